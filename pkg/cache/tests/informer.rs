//! Informers against a real kube-apiserver: order of events, watch resumption,
//! relist after 410 Gone, apiserver restarts, slow handlers, sharing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use cache::{
    Event, HandlerFn, InformerOptions, ListWatchConfig, SharedInformerFactory, object_key,
};
use envtest::{ControlPlane, Proxy, eventually};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(WAIT_SECS);
const WAIT_SECS: u64 = 60;

async fn namespace(client: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn cm(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "test".to_string(),
                "informer".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..Default::default()
    }
}

fn value(c: &ConfigMap) -> String {
    c.data
        .as_ref()
        .and_then(|d| d.get("v").cloned())
        .unwrap_or_default()
}

/// `Add ns/name=v`, `Update ns/name v1->v2`, `Delete ns/name=v`.
fn describe(e: &Event<ConfigMap>) -> String {
    match e {
        Event::Add(o) => format!("Add {}={}", object_key(o.as_ref()), value(o)),
        Event::Update { old, new } => {
            format!(
                "Update {} {}->{}",
                object_key(new.as_ref()),
                value(old),
                value(new)
            )
        }
        Event::Delete(o) => format!("Delete {}={}", object_key(o.as_ref()), value(o)),
    }
}

/// A handler sending descriptions of events in `ns` to a channel.
fn recorder(
    ns: &'static str,
) -> (
    HandlerFn<impl FnMut(&Event<ConfigMap>) + Send>,
    mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = HandlerFn(move |e: &Event<ConfigMap>| {
        let obj = match e {
            Event::Add(o) | Event::Delete(o) | Event::Update { new: o, .. } => o,
        };
        if obj.metadata.namespace.as_deref() == Some(ns) {
            let _ = tx.send(describe(e));
        }
    });
    (handler, rx)
}

async fn next_events(rx: &mut mpsc::UnboundedReceiver<String>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(WAIT, rx.recv()).await {
            Ok(Some(e)) => out.push(e),
            _ => panic!("expected {n} events, got {out:?}"),
        }
    }
    out
}

fn keys_in(store: &cache::Store<ConfigMap>, ns: &str) -> Vec<String> {
    let mut keys: Vec<String> = store
        .by_index(cache::NAMESPACE_INDEX, ns)
        .iter()
        .map(|o| object_key(o.as_ref()))
        .collect();
    keys.sort();
    keys
}

async fn server_keys(client: &Client, ns: &str) -> Vec<String> {
    let mut keys: Vec<String> = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(object_key)
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn adds_updates_and_deletes_arrive_in_order() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "order").await;
    let factory = SharedInformerFactory::new(client.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    let (handler, mut rx) = recorder("order");
    informer.add_event_handler(handler);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    let api: Api<ConfigMap> = Api::namespaced(client, "order");
    let pp = PostParams::default();
    api.create(&pp, &cm("a", "1")).await.unwrap();
    api.replace("a", &pp, &{
        let mut a = api.get("a").await.unwrap();
        a.data = Some(BTreeMap::from([("v".into(), "2".into())]));
        a
    })
    .await
    .unwrap();
    api.create(&pp, &cm("b", "1")).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();

    assert_eq!(
        next_events(&mut rx, 4).await,
        [
            "Add order/a=1",
            "Update order/a 1->2",
            "Add order/b=1",
            "Delete order/a=2"
        ]
    );
    assert_eq!(keys_in(&informer.store(), "order"), ["order/b"]);
    let lister = informer.lister();
    assert_eq!(value(&lister.namespaced("order").get("b").unwrap()), "1");
    assert!(lister.namespaced("order").get("a").is_none());
}

#[tokio::test]
async fn a_late_handler_gets_adds_for_what_is_cached_and_resync_redelivers() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "late").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "late");
    for name in ["x", "y"] {
        api.create(&PostParams::default(), &cm(name, "0"))
            .await
            .unwrap();
    }
    let factory = SharedInformerFactory::new(client, Some(Duration::from_secs(1)));
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    let (handler, mut rx) = recorder("late");
    informer.add_event_handler(handler);
    let mut adds = next_events(&mut rx, 2).await;
    adds.sort();
    assert_eq!(adds, ["Add late/x=0", "Add late/y=0"]);
    // Within the next resync period both are re-delivered as unchanged updates.
    let mut resync = next_events(&mut rx, 2).await;
    resync.sort();
    assert_eq!(resync, ["Update late/x 0->0", "Update late/y 0->0"]);
}

#[tokio::test]
async fn a_watch_closed_by_the_server_is_resumed_without_a_relist() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "resume").await;
    let factory = SharedInformerFactory::new(client.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions {
        // The server ends each watch after 1-2 s.
        list_watch: ListWatchConfig {
            watch_timeout: Duration::from_secs(2),
            ..Default::default()
        },
        ..Default::default()
    });
    let (handler, mut rx) = recorder("resume");
    informer.add_event_handler(handler);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);
    eventually("three watches", WAIT_SECS, || async {
        (informer.stats().watches.load(SeqCst) >= 3).then_some(())
    })
    .await;

    Api::<ConfigMap>::namespaced(client, "resume")
        .create(&PostParams::default(), &cm("after", "1"))
        .await
        .unwrap();
    assert_eq!(next_events(&mut rx, 1).await, ["Add resume/after=1"]);
    assert_eq!(
        informer.stats().lists.load(SeqCst),
        1,
        "a closed watch must not cause a relist"
    );
    assert_eq!(informer.stats().relists_after_gone.load(SeqCst), 0);
}

#[tokio::test]
async fn a_410_gone_leads_to_a_relist_and_deletes_for_what_vanished() {
    // Watches served straight from etcd, compacted every second: a watch
    // resumed from a resourceVersion a few seconds old gets 410 Gone.
    let cp = ControlPlane::builder()
        .apiserver_arg("--watch-cache=false")
        .apiserver_arg("--etcd-compaction-interval=1s")
        .start()
        .await
        .unwrap();
    let admin = cp.client();
    namespace(&admin, "gone").await;
    namespace(&admin, "churn").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "gone");
    let pp = PostParams::default();
    api.create(&pp, &cm("keep", "1")).await.unwrap();
    api.create(&pp, &cm("doomed", "last-known")).await.unwrap();

    let partition = Proxy::start(&cp).await.unwrap();
    let factory = SharedInformerFactory::new(partition.client(&cp).await.unwrap(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    let (handler, mut rx) = recorder("gone");
    informer.add_event_handler(handler);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);
    let mut initial = next_events(&mut rx, 2).await;
    initial.sort();
    assert_eq!(initial, ["Add gone/doomed=last-known", "Add gone/keep=1"]);

    partition.cut();
    api.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    api.create(&pp, &cm("fresh", "1")).await.unwrap();
    let patch = serde_json::json!({ "data": { "v": "2" } });
    api.patch("keep", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // Unrelated writes, and time for the apiserver to compact past them.
    let churn: Api<ConfigMap> = Api::namespaced(admin.clone(), "churn");
    for i in 0..20 {
        churn.create(&pp, &cm(&format!("c{i}"), "x")).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    partition.heal();

    let mut after = next_events(&mut rx, 3).await;
    after.sort();
    assert_eq!(
        after,
        [
            "Add gone/fresh=1",
            "Delete gone/doomed=last-known", // its last known state
            "Update gone/keep 1->2",
        ]
    );
    assert!(
        informer.stats().relists_after_gone.load(SeqCst) >= 1,
        "no 410 was seen"
    );
    assert_eq!(informer.stats().lists.load(SeqCst), 2);
    assert_eq!(
        keys_in(&informer.store(), "gone"),
        server_keys(&admin, "gone").await
    );
    assert_eq!(keys_in(&informer.store(), "churn").len(), 20);
}

#[tokio::test]
async fn killing_and_restarting_the_apiserver_ends_in_a_consistent_store() {
    let mut cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "restart").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "restart");
    let pp = PostParams::default();
    api.create(&pp, &cm("before", "1")).await.unwrap();
    let factory = SharedInformerFactory::new(admin.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions {
        list_watch: ListWatchConfig {
            initial_backoff: Duration::from_millis(100),
            ..Default::default()
        },
        ..Default::default()
    });
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    cp.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cp.start_apiserver().await.unwrap();
    api.create(&pp, &cm("after", "1")).await.unwrap();
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();

    let store = informer.store();
    eventually("the store to match the server", WAIT_SECS, || {
        let store = store.clone();
        let admin = admin.clone();
        async move { (keys_in(&store, "restart") == server_keys(&admin, "restart").await).then_some(()) }
    })
    .await;
    assert_eq!(keys_in(&store, "restart"), ["restart/after"]);
    assert!(
        informer.stats().errors.load(SeqCst) >= 1,
        "the outage went unnoticed"
    );
}

#[tokio::test]
async fn a_slow_handler_delays_neither_the_reflector_nor_other_handlers() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "slow").await;
    let factory = SharedInformerFactory::new(client.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    let (fast, mut fast_rx) = recorder("slow");
    let (slow_inner, mut slow_rx) = recorder("slow");
    let mut slow_inner = slow_inner;
    informer.add_event_handler(HandlerFn(move |e: &Event<ConfigMap>| {
        std::thread::sleep(Duration::from_millis(100));
        cache::EventHandler::on_add(
            &mut slow_inner,
            match e {
                Event::Add(o) => o,
                _ => return,
            },
        );
    }));
    informer.add_event_handler(fast);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    let api: Api<ConfigMap> = Api::namespaced(client, "slow");
    let creates = (0..40).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &cm(&format!("m{i:02}"), "1"))
                .await
                .unwrap()
        }
    });
    futures::future::join_all(creates).await;

    // The fast handler and the store have everything while the slow handler
    // (100 ms per event: 4 s in all) is still working through its buffer.
    let fast_events = next_events(&mut fast_rx, 40).await;
    assert_eq!(keys_in(&informer.store(), "slow").len(), 40);
    let mut slow_so_far = Vec::new();
    while let Ok(e) = slow_rx.try_recv() {
        slow_so_far.push(e);
    }
    assert!(
        slow_so_far.len() < 40,
        "the slow handler was not behind: {}",
        slow_so_far.len()
    );
    // ... and it still receives every event, in the same order.
    let rest = next_events(&mut slow_rx, 40 - slow_so_far.len()).await;
    slow_so_far.extend(rest);
    assert_eq!(slow_so_far, fast_events);
}

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
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(configmap_watches(&client).await - baseline, 2.0);
    assert_eq!(informers[0].stats().watches.load(SeqCst), 1);
}

#[tokio::test]
async fn a_watch_on_a_stalled_connection_is_restarted_and_the_cache_catches_up() {
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "stall").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "stall");
    let pp = PostParams::default();
    api.create(&pp, &cm("before", "1")).await.unwrap();

    let proxy = Proxy::start(&cp).await.unwrap();
    let factory = SharedInformerFactory::new(proxy.client(&cp).await.unwrap(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions {
        list_watch: ListWatchConfig {
            progress_timeout: Duration::from_secs(2),
            initial_backoff: Duration::from_millis(100),
            ..Default::default()
        },
        ..Default::default()
    });
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    // The connection stays up but nothing passes: without a progress
    // timeout the watch would wait for its next event forever.
    proxy.stall();
    api.create(&pp, &cm("during", "1")).await.unwrap();
    eventually("the stalled watch to be given up", WAIT_SECS, || async {
        (informer.stats().stalls.load(SeqCst) >= 1).then_some(())
    })
    .await;
    proxy.resume();
    api.create(&pp, &cm("after", "1")).await.unwrap();
    let store = informer.store();
    eventually("the store to match the server", WAIT_SECS, || {
        let (store, admin) = (store.clone(), admin.clone());
        async move {
            let want = server_keys(&admin, "stall").await;
            (want.len() == 3 && keys_in(&store, "stall") == want).then_some(())
        }
    })
    .await;
    assert_eq!(
        informer.stats().lists.load(SeqCst),
        1,
        "a restarted watch resumes from its resourceVersion, without a relist"
    );
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

fn pp() -> PostParams {
    PostParams::default()
}
