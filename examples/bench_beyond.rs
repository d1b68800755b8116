//! The "beyond the peers" benchmark (`hack/bench-beyond.sh`): the operator
//! binary with its webhook receiver on a real control plane, a chart
//! repository on loopback, helm behind a wrapper that logs each start.
//!
//! - Push to deploy: 20 times, a new chart version is published, then one
//!   signed `POST /hooks/chart-pushed`: push → helm started (the wrapper's
//!   log) and push → `Released` at the new version, for an app whose
//!   `interval` is an hour (nothing but the push makes it look).
//! - Approval: 20 spec changes of an app with `approval: manual`: change →
//!   `status.pendingChange` of the new configuration (its dry-run render
//!   included), and approve → `Released`.
//!
//! Prints one JSON line, and with `--markdown FILE` the report section.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{delivery_cluster, free_port, helm_started, logging_helm, now_epoch, stats};
use envtest::{ChartRepo, ControlPlane};
use hossted_operator::delivery::webhook::signature::sign;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "bench-webhook-key-0123456789";

/// The operator with delivery and the webhook receiver.
fn start_operator(bin: &str, cp: &ControlPlane, helm: &Path, dir: &Path, hooks: u16) -> Child {
    let key = dir.join("webhook-key");
    std::fs::write(&key, KEY).expect("key");
    let probes = free_port();
    Command::new(bin)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .args(["run", "--controllers", "delivery"])
        .args(["--max-concurrent-helm", "4", "--privileged-namespaces=*"])
        .arg(format!("--metrics-bind-address=127.0.0.1:{probes}"))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{probes}"))
        .arg(format!("--webhook-bind-address=127.0.0.1:{hooks}"))
        .arg("--webhook-secret-file")
        .arg(&key)
        .arg("--helm-binary")
        .arg(helm)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("operator.log")).expect("log"))
        .spawn()
        .expect("operator")
}

/// Publishes `tiny` at `version` into the repository.
fn publish(cp: &ControlPlane, repo: &ChartRepo, dir: &Path, version: &str) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts/tiny");
    let to = dir.join(format!("tiny-{version}")).join("tiny");
    let ok = Command::new("cp")
        .args(["-r"])
        .arg(&from)
        .arg(
            to.parent()
                .map(|p| {
                    let _ = std::fs::create_dir_all(p);
                    p.to_path_buf()
                })
                .unwrap_or_default(),
        )
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "copy the chart");
    let yaml = to.join("Chart.yaml");
    let text = std::fs::read_to_string(&yaml).expect("Chart.yaml");
    let text: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("version:") {
                format!("version: {version}")
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&yaml, text.join("\n") + "\n").expect("Chart.yaml");
    let repo_dir = repo.dir().display().to_string();
    for args in [
        vec![
            "package".to_string(),
            to.display().to_string(),
            "--destination".into(),
            repo_dir.clone(),
        ],
        vec![
            "repo".into(),
            "index".into(),
            repo_dir.clone(),
            "--url".into(),
            repo.url().into(),
        ],
    ] {
        let ok = cp
            .helm()
            .args(&args)
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "helm {args:?}");
    }
}

/// A signed POST; its status code.
async fn post(port: u16, path: &str, body: &str) -> u16 {
    let ts = (now_epoch() as i64).to_string();
    let sig = sign(KEY.as_bytes(), &ts, body.as_bytes());
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: hooks\r\nContent-Length: {}\r\nX-Hossted-Timestamp: {ts}\r\nX-Hossted-Signature: {sig}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Polls `name` until `done` holds (at most 5 minutes).
async fn until(api: &Api<HelmApp>, name: &str, done: impl Fn(&HelmApp) -> bool) -> Instant {
    let started = Instant::now();
    loop {
        if let Ok(app) = api.get(name).await
            && done(&app)
        {
            return Instant::now();
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{name} did not get there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn released_at(app: &HelmApp, version: &str) -> bool {
    app.status.as_ref().is_some_and(|s| {
        s.chart_version == version
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Released" && c.status == "True")
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

#[tokio::main]
async fn main() {
    let (mut pushes, mut markdown) = (20usize, None::<PathBuf>);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--pushes" => pushes = v.parse().unwrap_or(pushes),
            "--markdown" => markdown = Some(v.into()),
            other => eprintln!("bench-beyond: ignoring {other}"),
        }
    }
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let dir = std::env::temp_dir().join(format!("bench-beyond-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cp, repo) = delivery_cluster("tiny").await;
    let (wrapper, log) = logging_helm(&cp.helm_binary(), &dir);
    let hooks = free_port();
    let mut op = start_operator(&bin, &cp, &wrapper, &dir, hooks);
    let api: Api<HelmApp> = Api::namespaced(cp.client(), "default");
    let app = |name: &str, spec: serde_json::Value| -> HelmApp {
        serde_json::from_value(
            json!({ "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": name, "namespace": "default" }, "spec": spec }),
        )
        .expect("HelmApp")
    };

    // ---- Push to deploy ---------------------------------------------------
    let spec = json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "0.x" }, "interval": "1h" });
    api.create(&PostParams::default(), &app("pushed", spec))
        .await
        .expect("create");
    until(&api, "pushed", |a| released_at(a, "0.1.0")).await;
    eprintln!("bench-beyond: {pushes} pushes");
    let (mut to_helm, mut to_released) = (Vec::new(), Vec::new());
    for i in 0..pushes {
        let version = format!("0.{}.0", i + 2);
        publish(&cp, &repo, &dir, &version);
        let body = json!({ "repo": repo.url(), "name": "tiny", "version": version }).to_string();
        let (t0, clock) = (now_epoch(), Instant::now());
        assert_eq!(
            post(hooks, "/hooks/chart-pushed", &body).await,
            202,
            "a signed push"
        );
        let done = until(&api, "pushed", |a| released_at(a, &version)).await;
        to_released.push(done.duration_since(clock).as_secs_f64());
        let started = helm_started(&log, "pushed", t0).expect("helm started after the push");
        to_helm.push(started - t0);
    }

    // ---- Approval -----------------------------------------------------------
    let gated = |greeting: &str| {
        json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "0.1.0" },
                "approval": "manual", "values": { "greeting": greeting } })
    };
    api.create(&PostParams::default(), &app("gated", gated("g0")))
        .await
        .expect("create");
    let pending_hash = |a: &HelmApp| {
        a.status
            .as_ref()
            .and_then(|s| s.pending_change.as_ref())
            .map(|p| p.config_hash.clone())
    };
    until(&api, "gated", |a| pending_hash(a).is_some()).await;
    let first = api
        .get("gated")
        .await
        .ok()
        .and_then(|a| pending_hash(&a))
        .unwrap_or_default();
    let patch = json!({ "metadata": { "annotations": { "hossted.com/approve": first } } });
    api.patch("gated", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("approve");
    until(&api, "gated", |a| released_at(a, "0.1.0")).await;
    eprintln!("bench-beyond: {pushes} changes awaiting approval");
    let (mut to_pending, mut approved) = (Vec::new(), Vec::new());
    let mut last = first;
    for i in 1..=pushes {
        let patch = json!({ "spec": gated(&format!("g{i}")) });
        let clock = Instant::now();
        api.patch("gated", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("change");
        let prev = last.clone();
        let done = until(&api, "gated", |a| {
            pending_hash(a).is_some_and(|h| h != prev)
        })
        .await;
        to_pending.push(done.duration_since(clock).as_secs_f64());
        last = api
            .get("gated")
            .await
            .ok()
            .and_then(|a| pending_hash(&a))
            .unwrap_or_default();
        if i % 5 == 0 {
            let patch = json!({ "metadata": { "annotations": { "hossted.com/approve": last } } });
            let clock = Instant::now();
            api.patch("gated", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("approve");
            let hash = last.clone();
            let done = until(&api, "gated", |a| {
                a.status
                    .as_ref()
                    .is_some_and(|s| s.config_hash == hash && s.pending_change.is_none())
                    && released_at(a, "0.1.0")
            })
            .await;
            approved.push(done.duration_since(clock).as_secs_f64());
        }
    }
    let _ = op.kill();
    let _ = op.wait();
    let result = json!({
        "push_to_helm_started_s": stats(to_helm),
        "push_to_released_s": stats(to_released),
        "change_to_pending_s": stats(to_pending),
        "approve_to_released_s": stats(approved),
    });
    println!("{result}");
    if let Some(path) = markdown {
        std::fs::write(path, report(&result, pushes)).expect("markdown");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn report(r: &serde_json::Value, pushes: usize) -> String {
    let ms = |k: &str, p: &str| format!("{:.0} ms", r[k][p].as_f64().unwrap_or(f64::NAN) * 1000.0);
    let row = |what: &str, k: &str, target: &str| {
        format!(
            "| {what} | {} | {} | {} | {} | {target} |\n",
            r[k]["n"],
            ms(k, "p50"),
            ms(k, "p99"),
            ms(k, "max")
        )
    };
    format!(
        "## Beyond the peers: push to deploy and approval\n\n\
         `hack/bench-beyond.sh`: the release binary with `--webhook-bind-address`, a chart \
         repository on loopback, helm behind a wrapper that logs each start, {pushes} pushes \
         (a new version published, then one signed `chart-pushed`; the app's `interval` is 1h) \
         and {pushes} spec changes of an app with `approval: manual` (every 5th approved).\n\n\
         | | n | p50 | p99 | max | target |\n| --- | --- | --- | --- | --- | --- |\n{}{}{}{}",
        row("push → helm started", "push_to_helm_started_s", "p99 ≤ 1 s"),
        row(
            "push → Released at the new version",
            "push_to_released_s",
            ""
        ),
        row(
            "spec change → `status.pendingChange` (dry-run render included)",
            "change_to_pending_s",
            ""
        ),
        row("approve → Released", "approve_to_released_s", ""),
    )
}
