//! The runtime against a real apiserver: a test controller that mirrors
//! ConfigMaps is one module plus one `manager.add`; two controllers share one
//! informer; readiness, metrics and leader election behave as documented.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cache::{InformerOptions, Store};
use envtest::{ControlPlane, Proxy, eventually};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use runtime::{
    Action, Controller, LeaderElection, LeaseTiming, Manager, ManagerError, ManagerOptions,
    Reconciler,
};
use tokio::sync::oneshot;

/// The whole test controller: ConfigMaps in `src` labelled `mirror=yes` are
/// copied to `dst` (and the copy deleted with the original).
mod mirror {
    use super::*;

    pub struct Mirror {
        pub configmaps: Store<ConfigMap>,
        pub client: Client,
        /// Keys reconciled so far (for the test to know what was looked at).
        pub seen: parking_lot::Mutex<Vec<String>>,
    }

    impl Reconciler for Mirror {
        type Error = kube::Error;

        async fn reconcile(&self, key: &str) -> Result<Action, kube::Error> {
            self.seen.lock().push(key.to_string());
            let Some(name) = key.strip_prefix("src/") else {
                return Ok(Action::done("not in src"));
            };
            let copies: Api<ConfigMap> = Api::namespaced(self.client.clone(), "dst");
            match self.configmaps.get(key) {
                Some(cm)
                    if cm
                        .metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.get("mirror").is_some_and(|v| v == "yes")) =>
                {
                    let copy = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(name.to_string()),
                            ..Default::default()
                        },
                        data: cm.data.clone(),
                        ..Default::default()
                    };
                    copies
                        .patch(
                            name,
                            &PatchParams::apply("mirror").force(),
                            &Patch::Apply(&copy),
                        )
                        .await?;
                    Ok(Action::done("copied"))
                }
                _ => match copies.delete(name, &DeleteParams::default()).await {
                    Ok(_) => Ok(Action::done("copy deleted")),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::done("no copy")),
                    Err(e) => Err(e),
                },
            }
        }
    }

    /// The controller, wired: its informer from the shared factory, a
    /// handler that only enqueues.
    pub fn controller(manager: &Manager) -> Controller<Mirror> {
        let configmaps = manager
            .factory()
            .informer::<ConfigMap>(InformerOptions::default());
        let mirror = Mirror {
            configmaps: configmaps.store(),
            client: manager.client(),
            seen: Default::default(),
        };
        let controller = Controller::new(manager, "mirror", mirror).resync_all_of(&configmaps);
        configmaps.add_event_handler(controller.enqueue_handler());
        controller
    }
}

/// A second controller on the same informer: counts the ConfigMaps it saw.
struct Census;

impl Reconciler for Census {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, key: &str) -> Result<Action, Self::Error> {
        Ok(Action::done(format!("counted {key}")))
    }
}

async fn namespace(client: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

fn cm(name: &str, label: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("mirror".to_string(), label.to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..Default::default()
    }
}

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `(status, whole response)`; status 0 when nothing answered.
async fn get(url: String) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (host, path) = url.trim_start_matches("http://").split_once('/').unwrap();
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(host).await?;
        s.write_all(format!("GET /{path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    match exchange.await {
        Ok(out) => {
            let code = out
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            (code, out)
        }
        Err(e) => (0, e.to_string()),
    }
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ManagerError>>,
}

impl Running {
    fn start(manager: Manager) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(manager.run(async {
            let _ = stopped.await;
        }));
        Running {
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) -> Result<(), ManagerError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), &mut self.task)
            .await
            .expect("stops within 30 s")
            .expect("manager task")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn a_mirror_controller_is_one_module_and_shares_its_informer_with_another() {
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "src").await;
    namespace(&admin, "dst").await;
    let src: Api<ConfigMap> = Api::namespaced(admin.clone(), "src");
    let dst: Api<ConfigMap> = Api::namespaced(admin.clone(), "dst");
    src.create(&PostParams::default(), &cm("before", "yes", "1"))
        .await
        .unwrap();
    let watches_before = envtest::open_watches(&admin, "configmaps").await.unwrap();

    let addr = free_addr();
    let mut options = ManagerOptions::new("test", "runtime-test");
    options.metrics_address = Some(addr);
    options.health_address = Some(addr);
    let mut manager = Manager::new(admin.clone(), options);
    let mirror = mirror::controller(&manager);
    let mirror_seen = mirror.reconciler();
    manager.add(mirror);
    // The second controller asks for the same informer.
    let configmaps = manager
        .factory()
        .informer::<ConfigMap>(InformerOptions::default());
    let census = Controller::new(&manager, "census", Census);
    configmaps.add_event_handler(census.enqueue_handler());
    manager.add(census);
    let running = Running::start(manager);

    eventually("the existing ConfigMap mirrored", 60, || async {
        dst.get_opt("before").await.ok().flatten().map(|_| ())
    })
    .await;
    src.create(&PostParams::default(), &cm("new", "yes", "a"))
        .await
        .unwrap();
    src.create(&PostParams::default(), &cm("ignored", "no", "a"))
        .await
        .unwrap();
    eventually("the new ConfigMap mirrored", 30, || async {
        let c = dst.get_opt("new").await.ok().flatten()?;
        (c.data?.get("v")? == "a").then_some(())
    })
    .await;
    src.patch(
        "new",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"v": "b"}})),
    )
    .await
    .unwrap();
    eventually("the change mirrored", 30, || async {
        let c = dst.get_opt("new").await.ok().flatten()?;
        (c.data?.get("v")? == "b").then_some(())
    })
    .await;
    src.delete("new", &DeleteParams::default()).await.unwrap();
    eventually("the copy deleted with the original", 30, || async {
        dst.get_opt("new").await.ok()?.is_none().then_some(())
    })
    .await;
    eventually("the unlabelled ConfigMap reconciled", 30, || async {
        mirror_seen
            .seen
            .lock()
            .iter()
            .any(|k| k == "src/ignored")
            .then_some(())
    })
    .await;
    assert!(
        dst.get_opt("ignored").await.unwrap().is_none(),
        "an unlabelled ConfigMap was copied"
    );

    // Two controllers, one reflector: exactly one more WATCH on configmaps.
    assert_eq!(
        envtest::open_watches(&admin, "configmaps").await.unwrap() - watches_before,
        1.0,
        "two controllers asking for one informer must share one WATCH"
    );
    let (code, text) = get(format!("http://{addr}/metrics")).await;
    assert_eq!(code, 200, "{text}");
    for queue in ["mirror", "census"] {
        let adds = sample(&text, &format!("workqueue_adds_total{{name=\"{queue}\"}}"));
        assert!(adds.is_some_and(|n| n >= 3.0), "{queue}: {text}");
    }
    assert!(
        sample(
            &text,
            "test_reconcile_total{controller=\"mirror\",result=\"success\"}"
        )
        .is_some_and(|n| n >= 3.0),
        "{text}"
    );
    assert!(
        text.contains("test_reconcile_duration_seconds_bucket{le=\"600.0\",controller=\"mirror\"}"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "test_informer_synced{kind=\"ConfigMap\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "test_leader"),
        Some(1.0),
        "no election: this process works"
    );
    assert_eq!(get(format!("http://{addr}/readyz")).await.0, 200);
    assert_eq!(get(format!("http://{addr}/healthz")).await.0, 200);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn conflicting_informer_options_fail_the_start() {
    let cp = ControlPlane::start().await.unwrap();
    let mut manager = Manager::new(cp.client(), ManagerOptions::new("test", "runtime-test"));
    manager.add(mirror::controller(&manager));
    let mut small = InformerOptions::<ConfigMap>::default();
    small.list_watch.page_size = 10;
    manager.factory().informer::<ConfigMap>(small);
    let err = Running::start(manager)
        .stop()
        .await
        .expect_err("must not start");
    assert!(matches!(err, ManagerError::Informers(_)), "{err}");
}

fn election(timing: &LeaseTiming) -> LeaderElection {
    LeaderElection {
        namespace: "lease".into(),
        name: "runtime-test".into(),
        timing: timing.clone(),
    }
}

async fn holder(client: &Client) -> String {
    Api::<Lease>::namespaced(client.clone(), "lease")
        .get_opt("runtime-test")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default()
}

/// A manager that counts the reconciles of its one controller, under
/// leader election, reachable through `client`.
fn candidate(
    client: Client,
    instance: &str,
    timing: &LeaseTiming,
    addr: std::net::SocketAddr,
) -> (Running, Arc<runtime::ControllerStats>) {
    let mut options = ManagerOptions::new("test", "runtime-test");
    options.instance = instance.to_string();
    options.leader_election = Some(election(timing));
    options.metrics_address = Some(addr);
    options.health_address = Some(addr);
    let manager = {
        let mut m = Manager::new(client, options);
        let configmaps = m
            .factory()
            .informer::<ConfigMap>(InformerOptions::default());
        let census = Controller::new(&m, "census", Census)
            .resync_every(Duration::from_millis(200), &configmaps);
        let stats = census.stats();
        m.add(census);
        (m, stats)
    };
    (Running::start(manager.0), manager.1)
}

#[tokio::test]
async fn a_leader_whose_renewals_hang_stops_working_before_a_standby_takes_over() {
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "lease").await;
    let timing = LeaseTiming {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
    };
    let proxy = Proxy::start(&cp).await.unwrap();
    let (a_addr, b_addr) = (free_addr(), free_addr());
    let (a, a_stats) = candidate(proxy.client(&cp).await.unwrap(), "a", &timing, a_addr);
    eventually("a to lead", 60, || async {
        holder(&admin).await.starts_with("a_").then_some(())
    })
    .await;
    let (b, b_stats) = candidate(admin.clone(), "b", &timing, b_addr);

    // The standby is ready (warm) but does not lead, and says so.
    let b_metrics = eventually("b to be ready as a standby", 60, || async {
        let (code, _) = get(format!("http://{b_addr}/readyz")).await;
        let (_, text) = get(format!("http://{b_addr}/metrics")).await;
        (code == 200).then_some(text)
    })
    .await;
    assert_eq!(
        sample(&b_metrics, "test_leader"),
        Some(0.0),
        "a standby must not claim to lead"
    );
    let (_, a_metrics) = get(format!("http://{a_addr}/metrics")).await;
    assert_eq!(sample(&a_metrics, "test_leader"), Some(1.0));
    assert!(
        a_stats
            .wait_for_a_fresh_reconcile(Duration::from_secs(30))
            .await,
        "the leader works"
    );
    assert_eq!(b_stats.started(), 0, "the standby reconciled");

    // A's connection goes half-open: nothing passes, nothing is closed.
    proxy.stall();
    eventually("b to take the lease", 60, || async {
        holder(&admin).await.starts_with("b_").then_some(())
    })
    .await;
    assert!(
        a.task.is_finished(),
        "a standby took over while the old leader was still running: two leaders"
    );
    let a_started = a_stats.started();
    let err = a.stop().await.expect_err("losing the lease is an error");
    assert!(matches!(err, ManagerError::LeaseLost(_)), "{err}");
    assert_eq!(a_stats.started(), a_started);
    assert!(
        b_stats
            .wait_for_a_fresh_reconcile(Duration::from_secs(30))
            .await,
        "the new leader works"
    );
    b.stop().await.unwrap();
    assert_eq!(
        holder(&admin).await,
        "",
        "a clean shutdown releases the lease"
    );
}

/// An object of a kind whose spec any shape may take (nested past
/// serde_json's 128 levels, it does not decode as a `Value`).
#[derive(Clone, Debug, serde::Deserialize)]
struct Loose {
    metadata: ObjectMeta,
    #[serde(default)]
    #[allow(dead_code)]
    spec: serde_json::Value,
}

impl kube::Resource for Loose {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Loose".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "test.hossted.com".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "looses".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[tokio::test]
async fn an_object_an_informer_cannot_decode_gets_a_warning_event_on_it() {
    use k8s_openapi::api::core::v1::Event;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "deep").await;
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "looses.test.hossted.com" },
        "spec": {
            "group": "test.hossted.com", "scope": "Namespaced",
            "names": { "kind": "Loose", "plural": "looses", "singular": "loose" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    // Raw requests: a typed client would fail to decode the answer.
    let url = Api::<Loose>::namespaced(admin.clone(), "deep")
        .resource_url()
        .to_string();
    let create = |name: &str, depth: usize| {
        let mut spec = serde_json::json!(1);
        for _ in 0..depth {
            spec = serde_json::json!({ "a": spec });
        }
        let body = serde_json::json!({
            "apiVersion": "test.hossted.com/v1", "kind": "Loose",
            "metadata": { "name": name, "namespace": "deep" }, "spec": spec
        });
        let request = kube::core::Request::new(&url)
            .create(&PostParams::default(), serde_json::to_vec(&body).unwrap())
            .unwrap();
        let admin = admin.clone();
        async move { admin.request_text(request).await.map(|_| ()) }
    };
    eventually("the CRD served", 60, || async {
        create("first", 1).await.ok()
    })
    .await;
    create("deep", 200).await.unwrap();

    let mut manager = Manager::new(admin.clone(), ManagerOptions::new("test", "runtime-test"));
    let informer = manager
        .factory()
        .informer::<Loose>(InformerOptions::default());
    let store = informer.store();
    // A manager runs while it has a controller.
    let census = Controller::new(&manager, "census", Census);
    informer.add_event_handler(census.enqueue_handler());
    manager.add(census);
    let running = Running::start(manager);
    create("shallow", 3).await.unwrap();
    eventually("the object that decodes is cached", 60, || async {
        store.get("deep/shallow").map(|_| ())
    })
    .await;
    let events: Api<Event> = Api::namespaced(admin.clone(), "deep");
    let event = eventually("a DecodeFailed Warning on the object", 60, || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(runtime::DECODE_FAILED))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.involved_object.name.as_deref(), Some("deep"));
    assert_eq!(event.involved_object.kind.as_deref(), Some("Loose"));
    assert!(store.get("deep/deep").is_none());
    running.stop().await.unwrap();
}

/// Items that ran the `after_each_item` hook, across the test binary.
static AFTER_ITEM: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_item() {
    AFTER_ITEM.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

#[tokio::test]
async fn the_after_each_item_hook_is_the_process_choice_and_runs_after_every_reconcile() {
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "hooked").await;
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), "hooked");
    for name in ["a", "b", "c"] {
        configmaps
            .create(&PostParams::default(), &cm(name, "yes", "1"))
            .await
            .unwrap();
    }
    let mut options = ManagerOptions::new("test", "runtime-test");
    options.after_each_item = Some(count_item);
    let mut manager = Manager::new(admin.clone(), options);
    let informer = manager
        .factory()
        .informer::<ConfigMap>(InformerOptions::default());
    let census = Controller::new(&manager, "census", Census);
    informer.add_event_handler(census.enqueue_handler());
    manager.add(census);
    let running = Running::start(manager);
    // Once at the sync, and once per reconciled ConfigMap (the three and
    // whatever else the cluster holds).
    eventually("the hook after each item", 60, || async {
        (AFTER_ITEM.load(std::sync::atomic::Ordering::SeqCst) >= 4).then_some(())
    })
    .await;
    drop(running);
}
