//! `kubectl hossted ui` at 1,000 HelmApps (issue 44, docs/ui.md), on a real
//! control plane with the release binary and a real headless Chromium.
//! Measured in the same run:
//!
//! 1. the UI process's resident memory: watching an empty namespace (the
//!    baseline), then all 1,000 HelmApps synced, then after 20 overviews
//!    (and its peak, `VmHWM`);
//! 2. the overview's time to first byte and whole response over loopback
//!    (20 requests, raw TCP), against the apiserver's LIST of the same
//!    HelmApps (what a page that listed per request would wait for);
//! 3. the overview's weight: HTML, CSS and script;
//! 4. update latency in the browser: `kubectl patch` of one app's status →
//!    its row changed in the page's DOM (a MutationObserver stamps
//!    `Date.now()`), p50/p99 over 20 edits, from kubectl's start and from
//!    its exit — against a plain watch of the same objects (the event's
//!    arrival), the floor any UI sits on.
//!
//! Prints one JSON line, and with `--markdown FILE` the report section.
//! `hack/bench-ui.sh` runs it and writes bench/REPORT.md.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{DELIVERY_CRDS, apply_crds, now_epoch, stats};
use envtest::browser::{Browser, WebApp};
use envtest::fantoccini::Locator;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

const NAMESPACES: usize = 10;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn ui_command(cp: &envtest::ControlPlane, extra: &[&str]) -> std::process::Command {
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["ui", "--no-open"])
        .args(extra)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUST_LOG", "warn");
    cmd
}

fn kib(ui: &WebApp, field: &str) -> f64 {
    common::proc_field(ui.pid().expect("pid"), field).unwrap_or(0) as f64
}

/// GET `path` over a raw connection: (seconds to the first byte, seconds
/// to the whole response, body bytes).
fn raw_get(origin: &str, path: &str, cookie: &str) -> (f64, f64, usize) {
    let addr = origin.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    );
    let t = Instant::now();
    s.write_all(req.as_bytes()).expect("write");
    let mut first = [0u8; 1];
    s.read_exact(&mut first).expect("first byte");
    let ttfb = t.elapsed().as_secs_f64();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("read");
    let total = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&rest);
    let body = text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len());
    (ttfb, total, body)
}

/// Signs in: the session cookie.
async fn sign_in(ui: &WebApp) -> String {
    let url = ui.login_url.clone();
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .into();
        let r = agent.get(&url).call().expect("login");
        let set = r
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .expect("cookie");
        set.split(';').next().unwrap().to_string()
    })
    .await
    .unwrap()
}

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({ "type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-11-27T00:00:00Z" })
}

/// A status like the operator's, varied: 10% failing, 5% awaiting
/// approval, 5% waiting, the rest ready; five history entries and five
/// inventory objects each; an update notice on every tenth.
fn status_of(i: usize, name: &str) -> Value {
    let ready = match i % 20 {
        0 | 1 => condition(
            "False",
            "RetriesExhausted",
            &format!(
                "upgrade of {name} failed 5 times: context deadline exceeded; fix the cause, then reconcile"
            ),
        ),
        2 => condition(
            "False",
            "AwaitingApproval",
            "configuration 0123456789abcdef waits for approval",
        ),
        3 => condition("False", "DependencyNotReady", "waiting for db"),
        _ => condition(
            "True",
            "UpToDate",
            &format!("release {name} is up to date at revision 3"),
        ),
    };
    let history: Vec<Value> = (1..=5)
        .map(|r| json!({ "action": "upgrade", "revision": r, "chartVersion": "1.2.3", "configHash": format!("{r:064x}"),
                          "result": "succeeded", "time": "2026-11-27T00:00:00Z", "duration": "4.2s" }))
        .collect();
    let inventory: Vec<Value> = ["Deployment", "Service", "ConfigMap", "ServiceAccount", "Ingress"]
        .iter()
        .map(|k| json!({ "kind": k, "apiVersion": "v1", "namespace": "x", "name": format!("{name}-{}", k.to_lowercase()) }))
        .collect();
    let mut status = json!({ "releaseName": name, "targetNamespace": "x", "chartVersion": "1.2.3", "revision": 3,
        "configHash": format!("{i:064x}"), "lastAction": "upgrade", "history": history, "inventory": inventory,
        "conditions": [ready] });
    if i % 20 == 2 {
        status["pendingChange"] = json!({ "chartVersion": "1.2.4", "configHash": "0123456789abcdef",
            "objects": { "changed": ["Deployment x/web"] }, "diffLines": 4 });
    }
    if i % 10 == 5 {
        status["latestAvailable"] = json!("1.3.0");
    }
    json!({ "status": status })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let apps: usize = arg("--apps", "1000").parse().expect("--apps");
    let edits: usize = arg("--edits", "20").parse().expect("--edits");
    let markdown = arg("--markdown", "");
    let cp = envtest::ControlPlane::start().await.expect("control plane");
    apply_crds(&cp, &DELIVERY_CRDS);
    let client = cp.client();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in (0..NAMESPACES)
        .map(|n| format!("team-{n}"))
        .chain(["empty".to_string()])
    {
        let n: Namespace = serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
        ns_api
            .create(&PostParams::default(), &n)
            .await
            .expect("namespace");
    }

    // 1. Baseline: the UI watching an empty namespace.
    let empty = WebApp::start(ui_command(&cp, &["-n", "empty"]))
        .await
        .expect("ui");
    let cookie = sign_in(&empty).await;
    let _ = raw_get(&empty.origin, "/", &cookie);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_empty = kib(&empty, "VmRSS:");
    drop(empty);

    // 1,000 HelmApps with statuses like the operator's.
    let started = Instant::now();
    let names: Vec<(String, String)> = (0..apps)
        .map(|i| (format!("team-{}", i % NAMESPACES), format!("app-{i:04}")))
        .collect();
    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(24, |(i, (ns, name))| {
            let api: Api<HelmApp> = Api::namespaced(client.clone(), ns);
            async move {
                let app: HelmApp = serde_json::from_value(json!({
                    "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
                    "metadata": { "name": name, "namespace": ns },
                    "spec": { "chart": { "repo": "https://charts.example.com", "name": "web", "version": "1.2.3" },
                              "values": { "replicas": 2, "image": { "tag": "1.0" } } } }))
                .unwrap();
                api.create(&PostParams::default(), &app).await.expect("create");
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status_of(i, name))).await.expect("status");
            }
        })
        .await;
    eprintln!(
        "bench: {apps} HelmApps in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // The UI over all of them.
    let t = Instant::now();
    let ui = WebApp::start(ui_command(&cp, &[])).await.expect("ui");
    let start_s = t.elapsed().as_secs_f64();
    // The browser signs in (the token is one-time); the raw requests
    // below use its cookie.
    let b = Browser::start(1280, 900).await.expect("browser");
    b.client.goto(&ui.login_url).await.expect("login");
    b.client
        .wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css(r#"#live[data-live="live"]"#))
        .await
        .expect("live");
    let port = ui.origin.rsplit(':').next().unwrap_or_default().to_string();
    let session = b
        .client
        .get_named_cookie(&format!("hossted-ui-{port}"))
        .await
        .expect("session cookie");
    let cookie = format!("{}={}", session.name(), session.value());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_synced = kib(&ui, "VmRSS:");

    // 2–3. TTFB and weight, and the apiserver's LIST for comparison.
    let (origin, c) = (ui.origin.clone(), cookie.clone());
    let gets = tokio::task::spawn_blocking(move || {
        (0..20)
            .map(|_| raw_get(&origin, "/", &c))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let ttfb: Vec<f64> = gets.iter().map(|g| g.0 * 1000.0).collect();
    let whole: Vec<f64> = gets.iter().map(|g| g.1 * 1000.0).collect();
    let html_bytes = gets[0].2;
    let (origin, c) = (ui.origin.clone(), cookie.clone());
    let (css, js) = tokio::task::spawn_blocking(move || {
        (
            raw_get(&origin, "/static/ui.css", &c).2,
            raw_get(&origin, "/static/ui.js", &c).2,
        )
    })
    .await
    .unwrap();
    let all: Api<HelmApp> = Api::all(client.clone());
    let mut list_ms = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let l = all.list(&Default::default()).await.expect("list");
        assert_eq!(l.items.len(), apps);
        list_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let rss_loaded = kib(&ui, "VmRSS:");

    // 4. Update latency in the browser, and a plain watch beside it.
    let arrivals: Arc<Mutex<HashMap<String, f64>>> = Arc::default();
    let watch_task = {
        let (all, arrivals) = (all.clone(), arrivals.clone());
        tokio::spawn(async move {
            let mut stream = all
                .watch(&WatchParams::default(), "0")
                .await
                .expect("watch")
                .boxed();
            while let Some(Ok(e)) = stream.next().await {
                if let WatchEvent::Modified(app) = e {
                    let reason = app
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.first())
                        .map(|c| c.reason.clone())
                        .unwrap_or_default();
                    arrivals
                        .lock()
                        .entry(reason)
                        .or_insert_with(|| now_epoch() * 1000.0);
                }
            }
        })
    };
    let (mut from_start, mut from_exit, mut watch_ms) = (Vec::new(), Vec::new(), Vec::new());
    for e in 0..edits {
        let i = 4 + 20 * (e * 7 % (apps / 20).max(1)); // a Ready app, spread out
        let (ns, name) = &names[i];
        let reason = format!("BenchEdit{e}");
        let observe = r#"
            const [sel, reason] = arguments;
            window.__changed = null;
            window.__check = () => {
                const row = document.querySelector(sel);
                if (window.__changed === null && row && row.dataset.reason === reason) window.__changed = Date.now();
            };
            if (!window.__observer) {
                window.__observer = new MutationObserver(() => window.__check());
                window.__observer.observe(document.getElementById('main'), { childList: true, subtree: true });
            }
            return 0;"#;
        let sel = format!(r#"tr[data-app="{ns}/{name}"]"#);
        b.client
            .execute(observe, vec![json!(sel), json!(reason)])
            .await
            .expect("observer");
        let patch = json!({ "status": { "conditions": [condition("False", &reason, "edited by the benchmark")] } }).to_string();
        let t0 = now_epoch() * 1000.0;
        let out = tokio::process::Command::from(cp.kubectl())
            .args([
                "patch",
                "helmapp",
                name,
                "-n",
                ns,
                "--subresource=status",
                "--type=merge",
                "-p",
                &patch,
            ])
            .output()
            .await
            .expect("kubectl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t_exit = now_epoch() * 1000.0;
        let t = Instant::now();
        let changed = loop {
            let v = b
                .client
                .execute("return window.__changed;", vec![])
                .await
                .expect("poll");
            if let Some(at) = v.as_f64() {
                break at;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "edit {e}: the page did not change in 20 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        from_start.push(changed - t0);
        from_exit.push(changed - t_exit);
        if let Some(at) = arrivals.lock().get(&reason) {
            watch_ms.push(at - t0);
        }
    }
    b.close().await;
    watch_task.abort();
    let rss_after_edits = kib(&ui, "VmRSS:");
    let peak = kib(&ui, "VmHWM:");

    let p = |v: &[f64], q: f64| {
        let mut s = v.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        common::percentile(&s, q)
    };
    let weight_kb = (html_bytes + css + js) as f64 / 1024.0;
    let line = json!({
        "apps": apps, "ui_start_s": start_s,
        "rss_kib": { "empty": rss_empty, "synced": rss_synced, "after_overviews": rss_loaded, "after_edits": rss_after_edits, "peak": peak },
        "overview_ttfb_ms": stats(ttfb.clone()), "overview_whole_ms": stats(whole.clone()), "apiserver_list_ms": stats(list_ms.clone()),
        "weight_bytes": { "html": html_bytes, "css": css, "js": js },
        "update_ms_from_kubectl_start": stats(from_start.clone()), "update_ms_from_kubectl_exit": stats(from_exit.clone()),
        "watch_ms_from_kubectl_start": stats(watch_ms.clone()),
    });
    println!("{line}");
    if !markdown.is_empty() {
        let mib = |k: f64| k / 1024.0;
        let md = format!(
            "`hack/bench-ui.sh`: the release binary's `ui` against a real control plane holding {apps} HelmApps in {NAMESPACES} namespaces \
(statuses like the operator's: 10% failing, 5% awaiting approval, 5% waiting, five history entries and five inventory objects each), \
and a real headless Chromium; one run, 2-core machine.\n\n\
| figure | value | baseline (same run) | ratio |\n| --- | --- | --- | --- |\n\
| server memory (RSS), {apps} HelmApps synced | {:.1} MiB | {:.1} MiB watching an empty namespace | +{:.1} MiB |\n\
| server memory after 20 overviews and {edits} live updates (peak) | {:.1} MiB ({:.1} MiB) | | |\n\
| overview time to first byte, p50 / p99 (20 requests) | {:.1} / {:.1} ms | apiserver LIST of the {apps} HelmApps, p50 {:.1} ms | {:.2}× |\n\
| overview whole response, p50 | {:.1} ms | | |\n\
| page weight: HTML + CSS + script | {:.0} KB ({:.0} + {:.1} + {:.1}) | | |\n\
| update latency: `kubectl patch` start → DOM changed, p50 / p99 ({edits} edits) | {:.0} / {:.0} ms | a plain watch's event, p50 {:.0} ms | +{:.0} ms |\n\
| update latency: `kubectl patch` exit → DOM changed, p50 / p99 | {:.0} / {:.0} ms | | |\n\
| start: process → URL printed (caches synced) | {:.2} s | | |\n\n\
The page re-fetches its own `<main>` on each server-sent event: at {apps} apps that is the whole overview ({:.0} KB) per change, \
coalesced while a fetch is in flight. The latency from kubectl's start includes kubectl's own start-up (its exit is when the write is done).\n",
            mib(rss_synced),
            mib(rss_empty),
            mib(rss_synced - rss_empty),
            mib(rss_after_edits),
            mib(peak),
            p(&ttfb, 50.0),
            p(&ttfb, 99.0),
            p(&list_ms, 50.0),
            p(&ttfb, 50.0) / p(&list_ms, 50.0),
            p(&whole, 50.0),
            weight_kb,
            html_bytes as f64 / 1024.0,
            css as f64 / 1024.0,
            js as f64 / 1024.0,
            p(&from_start, 50.0),
            p(&from_start, 99.0),
            p(&watch_ms, 50.0),
            p(&from_start, 50.0) - p(&watch_ms, 50.0),
            p(&from_exit, 50.0),
            p(&from_exit, 99.0),
            start_s,
            html_bytes as f64 / 1024.0,
        );
        std::fs::write(&markdown, md).expect("markdown");
    }
}
