//! What the benchmarks share: a seeded generator, Helm release Secrets
//! exactly as Helm 3 stores them, and concurrent creation.

// Each benchmark uses a part of this module.
#![allow(dead_code)]

pub mod big_index;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use base64::Engine;
use flate2::Compression;
use flate2::write::GzEncoder;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::json;

/// Requests in flight while building a cluster.
pub const CONCURRENCY: usize = 24;

/// xorshift64: the same cluster for the same seed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: [&str; 16] = [
    "replicas",
    "image",
    "container",
    "port",
    "volume",
    "config",
    "service",
    "ingress",
    "secret",
    "labels",
    "annotations",
    "resources",
    "limits",
    "requests",
    "memory",
    "cpu",
];

/// A rendered manifest of `size` bytes that looks like Helm's output.
pub fn manifest(rng: &mut Rng, release: &str, size: usize) -> String {
    let mut m = String::with_capacity(size + 256);
    let mut doc = 0;
    while m.len() < size {
        doc += 1;
        m.push_str(&format!(
            "---\n# Source: app/templates/part-{doc}.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {release}-part-{doc}\n  labels:\n    app.kubernetes.io/instance: {release}\n    app.kubernetes.io/managed-by: Helm\ndata:\n"
        ));
        for k in 0..20 {
            let a = WORDS[rng.below(16) as usize];
            let b = WORDS[rng.below(16) as usize];
            m.push_str(&format!(
                "  {a}-{k}: \"{b}-{}-{}\"\n",
                rng.below(100_000),
                rng.next() % 997
            ));
        }
    }
    m
}

pub fn meta(ns: &str, name: &str, labels: &[(&str, String)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

/// A release Secret exactly as Helm 3 stores it.
/// (`manifest_bytes`: the size of its rendered manifest before gzip.)
pub fn release_secret(
    rng: &mut Rng,
    ns: &str,
    name: &str,
    version: u32,
    status: &str,
    manifest_bytes: usize,
) -> Secret {
    let size = manifest_bytes;
    let release = json!({
        "name": name, "namespace": ns, "version": version,
        "info": { "first_deployed": "2026-11-01T10:00:00.123456+01:00",
                  "last_deployed": format!("2026-11-{:02}T10:00:00.123456+01:00", 1 + version),
                  "deleted": "", "description": "Upgrade complete", "status": status },
        "chart": { "metadata": { "name": format!("chart-{}", rng.below(50)), "version": "1.0.0",
                                 "appVersion": format!("2.{}.0", version), "apiVersion": "v2" },
                   "templates": [], "values": { "replicaCount": 1 } },
        "config": {}, "manifest": manifest(rng, name, size), "hooks": []
    });
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    let _ = gz.write_all(release.to_string().as_bytes());
    let payload = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap_or_default());
    let labels = [
        ("owner", "helm".to_string()),
        ("name", name.to_string()),
        ("version", version.to_string()),
        ("status", status.to_string()),
        ("modifiedAt", "1795000000".to_string()),
    ];
    Secret {
        metadata: meta(
            ns,
            &format!("sh.helm.release.v1.{name}.v{version}"),
            &labels,
        ),
        type_: Some("helm.sh/release.v1".into()),
        data: Some([("release".to_string(), ByteString(payload.into_bytes()))].into()),
        ..Default::default()
    }
}

pub async fn create_all<K>(api_for: impl Fn(&str) -> Api<K>, objs: Vec<K>, what: &str)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let started = Instant::now();
    let n = objs.len();
    let done = AtomicU64::new(0);
    futures::stream::iter(objs)
        .for_each_concurrent(CONCURRENCY, |o| {
            let api = api_for(o.meta().namespace.as_deref().unwrap_or_default());
            let done = &done;
            async move {
                for attempt in 0..5 {
                    match api.create(&PostParams::default(), &o).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => break,
                        Err(e) if attempt == 4 => eprintln!("bench: giving up on a {what}: {e}"),
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
                let d = done.fetch_add(1, Relaxed) + 1;
                if d.is_multiple_of(2000) {
                    eprintln!("bench:   {d}/{n} {what}");
                }
            }
        })
        .await;
    eprintln!(
        "bench: created {n} {what} in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// A `kB` field of `/proc/<pid>/status` (e.g. `VmRSS:`).
pub fn proc_field(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
}

/// utime + stime of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// CPU seconds of `pid` and of its children it waited for (utime, stime,
/// cutime, cstime): an operator's process tree, helm runs included.
pub fn tree_cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = (11..15).filter_map(|i| f.get(i)?.parse::<f64>().ok()).sum();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The `p`th percentile of `sorted` (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

/// Applies the checked-in CRDs `names` (e.g. `"helmapps.hossted.com"`) and
/// waits until they are established.
pub fn apply_crds(cp: &envtest::ControlPlane, names: &[&str]) {
    for name in names {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(apis::crd_manifest_path(name));
        let out = cp.kubectl().args(["apply", "-f"]).arg(&path).output();
        assert!(
            out.is_ok_and(|o| o.status.success()),
            "kubectl apply {}",
            path.display()
        );
    }
    let out = cp
        .kubectl()
        .args(["wait", "--for", "condition=established", "--timeout=60s"])
        .args(names.iter().map(|n| format!("crd/{n}")))
        .output();
    assert!(
        out.is_ok_and(|o| o.status.success()),
        "CRDs {names:?} not established"
    );
}

/// The delivery kinds' CRDs (and the Hosstedproject's).
pub const DELIVERY_CRDS: [&str; 3] = [
    "helmapps.hossted.com",
    "helmappsets.hossted.com",
    "hosstedprojects.hossted.com",
];

/// A control plane with the delivery CRDs, and a chart repository on
/// loopback serving `examples/charts/<chart>`.
pub async fn delivery_cluster(chart: &str) -> (envtest::ControlPlane, envtest::ChartRepo) {
    let cp = envtest::ControlPlane::start().await.expect("control plane");
    apply_crds(&cp, &DELIVERY_CRDS);
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&cp, &[&charts.join(chart)], None)
        .await
        .expect("repo");
    (cp, repo)
}

/// A control plane whose apiserver logs `user`'s requests at `level`
/// (`Metadata`, or `Request` to keep bodies) to the returned path, one
/// event per stage not in `omit_stages` (e.g. `"RequestReceived,
/// ResponseStarted, Panic"`: one event per completed request).
pub async fn audited_control_plane(
    dir: &std::path::Path,
    user: &str,
    omit_stages: &str,
    level: &str,
) -> (envtest::ControlPlane, std::path::PathBuf) {
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        format!("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [{omit_stages}]\nrules:\n- level: {level}\n  users: [\"{user}\"]\n- level: None\n"),
    )
    .expect("policy");
    let audit = dir.join("audit.log");
    let cp = envtest::ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit.display()))
        .start()
        .await
        .expect("control plane");
    (cp, audit)
}

/// Seconds since the epoch (the helm wrapper's clock).
pub fn now_epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Count, p50, p95, p99 and max of `v`.
pub fn stats(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(|a, b| a.total_cmp(b));
    json!({ "n": v.len(), "p50": percentile(&v, 50.0), "p95": percentile(&v, 95.0),
            "p99": percentile(&v, 99.0), "max": v.last().copied().unwrap_or(f64::NAN) })
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    l.local_addr().expect("addr").port()
}

/// GET `url` (the operator's `/metrics` or `/readyz`): status and body.
pub async fn http_get(url: String) -> Option<(u16, String)> {
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let mut r = agent.get(&url).call().ok()?;
        let status = r.status().as_u16();
        Some((status, r.body_mut().read_to_string().ok()?))
    })
    .await
    .ok()
    .flatten()
}

/// A helm that logs `<epoch> <args>` to `dir/helm-starts.log` for each
/// start, then is `helm`: the wrapper's path and the log's.
pub fn logging_helm(
    helm: &std::path::Path,
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let log = dir.join("helm-starts.log");
    let wrapper = dir.join("helm-wrapper.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = version ]; then exec '{helm}' \"$@\"; fi\necho \"$(date +%s.%N) $*\" >> '{log}'\nexec '{helm}' \"$@\"\n",
            log = log.display(),
            helm = helm.display()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (wrapper, log)
}

/// The lines of the helm wrapper's log.
pub fn log_lines(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Whether a logged helm subcommand writes a release: `install` (the
/// operator's over nothing) or `upgrade --install`.
pub fn writes_release(subcommand: Option<&&str>) -> bool {
    matches!(subcommand, Some(&"install" | &"upgrade"))
}

/// The first start of `helm install` or `helm upgrade --install
/// <release>` logged after `since` (epoch seconds), not a dry run.
pub fn helm_started(log: &std::path::Path, release: &str, since: f64) -> Option<f64> {
    log_lines(log).iter().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let t: f64 = f.first()?.parse().ok()?;
        (t > since
            && writes_release(f.get(1))
            && released(&f) == Some(release)
            && !l.contains("dry-run"))
        .then_some(t)
    })
}

/// The release a logged helm command line acts on: the first word after
/// `--` (the operator puts every name there).
pub fn released<'a>(words: &[&'a str]) -> Option<&'a str> {
    let end = words.iter().position(|w| *w == "--")?;
    words.get(end + 1).copied()
}

/// An operator process a benchmark runs, reached on its probes and metrics
/// address.
pub struct Operator {
    child: std::process::Child,
    probes: String,
}

impl Operator {
    /// Runs `cmd` (the operator binary and its flags) with its probes and
    /// metrics on one free loopback port.
    pub fn spawn(mut cmd: std::process::Command) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        let child = cmd
            .arg(format!("--metrics-bind-address={addr}"))
            .arg(format!("--health-probe-bind-address={addr}"))
            .spawn()
            .expect("operator");
        Operator {
            child,
            probes: format!("http://{addr}"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GET `path` (`/metrics`, `/readyz`): status and body.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(format!("{}{path}", self.probes)).await
    }

    /// Waits until `/readyz` says 200 (its caches synced).
    pub async fn ready(&self) {
        while self.get("/readyz").await.map(|r| r.0) != Some(200) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The sum of the metric series whose lines start with `series` (e.g.
    /// `hossted_reconcile_total{controller="helmapp"`), 0 when none.
    pub async fn metric(&self, series: &str) -> f64 {
        let Some((_, text)) = self.get("/metrics").await else {
            return 0.0;
        };
        text.lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }

    /// SIGKILL, as a node's failure or an OOM kill would; waits for the exit.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as the kubelet sends it; waits for the exit.
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
