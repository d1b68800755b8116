//! Delivery at scale (`SCALE=1000 hack/bench-delivery.sh`): the release
//! operator binary against bare `helm upgrade --install --wait` of the
//! same releases at the same parallelism, on a real control plane with
//! kube-controller-manager (Deployments become Available the real way),
//! `examples/charts/podinfo` (six objects, scaled to zero, as Flux's
//! benchmark) served on loopback, HelmApps with `wait: true` across 50
//! namespaces. One fresh control plane per run:
//!
//! - 100, 500 and 1,000 apps at `--max-concurrent-helm 4`, and 1,000 at 10:
//!   time from the first apply to all Ready against bare helm's wall time;
//!   operator RSS (peak, steady) and the peak of operator + helm children;
//!   operator CPU seconds; apiserver requests by verb (audit log of the
//!   one user both sides run as; the operator's counted from its caches
//!   synced, its start — LISTs, discovery — reported apart, once);
//! - at 1,000 / 4 also: a restart with every app settled (helm runs and
//!   API writes, time from caches synced until every app was reconciled),
//!   and one values edit on each of 100 apps (spec change → helm started);
//! - 100 apps with `GOGC`/`GOMEMLIMIT` set for the helm children;
//! - index parsing: a generated 26 MB `index.yaml` (30,000 entries, the
//!   shape of Bitnami's) → RSS above idle and time to resolve one chart,
//!   and a second app on it within `interval` (downloads).
//!
//! Prints one JSON line per run, and with `--markdown FILE` the report
//! section. `HOSSTED_OPERATOR_BIN` names the operator.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{
    DELIVERY_CRDS, Operator, apply_crds, cpu_seconds, delivery_cluster, helm_started, log_lines,
    logging_helm, now_epoch, percentile, proc_field, tree_cpu_seconds,
};
use envtest::{ChartRepo, ControlPlane, ControllerManager};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The one user the operator, its helm children and bare helm run as: the
/// audit log counts its requests.
const USER: &str = "bench-delivery";
const NAMESPACES: usize = 50;

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// A control plane auditing [`USER`]'s requests, with room for 2,000
/// Services, and kube-controller-manager beside it.
async fn control_plane(dir: &Path) -> (ControlPlane, ControllerManager, PathBuf, PathBuf) {
    let policy = dir.join("audit-policy.yaml");
    // `BENCH_AUDIT_LEVEL=Request` keeps each request's body too: what each
    // write carried (a small run; the log grows by the bodies).
    let level = std::env::var("BENCH_AUDIT_LEVEL").unwrap_or_else(|_| "Metadata".into());
    std::fs::write(
        &policy,
        format!("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted, Panic]\nrules:\n- level: {level}\n  users: [\"{USER}\"]\n- level: None\n"),
    )
    .expect("policy");
    let audit = dir.join("audit.log");
    let cp = ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit.display()))
        .apiserver_arg("--service-cluster-ip-range=10.0.0.0/16")
        .apiserver_arg("--max-requests-inflight=800")
        .start()
        .await
        .expect("control plane");
    let kcm = ControllerManager::start(&cp, ControllerManager::WORKLOADS)
        .expect("kube-controller-manager (WITH_CONTROLLER_MANAGER=1 hack/setup-envtest.sh)");
    apply_crds(&cp, &DELIVERY_CRDS);
    let kubeconfig = cp
        .kubeconfig_for_user(USER, Some("system:masters"))
        .expect("kubeconfig");
    (cp, kcm, audit, kubeconfig)
}

/// Lines of the audit log, and its requests by verb from line `from` on.
fn audit_by_verb(path: &Path, from: usize) -> (usize, BTreeMap<String, u64>) {
    audit_by(path, from, |v| {
        v["verb"].as_str().unwrap_or("?").to_string()
    })
}

/// Requests after line `from` of the audit log, counted by `key` of each.
fn audit_by(
    path: &Path,
    from: usize,
    key: impl Fn(&Value) -> String,
) -> (usize, BTreeMap<String, u64>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut by = BTreeMap::new();
    for l in lines.iter().skip(from) {
        if let Ok(v) = serde_json::from_str::<Value>(l) {
            *by.entry(key(&v)).or_default() += 1;
        }
    }
    (lines.len(), by)
}

/// `verb resource[/subresource] by agent` of an audit record: which
/// program (helm, the operator) asked for what — the user is the same.
fn verb_resource_agent(v: &Value) -> String {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    let agent = s("/userAgent")
        .split(['/', ' '])
        .next()
        .unwrap_or("?")
        .to_string();
    let sub = match s("/objectRef/subresource") {
        "" => String::new(),
        sub => format!("/{sub}"),
    };
    // A request for no resource (discovery, OpenAPI, /version) is named
    // by its path: which of them a helm run asks for is the figure.
    let what = match s("/objectRef/resource") {
        "" => s("/requestURI").split('?').next().unwrap_or("").to_string(),
        resource => format!("{resource}{sub}"),
    };
    format!("{} {what} by {agent}", s("/verb"))
}

/// How long after all are Ready the operator's requests are counted.
const QUIET_SECS: u64 = 30;

/// The requests by verb of the audit records from line `from` on whose
/// stage time is within `window` after `start`.
fn audit_by_in(
    path: &Path,
    from: usize,
    start: chrono::DateTime<chrono::Utc>,
    window: Duration,
) -> Value {
    let end = start + chrono::Duration::from_std(window).unwrap_or_default();
    let within = |v: &Value| {
        v["stageTimestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| t >= start && t <= end)
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut by = BTreeMap::<String, u64>::new();
    for r in text
        .lines()
        .skip(from)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(within)
    {
        *by.entry(r["verb"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    json!({ "secs": window.as_secs(), "writes": writes(&by), "requests": by })
}

fn writes(by: &BTreeMap<String, u64>) -> u64 {
    ["create", "update", "patch", "delete", "deletecollection"]
        .iter()
        .map(|v| by.get(*v).copied().unwrap_or(0))
        .sum()
}

/// Memory of `pid` and of `pid` with every descendant, in kB.
struct TreeMemory {
    /// `VmRSS` of `pid`.
    own_rss: u64,
    /// `VmRSS` summed over the tree: a page shared by several processes
    /// (helm's own binary, ~40 MiB of it) is counted once per process.
    tree_rss: u64,
    /// `Pss` summed over the tree (`/proc/<pid>/smaps_rollup`): each shared
    /// page split between its sharers, so counted once overall — what a
    /// container's memory limit sees of the tree.
    tree_pss: u64,
}

fn pss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn tree_memory(pid: u32) -> TreeMemory {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok());
            if let Some(pp) = ppid {
                children.entry(pp).or_default().push(p);
            }
        }
    }
    let mut m = TreeMemory {
        own_rss: proc_field(pid, "VmRSS:").unwrap_or(0),
        tree_rss: 0,
        tree_pss: 0,
    };
    let mut queue = VecDeque::from([pid]);
    while let Some(p) = queue.pop_front() {
        m.tree_rss += proc_field(p, "VmRSS:").unwrap_or(0);
        m.tree_pss += pss(p);
        queue.extend(children.get(&p).into_iter().flatten());
    }
    m
}

/// Samples [`tree_memory`] every 100 ms until dropped: the peaks.
struct Sampler {
    stop: Arc<AtomicBool>,
    own: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
    total_pss: Arc<AtomicU64>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (own, total, total_pss): (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU64>) =
            Default::default();
        let (s, o, t, tp) = (
            Arc::clone(&stop),
            Arc::clone(&own),
            Arc::clone(&total),
            Arc::clone(&total_pss),
        );
        std::thread::spawn(move || {
            while !s.load(Relaxed) {
                let m = tree_memory(pid);
                o.fetch_max(m.own_rss, Relaxed);
                t.fetch_max(m.tree_rss, Relaxed);
                tp.fetch_max(m.tree_pss, Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler {
            stop,
            own,
            total,
            total_pss,
        }
    }

    /// Peak operator RSS and peak operator + children RSS (MiB).
    fn peaks(&self) -> (f64, f64) {
        (mib(self.own.load(Relaxed)), mib(self.total.load(Relaxed)))
    }

    /// Peak operator + children PSS (MiB).
    fn peak_pss(&self) -> f64 {
        mib(self.total_pss.load(Relaxed))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

/// The operator with delivery alone, `conc` helm runs at once.
fn start_operator(
    bin: &str,
    kubeconfig: &Path,
    helm: &Path,
    dir: &Path,
    conc: usize,
    env: &[(String, String)],
    log: &str,
) -> Operator {
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .args([
            "run",
            "--controllers",
            "delivery",
            "--privileged-namespaces=*",
        ])
        .arg(format!("--max-concurrent-helm={conc}"))
        .arg("--helm-binary")
        .arg(helm)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(log)).expect("log"));
    Operator::spawn(cmd)
}

/// HelmApp reconciles so far, whatever their result.
async fn reconciles(op: &Operator) -> f64 {
    op.metric("hossted_reconcile_total{controller=\"helmapp\"")
        .await
}

async fn namespaces(client: &Client, prefix: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    for i in 0..NAMESPACES {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(format!("{prefix}-{i:02}")),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = api.create(&PostParams::default(), &ns).await;
    }
}

fn helmapp(i: usize, repo: &str, level: &str) -> HelmApp {
    serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": format!("app-{i:04}"), "namespace": format!("apps-{:02}", i % NAMESPACES) },
        "spec": { "chart": { "repo": repo, "name": "podinfo", "version": "6.7.0" }, "wait": true,
                  "timeout": "5m", "values": { "logLevel": level } }
    }))
    .expect("HelmApp")
}

fn is_ready(a: &HelmApp) -> bool {
    a.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// Follows every HelmApp through a watch (no polling load on the
/// apiserver) until `done` holds of the ready ones; the instant it did.
async fn until_ready(
    api: &Api<HelmApp>,
    done: impl Fn(&HashMap<String, HelmApp>) -> bool,
) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let list = api.list(&ListParams::default()).await.expect("list");
        let mut seen: HashMap<String, HelmApp> = list
            .items
            .into_iter()
            .map(|a| {
                (
                    format!(
                        "{}/{}",
                        a.metadata.namespace.clone().unwrap_or_default(),
                        a.metadata.name.clone().unwrap_or_default()
                    ),
                    a,
                )
            })
            .collect();
        if done(&seen) {
            return Instant::now();
        }
        let rv = list.metadata.resource_version.unwrap_or_default();
        let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &rv).await else {
            continue;
        };
        let mut stream = stream.boxed();
        while let Ok(Some(ev)) = stream.try_next().await {
            match ev {
                WatchEvent::Added(a) | WatchEvent::Modified(a) => {
                    let key = format!(
                        "{}/{}",
                        a.metadata.namespace.clone().unwrap_or_default(),
                        a.metadata.name.clone().unwrap_or_default()
                    );
                    seen.insert(key, a);
                }
                WatchEvent::Deleted(_) | WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(_) => break,
            }
            if done(&seen) {
                return Instant::now();
            }
        }
        assert!(Instant::now() < deadline, "not all Ready within an hour");
    }
}

/// `n` bare `helm upgrade --install --wait` at `conc` at once: wall seconds.
/// The helm a row runs: the assets' helm 3 when its environment says
/// `BENCH_HELM=3` (`--only 100:4:BENCH_HELM=3`), helm 4 otherwise — for
/// bare helm and the operator alike.
fn helm_of(cp: &ControlPlane, env: &[(String, String)]) -> std::path::PathBuf {
    if env.iter().any(|(k, v)| k == "BENCH_HELM" && v == "3") {
        cp.helm3_binary()
    } else {
        cp.helm_binary()
    }
}

fn bare_helm(
    cp: &ControlPlane,
    helm: &Path,
    kubeconfig: &Path,
    tgz: &Path,
    n: usize,
    conc: usize,
) -> f64 {
    let home = cp.dir().join("bare-helm");
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..conc {
            let (next, home) = (next.clone(), home.clone());
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= n {
                        return;
                    }
                    let ns = format!("bare-{:02}", i % NAMESPACES);
                    let out = std::process::Command::new(helm)
                        .env("HELM_CACHE_HOME", home.join("cache"))
                        .env("HELM_CONFIG_HOME", home.join("config"))
                        .env("HELM_DATA_HOME", home.join("data"))
                        .args(["upgrade", "--install", &format!("rel-{i:04}")])
                        .arg(tgz)
                        .args(["-n", &ns, "--wait", "--timeout", "5m", "--kubeconfig"])
                        .arg(kubeconfig)
                        .output();
                    if !out.as_ref().is_ok_and(|o| o.status.success()) {
                        eprintln!("bench-delivery-scale: bare helm rel-{i:04} failed: {out:?}");
                    }
                }
            });
        }
    });
    started.elapsed().as_secs_f64()
}

/// One run: `n` apps at `conc` (see the module docs).
async fn run_one(
    bin: &str,
    n: usize,
    conc: usize,
    env: &[(String, String)],
    detailed: bool,
    edits: usize,
    idle: u64,
) -> Value {
    eprintln!("bench-delivery-scale: {n} apps at --max-concurrent-helm {conc} {env:?}");
    let dir = std::env::temp_dir().join(format!(
        "bench-delivery-scale-{}-{n}-{conc}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cp, _kcm, audit, kubeconfig) = control_plane(&dir).await;
    let client = cp.client();
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = ChartRepo::start(&cp, &[&charts.join("podinfo"), &charts.join("reach")], None)
        .await
        .expect("repo");
    let tgz = repo.dir().join("podinfo-6.7.0.tgz");
    namespaces(&client, "bare").await;
    namespaces(&client, "apps").await;

    // Bare helm first, the same releases at the same parallelism.
    let (from, _) = audit_by_verb(&audit, 0);
    let helm_bin = helm_of(&cp, env);
    // Bare helm's processes are this process's children: their CPU.
    let bare_cpu0 = tree_cpu_seconds(std::process::id()) - cpu_seconds(std::process::id());
    let cp_cpu0 = control_plane_cpu(cp.dir());
    let bare_secs =
        tokio::task::block_in_place(|| bare_helm(&cp, &helm_bin, &kubeconfig, &tgz, n, conc));
    let bare_cpu =
        tree_cpu_seconds(std::process::id()) - cpu_seconds(std::process::id()) - bare_cpu0;
    let cp_cpu_bare = control_plane_cpu(cp.dir()) - cp_cpu0;
    let (from_ours, bare_requests) = audit_by_verb(&audit, from);
    let (_, bare_what) = audit_by(&audit, from, verb_resource_agent);
    eprintln!("bench-delivery-scale:   bare helm {bare_secs:.1}s");

    let (helm, log) = logging_helm(&helm_bin, &dir);
    let op = start_operator(bin, &kubeconfig, &helm, &dir, conc, env, "operator.log");
    op.ready().await;
    // Its start (informers' LISTs, discovery) is counted on its own: a
    // fixed cost, not one of each release. (A WATCH is logged when it
    // ends: the informers' first ones fall in the wave or later.)
    let (from_wave, startup_requests) = audit_by_verb(&audit, from_ours);
    let (_, startup_what) = audit_by(&audit, from_ours, verb_resource_agent);
    let sampler = Sampler::start(op.pid());
    let cpu0 = cpu_seconds(op.pid());
    let tree_cpu0 = tree_cpu_seconds(op.pid());
    let cp_cpu1 = control_plane_cpu(cp.dir());
    let all: Api<HelmApp> = Api::all(client.clone());
    let started = Instant::now();
    let created = {
        let client = client.clone();
        let url = repo.url().to_string();
        tokio::spawn(async move {
            futures::stream::iter(0..n)
                .for_each_concurrent(16, |i| {
                    let (client, url) = (client.clone(), url.clone());
                    async move {
                        let app = helmapp(i, &url, "info");
                        let api: Api<HelmApp> = Api::namespaced(
                            client,
                            app.metadata.namespace.as_deref().unwrap_or_default(),
                        );
                        api.create(&PostParams::default(), &app)
                            .await
                            .expect("create");
                    }
                })
                .await
        })
    };
    let done = until_ready(&all, |seen| {
        seen.values().filter(|a| is_ready(a)).count() >= n
    })
    .await;
    let ready_at = chrono::Utc::now();
    let _ = created.await;
    let ours_secs = done.duration_since(started).as_secs_f64();
    let cpu = cpu_seconds(op.pid()) - cpu0;
    let tree_cpu = tree_cpu_seconds(op.pid()) - tree_cpu0;
    let cp_cpu_ours = control_plane_cpu(cp.dir()) - cp_cpu1;
    let (_, ours_requests) = audit_by_verb(&audit, from_wave);
    let (_, ours_what) = audit_by(&audit, from_wave, verb_resource_agent);
    let (peak_own, peak_total) = sampler.peaks();
    let peak_total_pss = sampler.peak_pss();
    eprintln!(
        "bench-delivery-scale:   ours {ours_secs:.1}s ({:.2}x)",
        ours_secs / bare_secs
    );
    // Settled when Ready: what the operator asks of the API in the
    // [`QUIET_SECS`] after all are (at least `idle`).
    tokio::time::sleep(Duration::from_secs(idle.max(QUIET_SECS))).await;
    let steady = mib(proc_field(op.pid(), "VmRSS:").unwrap_or(0));
    let after_ready = audit_by_in(&audit, from_ours, ready_at, Duration::from_secs(QUIET_SECS));
    drop(sampler);
    let mut result = json!({
        "apps": n, "concurrency": conc, "env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "bare_secs": bare_secs, "ours_secs": ours_secs, "ratio": ours_secs / bare_secs,
        "operator_rss_peak_mib": peak_own, "operator_rss_steady_mib": steady, "tree_rss_peak_mib": peak_total,
        "tree_pss_peak_mib": peak_total_pss,
        "operator_cpu_secs": cpu, "tree_cpu_secs": tree_cpu, "bare_cpu_secs": bare_cpu,
        "control_plane_cpu_secs": { "ours": cp_cpu_ours, "bare": cp_cpu_bare },
        "requests_ours": ours_requests, "requests_bare": bare_requests,
        "requests_ours_by_what": ours_what, "requests_bare_by_what": bare_what,
        "requests_startup": startup_requests, "requests_startup_by_what": startup_what,
        "helm_runs": log_lines(&log).len(),
        "after_ready": after_ready,
    });
    if detailed {
        result["refused"] = refused(&client, repo.url(), &log).await;
        let (paths, runs) = (
            Paths {
                kubeconfig: &kubeconfig,
                helm: &helm,
                log: &log,
                dir: &dir,
                audit: &audit,
            },
            (n, conc),
        );
        // Several restarts of one settled cluster: a figure that swings
        // between trials shows here, in one run (`BENCH_RESTARTS`).
        let trials: usize = std::env::var("BENCH_RESTARTS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(3)
            .max(1);
        let mut op = op;
        let mut all = Vec::new();
        for trial in 0..trials {
            let (measured, next) = restart(bin, &paths, runs, env, op, trial + 1 < trials).await;
            all.push(measured);
            match next {
                Some(next) => op = next,
                None => break,
            }
        }
        result["restart"] = all[0].clone();
        result["restarts"] = Value::Array(all);
        let op = start_operator(
            bin,
            &kubeconfig,
            &helm,
            &dir,
            conc,
            env,
            "operator-edits.log",
        );
        op.ready().await;
        result["edits"] = edit(&client, &log, edits, &op).await;
        op.stop();
    } else {
        op.stop();
    }
    drop(cp);
    // BENCH_KEEP_DIR=1: the audit log and the operator's log stay, to be
    // read after the run.
    if std::env::var_os("BENCH_KEEP_DIR").is_some() {
        eprintln!("bench-delivery-scale: kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("{result}");
    result
}

/// CPU seconds so far of this control plane's kube-apiserver and etcd
/// (their command lines name its directory).
fn control_plane_cpu(dir: &Path) -> f64 {
    let needle = dir.display().to_string();
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.into_iter()
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            let exe = cmd.split('\0').next().unwrap_or("");
            (exe.ends_with("kube-apiserver") || exe.ends_with("etcd")) && cmd.contains(&needle)
        })
        .map(cpu_seconds)
        .sum()
}

/// How long the refused tenant app is watched.
const REFUSED_SECS: u64 = 60;

/// A tenant's app whose chart RBAC refuses (issue 55): in `apps-00`, helm
/// impersonating a ServiceAccount whose Role may not make the
/// ClusterRoleBinding `reach` renders — no retry can succeed until RBAC or
/// the app changes. Its helm runs in [`REFUSED_SECS`] are counted: the
/// operator's backoff for refusals (seconds apart, growing), never the
/// work queue's milliseconds.
async fn refused(client: &kube::Client, repo: &str, log: &Path) -> Value {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let meta = json!({ "name": "bench-tenant", "namespace": "apps-00" });
    let sa: ServiceAccount = serde_json::from_value(json!({ "metadata": meta })).expect("sa");
    // Helm's storage and what a namespaced chart makes: never a
    // ClusterRoleBinding.
    let role: Role = serde_json::from_value(json!({ "metadata": meta, "rules": [{
        "apiGroups": [""], "resources": ["secrets", "configmaps", "services"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"] }] }))
    .expect("role");
    let binding: RoleBinding = serde_json::from_value(json!({ "metadata": meta,
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bench-tenant" },
        "subjects": [{ "kind": "ServiceAccount", "name": "bench-tenant", "namespace": "apps-00" }] }))
    .expect("binding");
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(client.clone(), "apps-00")
        .create(&pp, &sa)
        .await
        .expect("sa");
    Api::<Role>::namespaced(client.clone(), "apps-00")
        .create(&pp, &role)
        .await
        .expect("role");
    Api::<RoleBinding>::namespaced(client.clone(), "apps-00")
        .create(&pp, &binding)
        .await
        .expect("binding");
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "refused", "namespace": "apps-00" },
        "spec": { "chart": { "repo": repo, "name": "reach" }, "serviceAccountName": "bench-tenant",
                  "values": { "clusterAdmin": true } }
    }))
    .expect("HelmApp");
    let api: Api<HelmApp> = Api::namespaced(client.clone(), "apps-00");
    // Its installs (`helm install` over nothing, or `upgrade --install`;
    // no dry run, no other subcommand).
    let runs = || {
        log_lines(log)
            .iter()
            .filter(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                (words.contains(&"install") || words.contains(&"upgrade"))
                    && words.contains(&"refused")
                    && !words.iter().any(|w| w.starts_with("--dry-run"))
            })
            .count()
    };
    let before = runs();
    api.create(&PostParams::default(), &app)
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_secs(REFUSED_SECS)).await;
    let reason = api
        .get("refused")
        .await
        .ok()
        .and_then(|a| a.status)
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.reason)
        .unwrap_or_default();
    let helm_runs = runs() - before;
    // Gone before the restart is measured: its uninstall is refused too
    // (the ClusterRoleBinding it would delete), so the finalizer is taken
    // off by hand.
    let _ = api.delete("refused", &Default::default()).await;
    let unheld = json!({ "metadata": { "finalizers": null } });
    let _ = api
        .patch("refused", &PatchParams::default(), &Patch::Merge(&unheld))
        .await;
    while api.get_opt("refused").await.ok().flatten().is_some() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    json!({ "secs": REFUSED_SECS, "helm_runs": helm_runs, "reason": reason })
}

/// Where a run keeps what a restart needs.
struct Paths<'a> {
    kubeconfig: &'a Path,
    helm: &'a Path,
    log: &'a Path,
    dir: &'a Path,
    audit: &'a Path,
}

/// A restart with every app settled: helm runs, API writes, and the time
/// from caches synced (`/readyz`) until every app was reconciled.
async fn restart(
    bin: &str,
    p: &Paths<'_>,
    (n, conc): (usize, usize),
    env: &[(String, String)],
    op: Operator,
    keep: bool,
) -> (Value, Option<Operator>) {
    let &Paths {
        kubeconfig,
        helm,
        log,
        dir,
        audit,
    } = p;
    op.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (from, _) = audit_by_verb(audit, 0);
    let runs_before = log_lines(log).len();
    let op = start_operator(
        bin,
        kubeconfig,
        helm,
        dir,
        conc,
        env,
        "operator-restart.log",
    );
    let started = Instant::now();
    op.ready().await;
    let synced = Instant::now();
    while reconciles(&op).await < n as f64 {
        assert!(
            synced.elapsed() < Duration::from_secs(600),
            "not every app reconciled after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let verified = synced.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The new process's CPU from its start to 10 s after all were verified.
    let cpu = cpu_seconds(op.pid());
    let reconciled = reconciles(&op).await;
    let (_, by) = audit_by_verb(audit, from);
    let (_, who) = audit_by(audit, from, verb_resource_agent);
    let measured = json!({ "helm_runs": log_lines(log).len() - runs_before, "api_writes": writes(&by), "requests": by,
            "requests_by_resource_and_agent": who, "cpu_secs": cpu, "reconciles": reconciled,
            "start_to_synced_secs": synced.duration_since(started).as_secs_f64(), "synced_to_all_verified_secs": verified });
    if keep {
        return (measured, Some(op));
    }
    op.stop();
    (measured, None)
}

/// One values edit on each of `edits` apps, one after another: spec change
/// → helm started, the revisions made, and the mean wait of those helm
/// runs for a free slot (`hossted_helm_slot_wait_seconds`: this operator
/// ran no other).
async fn edit(client: &Client, log: &Path, edits: usize, op: &Operator) -> Value {
    let mut latencies = Vec::new();
    for i in 0..edits {
        let ns = format!("apps-{:02}", i % NAMESPACES);
        let api: Api<HelmApp> = Api::namespaced(client.clone(), &ns);
        let patch = json!({ "spec": { "values": { "logLevel": format!("debug-{i}") } } });
        let t = now_epoch();
        api.patch(
            &format!("app-{i:04}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("edit");
        let deadline = Instant::now() + Duration::from_secs(120);
        let started = loop {
            if let Some(s) = helm_started(log, &format!("app-{i:04}"), t) {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "no helm run for the edit of app-{i:04}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        latencies.push(started - t);
    }
    let all: Api<HelmApp> = Api::all(client.clone());
    let edited: HashSet<String> = (0..edits).map(|i| format!("app-{i:04}")).collect();
    until_ready(&all, |seen| {
        seen.values()
            .filter(|a| edited.contains(a.metadata.name.as_deref().unwrap_or_default()))
            .filter(|a| is_ready(a) && a.status.as_ref().is_some_and(|s| s.revision == 2))
            .count()
            >= edits
    })
    .await;
    latencies.sort_by(f64::total_cmp);
    let metrics = op.get("/metrics").await.map(|(_, t)| t).unwrap_or_default();
    let sample = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(f64::NAN)
    };
    let (wait_sum, waits) = (
        sample("hossted_helm_slot_wait_seconds_sum"),
        sample("hossted_helm_slot_wait_seconds_count"),
    );
    json!({ "edits": edits, "revisions_2": edits, "to_helm_started_s": { "p50": percentile(&latencies, 50.0),
            "p99": percentile(&latencies, 99.0), "max": latencies.last() },
            "slot_wait_mean_s": wait_sum / waits, "slot_waits": waits })
}

/// Index parsing (see the module docs).
async fn index_part(bin: &str) -> Value {
    eprintln!("bench-delivery-scale: a 26 MB index.yaml");
    let dir = std::env::temp_dir().join(format!("bench-delivery-index-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cp, repo) = delivery_cluster("podinfo").await;
    let index = repo.dir().join("index.yaml");
    let big = common::big_index::generate(&std::fs::read_to_string(&index).expect("index"), 30_000);
    std::fs::write(&index, &big).expect("index");
    let (helm, log) = logging_helm(&cp.helm_binary(), &dir);
    let op = start_operator(
        bin,
        cp.kubeconfig_path(),
        &helm,
        &dir,
        4,
        &[],
        "operator-index.log",
    );
    op.ready().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = mib(proc_field(op.pid(), "VmRSS:").unwrap_or(0));
    let sampler = Sampler::start(op.pid());
    let api: Api<HelmApp> = Api::namespaced(cp.client(), "default");
    let app = |name: &str| -> HelmApp {
        serde_json::from_value(json!({ "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": name, "namespace": "default" },
            "spec": { "chart": { "repo": repo.url(), "name": "podinfo", "version": "6.7.0" }, "interval": "1h" } }))
        .expect("HelmApp")
    };
    let t = now_epoch();
    api.create(&PostParams::default(), &app("indexed"))
        .await
        .expect("create");
    let resolved = loop {
        if let Some(s) = helm_started(&log, "indexed", t) {
            break s - t;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    until_ready(&api, |s| s.values().any(is_ready)).await;
    let (peak, _) = sampler.peaks();
    let served = repo.served();
    let t2 = now_epoch();
    api.create(&PostParams::default(), &app("indexed-again"))
        .await
        .expect("create");
    let second = loop {
        if let Some(s) = helm_started(&log, "indexed-again", t2) {
            break s - t2;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let downloads = repo.served() - served;
    op.stop();
    let _ = std::fs::remove_dir_all(&dir);
    let result = json!({ "index_bytes": big.len(), "entries": 30_001, "idle_rss_mib": idle, "peak_rss_mib": peak,
        "above_idle_mib": peak - idle, "create_to_helm_started_s": resolved,
        "second_app_downloads": downloads, "second_create_to_helm_started_s": second });
    println!("{result}");
    result
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let (mut sizes, mut edits, mut idle, mut markdown) =
        (vec![100usize, 500, 1000], 100usize, 60u64, None::<PathBuf>);
    let mut high = 10usize;
    // `--only apps:concurrency[:NAME=VALUE,...]` (repeatable): just these
    // runs, no report — to try a setting.
    let mut only: Vec<Row> = Vec::new();
    // `--only-edits N`: those runs also restart and make N edits.
    let mut only_edits: Option<usize> = None;
    // `--only-index yes`: the index row too.
    let mut only_index = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--sizes" => sizes = v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
            "--edits" => edits = v.parse().unwrap_or(edits),
            "--idle-secs" => idle = v.parse().unwrap_or(idle),
            "--high-concurrency" => high = v.parse().unwrap_or(high),
            "--markdown" => markdown = Some(v.into()),
            "--only" => only.extend(parse_only(&v)),
            "--only-edits" => only_edits = v.parse().ok(),
            "--only-index" => only_index = v == "yes",
            other => eprintln!("bench-delivery-scale: ignoring {other}"),
        }
    }
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    if !only.is_empty() || only_index {
        let index = match only_index {
            true => Some(index_part(&bin).await),
            false => None,
        };
        let mut runs = Vec::new();
        for (n, conc, env) in &only {
            let edits = only_edits.unwrap_or(0).min(*n);
            let r = run_one(&bin, *n, *conc, env, only_edits.is_some(), edits, 5).await;
            println!("{r}");
            runs.push(r);
        }
        if let Some(path) = markdown {
            let args = std::env::var("ONLY").unwrap_or_default();
            std::fs::write(path, only_report(&runs, index.as_ref(), &args)).expect("markdown");
        }
        return;
    }
    let largest = sizes.iter().copied().max().unwrap_or(1000);
    let mut runs = Vec::new();
    let index = index_part(&bin).await;
    for &n in &sizes {
        runs.push(run_one(&bin, n, 4, &[], n == largest, edits.min(n), idle).await);
    }
    if high != 4 {
        runs.push(run_one(&bin, largest, high, &[], false, 0, idle).await);
    }
    let gc = [
        ("GOGC".to_string(), "50".to_string()),
        ("GOMEMLIMIT".to_string(), "40MiB".to_string()),
    ];
    runs.push(run_one(&bin, sizes[0], 4, &gc, false, 0, 5).await);
    if let Some(path) = markdown {
        std::fs::write(path, report(&runs, &index)).expect("markdown");
    }
}

/// A run to try: apps, helm concurrency, environment.
type Row = (usize, usize, Vec<(String, String)>);

/// `apps:concurrency[:NAME=VALUE,...]`.
fn parse_only(v: &str) -> Option<Row> {
    let mut parts = v.splitn(3, ':');
    let n = parts.next()?.parse().ok()?;
    let conc = parts.next()?.parse().ok()?;
    let env = parts
        .next()
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some((n, conc, env))
}

fn report(runs: &[Value], index: &Value) -> String {
    let mut out = String::from(
        "## Delivery at scale: 1,000 HelmApps against bare helm\n\n\
         `SCALE=1000 hack/bench-delivery.sh` (`examples/bench_delivery_scale.rs`): ",
    );
    out.push_str(SETUP);
    out.push_str(&table(runs));
    out.push_str(&details(runs));
    out.push_str(&format!(
        "\n![time to all Ready against HelmApps](delivery-scale.png) (`hack/plot.sh`)\n\n{}\nRaw results (one JSON line per run):\n\n```\n{}\n{}\n```\n",
        index_paragraph(index),
        index,
        runs.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"),
    ));
    out
}

/// What the index row found, in words.
fn index_paragraph(index: &Value) -> String {
    let f = |k: &str| index[k].as_f64().unwrap_or(f64::NAN);
    format!(
        "Index parsing: a generated index.yaml of {:.1} MB ({} entries, Bitnami's shape; the wanted chart last). \
         Resolving one chart: create → helm started {:.2} s (target ≤ 1 s), operator RSS {:.1} MiB idle, peak {:.1} MiB, \
         {:.1} MiB above idle (target ≤ 32 MiB). A second HelmApp of that chart within its interval: {} downloads, \
         create → helm started {:.2} s.\n",
        f("index_bytes") / 1e6,
        index["entries"],
        f("create_to_helm_started_s"),
        f("idle_rss_mib"),
        f("peak_rss_mib"),
        f("above_idle_mib"),
        index["second_app_downloads"],
        f("second_create_to_helm_started_s"),
    )
}

/// The report of `--only` runs: the same table, for a setting tried.
fn only_report(runs: &[Value], index: Option<&Value>, args: &str) -> String {
    let mut out = format!(
        "## Delivery at scale: chosen runs\n\n`ONLY=\"{args}\" hack/bench-delivery.sh` \
         (`examples/bench_delivery_scale.rs --only`): "
    );
    out.push_str(SETUP);
    if !runs.is_empty() {
        out.push_str(&table(runs));
        out.push_str(&details(runs));
    }
    if let Some(index) = index {
        out.push('\n');
        out.push_str(&index_paragraph(index));
    }
    out.push_str(&format!(
        "\nRaw results (one JSON line per run):\n\n```\n{}\n```\n",
        runs.iter()
            .chain(index)
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    ));
    out
}

/// How every run is set up: the reports' first paragraph, after the command.
const SETUP: &str = "one fresh control plane per run \
    with kube-controller-manager (deployments, replicasets, GC, namespaces), `examples/charts/podinfo` \
    (6 objects, Deployment scaled to zero) on loopback, HelmApps with `wait: true` across 50 namespaces \
    created 16 at a time; bare `helm upgrade --install --wait` of the same releases at the same parallelism \
    first, in the same run, as the same user. 2 cores shared by everything. Memory of operator + helm children \
    is sampled every 100 ms: PSS summed (a page shared by processes — helm's ~40 MiB binary — counted once, \
    as a container's memory limit counts it) and, beside it, VmRSS summed (shared pages counted per process). \
    `env` is the operator's environment (helm gets Go's settings from it); without `GOMAXPROCS` there, \
    each helm gets the cores ÷ `--max-concurrent-helm` (at least 1: here 1).\n\n";

/// One row per run.
fn table(runs: &[Value]) -> String {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let mut out = String::from(
        "| apps | helm at once | env | bare helm (s) | ours to all Ready (s) | ratio (target ≤ 1.10) | operator RSS peak / steady (MiB, target steady ≤ 64) | operator + helm peak, PSS (MiB, target ≤ 200 at 4) | operator + helm peak, RSS summed (MiB) | operator CPU (s) | CPU of operator + helm / of bare helm (s) | requests ours / bare |\n\
         | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    let total = |v: &Value| {
        v.as_object()
            .map(|m| m.values().filter_map(Value::as_u64).sum::<u64>())
            .unwrap_or(0)
    };
    for r in runs {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.1} / {:.1} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} | {} / {} |\n",
            r["apps"],
            r["concurrency"],
            r["env"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "))
                .unwrap_or_default(),
            f(r, "bare_secs"),
            f(r, "ours_secs"),
            f(r, "ratio"),
            f(r, "operator_rss_peak_mib"),
            f(r, "operator_rss_steady_mib"),
            f(r, "tree_pss_peak_mib"),
            f(r, "tree_rss_peak_mib"),
            f(r, "operator_cpu_secs"),
            f(r, "tree_cpu_secs"),
            f(r, "bare_cpu_secs"),
            total(&r["requests_ours"]),
            total(&r["requests_bare"]),
        ));
    }
    out
}

/// A run's requests per release (see [`per_release`]).
struct PerRelease {
    ours: f64,
    /// Of `ours`, those of the operator's helm children.
    helm: f64,
    bare: f64,
    writes_ours: f64,
    writes_bare: f64,
    /// The operator's own requests per release, by verb and resource.
    own_by_what: String,
    /// The operator's requests at its start, before the first HelmApp
    /// (informers, discovery): not per release.
    startup: f64,
}

/// Requests per release of run `r`, told apart by program (the audit
/// log's user agent: helm's say `Helm`).
fn per_release(r: &Value) -> PerRelease {
    let n = r["apps"].as_f64().unwrap_or(1.0).max(1.0);
    let sum = |v: &Value| {
        v.as_object()
            .map_or(0.0, |m| m.values().filter_map(Value::as_f64).sum::<f64>())
    };
    let writes = |v: &Value| {
        v.as_object().map_or(0.0, |m| {
            m.iter()
                .filter(|(verb, _)| {
                    ["create", "update", "patch", "delete", "deletecollection"]
                        .contains(&verb.as_str())
                })
                .filter_map(|(_, c)| c.as_f64())
                .sum::<f64>()
        })
    };
    let by_what = r["requests_ours_by_what"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let helm: f64 = by_what
        .iter()
        .filter(|(what, _)| what.ends_with(" by Helm"))
        .filter_map(|(_, c)| c.as_f64())
        .sum();
    let own: Vec<String> = by_what
        .iter()
        .filter(|(what, _)| !what.ends_with(" by Helm"))
        .filter_map(|(what, c)| {
            let per = c.as_f64()? / n;
            (per >= 0.05).then(|| format!("{} {per:.2}", what.trim_end_matches(" by ")))
        })
        .collect();
    PerRelease {
        ours: sum(&r["requests_ours"]) / n,
        helm: helm / n,
        bare: sum(&r["requests_bare"]) / n,
        writes_ours: writes(&r["requests_ours"]) / n,
        writes_bare: writes(&r["requests_bare"]) / n,
        own_by_what: own.join(", "),
        startup: sum(&r["requests_startup"]),
    }
}

/// The quiet after all were Ready, and the restart and the edits of the
/// run that made them.
fn details(runs: &[Value]) -> String {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let mut out = String::new();
    let quiet: Vec<String> = runs
        .iter()
        .filter(|r| r.get("after_ready").is_some())
        .map(|r| {
            let q = &r["after_ready"];
            format!(
                "{} apps at {}: {} writes, requests {}",
                r["apps"], r["concurrency"], q["writes"], q["requests"]
            )
        })
        .collect();
    if !quiet.is_empty() {
        out.push_str(&format!(
            "\nSettled when Ready — the operator's requests in the {QUIET_SECS} s after all were Ready (target: no writes): {}.\n",
            quiet.join("; ")
        ));
    }
    for r in runs {
        let per = per_release(r);
        out.push_str(&format!(
            "\nRequests per release at {} apps, {} at once: ours {:.1} (helm {:.1} + the operator {:.2}) / bare helm {:.1}, counted from the operator's caches synced (its start before that: {} requests, once); writes ours {:.1} / bare {:.1}. The operator's own, by what: {}. kube-apiserver + etcd CPU during the run: ours {:.1} s / bare {:.1} s ({:.2}×).\n",
            r["apps"], r["concurrency"], per.ours, per.helm, per.ours - per.helm, per.bare, per.startup,
            per.writes_ours, per.writes_bare, per.own_by_what,
            f(&r["control_plane_cpu_secs"], "ours"), f(&r["control_plane_cpu_secs"], "bare"),
            f(&r["control_plane_cpu_secs"], "ours") / f(&r["control_plane_cpu_secs"], "bare"),
        ));
    }
    if let Some(refused) = runs.iter().find_map(|r| r.get("refused")) {
        out.push_str(&format!(
            "\nA tenant's app RBAC refuses (its chart makes a ClusterRoleBinding; helm as a ServiceAccount whose Role may not): {} helm runs in {} s, Ready reason {}.\n",
            refused["helm_runs"], refused["secs"], refused["reason"]
        ));
    }
    // The restarts of the largest run (the figure the target is for).
    if let Some(d) = runs
        .iter()
        .filter(|r| r.get("restart").is_some())
        .max_by_key(|r| r["apps"].as_u64())
    {
        let (rs, e) = (&d["restart"], &d["edits"]);
        let trials: Vec<String> = d["restarts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                format!(
                    "{:.2} CPU-s ({} reconciles, synced {:.2} s)",
                    f(t, "cpu_secs"),
                    t["reconciles"],
                    f(t, "start_to_synced_secs")
                )
            })
            .collect();
        out.push_str(&format!(
            "\nAt {} apps: requests by verb, ours {} / bare {}.\n\n\
             - Restart with every app settled: {} helm runs (target 0), {} API writes (target 0), {} requests, caches synced {:.1} s after start, \
             every app re-verified {:.2} s after that (target ≤ 2 s); the new process's CPU to 10 s after that {:.2} s (target ≤ 2 s at 1,000); \
             each restart of this run: {}.\n\
             - One values edit on each of {} apps, one after another (each edit's helm run waits for its rollout; the next edit does not wait for it): \
             spec change → helm started p50 {:.0} ms, p99 {:.0} ms; {} revisions 2; those runs waited for a free helm slot {:.0} ms on average.\n",
            d["apps"], d["requests_ours"], d["requests_bare"], rs["helm_runs"], rs["api_writes"], rs["requests"], f(rs, "start_to_synced_secs"),
            f(rs, "synced_to_all_verified_secs"), f(rs, "cpu_secs"), trials.join(", "), e["edits"], f(&e["to_helm_started_s"], "p50") * 1000.0,
            f(&e["to_helm_started_s"], "p99") * 1000.0, e["revisions_2"], f(e, "slot_wait_mean_s") * 1000.0,
        ));
    }
    out
}
