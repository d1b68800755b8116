//! `dependsOn` any object (issue 39, docs/dependencies.md), on a real
//! control plane with the release operator binary and real helm: 100
//! HelmApps, each depending on one of 100 custom objects (Gadgets, a CRD
//! made here, `Ready=False`), all waiting. Measured in the same run:
//!
//! - idle: the operator's requests over 30 s while all 100 wait (audit log
//!   of the user it runs as), and the dependency informers started;
//! - one dependency at a time turns `Ready=True` → the helm start of its
//!   dependent (helm wrapper's clock), each app Ready before the next;
//! - the baseline: one values edit at a time of the same apps → their helm
//!   start, the path every spec change takes.
//!
//! Prints one JSON line, and with `--markdown FILE` the report section.
//! `hack/bench-dependencies.sh` runs it and writes bench/REPORT.md.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{
    DELIVERY_CRDS, Operator, apply_crds, audited_control_plane, helm_started, logging_helm,
    now_epoch, stats,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::{Value, json};

const NS: &str = "deps";
const USER: &str = "bench-dependencies";
const IDLE_SECS: u64 = 30;

fn gadgets(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.hossted.com", "v1", "Gadget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    Api::namespaced_with(client.clone(), NS, &resource)
}

fn ready(status: &str) -> Value {
    json!({ "status": { "conditions": [{ "type": "Ready", "status": status, "reason": "Bench",
        "message": "set by the benchmark", "lastTransitionTime": "2026-01-01T00:00:00Z" }] } })
}

/// Seconds until `name` is Ready at `revision`, polled every 20 ms.
async fn until_ready(api: &Api<HelmApp>, name: &str, revision: i64) {
    let t = Instant::now();
    loop {
        if let Ok(Some(a)) = api.get_opt(name).await
            && let Some(s) = &a.status
            && s.revision == revision
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{name} not Ready at revision {revision} in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first helm start of `release` after `since`, waited for.
async fn helm_start_after(log: &Path, release: &str, since: f64) -> f64 {
    let t = Instant::now();
    loop {
        if let Some(at) = helm_started(log, release, since) {
            return at - since;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no helm for {release} in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The audit records of the operator's user from line `from` on, by verb
/// and resource.
fn requests_since(audit: &Path, from: usize) -> (usize, Value) {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut by = std::collections::BTreeMap::<String, u64>::new();
    for l in lines.iter().skip(from) {
        if let Ok(v) = serde_json::from_str::<Value>(l) {
            let s = |p: &str| {
                v.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string()
            };
            *by.entry(format!("{} {}", s("/verb"), s("/objectRef/resource")))
                .or_default() += 1;
        }
    }
    (lines.len(), json!(by))
}

#[tokio::main]
async fn main() {
    let mut apps = 100usize;
    let mut markdown: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--apps" => apps = v.parse().unwrap_or(apps),
            "--markdown" => markdown = Some(v.into()),
            other => eprintln!("bench-dependencies: ignoring {other}"),
        }
    }
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let dir = std::env::temp_dir().join(format!("bench-dependencies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cp, audit) = audited_control_plane(
        &dir,
        USER,
        "RequestReceived, ResponseStarted, Panic",
        "Metadata",
    )
    .await;
    apply_crds(&cp, &DELIVERY_CRDS);
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let crd = charts.join("gadget/crds/gadgets.yaml");
    let applied = cp.kubectl().args(["apply", "-f"]).arg(&crd).status();
    assert!(applied.is_ok_and(|s| s.success()), "Gadget CRD");
    let client = cp.client();
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NS } })).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let g = gadgets(&client);
    for i in 0..apps {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.hossted.com/v1", "kind": "Gadget",
            "metadata": { "name": format!("g-{i}"), "namespace": NS }, "spec": {} }))
        .expect("gadget");
        loop {
            if g.create(&PostParams::default(), &object).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        g.patch_status(
            &format!("g-{i}"),
            &PatchParams::default(),
            &Patch::Merge(ready("False")),
        )
        .await
        .expect("status");
    }
    let (wrapper, log) = logging_helm(&cp.helm_binary(), &dir);
    let kubeconfig = cp
        .kubeconfig_for_user(USER, Some("system:masters"))
        .expect("kubeconfig");
    let mut cmd = Command::new(&bin);
    cmd.env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .args([
            "run",
            "--controllers",
            "delivery",
            "--max-concurrent-helm",
            "4",
        ])
        .arg("--privileged-namespaces=*")
        .arg("--helm-binary")
        .arg(&wrapper)
        .arg("--chart-path-root")
        .arg(&charts)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("operator.log")).expect("log"));
    let op = Operator::spawn(cmd);
    op.ready().await;
    let api: Api<HelmApp> = Api::namespaced(client.clone(), NS);
    for i in 0..apps {
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": format!("app-{i}"), "namespace": NS },
            "spec": { "chart": { "path": "tiny" },
                "dependsOn": [{ "apiVersion": "example.hossted.com/v1", "kind": "Gadget", "name": format!("g-{i}") }] } }))
        .expect("app");
        api.create(&PostParams::default(), &app)
            .await
            .expect("create");
    }
    // All wait: each says DependencyNotReady.
    let t = Instant::now();
    loop {
        let list = api.list(&Default::default()).await.expect("list");
        let waiting = list
            .items
            .iter()
            .filter(|a| {
                a.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.reason == "DependencyNotReady")
                })
            })
            .count();
        if waiting == apps {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{waiting}/{apps} waiting"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (from, _) = requests_since(&audit, 0);
    tokio::time::sleep(Duration::from_secs(IDLE_SECS)).await;
    let (_, idle) = requests_since(&audit, from);
    let informers_started = op
        .metric("hossted_dependency_informers_started_total")
        .await;
    let informers_running = op.metric("hossted_dependency_informers ").await;
    eprintln!("bench-dependencies: all {apps} wait; idle {IDLE_SECS} s: {idle}");

    // One dependency at a time → its dependent's helm start.
    let mut dependency = Vec::new();
    for i in 0..apps {
        let since = now_epoch();
        g.patch_status(
            &format!("g-{i}"),
            &PatchParams::default(),
            &Patch::Merge(ready("True")),
        )
        .await
        .expect("status");
        dependency.push(helm_start_after(&log, &format!("app-{i}"), since).await);
        until_ready(&api, &format!("app-{i}"), 1).await;
    }
    // Baseline: a values edit of each → its helm start.
    let mut edit = Vec::new();
    for i in 0..apps {
        let since = now_epoch();
        api.patch(
            &format!("app-{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "values": { "edit": 1 } } })),
        )
        .await
        .expect("edit");
        edit.push(helm_start_after(&log, &format!("app-{i}"), since).await);
        until_ready(&api, &format!("app-{i}"), 2).await;
    }
    op.stop();
    let ms = |v: Vec<f64>| stats(v.iter().map(|x| x * 1000.0).collect());
    let (dep, base) = (ms(dependency), ms(edit));
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let out = json!({
        "apps": apps,
        "dependency_to_helm_ms": dep,
        "values_edit_to_helm_ms": base,
        "ratio_p50": f(&dep, "p50") / f(&base, "p50"),
        "ratio_p99": f(&dep, "p99") / f(&base, "p99"),
        "informers": { "started": informers_started, "running": informers_running },
        "idle_requests": { "secs": IDLE_SECS, "by": idle },
    });
    println!("{out}");
    if let Some(path) = markdown {
        let idle_total: u64 = idle
            .as_object()
            .map(|m| m.values().filter_map(Value::as_u64).sum())
            .unwrap_or(0);
        let idle_list = idle
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let md = format!(
            "{apps} HelmApps, each `dependsOn` one of {apps} Gadgets (a CRD; `Ready=False`), release binary, real helm, `--max-concurrent-helm 4` (`hack/bench-dependencies.sh`). One change at a time, each app Ready before the next; times to the dependent's helm start (wrapper's clock):\n\n\
| change | n | p50 | p95 | p99 | max |\n|---|---|---|---|---|---|\n\
| a dependency turns `Ready=True` (watched, one informer) | {apps} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n\
| baseline: a values edit of the app, same run | {apps} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n\n\
Ratio to the baseline: p50 {:.2}×, p99 {:.2}×. Dependency informers started: {informers_started} (running: {informers_running}). While all {apps} waited, the operator made {idle_total} requests in {IDLE_SECS} s ({}).\n",
            f(&dep, "p50"),
            f(&dep, "p95"),
            f(&dep, "p99"),
            f(&dep, "max"),
            f(&base, "p50"),
            f(&base, "p95"),
            f(&base, "p99"),
            f(&base, "max"),
            f(&dep, "p50") / f(&base, "p50"),
            f(&dep, "p99") / f(&base, "p99"),
            if idle_list.is_empty() {
                "none".to_string()
            } else {
                idle_list
            },
        );
        std::fs::write(path, md).expect("markdown");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
