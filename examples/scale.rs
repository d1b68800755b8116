//! The scale benchmark (issue 6), run by `hack/bench.sh`: loads a real
//! control plane with a large, seeded, realistic cluster and measures the
//! operator binary from outside. Prints JSON lines and a Markdown section.
//!
//! `cargo run --release --example scale -- --scale 1.0 [--idle-secs 300] [--changes 100] [--seed 42]`
//! (`HOSSTED_OPERATOR_BIN` names the operator binary; default
//! `target/release/hossted-operator`.)

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use envtest::{ControlPlane, Receiver};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

#[path = "common/mod.rs"]
mod common;
use common::{
    CONCURRENCY, Rng, cpu_seconds, create_all, manifest, meta, percentile, proc_field,
    release_secret,
};

/// About 1 KB of configuration for a release's ConfigMap.
fn config_text(rng: &mut Rng, name: &str) -> String {
    manifest(rng, name, 1_000)
}

const USER: &str = "hossted-bench-operator";

struct Shape {
    namespaces: usize,
    releases: usize,
    revisions: u32,
    pods_per_release: usize,
    services_per_release: usize,
    unrelated_secrets: usize,
    unrelated_pods: usize,
}

/// Builds the cluster; returns the releases `(namespace, name, latest revision)`.
async fn build(client: &Client, shape: &Shape, seed: u64) -> Vec<(String, String, u32)> {
    let mut rng = Rng(seed | 1);
    let ns_names: Vec<String> = (0..shape.namespaces)
        .map(|i| format!("team-{i:03}"))
        .collect();
    create_all(
        |_| Api::<Namespace>::all(client.clone()),
        ns_names
            .iter()
            .map(|n| Namespace {
                metadata: ObjectMeta {
                    name: Some(n.clone()),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect(),
        "namespaces",
    )
    .await;
    let releases: Vec<(String, String, u32)> = (0..shape.releases)
        .map(|i| {
            (
                ns_names[i % shape.namespaces].clone(),
                format!("rel-{i:04}"),
                shape.revisions,
            )
        })
        .collect();
    let mut secrets = Vec::new();
    for (ns, name, latest) in &releases {
        for v in 1..=*latest {
            let size = 20_000 + rng.below(40_000) as usize;
            let status = if v == *latest {
                "deployed"
            } else {
                "superseded"
            };
            secrets.push(release_secret(&mut rng, ns, name, v, status, size));
        }
    }
    for i in 0..shape.unrelated_secrets {
        let ns = &ns_names[i % shape.namespaces];
        secrets.push(Secret {
            metadata: meta(ns, &format!("unrelated-{i}"), &[("app", "other".into())]),
            string_data: Some(
                [(
                    "token".to_string(),
                    format!("{:x}{:x}", rng.next(), rng.next()),
                )]
                .into(),
            ),
            ..Default::default()
        });
    }
    create_all(
        |ns| Api::<Secret>::namespaced(client.clone(), ns),
        secrets,
        "secrets",
    )
    .await;

    // The other kinds the payload names, in proportion: per release a
    // Deployment (reading its Secret), a ConfigMap and a Secret; a
    // StatefulSet for every other release.
    let mut deployments = Vec::new();
    let mut statefulsets = Vec::new();
    let mut configmaps = Vec::new();
    let mut member_secrets = Vec::new();
    for (i, (ns, name, _)) in releases.iter().enumerate() {
        let labels =
            json!({ "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "Helm" });
        let template = json!({ "metadata": { "labels": labels }, "spec": { "containers": [{
            "name": "app", "image": format!("registry.example.com/{name}/app:1.0"),
            "env": [{ "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": format!("{name}-db"), "key": "password" } } }] }] } });
        let selector = json!({ "matchLabels": { "app.kubernetes.io/instance": name } });
        deployments.push(
            serde_json::from_value::<Deployment>(json!({
                "metadata": { "name": format!("{name}-app"), "namespace": ns, "labels": labels },
                "spec": { "selector": selector, "template": template }
            }))
            .unwrap_or_default(),
        );
        if i % 2 == 0 {
            statefulsets.push(serde_json::from_value::<StatefulSet>(json!({
                "metadata": { "name": format!("{name}-db"), "namespace": ns, "labels": labels },
                "spec": { "selector": selector, "serviceName": format!("{name}-db"), "template": template }
            })).unwrap_or_default());
        }
        configmaps.push(
            serde_json::from_value::<ConfigMap>(json!({
                "metadata": { "name": format!("{name}-env"), "namespace": ns, "labels": labels },
                "data": { "LOG_LEVEL": "info", "settings.yaml": config_text(&mut rng, name) }
            }))
            .unwrap_or_default(),
        );
        member_secrets.push(
            serde_json::from_value::<Secret>(json!({
                "metadata": { "name": format!("{name}-db"), "namespace": ns, "labels": labels },
                "stringData": { "password": format!("{:x}", rng.next()) }
            }))
            .unwrap_or_default(),
        );
    }
    create_all(
        |ns| Api::<Deployment>::namespaced(client.clone(), ns),
        deployments,
        "deployments",
    )
    .await;
    create_all(
        |ns| Api::<StatefulSet>::namespaced(client.clone(), ns),
        statefulsets,
        "statefulsets",
    )
    .await;
    create_all(
        |ns| Api::<ConfigMap>::namespaced(client.clone(), ns),
        configmaps,
        "configmaps",
    )
    .await;
    create_all(
        |ns| Api::<Secret>::namespaced(client.clone(), ns),
        member_secrets,
        "secrets of releases",
    )
    .await;

    let mut pods = Vec::new();
    let mut services = Vec::new();
    let mut pvcs = Vec::new();
    let mut ingresses = Vec::new();
    for (i, (ns, name, _)) in releases.iter().enumerate() {
        let labels = [
            ("app.kubernetes.io/instance", name.clone()),
            ("app.kubernetes.io/managed-by", "Helm".to_string()),
        ];
        for p in 0..shape.pods_per_release {
            let containers: Vec<_> = (0..1 + rng.below(3))
                .map(|c| json!({ "name": format!("c{c}"), "image": format!("registry.example.com/{name}/c{c}:1.{}", rng.below(9)) }))
                .collect();
            pods.push(serde_json::from_value::<Pod>(json!({
                "metadata": meta(ns, &format!("{name}-{p}"), &labels), "spec": { "containers": containers }
            })).unwrap_or_default());
        }
        for s in 0..shape.services_per_release {
            services.push(serde_json::from_value::<Service>(json!({
                "metadata": meta(ns, &format!("{name}-svc-{s}"), &labels),
                "spec": { "ports": [{ "port": 80 + s as i32 }], "selector": { "app.kubernetes.io/instance": name } }
            })).unwrap_or_default());
        }
        if i % 2 == 0 {
            pvcs.push(serde_json::from_value::<PersistentVolumeClaim>(json!({
                "metadata": meta(ns, &format!("data-{name}-0"), &labels[..1]),
                "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "8Gi" } } }
            })).unwrap_or_default());
        } else {
            ingresses.push(
                serde_json::from_value::<Ingress>(json!({
                    "metadata": meta(ns, name, &labels),
                    "spec": { "rules": [{ "host": format!("{name}.example.com") }] }
                }))
                .unwrap_or_default(),
            );
        }
    }
    for i in 0..shape.unrelated_pods {
        let ns = &ns_names[i % shape.namespaces];
        pods.push(
            serde_json::from_value::<Pod>(json!({
                "metadata": meta(ns, &format!("unrelated-{i}"), &[("app", "batch".into())]),
                "spec": { "containers": [{ "name": "job", "image": "busybox:1.36" }] }
            }))
            .unwrap_or_default(),
        );
    }
    let pod_keys: Vec<(String, String)> = pods
        .iter()
        .map(|p| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    create_all(
        |ns| Api::<Pod>::namespaced(client.clone(), ns),
        pods,
        "pods",
    )
    .await;
    create_all(
        |ns| Api::<Service>::namespaced(client.clone(), ns),
        services,
        "services",
    )
    .await;
    create_all(
        |ns| Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
        pvcs,
        "PVCs",
    )
    .await;
    create_all(
        |ns| Api::<Ingress>::namespaced(client.clone(), ns),
        ingresses,
        "ingresses",
    )
    .await;
    let started = Instant::now();
    futures::stream::iter(pod_keys)
        .for_each_concurrent(CONCURRENCY, |(ns, name)| async move {
            let patch = json!({ "status": { "phase": "Running" } });
            let _ = Api::<Pod>::namespaced(client.clone(), &ns)
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        })
        .await;
    eprintln!(
        "scale: pods marked Running in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    releases
}

/// Requests of the operator's user in the audit log, by verb.
fn audit_counts(path: &std::path::Path) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return counts;
    };
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["user"]["username"] == USER && v["stage"] == "RequestReceived" {
            *counts
                .entry(v["verb"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
    }
    counts
}

#[tokio::main]
async fn main() {
    let mut scale = 1.0f64;
    let mut idle_secs = 300u64;
    let mut changes = 100usize;
    let mut churn_secs = 300u64;
    let mut seed = 42u64;
    let mut restart_count = 4usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--scale" => scale = v.parse().unwrap_or(scale),
            "--idle-secs" => idle_secs = v.parse().unwrap_or(idle_secs),
            "--changes" => changes = v.parse().unwrap_or(changes),
            "--churn-secs" => churn_secs = v.parse().unwrap_or(churn_secs),
            "--seed" => seed = v.parse().unwrap_or(seed),
            "--restarts" => restart_count = v.parse().unwrap_or(restart_count),
            other => eprintln!("scale: ignoring {other}"),
        }
    }
    let n = |x: f64| ((x * scale).round() as usize).max(1);
    let shape = Shape {
        namespaces: n(200.0),
        releases: n(1000.0),
        revisions: 5,
        pods_per_release: 5,
        services_per_release: 2,
        unrelated_secrets: n(5000.0),
        unrelated_pods: n(2000.0),
    };
    let operator_bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());

    // The control plane, with an audit log of the operator's requests only.
    let dir = tempfile_dir();
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [ResponseStarted, ResponseComplete, Panic]\nrules:\n- level: Metadata\n  users: [\"{USER}\"]\n- level: None\n"
        ),
    )
    .expect("audit policy");
    let audit_log = dir.join("audit.log");
    let cp = ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit_log.display()))
        .apiserver_arg("--max-requests-inflight=800")
        // 2,000 services need more than envtest's /24 of service IPs.
        .apiserver_arg("--service-cluster-ip-range=10.0.0.0/16")
        .etcd_arg("--quota-backend-bytes=8589934592")
        .start()
        .await
        .expect("control plane");
    let client = cp.client();
    eprintln!(
        "scale: building {} namespaces, {} releases x {} revisions, {} pods, {} unrelated secrets, {} unrelated pods (seed {seed})",
        shape.namespaces,
        shape.releases,
        shape.revisions,
        shape.releases * shape.pods_per_release + shape.unrelated_pods,
        shape.unrelated_secrets,
        shape.unrelated_pods
    );
    let build_started = Instant::now();
    let mut releases = build(&client, &shape, seed).await;
    // One real helm install among them: the collector cannot tell them apart.
    let web = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts/web");
    let out = cp
        .helm()
        .args(["install", "real-helm", web, "-n", "team-000"])
        .output()
        .expect("helm");
    assert!(
        out.status.success(),
        "helm install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    releases.push(("team-000".into(), "real-helm".into(), 1));
    let expected_apps = releases.len();
    let build_secs = build_started.elapsed().as_secs_f64();

    common::apply_crds(&cp, &["hosstedprojects.hossted.com"]);
    let out = cp
        .kubectl()
        .args([
            "apply",
            "-f",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hosstedproject.yaml"),
        ])
        .output()
        .expect("kubectl");
    assert!(out.status.success());
    let kubeconfig = cp
        .kubeconfig_for_user(USER, Some("system:masters"))
        .expect("kubeconfig");
    let api = Receiver::start().await.expect("receiver");

    // Start the operator and watch it from outside.
    let started = Instant::now();
    let (mut child, collect_ms) =
        start_operator(&operator_bin, &kubeconfig, &api, &dir.join("operator.log"));
    let pid = child.id();
    let peak_rss = Arc::new(AtomicU64::new(0));
    std::thread::spawn({
        let peak = peak_rss.clone();
        move || {
            while let Some(rss) = proc_field(pid, "VmRSS:") {
                peak.fetch_max(rss, Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    let reported = api
        .wait_for(
            |r| r.path == "/v1/apps",
            expected_apps,
            Duration::from_secs(600),
        )
        .await;
    // When the last of them arrived, not when this wait noticed it.
    let start_to_report = reported
        .iter()
        .map(|r| r.at)
        .max()
        .map_or(started.elapsed(), |at| at.duration_since(started))
        .as_secs_f64();
    assert_eq!(
        reported.len(),
        expected_apps,
        "not every release was reported"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let steady_rss_after_report = proc_field(pid, "VmRSS:").unwrap_or(0);
    let full_collections: Vec<f64> = collect_ms
        .lock()
        .iter()
        .filter(|(n, _)| *n == expected_apps)
        .map(|(_, ms)| *ms)
        .collect();

    // Change-to-delivery: a new revision of a random release, until its POST arrives.
    let mut rng = Rng(seed.rotate_left(17) | 1);
    let mut latencies = Vec::new();
    let mut latest: BTreeMap<(String, String), u32> = releases
        .iter()
        .map(|(ns, n, v)| ((ns.clone(), n.clone()), *v))
        .collect();
    for _ in 0..changes {
        let (ns, name, _) = releases[rng.below((releases.len() - 1) as u64) as usize].clone();
        let v = latest
            .get(&(ns.clone(), name.clone()))
            .copied()
            .unwrap_or(1)
            + 1;
        latest.insert((ns.clone(), name.clone()), v);
        let seen = api.requests().len();
        let size = 20_000 + rng.below(40_000) as usize;
        let secret = release_secret(&mut rng, &ns, &name, v, "deployed", size);
        Api::<Secret>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &secret)
            .await
            .expect("new revision");
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
        assert!(
            !got.is_empty(),
            "no POST for {ns}/{name} v{v} (after {} requests)",
            seen
        );
        // When the POST arrived, not when this loop noticed it.
        latencies.push(got[0].at.duration_since(t0).as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);

    // Idle: no change for idle_secs.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (cpu0, audit0) = (cpu_seconds(pid), audit_counts(&audit_log));
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let (cpu1, audit1) = (cpu_seconds(pid), audit_counts(&audit_log));
    let steady_rss = proc_field(pid, "VmRSS:").unwrap_or(0);
    let peak = proc_field(pid, "VmHWM:")
        .unwrap_or(0)
        .max(peak_rss.load(Relaxed));
    let idle_requests: BTreeMap<String, u64> = audit1
        .iter()
        .map(|(verb, n)| (verb.clone(), n - audit0.get(verb).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();

    // Churn: 100 label changes a minute on pods of no release. Nothing may
    // be reported or written; what it costs is the operator's CPU.
    let projects: Api<apis::Hosstedproject> = Api::all(client.clone());
    let rv = |hp: Option<apis::Hosstedproject>| {
        hp.and_then(|h| h.metadata.resource_version)
            .unwrap_or_default()
    };
    let (rv0, posts0, cpu_c0) = (
        rv(projects.get_opt("hossted-operator-cr").await.ok().flatten()),
        api.requests().len(),
        cpu_seconds(pid),
    );
    let flips = churn_secs * 100 / 60;
    let unrelated = shape.unrelated_pods.max(1);
    for i in 0..flips {
        let n = i as usize % unrelated;
        let ns = format!("team-{:03}", n % shape.namespaces);
        let patch = json!({ "metadata": { "labels": { "churn": i.to_string() } } });
        let _ = Api::<Pod>::namespaced(client.clone(), &ns)
            .patch(
                &format!("unrelated-{n}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rv1, posts1, cpu_c1) = (
        rv(projects.get_opt("hossted-operator-cr").await.ok().flatten()),
        api.requests().len(),
        cpu_seconds(pid),
    );
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("scale: {restart_count} restarts on the settled cluster");
    let (restart_collections, restart_posts) = restarts(
        &operator_bin,
        &kubeconfig,
        &api,
        &dir,
        expected_apps,
        restart_count,
    )
    .await;
    let mut collections: Vec<f64> = full_collections
        .iter()
        .chain(&restart_collections)
        .copied()
        .collect();
    collections.sort_by(f64::total_cmp);
    let collection_median = collections.get(collections.len() / 2).copied();

    let idle_cpu_pct = (cpu1 - cpu0) / idle_secs as f64 * 100.0;
    let per_minute =
        |verb: &str| idle_requests.get(verb).copied().unwrap_or(0) as f64 * 60.0 / idle_secs as f64;
    let result = json!({
        "scale": scale, "seed": seed, "releases": expected_apps, "release_secrets": shape.releases * shape.revisions as usize + 1,
        "pods": shape.releases * shape.pods_per_release + shape.unrelated_pods + 1,
        "build_secs": build_secs,
        "start_to_first_full_report_secs": start_to_report,
        "peak_rss_mib": peak as f64 / 1024.0,
        "steady_rss_mib_after_report": steady_rss_after_report as f64 / 1024.0,
        "steady_rss_mib_after_idle": steady_rss as f64 / 1024.0,
        "full_collection_ms": full_collections,
        "restart_collection_ms": restart_collections,
        "collection_median_ms": collection_median,
        "restarts": restart_count, "restart_posts": restart_posts,
        "change_to_delivery_ms": { "n": latencies.len(), "p50": percentile(&latencies, 50.0), "p95": percentile(&latencies, 95.0),
                                   "p99": percentile(&latencies, 99.0), "max": latencies.last() },
        "idle_secs": idle_secs, "idle_cpu_seconds": cpu1 - cpu0, "idle_cpu_percent": idle_cpu_pct,
        "idle_requests_by_verb": idle_requests, "idle_list_get_per_minute": per_minute("list") + per_minute("get"),
        "startup_requests_by_verb": audit0,
        "churn": { "secs": churn_secs, "label_changes": flips, "posts": posts1 - posts0,
                   "status_written": rv0 != rv1, "cpu_seconds": cpu_c1 - cpu_c0,
                   "cpu_percent": (cpu_c1 - cpu_c0) / churn_secs.max(1) as f64 * 100.0 },
    });
    println!("{result}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Full collections, `(apps, ms)`, read from the operator's log lines
/// "... collected N in X ms".
type Collections = Arc<parking_lot::Mutex<Vec<(usize, f64)>>>;

/// The operator binary reporting to `api`, its log copied to `log`.
fn start_operator(
    bin: &str,
    kubeconfig: &std::path::Path,
    api: &Receiver,
    log: &std::path::Path,
) -> (std::process::Child, Collections) {
    let mut child = Command::new(bin)
        .env("KUBECONFIG", kubeconfig)
        .env("HOSSTED_API_URL", format!("{}/v1", api.url()))
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
    let collect_ms: Collections = Arc::default();
    let stderr = child.stderr.take().expect("stderr");
    let log = log.to_path_buf();
    std::thread::spawn({
        let collect_ms = collect_ms.clone();
        move || {
            let mut file = std::fs::File::create(log).ok();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = file.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
                // "... collected N in X ms"
                if let Some((_, tail)) = line.rsplit_once("collected ")
                    && let Some((n, rest)) = tail.split_once(" in ")
                    && let (Ok(n), Some(ms)) = (
                        n.parse::<usize>(),
                        rest.strip_suffix(" ms").and_then(|m| m.parse::<f64>().ok()),
                    )
                {
                    collect_ms.lock().push((n, ms));
                }
            }
        }
    });
    (child, collect_ms)
}

/// `restarts` restarts of the operator on the settled cluster: each one's
/// full collection (ms) and the POSTs it made (a restart re-sends nothing).
async fn restarts(
    bin: &str,
    kubeconfig: &std::path::Path,
    api: &Receiver,
    dir: &std::path::Path,
    apps: usize,
    restarts: usize,
) -> (Vec<f64>, usize) {
    let (mut collections, mut posts) = (Vec::new(), 0);
    for i in 0..restarts {
        let before = api.requests().len();
        let log = dir.join(format!("operator-restart-{i}.log"));
        let (mut child, collect_ms) = start_operator(bin, kubeconfig, api, &log);
        let deadline = Instant::now() + Duration::from_secs(300);
        let full = loop {
            let found = collect_ms
                .lock()
                .iter()
                .find(|(n, _)| *n == apps)
                .map(|(_, ms)| *ms);
            if let Some(ms) = found {
                break Some(ms);
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // What a restart would send has been sent within this.
        tokio::time::sleep(Duration::from_secs(10)).await;
        posts += api.requests().len() - before;
        collections.extend(full);
        let _ = child.kill();
        let _ = child.wait();
        eprintln!(
            "scale: restart {}/{restarts}: full collection {full:?} ms",
            i + 1
        );
    }
    (collections, posts)
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("hossted-scale-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&d);
    d
}
