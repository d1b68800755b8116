//! The served web view (`hossted-operator ui --serve`, docs/ui.md "Served
//! in the cluster") with 1 and with 50 signed-in users, each holding a
//! live stream, on a real control plane (its audit log counting the UI's
//! requests) with Ory Hydra as the provider. Measured in the same run:
//!
//! 1. the UI process's resident memory: 1 session, then 50;
//! 2. the UI's requests to the apiserver per minute while nothing changes,
//!    and the watches it opened (one set shared by every session);
//! 3. the overview's time to first byte and weight, for one user;
//! 4. update latency: a HelmApp's status patched → the server-sent event
//!    on one session's stream (p50), and on all 50 (the slowest, p50).
//!
//! Prints one JSON line, and with `--markdown FILE` the report section
//! (`hack/bench-ui.sh` writes it to bench/REPORT.md).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{DELIVERY_CRDS, apply_crds, percentile};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

const NAMESPACES: usize = 10;
const USER: &str = "ui-sa";

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: { name: ui-impersonator }
rules: [{ apiGroups: [""], resources: [users, groups], verbs: [impersonate] }]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: { name: ui-impersonator }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ui-impersonator }
subjects: [{ kind: User, name: ui-sa, apiGroup: rbac.authorization.k8s.io }]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: { name: ui-reader }
rules:
- { apiGroups: [hossted.com], resources: [helmapps, helmappsets], verbs: [get, list, watch] }
- { apiGroups: [""], resources: [events], verbs: [create, list] }
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: { name: ui-reader }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ui-reader }
subjects: [{ kind: User, name: "hossted-ui:reader", apiGroup: rbac.authorization.k8s.io }]
"#;

/// The team may read HelmApps in the first half of the namespaces.
fn team_binding(ns: &str) -> String {
    format!(
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{ name: team-reads, namespace: {ns} }}\nroleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ui-reader }}\nsubjects: [{{ kind: Group, name: team, apiGroup: rbac.authorization.k8s.io }}]\n"
    )
}

/// Signs `user` in through Hydra's login app (blocking HTTP, redirects
/// followed by hand, cookies kept by name): the UI's session cookie.
fn sign_in(ui: &str, user: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into();
    let mut jar: BTreeMap<String, String> = BTreeMap::new();
    let header = |jar: &BTreeMap<String, String>| {
        jar.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let keep = |jar: &mut BTreeMap<String, String>, r: &http::Response<ureq::Body>| {
        for c in r.headers().get_all("set-cookie") {
            let c = c.to_str().unwrap_or_default();
            if let Some((k, v)) = c.split(';').next().and_then(|p| p.split_once('=')) {
                if v.is_empty() || c.contains("Max-Age=0") {
                    jar.remove(k);
                } else {
                    jar.insert(k.to_string(), v.to_string());
                }
            }
        }
    };
    let follow = |jar: &mut BTreeMap<String, String>, mut url: String| -> (String, String) {
        for _ in 0..20 {
            let mut r = agent
                .get(&url)
                .header("Cookie", &header(jar))
                .call()
                .expect("GET");
            keep(jar, &r);
            match r.headers().get("location").and_then(|l| l.to_str().ok()) {
                Some(next) if r.status().is_redirection() => {
                    url = if next.starts_with('/') {
                        format!("{ui}{next}")
                    } else {
                        next.to_string()
                    };
                }
                _ => return (url, r.body_mut().read_to_string().unwrap_or_default()),
            }
        }
        panic!("too many redirects");
    };
    let (form_url, form) = follow(&mut jar, format!("{ui}/"));
    let marker = "name=\"challenge\" value=\"";
    let at = form.find(marker).expect("the login form") + marker.len();
    let challenge = &form[at..at + form[at..].find('"').unwrap()];
    let origin: String = form_url.split('/').take(3).collect::<Vec<_>>().join("/");
    let r = agent
        .post(&format!("{origin}/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Cookie", &header(&jar))
        .send(format!(
            "challenge={challenge}&username={user}&password={}",
            envtest::hydra::password_of(user)
        ))
        .expect("POST login");
    keep(&mut jar, &r);
    let next = r
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .expect("redirect")
        .to_string();
    let (_, page) = follow(&mut jar, next);
    assert!(
        page.contains(&format!("data-user=\"{user}\"")),
        "{user} not signed in"
    );
    format!(
        "__Host-hossted-ui-session={}",
        jar["__Host-hossted-ui-session"]
    )
}

/// GET `path` with `cookie` over a raw connection: (ms to the first byte,
/// body bytes).
fn raw_get(host: &str, path: &str, cookie: &str) -> (f64, usize) {
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    s.set_nodelay(true).ok();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    );
    let t = Instant::now();
    s.write_all(req.as_bytes()).expect("write");
    let mut first = [0u8; 1];
    s.read_exact(&mut first).expect("first byte");
    let ttfb = t.elapsed().as_secs_f64() * 1000.0;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("read");
    let text = String::from_utf8_lossy(&rest);
    (
        ttfb,
        text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len()),
    )
}

/// A session's live stream: the arrival time of each event.
fn open_stream(host: String, cookie: String, arrivals: Arc<Mutex<Vec<Instant>>>) {
    std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(&host).expect("connect");
        let req = format!(
            "GET /events HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
        );
        s.write_all(req.as_bytes()).expect("write");
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                return;
            }
            let events = String::from_utf8_lossy(&buf[..n]).matches("data: ").count();
            let now = Instant::now();
            arrivals.lock().extend(std::iter::repeat_n(now, events));
        }
    });
}

/// Audit events of the UI's identity so far: (requests, watches).
fn audited(log: &std::path::Path) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let watches = events.iter().filter(|e| e["verb"] == "watch").count();
    (events.len(), watches)
}

fn rss_mib(pid: u32) -> f64 {
    common::proc_field(pid, "VmRSS:").unwrap_or(0) as f64 / 1024.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let apps: usize = arg("--apps", "1000").parse().expect("--apps");
    let users: usize = arg("--users", "50").parse().expect("--users");
    let quiet: u64 = arg("--quiet-seconds", "60")
        .parse()
        .expect("--quiet-seconds");
    let edits: usize = arg("--edits", "10").parse().expect("--edits");
    let markdown = arg("--markdown", "");
    let dir = tempfile_dir();
    let (cp, audit) = common::audited_control_plane(
        &dir,
        USER,
        "ResponseStarted, ResponseComplete, Panic",
        "Metadata",
    )
    .await;
    apply_crds(&cp, &DELIVERY_CRDS);
    let client = cp.client();
    let mut rbac = RBAC.to_string();
    for n in 0..NAMESPACES {
        let ns = format!("team-{n}");
        let object: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &object)
            .await
            .expect("namespace");
        if n < NAMESPACES / 2 {
            rbac.push_str(&team_binding(&ns));
        }
    }
    let file = dir.join("rbac.yaml");
    std::fs::write(&file, rbac).unwrap();
    let out = cp
        .kubectl()
        .args(["apply", "-f"])
        .arg(&file)
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = Instant::now();
    futures::future::join_all((0..apps).map(|i| {
        let api: Api<HelmApp> = Api::namespaced(client.clone(), &format!("team-{}", i % NAMESPACES));
        async move {
            let app: HelmApp = serde_json::from_value(json!({
                "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
                "metadata": { "name": format!("app-{i:04}") },
                "spec": { "chart": { "repo": "https://charts.example.com", "name": "web", "version": "1.2.3" } } }))
            .unwrap();
            api.create(&PostParams::default(), &app).await.expect("create");
        }
    }))
    .await;
    eprintln!(
        "bench: {apps} HelmApps in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // Hydra, the UI's client, the UI.
    let names: Vec<String> = (0..users).map(|u| format!("user-{u}")).collect();
    let groups: &[&str] = &["team"];
    let directory: Vec<(&str, &[&str])> = names.iter().map(|n| (n.as_str(), groups)).collect();
    let hydra = envtest::Hydra::start(cp.assets(), &directory, None)
        .await
        .expect("hydra");
    let port = common::free_port();
    let (host, url) = (
        format!("127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}"),
    );
    hydra
        .client("hossted-ui", "bench-secret", &format!("{url}/callback"))
        .expect("client");
    let secret = dir.join("secret");
    std::fs::write(&secret, "bench-secret").unwrap();
    let kubeconfig = cp.kubeconfig_for_user(USER, None).expect("kubeconfig");
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let mut child = std::process::Command::new(bin)
        .args(["ui", "--serve", "--listen", &host, "--public-url", &url])
        .args([
            "--oidc-issuer",
            hydra.issuer(),
            "--oidc-client-id",
            "hossted-ui",
        ])
        .arg("--oidc-client-secret-file")
        .arg(&secret)
        .args(["--oidc-scopes", "openid,email,profile,groups"])
        .args(["--max-streams-per-user", "2"])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("the UI");
    let pid = child.id();
    let t = Instant::now();
    while common::http_get(format!("{url}/healthz"))
        .await
        .map(|(s, _)| s)
        != Some(200)
    {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the UI did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let start_s = t.elapsed().as_secs_f64();

    // 1 session.
    let (u, h) = (url.clone(), names[0].clone());
    let first = tokio::task::spawn_blocking(move || sign_in(&u, &h))
        .await
        .unwrap();
    let arrivals: Vec<Arc<Mutex<Vec<Instant>>>> = (0..users).map(|_| Arc::default()).collect();
    open_stream(host.clone(), first.clone(), arrivals[0].clone());
    let (hs, c) = (host.clone(), first.clone());
    let gets = tokio::task::spawn_blocking(move || {
        (0..20).map(|_| raw_get(&hs, "/", &c)).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut ttfb: Vec<f64> = gets.iter().map(|g| g.0).collect();
    ttfb.sort_by(f64::total_cmp);
    let html = gets[0].1;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_one = rss_mib(pid);
    let before = audited(&audit).0;
    tokio::time::sleep(Duration::from_secs(quiet)).await;
    let per_min_one = (audited(&audit).0 - before) as f64 * 60.0 / quiet as f64;

    // 50 sessions, each with a stream and an overview.
    let mut cookies = vec![first];
    for name in &names[1..] {
        let (u, h) = (url.clone(), name.clone());
        cookies.push(
            tokio::task::spawn_blocking(move || sign_in(&u, &h))
                .await
                .unwrap(),
        );
    }
    for (i, c) in cookies.iter().enumerate().skip(1) {
        open_stream(host.clone(), c.clone(), arrivals[i].clone());
        let (hs, c) = (host.clone(), c.clone());
        tokio::task::spawn_blocking(move || raw_get(&hs, "/", &c))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_all = rss_mib(pid);
    let before = audited(&audit).0;
    tokio::time::sleep(Duration::from_secs(quiet)).await;
    let per_min_all = (audited(&audit).0 - before) as f64 * 60.0 / quiet as f64;
    let rss_after_quiet = rss_mib(pid);

    // Update latency: a status patched → the event on each stream.
    let api: Api<HelmApp> = Api::namespaced(client.clone(), "team-0");
    let (mut one, mut all) = (Vec::new(), Vec::new());
    for e in 0..edits {
        let counts: Vec<usize> = arrivals.iter().map(|a| a.lock().len()).collect();
        let patch = json!({ "status": { "observedGeneration": e as i64 + 1 } });
        let t = Instant::now();
        api.patch_status("app-0000", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch");
        let deadline = t + Duration::from_secs(30);
        loop {
            let got: Vec<Option<Instant>> = arrivals
                .iter()
                .zip(&counts)
                .map(|(a, n)| a.lock().get(*n).copied())
                .collect();
            if got.iter().all(Option::is_some) {
                let ms: Vec<f64> = got
                    .iter()
                    .map(|g| (g.unwrap() - t).as_secs_f64() * 1000.0)
                    .collect();
                one.push(ms[0]);
                all.push(ms.iter().copied().fold(0.0, f64::max));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "an edit reached not every stream in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    one.sort_by(f64::total_cmp);
    all.sort_by(f64::total_cmp);
    let (requests, watches) = audited(&audit);
    let _ = child.kill();
    let _ = child.wait();

    let figures = json!({
        "apps": apps, "users": users, "start_s": start_s,
        "rss_mib": { "one_session": rss_one, "sessions": rss_all, "after_quiet": rss_after_quiet },
        "requests_per_minute": { "one_session": per_min_one, "sessions": per_min_all },
        "ui_requests_total": requests, "watches_opened": watches,
        "overview_ttfb_ms": { "p50": percentile(&ttfb, 50.0), "p99": percentile(&ttfb, 99.0) },
        "overview_bytes": html,
        "update_ms": { "one_stream_p50": percentile(&one, 50.0), "all_streams_p50": percentile(&all, 50.0),
                       "all_streams_max": all.last().copied().unwrap_or(0.0) },
    });
    println!("{figures}");
    if !markdown.is_empty() {
        let f = &figures;
        let md = format!(
            "`hack/bench-ui.sh` (served part): the release binary's `ui --serve` against a real control plane holding {apps} HelmApps in {NAMESPACES} namespaces, Ory Hydra as the provider, {users} users of one group that may list HelmApps in half of the namespaces (so each needs an access review per namespace), each signed in through Hydra's login app and holding a live stream; the apiserver's audit log counts the UI's requests. One run, 2-core machine.\n\n\
| figure | 1 session | {users} sessions | ratio |\n| --- | --- | --- | --- |\n\
| UI memory (RSS) | {:.1} MiB | {:.1} MiB ({:.1} MiB after {quiet} s quiet) | {:.2}× |\n\
| UI requests to the apiserver per minute, nothing changing | {:.1} | {:.1} | |\n\
| watches the UI opened (the whole run) | {watches} | | |\n\n\
| figure | value |\n| --- | --- |\n\
| start: process → /healthz answers (watches synced) | {:.2} s |\n\
| overview time to first byte, one user, p50 / p99 (20 requests) | {:.1} / {:.1} ms |\n\
| overview weight (HTML, the user's {} of {apps} apps) | {:.0} KB |\n\
| update latency: status patched → event on one stream, p50 ({edits} edits) | {:.0} ms |\n\
| update latency: status patched → event on all {users} streams, p50 / max | {:.0} / {:.0} ms |\n\n\
Every session shares the reader's watches (one of HelmApps, one of HelmAppSets, re-opened when the apiserver ends them); a session adds an impersonating client and its access reviews (cluster-wide, then per namespace, each remembered 30 s). The latency is server-side (the event on the stream); the page then fetches its `<main>` as in the local view.\n",
            f["rss_mib"]["one_session"].as_f64().unwrap(),
            f["rss_mib"]["sessions"].as_f64().unwrap(),
            f["rss_mib"]["after_quiet"].as_f64().unwrap(),
            f["rss_mib"]["sessions"].as_f64().unwrap()
                / f["rss_mib"]["one_session"].as_f64().unwrap(),
            per_min_one,
            per_min_all,
            start_s,
            percentile(&ttfb, 50.0),
            percentile(&ttfb, 99.0),
            apps / 2,
            html as f64 / 1000.0,
            percentile(&one, 50.0),
            percentile(&all, 50.0),
            all.last().copied().unwrap_or(0.0),
        );
        std::fs::write(&markdown, md).expect("markdown");
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bench-ui-served-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}
