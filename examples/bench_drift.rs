//! The drift benchmark (`hack/bench-drift.sh`, issue 23): the operator
//! binary (delivery only) on a real control plane with an audit log of its
//! user, `APPS` settled HelmApps of the `full` chart (6 objects each) with
//! `drift.mode: enabled` and an ignore rule on Deployments'
//! `/spec/replicas`.
//!
//! - idle: the operator's requests over a minute without edits;
//! - edits: `EDITS` random `kubectl edit`-style changes over `MINUTES`
//!   (a ConfigMap key, a Deployment image, a Service port; 10 % a
//!   Deployment's replicas, which the rule ignores), each followed through
//!   a watch until put back: edit → put back p50/p99, the operator's
//!   requests per edit (audit log), its dry runs (`hossted_drift_checks_total`)
//!   against Flux's cost model (every object of every release dry-run each
//!   2 m interval);
//! - memory: operator RSS per settled HelmApp (everything it keeps), and
//!   what `status.inventory` + `status.drift` take per HelmApp.
//!
//! Prints one JSON line, and with `--markdown FILE` the report section.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{Rng, apply_crds, audited_control_plane, percentile, proc_field};
use envtest::ControlPlane;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;

/// The operator's user: its requests are the audit log's.
const USER: &str = "bench-operator";
const NAMESPACES: usize = 10;
const LOG_LEVEL: &str = "cm-value-only-with-the-flag";
const IMAGE: &str = "registry.example.com/full/app:2.1.0";
const CHECKS: &str = "hossted_drift_checks_total";
const DRY_RUNS: &str = "hossted_drift_dry_runs_total";

struct Operator {
    child: Child,
    metrics: String,
}

impl Operator {
    fn start(bin: &str, kubeconfig: &Path, cp: &ControlPlane, work: &Path, log: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let child = Command::new(bin)
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("BENCH_RUST_LOG").unwrap_or("warn".into()),
            )
            .args([
                "run",
                "--controllers",
                "delivery",
                "--privileged-namespaces=*",
            ])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}")])
            .args(["--health-probe-bind-address", "0"])
            .arg("--helm-binary")
            .arg(cp.helm_binary())
            .arg("--work-dir")
            .arg(work)
            .arg("--chart-path-root")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"))
            .spawn()
            .expect("operator");
        Operator {
            child,
            metrics: format!("http://127.0.0.1:{port}/metrics"),
        }
    }

    fn rss_mib(&self) -> f64 {
        proc_field(self.child.id(), "VmRSS:").unwrap_or(0) as f64 / 1024.0
    }

    /// The sum of counter `name` over kinds.
    async fn counter(&self, name: &str) -> f64 {
        let url = self.metrics.clone();
        let text = tokio::task::spawn_blocking(move || {
            ureq::get(&url)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn stop(mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Requests of [`USER`] in the audit log from line `from` (watches left
/// out: they are long-lived, not per edit); returns the line count too.
fn audited(path: &Path, from: usize) -> (usize, usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let n = lines
        .iter()
        .skip(from)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["user"]["username"] == USER && v["verb"] != "watch")
        .count();
    (lines.len(), n)
}

/// Edits waiting to be put back: `Kind/ns/name` → when edited.
type Pending = Arc<Mutex<HashMap<String, Instant>>>;

/// Follows `K` in every namespace; an object of `pending` that `repaired`
/// says is back records its latency in `done`.
fn follow<K>(
    client: &Client,
    kind: &'static str,
    repaired: fn(&K) -> bool,
    pending: Pending,
    done: Arc<Mutex<Vec<f64>>>,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut rv = "0".to_string();
        loop {
            let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &rv).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut stream = stream.boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                let obj = match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => o,
                    WatchEvent::Bookmark(b) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    _ => continue,
                };
                let meta = obj.meta();
                rv = meta.resource_version.clone().unwrap_or(rv);
                let key = format!(
                    "{kind}/{}/{}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                );
                if repaired(&obj)
                    && let Some(t) = pending.lock().remove(&key)
                {
                    done.lock().push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
    });
}

async fn create_apps(client: &Client, apps: usize) {
    for i in 0..NAMESPACES {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(format!("drift-{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await;
    }
    for i in 0..apps {
        let ns = format!("drift-{}", i % NAMESPACES);
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": format!("app-{i}"), "namespace": ns },
            "spec": { "chart": { "path": "full" },
                      "drift": { "mode": "enabled", "ignore": [
                          { "paths": ["/spec/replicas"], "target": { "kind": "Deployment" } } ] } }
        }))
        .expect("helmapp");
        Api::<HelmApp>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &app)
            .await
            .expect("create helmapp");
    }
}

/// Waits until every HelmApp is Ready; the seconds it took.
async fn all_ready(client: &Client, apps: usize) -> f64 {
    let t = Instant::now();
    let api: Api<HelmApp> = Api::all(client.clone());
    loop {
        let ready = api
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|a| {
                        a.status.as_ref().is_some_and(|s| {
                            s.conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                                && !s.inventory.is_empty()
                        })
                    })
                    .count()
            })
            .unwrap_or(0);
        if ready >= apps {
            return t.elapsed().as_secs_f64();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// One edit of app `i`: which kind (and whether the ignore rule covers it).
async fn edit(client: &Client, i: usize, what: u64, n: u64) -> Option<String> {
    let ns = format!("drift-{}", i % NAMESPACES);
    let name = format!("app-{i}");
    let params = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    match what {
        0..=2 => {
            let body = json!({ "data": { "LOG_LEVEL": format!("edit-{n}") } });
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            let key = format!("{name}-env");
            api.patch(&key, &params, &Patch::Merge(&body)).await.ok()?;
            Some(format!("ConfigMap/{ns}/{key}"))
        }
        3..=5 => {
            let body = json!({ "spec": { "template": { "spec": { "containers": [
                { "name": "app", "image": format!("registry.example.com/full/app:edit-{n}") } ] } } } });
            let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
            let key = format!("{name}-app");
            api.patch(&key, &params, &Patch::Strategic(&body))
                .await
                .ok()?;
            Some(format!("Deployment/{ns}/{key}"))
        }
        6..=8 => {
            let body = json!({ "spec": { "ports": [{ "port": 81, "protocol": "TCP", "targetPort": 80 }] } });
            let api: Api<Service> = Api::namespaced(client.clone(), &ns);
            let key = format!("{name}-app");
            api.patch(&key, &params, &Patch::Merge(&body)).await.ok()?;
            Some(format!("Service/{ns}/{key}"))
        }
        _ => {
            let body = json!({ "spec": { "replicas": 2 + (n % 5) } });
            let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
            api.patch(&format!("{name}-app"), &params, &Patch::Merge(&body))
                .await
                .ok()?;
            None
        }
    }
}

struct Figures {
    apps: usize,
    install_secs: f64,
    idle_requests_per_min: f64,
    idle_checks: f64,
    edits: usize,
    ignored: usize,
    minutes: f64,
    repaired: Vec<f64>,
    unrepaired: usize,
    requests: usize,
    checks: f64,
    dry_runs: f64,
    flux_dry_runs: f64,
    rss_per_app_kib: f64,
    status_bytes_per_app: f64,
}

/// Follows the three kinds edited, recording each put-back's latency.
fn follow_all(client: &Client, pending: &Pending, done: &Arc<Mutex<Vec<f64>>>) {
    follow::<ConfigMap>(
        client,
        "ConfigMap",
        |c| {
            c.data
                .as_ref()
                .and_then(|d| d.get("LOG_LEVEL"))
                .map(String::as_str)
                == Some(LOG_LEVEL)
        },
        pending.clone(),
        done.clone(),
    );
    follow::<Deployment>(
        client,
        "Deployment",
        |d| {
            d.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.as_deref())
                == Some(IMAGE)
        },
        pending.clone(),
        done.clone(),
    );
    follow::<Service>(
        client,
        "Service",
        |s| {
            s.spec
                .as_ref()
                .and_then(|s| s.ports.as_ref())
                .is_some_and(|p| p.iter().any(|p| p.port == 80))
        },
        pending.clone(),
        done.clone(),
    );
}

/// `edits` edits of random apps spread over `minutes`, each on an app
/// with nothing pending; the number that the ignore rule covers.
async fn run_edits(
    client: &Client,
    apps: usize,
    edits: usize,
    minutes: usize,
    pending: &Pending,
) -> usize {
    let start = Instant::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let period = Duration::from_secs_f64(minutes as f64 * 60.0 / edits.max(1) as f64);
    let mut ignored = 0;
    for n in 0..edits {
        tokio::time::sleep_until((start + period * n as u32).into()).await;
        let what = rng.below(10);
        // An app with nothing pending (its last edit put back).
        let mut i = rng.below(apps as u64) as usize;
        for _ in 0..apps {
            let busy = pending.lock().keys().any(|k| {
                k.ends_with(&format!("/app-{i}-env")) || k.ends_with(&format!("/app-{i}-app"))
            });
            if !busy {
                break;
            }
            i = (i + 1) % apps;
        }
        let t = Instant::now();
        match edit(client, i, what, n as u64).await {
            Some(key) => {
                pending.lock().insert(key, t);
            }
            None => ignored += 1,
        }
    }
    ignored
}

#[tokio::main]
async fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (apps, edits, minutes) = (env("APPS", 100), env("EDITS", 1000), env("MINUTES", 10));
    let mut markdown: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--markdown" {
            markdown = args.next().map(PathBuf::from);
        }
    }
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let dir = std::env::temp_dir().join(format!("bench-drift-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("work")).expect("dir");
    // `BENCH_AUDIT_LEVEL=Request` keeps request bodies, to see what a
    // request was for.
    let level = std::env::var("BENCH_AUDIT_LEVEL").unwrap_or("Metadata".into());
    let stages = "RequestReceived, ResponseStarted, Panic";
    let (cp, audit) = audited_control_plane(&dir, USER, stages, &level).await;
    let client = cp.client();
    let kubeconfig = cp
        .kubeconfig_for_user(USER, Some("system:masters"))
        .expect("kubeconfig");
    apply_crds(
        &cp,
        &[
            "helmapps.hossted.com",
            "helmappsets.hossted.com",
            "hosstedprojects.hossted.com",
        ],
    );
    let op = Operator::start(
        &bin,
        &kubeconfig,
        &cp,
        &dir.join("work"),
        &dir.join("operator.log"),
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_empty = op.rss_mib();

    eprintln!("bench-drift: {apps} HelmApps of the full chart, drift enabled");
    create_apps(&client, apps).await;
    let install_secs = all_ready(&client, apps).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let rss_settled = op.rss_mib();
    let listed = Api::<HelmApp>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("list");
    let status_bytes: usize = listed
        .items
        .iter()
        .filter_map(|a| a.status.as_ref())
        .map(|s| {
            serde_json::to_vec(&s.inventory).map_or(0, |v| v.len())
                + serde_json::to_vec(&s.drift).map_or(0, |v| v.len())
        })
        .sum();

    eprintln!("bench-drift: a minute idle");
    let (mark, _) = audited(&audit, 0);
    let checks_before = op.counter(CHECKS).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (_, idle_requests) = audited(&audit, mark);
    let idle_checks = op.counter(CHECKS).await - checks_before;

    eprintln!("bench-drift: {edits} edits over {minutes} min");
    let pending: Pending = Arc::default();
    let done: Arc<Mutex<Vec<f64>>> = Arc::default();
    follow_all(&client, &pending, &done);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mark, _) = audited(&audit, 0);
    let checks_before = op.counter(CHECKS).await;
    let dry_runs_before = op.counter(DRY_RUNS).await;
    let start = Instant::now();
    let ignored = run_edits(&client, apps, edits, minutes, &pending).await;
    let wait = Instant::now();
    while !pending.lock().is_empty() && wait.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, requests) = audited(&audit, mark);
    let checks = op.counter(CHECKS).await - checks_before;
    let dry_runs = op.counter(DRY_RUNS).await - dry_runs_before;
    let elapsed_min = start.elapsed().as_secs_f64() / 60.0;
    let mut repaired = done.lock().clone();
    repaired.sort_by(f64::total_cmp);
    let f = Figures {
        apps,
        install_secs,
        idle_requests_per_min: idle_requests as f64,
        idle_checks,
        edits,
        ignored,
        minutes: elapsed_min,
        unrepaired: pending.lock().len(),
        repaired,
        requests,
        checks,
        dry_runs,
        // Flux: every object of every release, one dry run per 2 m interval.
        flux_dry_runs: (apps * 6) as f64 * (elapsed_min / 2.0).floor().max(1.0),
        rss_per_app_kib: (rss_settled - rss_empty) * 1024.0 / apps as f64,
        status_bytes_per_app: status_bytes as f64 / apps as f64,
    };
    op.stop();
    report(&f, markdown.as_deref());
}

fn report(f: &Figures, markdown: Option<&Path>) {
    let fixed = f.edits - f.ignored;
    let (p50, p99) = (percentile(&f.repaired, 50.0), percentile(&f.repaired, 99.0));
    let per_edit = f.requests as f64 / fixed.max(1) as f64;
    println!(
        "{}",
        json!({
            "apps": f.apps, "install_secs": f.install_secs, "edits": f.edits, "ignored_edits": f.ignored,
            "minutes": f.minutes, "put_back": f.repaired.len(), "not_put_back": f.unrepaired,
            "put_back_p50_ms": p50, "put_back_p99_ms": p99,
            "requests": f.requests, "requests_per_edit": per_edit,
            "checks": f.checks, "dry_runs": f.dry_runs, "flux_model_dry_runs": f.flux_dry_runs,
            "idle_requests_per_min": f.idle_requests_per_min, "idle_dry_runs": f.idle_checks,
            "rss_per_app_kib": f.rss_per_app_kib, "status_bytes_per_app": f.status_bytes_per_app,
        })
    );
    let Some(path) = markdown else {
        return;
    };
    let verdict = |ok: bool| if ok { "met" } else { "**not met**" };
    let text = format!(
        "Drift of every field, found by events (`hack/bench-drift.sh`, issue 23): the operator binary (delivery only) on a real control plane, {apps} settled HelmApps of the `full` chart (6 objects each: Deployment, StatefulSet, Service, Ingress, ConfigMap, Secret; installed in {install:.0} s), `drift.mode: enabled`, an ignore rule on Deployments' `/spec/replicas`. {edits} `kubectl edit`-style changes over {minutes:.1} min — a ConfigMap key, a Deployment image or a Service port, and {ignored} on an ignored field — each followed through a watch until put back. Requests are the operator's user's in the apiserver's audit log (watches left out); checks (a read of a suspect object, compared with its manifest) are `hossted_drift_checks_total`, dry runs `hossted_drift_dry_runs_total` (enabled mode confirms by the put-back itself, so makes none).\n\n\
| measure | figure | target | |\n|---|---|---|---|\n\
| edit → put back, p50 / p99 ({put} of {fixed} edits; {left} not seen back within 30 s of the last) | {p50:.0} / {p99:.0} ms | p99 ≤ 2 s | {v1} |\n\
| the operator's apiserver requests per edit (all of them, over all {edits} edits, divided by the {fixed} not ignored) | {per_edit:.2} | ≤ 3 for a watched kind | {v2} |\n\
| checks / dry runs over the {minutes:.1} min | {checks:.0} / {dry_runs:.0} | Flux's model for the same time: {apps} × 6 objects × one dry run per 2 m interval = {flux:.0} | {ratio:.1}× fewer reads, no dry run |\n\
| idle, drift enabled, no edits: requests / checks in a minute | {idle:.0} / {idle_checks:.0} | 0 for watched kinds | {v3} |\n\
| operator RSS per settled HelmApp (everything it keeps for one: caches of 6 objects, the HelmApp, status) | {rss:.1} KiB | — | |\n\
| `status.inventory` + `status.drift` per HelmApp (JSON) | {status:.0} B | ≤ 2 KiB for inventory + drift state | {v4} |\n\n\
Per edit the operator makes a read, a put-back and an Event (created, or its count patched); over the run, once per HelmApp the status write of its first `Drifted` condition and once per Service the server-side apply the server refuses (the edited port list would be invalid; merge patch from then on) — what is above 3 (seen with `BENCH_AUDIT_LEVEL=Request` on a small run). The ignored edits cost no request.\n",
        apps = f.apps,
        install = f.install_secs,
        edits = f.edits,
        minutes = f.minutes,
        ignored = f.ignored,
        put = f.repaired.len(),
        left = f.unrepaired,
        v1 = verdict(p99 <= 2000.0 && f.unrepaired == 0),
        v2 = verdict(per_edit <= 3.0),
        checks = f.checks,
        dry_runs = f.dry_runs,
        flux = f.flux_dry_runs,
        ratio = f.flux_dry_runs / f.checks.max(1.0),
        idle = f.idle_requests_per_min,
        idle_checks = f.idle_checks,
        v3 = verdict(f.idle_requests_per_min == 0.0 && f.idle_checks == 0.0),
        rss = f.rss_per_app_kib,
        status = f.status_bytes_per_app,
        v4 = verdict(f.status_bytes_per_app <= 2048.0),
    );
    std::fs::write(path, text).expect("markdown");
}
