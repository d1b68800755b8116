//! Charts from Git (issue 38, docs/sources.md), on a real control plane
//! with the release operator binary and real helm. Measured in the same
//! run:
//!
//! 1. create → helm start for a chart from Git (each app its own
//!    repository: a cold fetch each), against the same chart from an HTTP
//!    repository (each app its own version range: a cold resolution each);
//! 2. 100 HelmApps of one repository and ref: the packs fetched to install
//!    them all, and after one commit that changes the chart (the webhook
//!    is not used: each app's `interval` finds it);
//! 3. peak RSS above idle while one HelmApp installs from a 200 MB
//!    repository whose chart directory is 50 KB.
//!
//! Prints one JSON line, and with `--markdown FILE` the report section.
//! `hack/bench-git.sh` runs it and writes bench/REPORT.md.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{
    DELIVERY_CRDS, Operator, apply_crds, helm_started, logging_helm, now_epoch, proc_field, stats,
};
use envtest::{GitRepo, GitServer};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const NS: &str = "git";

/// Seconds until `name` is Ready at `revision`, polled every 50 ms.
async fn until_ready(api: &Api<HelmApp>, name: &str, revision: i64, secs: u64) {
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
            t.elapsed() < Duration::from_secs(secs),
            "{name} not Ready at revision {revision} in {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create(api: &Api<HelmApp>, name: &str, spec: Value) {
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": NS }, "spec": spec }))
    .expect("app");
    api.create(&PostParams::default(), &app)
        .await
        .expect("create");
}

/// The first helm start of `release` after `since`, waited for.
async fn helm_start_after(log: &Path, release: &str, since: f64) -> f64 {
    let t = Instant::now();
    loop {
        if let Some(at) = helm_started(log, release, since) {
            return at - since;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "no helm for {release} in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn mib(pid: u32, field: &str) -> f64 {
    proc_field(pid, field).unwrap_or(0) as f64 / 1024.0
}

/// Random bytes (xorshift): incompressible, as a repository's binaries
/// are.
fn random_file(path: &Path, bytes: usize, seed: u64) {
    // Odd and distinct per seed: equal files would be one blob to Git.
    let mut rng = common::Rng(seed * 2 + 1);
    let mut data = Vec::with_capacity(bytes);
    while data.len() < bytes {
        data.extend_from_slice(&rng.next().to_le_bytes());
    }
    data.truncate(bytes);
    std::fs::create_dir_all(path.parent().unwrap()).expect("dir");
    std::fs::write(path, data).expect("file");
}

#[tokio::main]
async fn main() {
    let mut cold = 20usize;
    let mut shared = 100usize;
    let mut big_mb = 200usize;
    let mut markdown: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--cold" => cold = v.parse().unwrap_or(cold),
            "--apps" => shared = v.parse().unwrap_or(shared),
            "--big-mb" => big_mb = v.parse().unwrap_or(big_mb),
            "--markdown" => markdown = Some(v.into()),
            other => eprintln!("bench-git: ignoring {other}"),
        }
    }
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let dir = std::env::temp_dir().join(format!("bench-git-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("git")).expect("dir");
    let cp = envtest::ControlPlane::start().await.expect("control plane");
    apply_crds(&cp, &DELIVERY_CRDS);
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let tiny = charts.join("tiny");
    let http = envtest::ChartRepo::start(&cp, &[&tiny], None)
        .await
        .expect("chart repository");
    let server = GitServer::start(&dir.join("git"))
        .await
        .expect("git server");
    let url = |repo: &GitRepo| format!("{}/{}", server.url(), repo.served_name());
    let client = cp.client();
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NS } })).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let (wrapper, log) = logging_helm(&cp.helm_binary(), &dir);
    let mut cmd = Command::new(&bin);
    cmd.env("KUBECONFIG", cp.kubeconfig_path())
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
        .arg("--work-dir")
        .arg(dir.join("work"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("operator.log")).expect("log"));
    let op = Operator::spawn(cmd);
    op.ready().await;
    let api: Api<HelmApp> = Api::namespaced(client.clone(), NS);

    // 1. Cold: create → helm start, Git against HTTP, alternating.
    let mut from_git = Vec::new();
    let mut from_http = Vec::new();
    for i in 0..cold {
        let repo = GitRepo::create(server.root(), &format!("cold-{i}"));
        repo.copy_dir(&tiny, "charts/tiny");
        repo.commit("tiny");
        let since = now_epoch();
        let name = format!("git-{i}");
        let git = json!({ "url": url(&repo), "path": "charts/tiny" });
        create(&api, &name, json!({ "chart": { "git": git } })).await;
        from_git.push(helm_start_after(&log, &name, since).await);
        until_ready(&api, &name, 1, 120).await;
        let since = now_epoch();
        let name = format!("http-{i}");
        let chart = json!({ "repo": http.url(), "name": "tiny", "version": format!(">=0.0.{i}") });
        create(&api, &name, json!({ "chart": chart })).await;
        from_http.push(helm_start_after(&log, &name, since).await);
        until_ready(&api, &name, 1, 120).await;
    }

    // 2. 100 HelmApps of one repository and ref.
    let one = GitRepo::create(server.root(), "shared");
    one.copy_dir(&tiny, "charts/tiny");
    one.commit("tiny");
    let packs_before = server.fetches();
    let git = json!({ "url": url(&one), "path": "charts/tiny" });
    let started = Instant::now();
    for i in 0..shared {
        create(
            &api,
            &format!("shared-{i}"),
            json!({ "chart": { "git": git }, "interval": "30s" }),
        )
        .await;
    }
    for i in 0..shared {
        until_ready(&api, &format!("shared-{i}"), 1, 600).await;
    }
    let install_s = started.elapsed().as_secs_f64();
    let packs_install = server.fetches() - packs_before;
    one.write("charts/tiny/values.yaml", "label: second-commit\n");
    one.commit("a change to the chart");
    let started = Instant::now();
    for i in 0..shared {
        until_ready(&api, &format!("shared-{i}"), 2, 600).await;
    }
    let upgrade_s = started.elapsed().as_secs_f64();
    let packs_commit = server.fetches() - packs_before - packs_install;
    // Intervals pass with no new commit: ref listings only.
    tokio::time::sleep(Duration::from_secs(65)).await;
    let packs_idle = server.fetches() - packs_before - packs_install - packs_commit;

    // 3. A 200 MB repository, a 50 KB chart directory.
    let big = GitRepo::create(server.root(), "big");
    big.copy_dir(&tiny, "charts/tiny");
    random_file(
        &big.work().join("charts/tiny/files/blob.bin"),
        50 * 1024 - 2048,
        7,
    );
    for f in 0..big_mb / 2 {
        random_file(
            &big.work().join(format!("assets/{f:03}.bin")),
            2 * 1024 * 1024,
            f as u64 + 11,
        );
    }
    big.commit("200 MB of assets");
    let bare_mb = dir_bytes(big.bare()) as f64 / (1024.0 * 1024.0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = mib(op.pid(), "VmRSS:");
    // Reset the peak: what follows is the big fetch's.
    let _ = std::fs::write(format!("/proc/{}/clear_refs", op.pid()), "5");
    let since = now_epoch();
    let git = json!({ "url": url(&big), "path": "charts/tiny" });
    create(&api, "big", json!({ "chart": { "git": git } })).await;
    let big_start = helm_start_after(&log, "big", since).await;
    until_ready(&api, "big", 1, 300).await;
    let peak = mib(op.pid(), "VmHWM:");
    op.stop();

    let ms = |v: Vec<f64>| stats(v.iter().map(|x| x * 1000.0).collect());
    let (g, h) = (ms(from_git), ms(from_http));
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let out = json!({
        "cold": { "git_ms": g, "http_ms": h, "ratio_p50": f(&g, "p50") / f(&h, "p50"),
                  "ratio_p99": f(&g, "p99") / f(&h, "p99") },
        "shared": { "apps": shared, "packs_install": packs_install, "packs_commit": packs_commit,
                    "packs_idle_65s": packs_idle, "install_s": install_s, "upgrade_s": upgrade_s },
        "big": { "repo_mb": bare_mb, "idle_mib": idle, "peak_mib": peak, "above_idle_mib": peak - idle,
                 "create_to_helm_s": big_start },
    });
    println!("{out}");
    if let Some(path) = markdown {
        let md = format!(
            "Release binary, real helm, `--max-concurrent-helm 4`, Git served by `git http-backend` on loopback (`hack/bench-git.sh`).\n\n\
**Create → helm start**, one app at a time, each Ready before the next; a cold source each time (Git: a repository of its own, so a fetch; HTTP: a version range of its own, so an index read and a download):\n\n\
| chart from | n | p50 | p95 | p99 | max |\n|---|---|---|---|---|---|\n\
| Git (`chart.git`) | {cold} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n\
| HTTP repository, same run | {cold} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n\n\
Ratio Git / HTTP: p50 {:.2}×, p99 {:.2}×.\n\n\
**{shared} HelmApps of one repository and ref** (`interval: 30s`): packs fetched to install them all: {packs_install} (all Ready in {install_s:.0} s); after one commit that changes the chart: {packs_commit} more (all upgraded in {upgrade_s:.0} s); over the next 65 s with no commit: {packs_idle} (ref listings only).\n\n\
**A {bare_mb:.0} MB repository** (bare, on the server) with a 50 KB chart directory: the operator's peak RSS {peak:.1} MiB against {idle:.1} MiB idle — {:.1} MiB above idle; create → helm start {big_start:.1} s.\n",
            f(&g, "p50"),
            f(&g, "p95"),
            f(&g, "p99"),
            f(&g, "max"),
            f(&h, "p50"),
            f(&h, "p95"),
            f(&h, "p99"),
            f(&h, "max"),
            f(&g, "p50") / f(&h, "p50"),
            f(&g, "p99") / f(&h, "p99"),
            peak - idle,
        );
        std::fs::write(path, md).expect("markdown");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let p = e.path();
                    if p.is_dir() {
                        dir_bytes(&p)
                    } else {
                        e.metadata().map(|m| m.len()).unwrap_or(0)
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}
