//! The status-size benchmark (issue 11), run by `hack/bench.sh`: the
//! Hosstedproject's status at 1,000 and 10,000 releases (release Secrets
//! only, no pods), and a restart at the largest size that must re-send
//! nothing. Prints one JSON line and, on stderr, progress.
//!
//! `cargo run --release --example status_size -- --releases 1000,10000 [--seed 42]`
//! (`HOSSTED_OPERATOR_BIN` names the operator binary; default
//! `target/release/hossted-operator`.)

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use envtest::{ControlPlane, Receiver};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::ObjectMeta;
use serde_json::json;

#[path = "common/mod.rs"]
mod common;
use common::{Rng, create_all, release_secret};

const PROJECT: &str = "hossted-operator-cr";
/// Release names as clusters have them: a chart's name and a suffix.
const CHARTS: [&str; 12] = [
    "keycloak",
    "postgresql",
    "redis",
    "grafana",
    "prometheus-node-exporter",
    "ingress-nginx",
    "wordpress",
    "mongodb",
    "cert-manager",
    "rabbitmq",
    "kube-state-metrics",
    "minio",
];
const RELEASES_PER_NAMESPACE: usize = 100;

fn release_name(i: usize) -> String {
    format!("{}-{i}", CHARTS[i % CHARTS.len()])
}

fn namespace_of(i: usize) -> String {
    format!("tenant-{:03}", i / RELEASES_PER_NAMESPACE)
}

/// Creates releases `from..to` (one revision each, 2 KB manifests) and
/// their namespaces.
async fn add_releases(client: &kube::Client, rng: &mut Rng, from: usize, to: usize) {
    let namespaces: Vec<Namespace> = (from..to)
        .map(namespace_of)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|n| Namespace {
            metadata: ObjectMeta {
                name: Some(n),
                ..Default::default()
            },
            ..Default::default()
        })
        .collect();
    create_all(|_| Api::all(client.clone()), namespaces, "namespaces").await;
    let secrets: Vec<Secret> = (from..to)
        .map(|i| {
            release_secret(
                rng,
                &namespace_of(i),
                &release_name(i),
                1,
                "deployed",
                2_000,
            )
        })
        .collect();
    create_all(
        |ns| Api::<Secret>::namespaced(client.clone(), ns),
        secrets,
        "release Secrets",
    )
    .await;
}

/// The operator, its stderr copied to `log` and "collected N" lines counted.
struct Operator {
    child: Child,
    full_collections: Arc<AtomicUsize>,
    /// Each reconcile's "status written in X ms".
    status_writes_ms: Arc<parking_lot::Mutex<Vec<f64>>>,
}

fn start_operator(kubeconfig: &std::path::Path, api_url: &str, expected: usize) -> Operator {
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let mut child = Command::new(&bin)
        .env("KUBECONFIG", kubeconfig)
        .env("HOSSTED_API_URL", api_url)
        .env("HOSSTED_AUTH_TOKEN", "bench")
        .env("EMAIL_ID", "bench@example.com")
        .env("RUST_LOG", "info")
        .args([
            "run",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("operator binary (build it with cargo build --release)");
    let full_collections = Arc::new(AtomicUsize::new(0));
    let status_writes_ms: Arc<parking_lot::Mutex<Vec<f64>>> = Arc::default();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn({
        let full = full_collections.clone();
        let writes = status_writes_ms.clone();
        let needle = format!("collected {expected} in");
        // The whole log, for a look at where the time goes.
        let mut log = std::env::var_os("OPERATOR_LOG").and_then(|p| {
            let mut open = std::fs::OpenOptions::new();
            open.create(true).append(true).open(p).ok()
        });
        move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = log.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
                if line.contains(&needle) {
                    full.fetch_add(1, Relaxed);
                }
                if let Some((_, tail)) = line.split_once(" written in ")
                    && let Some(ms) = tail.split(' ').next().and_then(|m| m.parse().ok())
                {
                    writes.lock().push(ms);
                }
                if line.contains(" WARN ") || line.contains(" ERROR ") {
                    eprintln!("operator: {line}");
                }
            }
        }
    });
    Operator {
        child,
        full_collections,
        status_writes_ms,
    }
}

impl Operator {
    /// Waits until a reconcile collected every release (and finished).
    async fn wait_full_reconcile(&self, timeout: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if self.full_collections.load(Relaxed) > 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    fn stop(mut self) {
        // SIGTERM, as the kubelet does: drain, then exit.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// `n` changes, one after the other: a new revision of a random release
/// among the first `releases` (each still at revision 1, or changed once
/// before), then the wait for its POST. Gives the latencies and the status
/// writes' durations the operator logged meanwhile.
async fn change_to_delivery(
    client: &kube::Client,
    api: &Receiver,
    op: &Operator,
    rng: &mut Rng,
    releases: usize,
    n: usize,
) -> serde_json::Value {
    let writes_before = op.status_writes_ms.lock().len();
    let mut revisions = std::collections::HashMap::new();
    let mut latencies = Vec::new();
    for _ in 0..n {
        let i = rng.below(releases as u64) as usize;
        let (ns, name) = (namespace_of(i), release_name(i));
        let v: &mut u32 = revisions.entry(i).or_insert(1);
        *v += 1;
        let v = *v;
        let seen = api.requests().len();
        let secret = release_secret(rng, &ns, &name, v, "deployed", 2_000);
        Api::<Secret>::namespaced(client.clone(), &ns)
            .create(&Default::default(), &secret)
            .await
            .expect("a new revision");
        let t0 = Instant::now();
        let got = api
            .wait_for_since(
                seen,
                |r| {
                    r.path == "/v1/apps"
                        && r.json()["app_info"]["helm_info"]["name"] == name.as_str()
                        && r.json()["app_info"]["helm_info"]["revision"] == v
                },
                1,
                Duration::from_secs(30),
            )
            .await;
        assert!(!got.is_empty(), "no POST for {ns}/{name} v{v}");
        // When the POST arrived, not when this loop noticed it.
        latencies.push(got[0].at.duration_since(t0).as_secs_f64() * 1000.0);
    }
    // The last change's status write.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = op.status_writes_ms.lock()[writes_before..].to_vec();
    json!({
        "releases": releases,
        "change_to_delivery_ms": common::stats(latencies),
        "status_write_ms": common::stats(writes),
    })
}

/// The status's size as JSON, the whole object's size, and the YAML `kubectl
/// get hp -o yaml` shows.
async fn measure(cp: &ControlPlane, client: &kube::Client, apps: usize) -> serde_json::Value {
    let api: Api<apis::Hosstedproject> = Api::all(client.clone());
    let started = Instant::now();
    let hp = loop {
        let hp = api.get(PROJECT).await.expect("the Hosstedproject");
        let count = hp.status.as_ref().map(|s| s.app_count).unwrap_or(0);
        if count as usize == apps || started.elapsed() > Duration::from_secs(900) {
            break hp;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let status_bytes = serde_json::to_string(&hp.status)
        .map(|s| s.len())
        .unwrap_or(0);
    let object_bytes = serde_json::to_string(&hp).map(|s| s.len()).unwrap_or(0);
    let out = cp
        .kubectl()
        .args(["get", "hp", PROJECT, "-o", "yaml"])
        .output()
        .expect("kubectl");
    let yaml = String::from_utf8_lossy(&out.stdout).into_owned();
    json!({
        "releases": apps,
        "app_count": hp.status.as_ref().map(|s| s.app_count),
        "status_json_bytes": status_bytes,
        "object_json_bytes": object_bytes,
        "yaml_bytes": yaml.len(),
        "bytes_per_release": status_bytes as f64 / apps.max(1) as f64,
        "resource_version": hp.metadata.resource_version,
        "yaml": yaml,
    })
}

#[tokio::main]
async fn main() {
    let mut sizes = vec![1_000usize, 10_000];
    let mut seed = 42u64;
    let mut markdown: Option<String> = None;
    let mut changes = 20usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--releases" => sizes = v.split(',').filter_map(|n| n.parse().ok()).collect(),
            "--seed" => seed = v.parse().unwrap_or(seed),
            "--markdown" => markdown = Some(v),
            "--changes" => changes = v.parse().unwrap_or(changes),
            other => eprintln!("status_size: ignoring {other}"),
        }
    }
    sizes.sort_unstable();
    let cp = ControlPlane::builder()
        .apiserver_arg("--max-requests-inflight=800")
        .etcd_arg("--quota-backend-bytes=8589934592")
        .start()
        .await
        .expect("control plane");
    let client = cp.client();
    common::apply_crds(&cp, &["hosstedprojects.hossted.com"]);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hosstedproject.yaml");
    let out = cp.kubectl().args(["apply", "-f", example]).output();
    assert!(
        out.is_ok_and(|o| o.status.success()),
        "kubectl apply {example}"
    );
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let api = Receiver::start().await.expect("receiver");
    let api_url = format!("{}/v1", api.url());
    let mut rng = Rng(seed | 1);

    // Grow the cluster size by size under one running operator.
    let mut results = Vec::new();
    let mut have = 0;
    let mut operator: Option<Operator> = None;
    for &n in &sizes {
        let t = Instant::now();
        add_releases(&client, &mut rng, have, n).await;
        eprintln!(
            "status_size: {n} releases in {:.1}s",
            t.elapsed().as_secs_f64()
        );
        have = n;
        let op = operator.get_or_insert_with(|| start_operator(&kubeconfig, &api_url, n));
        let t = Instant::now();
        let posts = api
            .wait_for(|r| r.path == "/v1/apps", n, Duration::from_secs(900))
            .await;
        assert_eq!(posts.len(), n, "not every release was reported");
        let mut m = measure(&cp, &client, n).await;
        let last = posts.iter().map(|r| r.at).max();
        let report = last.map_or(t.elapsed(), |at| at.duration_since(t));
        m["report_secs"] = json!(report.as_secs_f64());
        eprintln!(
            "status_size: {n} releases: status {} bytes",
            m["status_json_bytes"]
        );
        results.push(m);
        let _ = op;
    }

    // Change → delivery at the largest size: a new revision of one release
    // at a time, until its POST arrives; and what each status write took.
    let changes = if let Some(op) = operator.as_ref() {
        change_to_delivery(&client, &api, op, &mut rng, have, changes).await
    } else {
        json!(null)
    };

    // Restart at the largest size: the new process reconciles everything
    // and must send nothing and write nothing.
    if let Some(op) = operator.take() {
        op.stop();
    }
    let before_requests = api.requests().len();
    let before = Api::<apis::Hosstedproject>::all(client.clone())
        .get(PROJECT)
        .await
        .ok()
        .and_then(|hp| hp.metadata.resource_version);
    let t = Instant::now();
    let op = start_operator(&kubeconfig, &api_url, have);
    let reconciled = op.wait_full_reconcile(Duration::from_secs(600)).await;
    let restart_reconcile_secs = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = Api::<apis::Hosstedproject>::all(client.clone())
        .get(PROJECT)
        .await
        .ok()
        .and_then(|hp| hp.metadata.resource_version);
    let resent = api.requests().len() - before_requests;
    op.stop();

    let mut out = std::io::stdout().lock();
    let result = json!({
        "seed": seed,
        "sizes": results.iter().map(|m| {
            let mut m = m.clone();
            if let Some(o) = m.as_object_mut() { o.remove("yaml"); }
            m
        }).collect::<Vec<_>>(),
        "changes": changes,
        "restart": {
            "releases": have,
            "reconciled_all": reconciled,
            "start_to_full_reconcile_secs": restart_reconcile_secs,
            "requests_sent": resent,
            "status_written": before != after,
        },
    });
    let _ = writeln!(out, "{result}");
    if let Some(path) = markdown {
        let arg = sizes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let yaml = results
            .last()
            .and_then(|m| m["yaml"].as_str())
            .unwrap_or_default();
        std::fs::write(&path, report_section(&result, &arg, yaml)).expect("the Markdown section");
    }
}

/// The "status" section of bench/REPORT.md.
fn report_section(d: &serde_json::Value, sizes: &str, yaml: &str) -> String {
    use std::fmt::Write;
    let mut m = String::new();
    let _ = writeln!(
        m,
        "## Status size: what the Hosstedproject keeps at 10,000 releases\n"
    );
    let _ = writeln!(
        m,
        "Generated by `PARTS=status hack/bench.sh` (STATUS_SIZES={sizes} SEED={}): release Secrets only (one revision each,\n\
         2 KB manifests), {RELEASES_PER_NAMESPACE} releases per namespace, names like `prometheus-node-exporter-4` (a chart name and a number).\n\
         Target: under 512 KiB at 10,000 releases (etcd refuses objects over 1.5 MiB), and a restart re-sends nothing.\n",
        d["seed"]
    );
    let _ = writeln!(
        m,
        "| releases | status (JSON bytes) | bytes per release | whole object (JSON bytes) | `kubectl get hp -o yaml` (bytes) | time to report all (s) |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in d["sizes"].as_array().into_iter().flatten() {
        let bytes = s["status_json_bytes"].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            m,
            "| {} | {} ({:.0} KiB) | {:.1} | {} | {} | {:.1} |",
            s["releases"],
            bytes,
            bytes / 1024.0,
            s["bytes_per_release"].as_f64().unwrap_or(0.0),
            s["object_json_bytes"],
            s["yaml_bytes"],
            s["report_secs"].as_f64().unwrap_or(0.0)
        );
    }
    let r = &d["restart"];
    let _ = writeln!(
        m,
        "\nRestart at {} releases: a full reconcile {:.1} s after start (all reconciled: {}); requests sent to the API: **{}**; status written: **{}**.\n",
        r["releases"],
        r["start_to_full_reconcile_secs"].as_f64().unwrap_or(0.0),
        r["reconciled_all"],
        r["requests_sent"],
        r["status_written"]
    );
    let c = &d["changes"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let _ = writeln!(
        m,
        "Change → delivery at {} releases ({} changes, one at a time: a new revision, then the wait for its POST; \
         the 500 ms coalescing window included): p50 {:.0} ms, p99 {:.0} ms. Each status write meanwhile took p50 {:.0} ms, p99 {:.0} ms \
         (the operator's log: a whole-status server-side apply, ~{:.0} KiB).\n",
        c["releases"],
        c["change_to_delivery_ms"]["n"],
        f(&c["change_to_delivery_ms"]["p50"]),
        f(&c["change_to_delivery_ms"]["p99"]),
        f(&c["status_write_ms"]["p50"]),
        f(&c["status_write_ms"]["p99"]),
        d["sizes"]
            .as_array()
            .and_then(|s| s.last())
            .map(|s| f(&s["status_json_bytes"]) / 1024.0)
            .unwrap_or(0.0)
    );
    let _ = writeln!(
        m,
        "The status part of `kubectl get hp -o yaml` at the largest size (lines cut at 110 characters; of `apps`, the first three lines only):\n\n```yaml"
    );
    let mut in_apps = false;
    let mut apps_lines = 0;
    for line in yaml.lines().skip_while(|l| !l.starts_with("status:")) {
        if line == "  apps:" {
            in_apps = true;
        } else if in_apps && line.starts_with("    ") {
            apps_lines += 1;
            if apps_lines == 4 {
                let _ = writeln!(m, "    ...");
            }
            if apps_lines > 3 {
                continue;
            }
        } else {
            in_apps = false;
        }
        let cut: String = line.chars().take(110).collect();
        let _ = writeln!(
            m,
            "{cut}{}",
            if cut.len() < line.len() { " ..." } else { "" }
        );
    }
    let _ = writeln!(m, "```");
    m
}
