//! Shared fixture for the operator's end-to-end tests: a real control plane
//! with the CRD, the real helm and kubectl, a local API receiver, and the
//! operator running in-process.

#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use apis::Hosstedproject;
pub use envtest::eventually;
use envtest::{ControlPlane, Receiver, Recorded};

mod helmapps;
pub use helmapps::*;
use hossted_operator::delivery;
use hossted_operator::inventory::poster::{ApiConfig, Poster};
use hossted_operator::inventory::{self, Settings};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use runtime::{ControllerStats, Manager, ManagerOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const EMAIL: &str = "ops@example.com";
pub const TOKEN: &str = "test-token-never-logged";

pub struct Fixture {
    pub cp: ControlPlane,
    pub api: Receiver,
}

/// Runs `cmd` to completion and asserts it succeeded, naming it and its
/// stderr if not.
pub fn output_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn chart(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/charts")
        .join(name)
        .display()
        .to_string()
}

impl Fixture {
    /// A control plane with the CRD installed and established, and a receiver.
    pub async fn new() -> Self {
        Self::on(ControlPlane::start().await.expect("control plane")).await
    }

    /// [`new`](Self::new) on a control plane started by the caller.
    pub async fn on(cp: ControlPlane) -> Self {
        // The in-process operator's log, shown with a failing test's output
        // (`RUST_LOG=info` for more than errors).
        let _ = env_logger::builder().is_test(true).try_init();
        apply_crd(&cp, "hosstedprojects.hossted.com").await;
        let api = Receiver::start().await.unwrap();
        Fixture { cp, api }
    }

    pub fn helm(&self, args: &[&str]) {
        output_ok(self.cp.helm().args(args));
    }

    /// `helm install <release> examples/charts/<chart> -n <namespace> --create-namespace`.
    pub fn helm_install(&self, release: &str, chart_name: &str, namespace: &str) {
        let chart = chart(chart_name);
        self.helm(&[
            "install",
            release,
            &chart,
            "-n",
            namespace,
            "--create-namespace",
        ]);
    }

    /// `helm upgrade <release> examples/charts/<chart> -n <namespace> --set <set>`.
    pub fn helm_upgrade(&self, release: &str, chart_name: &str, namespace: &str, set: &str) {
        let chart = chart(chart_name);
        self.helm(&["upgrade", release, &chart, "-n", namespace, "--set", set]);
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = output_ok(self.cp.kubectl().args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub async fn namespace(&self, name: &str) {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        // Already there is fine (tests ask for the same namespace twice);
        // anything else fails here, not as a time-out later.
        match Api::<Namespace>::all(self.cp.client())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating namespace {name}: {e}"),
        }
    }

    /// Sets a pod's phase through the status subresource (no kubelet here).
    pub async fn set_pod_phase(&self, ns: &str, name: &str, phase: &str) {
        let pods: Api<Pod> = Api::namespaced(self.cp.client(), ns);
        let patch = serde_json::json!({ "status": { "phase": phase } });
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub async fn secret(&self, ns: &str, name: &str, data: &[(&str, &str)]) {
        let s = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            string_data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
        Api::<Secret>::namespaced(self.cp.client(), ns)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }

    pub async fn hosstedproject(&self, name: &str, spec: serde_json::Value) {
        let hp: Hosstedproject = serde_json::from_value(serde_json::json!({
            "apiVersion": "hossted.com/v1", "kind": "Hosstedproject",
            "metadata": { "name": name }, "spec": spec
        }))
        .unwrap();
        Api::<Hosstedproject>::all(self.cp.client())
            .create(&PostParams::default(), &hp)
            .await
            .unwrap();
    }

    pub async fn get_hp(&self, name: &str) -> Hosstedproject {
        Api::<Hosstedproject>::all(self.cp.client())
            .get(name)
            .await
            .unwrap()
    }

    pub async fn set_stop(&self, name: &str, stop: bool) {
        self.patch_spec(name, serde_json::json!({ "stop": stop }))
            .await;
    }

    /// Merges `spec` into the Hosstedproject's spec.
    pub async fn patch_spec(&self, name: &str, spec: serde_json::Value) {
        let patch = serde_json::json!({ "spec": spec });
        Api::<Hosstedproject>::all(self.cp.client())
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Runs the operator in-process against this control plane and receiver.
    pub fn start_operator(&self) -> Operator {
        self.start_operator_with(|_| {})
    }

    /// [`start_operator`](Self::start_operator) with `change` applied to
    /// the inventory settings.
    pub fn start_operator_with(&self, change: impl FnOnce(&mut Settings)) -> Operator {
        self.start_inventory(change, false)
    }

    /// The inventory as `--controllers inventory` runs it: with delivery's
    /// piece that says `DeliveryDisabled` (the other tests' in-process
    /// inventory runs beside an in-process delivery).
    pub fn start_inventory_alone(&self) -> Operator {
        self.start_inventory(|_| {}, true)
    }

    fn start_inventory(&self, change: impl FnOnce(&mut Settings), delivery_off: bool) -> Operator {
        let poster = Poster::new(ApiConfig::new(&format!("{}/v1", self.api.url()), TOKEN)).unwrap();
        let mut settings = Settings {
            email_id: EMAIL.into(),
            org_id: "org-123".into(),
            context_name: "test-cluster".into(),
            resync: Duration::from_secs(600),
            coalesce: Duration::from_millis(500),
            configmap_driver: false,
            report_configmap_data: false,
            workers: 2,
        };
        change(&mut settings);
        let mut options = ManagerOptions::new("hossted", "hossted-operator");
        options.instance = "test-instance".into();
        options.sync_timeout = Duration::from_secs(60);
        options.drain_timeout = Duration::from_secs(10);
        let mut manager = Manager::new(self.cp.client(), options);
        let controller = inventory::controller(&manager, settings, poster);
        let stats = controller.stats();
        manager.add(controller);
        if delivery_off {
            delivery::add_disabled_to(&mut manager);
        }
        Operator::run(manager, stats)
    }

    /// Applies the delivery CRDs (HelmApp, HelmAppSet) and waits until
    /// they are established.
    pub async fn helmapp_crd(&self) {
        for name in ["helmapps.hossted.com", "helmappsets.hossted.com"] {
            apply_crd(&self.cp, name).await;
        }
    }

    /// Installs the delivery CRDs and runs the delivery controllers
    /// in-process: charts by path from `examples/charts`, helm from the test
    /// assets.
    pub async fn start_delivery(&self) -> Operator {
        self.start_delivery_with(|_| {}).await
    }

    /// [`start_delivery`](Self::start_delivery) with `change` applied to the settings.
    pub async fn start_delivery_with(
        &self,
        change: impl FnOnce(&mut delivery::Settings),
    ) -> Operator {
        self.helmapp_crd().await;
        let mut settings = self.delivery_settings();
        change(&mut settings);
        // Where the operator runs: a Hosstedproject's HelmApps live there.
        self.namespace(&settings.tenancy.operator_namespace).await;
        let mut options = ManagerOptions::new("hossted", "hossted-operator");
        options.instance = "test-delivery".into();
        options.sync_timeout = Duration::from_secs(60);
        options.drain_timeout = Duration::from_secs(30);
        let mut manager = Manager::new(self.cp.client(), options);
        let webhook = settings.webhook.clone();
        let added = delivery::add_to(&mut manager, settings).expect("delivery starts");
        let server = match webhook {
            Some(config) => Some(
                delivery::webhook::start(&manager, added.nudge, &config)
                    .await
                    .unwrap(),
            ),
            None => None,
        };
        let mut operator = Operator::run(manager, added.stats);
        operator.webhook = server;
        operator
    }

    /// The settings [`start_delivery`](Self::start_delivery) runs with.
    pub fn delivery_settings(&self) -> delivery::Settings {
        let work_dir = self.cp.dir().join("delivery");
        std::fs::create_dir_all(&work_dir).unwrap();
        delivery::Settings {
            shard: delivery::Shard::Unsharded,
            helm: delivery::HelmConfig {
                binary: self.cp.helm_binary(),
                work_dir,
                kubeconfig: Some(self.cp.kubeconfig_path().to_path_buf()),
                max_concurrent: 4,
                // In-process, the test binary is not the operator's: helm
                // runs the built operator binary's `post-render`.
                post_renderer: Some(PathBuf::from(env!("CARGO_BIN_EXE_hossted-operator"))),
                cli: Default::default(),
            },
            chart_path_root: Some(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/charts"),
            ),
            tenancy: delivery::Tenancy::single_tenant("hossted-operator"),
            workers: 4,
            resync: Duration::from_secs(600),
            // Tests serve charts from loopback, which the default policy
            // allows; 169.254/16 stays refused.
            sources: delivery::SourceLimits::default(),
            max_helm_timeout: Duration::from_secs(1800),
            max_remote_clusters: 100,
            max_remote_clusters_per_namespace: 10,
            webhook: None,
        }
    }

    /// Requests to `path` (e.g. `/v1/apps`) so far.
    pub fn requests_to(&self, path: &str) -> Vec<Recorded> {
        self.api
            .requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    pub async fn wait_requests(&self, path: &str, n: usize, secs: u64) -> Vec<Recorded> {
        let got = self
            .api
            .wait_for(|r| r.path == path, n, Duration::from_secs(secs))
            .await;
        assert!(
            got.len() >= n,
            "expected {n} requests to {path}, got {}: {got:?}",
            got.len()
        );
        got
    }
}

/// Applies the checked-in CRD `name` and waits until it is established.
async fn apply_crd(cp: &ControlPlane, name: &str) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(apis::crd_manifest_path(name));
    output_ok(cp.kubectl().args(["apply", "-f"]).arg(&file));
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    eventually(&format!("CRD {name} to be established"), 30, || async {
        let c = crds.get(name).await.ok()?;
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// The first line of a test's helm wrapper after `#!/bin/sh`: the
/// operator's start-up question (`helm version`) goes straight to `helm`,
/// unlogged and undelayed — the wrappers log and time release actions.
pub fn version_passes_through(helm: &Path) -> String {
    format!(
        "if [ \"$1\" = version ]; then exec '{}' \"$@\"; fi\n",
        helm.display()
    )
}

/// A helm that logs each run's full command line to a file, then runs the
/// real one (helm 4, the assets' `helm`); returns (wrapper, log).
pub fn counting_helm(f: &Fixture) -> (PathBuf, PathBuf) {
    counting(f, &f.cp.helm_binary())
}

/// A helm the delivery tests run under: the assets' helm 4, or their
/// helm 3 (the oldest the operator runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelmUnderTest {
    Four,
    Three,
}

impl HelmUnderTest {
    pub fn binary(self, f: &Fixture) -> PathBuf {
        match self {
            HelmUnderTest::Four => f.cp.helm_binary(),
            HelmUnderTest::Three => f.cp.helm3_binary(),
        }
    }

    /// The flag `spec.upgrade.force` is to this helm.
    pub fn force_flag(self) -> &'static str {
        match self {
            HelmUnderTest::Four => "--force-replace",
            HelmUnderTest::Three => "--force",
        }
    }
}

/// `mod <test> { helm_4, helm_3 }` for each `async fn <test>(HelmUnderTest)`:
/// the test run under each helm.
#[macro_export]
macro_rules! under_both_helms {
    ($($test:ident),+ $(,)?) => {
        $(
            mod $test {
                use super::HelmUnderTest;
                #[tokio::test]
                async fn helm_4() {
                    super::$test(HelmUnderTest::Four).await
                }
                #[tokio::test]
                async fn helm_3() {
                    super::$test(HelmUnderTest::Three).await
                }
            }
        )+
    };
}

/// [`counting_helm`] of `helm`.
pub fn counting(f: &Fixture, helm: &Path) -> (PathBuf, PathBuf) {
    let log = f.cp.dir().join("helm-runs.log");
    let wrapper = f.cp.dir().join("helm-wrapper.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{}echo \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            version_passes_through(helm),
            log.display(),
            helm.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, log)
}

/// The runs logged by [`counting_helm`], as `<subcommand> <release>`.
pub fn runs_in(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let call = HelmCall::parse(l);
            format!("{} {}", call.subcommand, call.release().unwrap_or(""))
        })
        .collect()
}

/// [`runs_in`] but the dry runs (renders that write nothing — a proof
/// that a revision a failed run left is ours among them).
pub fn writing_runs_in(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(HelmCall::parse)
        .filter(|call| !call.dry_run())
        .map(|call| format!("{} {}", call.subcommand, call.release().unwrap_or("")))
        .collect()
}

/// A control plane whose apiserver writes an audit log (one JSON event
/// per completed request, `Metadata` level) to the returned path: what a
/// test decides about requests it reads from there, not from log text.
pub async fn audited_control_plane() -> (ControlPlane, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("audit-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted, Panic]\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let log = dir.join("audit.log");
    let cp = ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", log.display()))
        .start()
        .await
        .expect("control plane");
    (cp, log)
}

/// The requests `user` made that the apiserver answered 403, from its
/// audit log (`verb resource namespace/name`).
pub fn forbidden_requests(audit_log: &Path, user: &str) -> Vec<String> {
    let text = std::fs::read_to_string(audit_log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == user && e["responseStatus"]["code"] == 403)
        .map(|e| {
            let r = &e["objectRef"];
            format!(
                "{} {} {}/{}",
                e["verb"].as_str().unwrap_or("?"),
                r["resource"].as_str().unwrap_or("?"),
                r["namespace"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// How many requests `user` made, from the audit log (a test that finds no
/// forbidden request first shows the log holds the user's requests).
pub fn audited_requests(audit_log: &Path, user: &str) -> usize {
    let text = std::fs::read_to_string(audit_log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == user)
        .count()
}

/// The flags every test that runs the binary with delivery gives it:
/// the test's helm, a work directory `work`, charts by path from
/// `examples/charts`, and the health probes off.
pub fn delivery_flags(cmd: &mut Command, cp: &ControlPlane, work: &Path) {
    // Not about tenancy: every namespace privileged (docs/tenancy.md).
    cmd.args(["--health-probe-bind-address", "0"])
        .arg("--privileged-namespaces=*")
        .arg("--helm-binary")
        .arg(cp.helm_binary())
        .arg("--work-dir")
        .arg(work)
        .arg("--chart-path-root")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"));
}

/// The operator binary with none of its configuration inherited from the
/// environment the tests run in. It dies with the test thread that started
/// it (`PR_SET_PDEATHSIG`), so a failed test leaves no operator running —
/// one holding a port or a Lease would break the tests after it.
pub fn operator_binary() -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(env!("CARGO_BIN_EXE_hossted-operator"));
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    for var in [
        "HOSSTED_API_URL",
        "HOSSTED_AUTH_TOKEN",
        "HOSSTED_AUTH_TOKEN_FILE",
        "HOSSTED_CA_FILE",
        "EMAIL_ID",
        "HOSSTED_ORG_ID",
        "CONTEXT_NAME",
        "RECONCILE_DURATION",
    ] {
        c.env_remove(var);
    }
    c
}

impl Fixture {
    /// The operator binary, acting through `kubeconfig`, reporting to this
    /// fixture's receiver.
    pub fn operator_command(&self, kubeconfig: &Path) -> Command {
        let mut c = operator_binary();
        c.env("KUBECONFIG", kubeconfig)
            .env("HOSSTED_API_URL", format!("{}/v1", self.api.url()))
            .env("HOSSTED_AUTH_TOKEN", TOKEN)
            .env("EMAIL_ID", EMAIL);
        c
    }
}

pub struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), String>>,
    stats: std::sync::Arc<ControllerStats>,
    metrics: std::sync::Arc<runtime::Metrics>,
    /// The webhook receiver, when the settings asked for one.
    webhook: Option<delivery::webhook::WebhookServer>,
}

impl Operator {
    /// Where the webhook receiver listens (settings with a webhook only).
    pub fn webhook_address(&self) -> std::net::SocketAddr {
        self.webhook
            .as_ref()
            .expect("started with a webhook")
            .address
    }

    /// Runs `manager` until [`stop`](Self::stop); `stats` are its
    /// controller's.
    fn run(manager: Manager, stats: std::sync::Arc<ControllerStats>) -> Self {
        let metrics = manager.metrics_handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            manager
                .run(async {
                    let _ = stopped.await;
                })
                .await
                .map_err(|e| e.to_string())
        });
        Operator {
            stop: Some(stop),
            task,
            stats,
            metrics,
            webhook: None,
        }
    }

    /// Its metrics, as `/metrics` would serve them.
    pub fn scrape(&self) -> String {
        self.metrics.encode()
    }

    /// Waits until no reconcile has begun for 1.5 s (three coalescing
    /// windows) and none runs: what start-up enqueued is done.
    pub async fn settle(&self) {
        let mut last = self.stats.started();
        let mut quiet_since = std::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.stats.started();
            if now != last || self.stats.finished() < now {
                last = now;
                quiet_since = std::time::Instant::now();
            } else if quiet_since.elapsed() >= Duration::from_millis(1500) {
                return;
            }
        }
    }

    /// A mark to take before causing an event (see [`reconciled_since`](Self::reconciled_since)).
    pub fn mark(&self) -> u64 {
        self.stats.started()
    }

    /// Waits until a reconcile that began after `mark` has finished: it saw
    /// everything that happened before the mark. "Nothing was sent" checks
    /// need this first, or a stalled operator would pass them.
    pub async fn reconciled_since(&self, mark: u64) {
        assert!(
            self.stats
                .wait_for_reconcile_since(mark, Duration::from_secs(60))
                .await,
            "no reconcile began after the mark and finished within 60 s"
        );
    }

    /// SIGTERM-like: stop taking keys, finish in-flight work, return.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let task = &mut self.task;
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("operator stops within 30 s")
            .expect("operator task")
            .expect("operator ran");
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn by_app_name(requests: &[Recorded]) -> BTreeMap<String, serde_json::Value> {
    requests
        .iter()
        .map(|r| {
            let j = r.json();
            (
                j["app_api_info"]["app_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                j,
            )
        })
        .collect()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET url`: `(status, body)`, or `None` when nothing answered.
pub async fn http_get(url: &str) -> Option<(u16, String)> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut r = agent.get(&url).call().ok()?;
        Some((
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        ))
    })
    .await
    .ok()?
}

/// The value of the series `series` (name with labels) in a scrape.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `(status, reason)` of a Hosstedproject's `Ready` condition.
pub fn ready(hp: &Hosstedproject) -> Option<(String, String)> {
    hp.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// One helm command line a wrapper logged (`$*`, perhaps after a time
/// stamp): the operator puts every name after `--`, so the release is the
/// first word after it — never found by position among the flags.
#[derive(Debug, Clone, PartialEq)]
pub struct HelmCall {
    /// `install`, `upgrade`, `rollback`, `uninstall`, `test`, `get`,
    /// `show`, …
    pub subcommand: String,
    /// Every word, the subcommand's included (the time stamp not).
    pub words: Vec<String>,
    /// The words after `--`: release (and chart, or revision).
    pub positionals: Vec<String>,
}

impl HelmCall {
    pub fn parse(line: &str) -> HelmCall {
        let mut words: Vec<String> = line.split_whitespace().map(String::from).collect();
        if words.first().is_some_and(|w| w.parse::<f64>().is_ok()) {
            words.remove(0);
        }
        let positionals = match words.iter().position(|w| w == "--") {
            Some(end) => words[end + 1..].to_vec(),
            None => Vec::new(),
        };
        HelmCall {
            subcommand: words.first().cloned().unwrap_or_default(),
            words,
            positionals,
        }
    }

    /// The release it acts on (`show crds` has none).
    pub fn release(&self) -> Option<&str> {
        match self.subcommand.as_str() {
            "show" => None,
            _ => self.positionals.first().map(String::as_str),
        }
    }

    /// Whether it is an install or upgrade: `install` (the operator's
    /// over nothing) or `upgrade --install` — a dry run too.
    pub fn releases(&self) -> bool {
        matches!(self.subcommand.as_str(), "install" | "upgrade")
    }

    /// Whether it is a dry run (`--dry-run=…`): a render, nothing written.
    pub fn dry_run(&self) -> bool {
        self.words.iter().any(|w| w.starts_with("--dry-run"))
    }

    /// Whether it acts on `release`.
    pub fn on(&self, release: &str) -> bool {
        self.release() == Some(release)
    }
}

/// The command lines of a wrapper's log, parsed.
pub fn helm_calls(log: &Path) -> Vec<HelmCall> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(HelmCall::parse)
        .collect()
}
