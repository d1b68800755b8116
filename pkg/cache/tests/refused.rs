//! An object the decoder refuses is reported and skipped; the LIST and the
//! watch go on (one object never stops an informer for every other).
//! Against a real kube-apiserver, with objects nested deeper than
//! serde_json's 128 levels — which the apiserver stores without complaint.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use cache::{InformerOptions, Refusal, SharedInformerFactory};
use envtest::{ControlPlane, eventually};
use k8s_apiextensions::CustomResourceDefinition;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as k8s_apiextensions;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde::Deserialize;

mod common;
use common::*;

/// A HelmApp read with a plain `serde_json::Value` spec: a decoder that
/// fails past 128 levels, as any type without its own bound does.
#[derive(Clone, Debug, Deserialize)]
struct Loose {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: serde_json::Value,
}

impl kube::Resource for Loose {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "HelmApp".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "hossted.com".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "helmapps".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn app(name: &str, depth: usize) -> serde_json::Value {
    let mut values = serde_json::json!(1);
    for _ in 0..depth {
        values = serde_json::json!({ "a": values });
    }
    serde_json::json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": "deep" },
        "spec": { "chart": { "path": "x" }, "values": values }
    })
}

#[tokio::test]
async fn an_object_that_does_not_decode_is_skipped_and_the_list_and_watch_go_on() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "deep").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &apis::helmapp_crd())
        .await
        .unwrap();
    eventually("the HelmApp CRD served", 60, || async {
        let list = Api::<Loose>::namespaced(client.clone(), "deep");
        list.list(&Default::default()).await.ok().map(|_| ())
    })
    .await;
    // Written raw, the answer skipped unread: this test's own decoders
    // would fail on what it writes.
    let url = Api::<Loose>::namespaced(client.clone(), "deep")
        .resource_url()
        .to_string();
    let send = |req: http::Request<Vec<u8>>| {
        let client = client.clone();
        async move {
            client.request::<serde::de::IgnoredAny>(req).await.unwrap();
        }
    };
    let create = |v: serde_json::Value| {
        let req = kube::core::Request::new(&url)
            .create(&PostParams::default(), serde_json::to_vec(&v).unwrap())
            .unwrap();
        send(req)
    };
    // In the first LIST: one good, one 200 levels deep, one good.
    create(app("a", 1)).await;
    create(app("deep", 200)).await;
    create(app("c", 1)).await;

    let factory = SharedInformerFactory::new(client.clone(), None);
    let refused: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let seen = refused.clone();
    factory.on_refused(Arc::new(move |_, kind, r: &Refusal| {
        seen.lock().push((kind.to_string(), r.key()));
    }));
    let informer = factory.informer::<Loose>(InformerOptions::default());
    factory.start().unwrap();
    assert!(
        factory.wait_for_cache_sync(WAIT).await,
        "the LIST completed"
    );
    let store = informer.store();
    assert!(store.get("deep/a").is_some() && store.get("deep/c").is_some());
    assert!(store.get("deep/deep").is_none());
    assert_eq!(informer.stats().refused.load(SeqCst), 1);
    assert_eq!(
        refused.lock().clone(),
        [("HelmApp".to_string(), "deep/deep".to_string())]
    );

    // The watch goes on: an object after a refused one arrives; a good
    // object turned bad keeps its last readable version.
    create(app("deep2", 300)).await;
    create(app("b", 1)).await;
    eventually("b arrives after a refused object", 60, || async {
        store.get("deep/b").map(|_| ())
    })
    .await;
    let deep = serde_json::json!({ "spec": { "values": app("x", 200)["spec"]["values"] } });
    let req = kube::core::Request::new(&url)
        .patch("c", &PatchParams::default(), &Patch::Merge(&deep))
        .unwrap();
    send(req).await;
    eventually("the refusals counted", 60, || async {
        (informer.stats().refused.load(SeqCst) >= 3).then_some(())
    })
    .await;
    let c = store
        .get("deep/c")
        .expect("c keeps its last readable version");
    assert_eq!(c.spec["values"], serde_json::json!({ "a": 1 }));
    assert!(store.get("deep/deep2").is_none());
    assert!(
        refused.lock().iter().any(|(_, key)| key == "deep/deep2"),
        "{:?}",
        refused.lock()
    );
}
