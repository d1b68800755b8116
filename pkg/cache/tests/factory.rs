//! The shared informer factory against a real kube-apiserver: one watch per
//! kind and selectors, conflicting options refused, optional informers that
//! follow their CRD.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use cache::{InformerOptions, SharedInformerFactory};
use envtest::{ControlPlane, eventually};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use kube::{Api, Client};

mod common;
use common::*;

/// WATCHes of configmaps the apiserver serves now.
async fn configmap_watches(client: &Client) -> f64 {
    envtest::open_watches(client, "configmaps").await.unwrap()
}

#[tokio::test]
async fn the_factory_opens_one_watch_per_type_however_many_callers_ask() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    let baseline = configmap_watches(&client).await;
    let factory = SharedInformerFactory::new(client.clone(), None);
    let informers: Vec<_> = (0..5)
        .map(|_| factory.informer::<ConfigMap>(InformerOptions::default()))
        .collect();
    assert!(informers.iter().all(|i| Arc::ptr_eq(i, &informers[0])));
    let other = factory.informer::<ConfigMap>(InformerOptions::default().labels("test=informer"));
    assert!(
        !Arc::ptr_eq(&other, &informers[0]),
        "other selectors get their own informer"
    );
    assert_eq!(factory.len(), 2);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);
    eventually("two configmap watches at the apiserver", WAIT_SECS, || {
        let client = client.clone();
        async move { (configmap_watches(&client).await - baseline >= 2.0).then_some(()) }
    })
    .await;
    // Each informer opened exactly one watch (its own count: the
    // apiserver's gauge is global, and other clients may move it).
    assert_eq!(informers[0].stats().watches.load(SeqCst), 1);
    assert_eq!(other.stats().watches.load(SeqCst), 1);
}

#[tokio::test]
async fn one_informer_asked_for_with_different_options_fails_the_start() {
    let factory = SharedInformerFactory::new(factory_client(), None);
    let a = factory.informer::<ConfigMap>(InformerOptions::default().labels("app=x"));
    let mut small_pages = InformerOptions::default().labels("app=x");
    small_pages.list_watch.page_size = 50;
    let b = factory.informer::<ConfigMap>(small_pages);
    assert!(
        Arc::ptr_eq(&a, &b),
        "still one informer per (kind, selectors)"
    );
    let e = factory
        .start()
        .expect_err("conflicting options must not start");
    let msg = e.to_string();
    assert!(
        msg.contains("ConfigMap") && msg.contains("page_size=50"),
        "{msg}"
    );

    // Same options (and a same-named transform) share without complaint.
    let factory = SharedInformerFactory::new(factory_client(), None);
    for _ in 0..2 {
        factory.informer::<ConfigMap>(InformerOptions::default().transform("strip", |c| c));
    }
    factory.informer::<ConfigMap>(InformerOptions::default().labels("other=1"));
    assert_eq!(factory.len(), 2);
    assert!(factory.start().is_ok());
}

fn factory_client() -> Client {
    Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap())).unwrap()
}

#[tokio::test]
async fn an_optional_informer_waits_for_its_crd_without_polling_and_stops_when_it_goes() {
    use apis::Hosstedproject;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    let factory = SharedInformerFactory::new(admin.clone(), None);
    let configmaps = factory.informer::<ConfigMap>(InformerOptions::default());
    let projects = factory.optional_informer::<Hosstedproject>(InformerOptions::default());
    factory.start().unwrap();
    assert!(
        factory.wait_for_cache_sync(WAIT).await,
        "an absent optional kind must not hold up the sync"
    );
    assert!(configmaps.has_synced() && !projects.has_synced());
    // Something could have listed by now: the CRD watch has synced.
    eventually("the CRD watch to sync", WAIT_SECS, || async {
        factory
            .synced()
            .iter()
            .all(|i| i.kind != "CustomResourceDefinition" || i.synced)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        projects.stats().lists.load(SeqCst),
        0,
        "no LIST of an absent kind"
    );

    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    crds.create(&pp(), &apis::crd()).await.unwrap();
    eventually(
        "the optional informer to start and sync",
        WAIT_SECS,
        || async { projects.has_synced().then_some(()) },
    )
    .await;
    let hp: Hosstedproject = serde_json::from_value(serde_json::json!({
        "apiVersion": "hossted.com/v1", "kind": "Hosstedproject",
        "metadata": { "name": "late" }, "spec": {}
    }))
    .unwrap();
    Api::<Hosstedproject>::all(admin.clone())
        .create(&pp(), &hp)
        .await
        .unwrap();
    eventually("the object in the optional cache", WAIT_SECS, || async {
        projects.store().get("late").map(|_| ())
    })
    .await;

    crds.delete("hosstedprojects.hossted.com", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the optional informer to stop and empty its cache",
        WAIT_SECS,
        || async {
            (!projects.is_running() && projects.store().list().is_empty() && !projects.has_synced())
                .then_some(())
        },
    )
    .await;
    assert!(
        factory.required_synced(),
        "losing an optional kind never costs readiness"
    );
}
