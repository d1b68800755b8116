//! Remote clusters and shards at scale (`hack/bench-remote.sh`, issue 53):
//! the operator binary (`--controllers delivery`, `--max-concurrent-helm 4`,
//! no leader election) on envtest control planes (etcd + kube-apiserver, no
//! kube-controller-manager), `examples/charts/podinfo` (six objects) served
//! on loopback, HelmApps with `wait: false` (Ready once helm has installed)
//! across 50 namespaces. The parts (`--only PART`, comma-separated):
//!
//! 1. `remote`: `--apps-remote` (200) HelmApps released into the operator's
//!    cluster A, then as many in A whose `spec.kubeConfig` names a Secret
//!    holding a token kubeconfig (server, CA and token inline, https) of
//!    ServiceAccount `hossted-remote/deployer` of a cluster B, cluster-admin
//!    there. Fresh A and B for each run (B idle in the local one). Seconds
//!    from the first create to all Ready, requests to A's apiserver (the
//!    operator's user) and to B's (the deployer), requests per release,
//!    operator peak RSS and CPU.
//! 2. `memory`: operator RSS after 30 s idle with 0, 1, 3 and 5
//!    (`--remotes`) remote control planes (started once, added one step at a
//!    time), each with one HelmApp released into it, and one local HelmApp
//!    throughout; the delta per cluster; the requests a minute each remote
//!    gets at idle (`--idle-window-secs`, 60).
//! 3. `shards`: `--apps-shards` (1,000) HelmApps, one unsharded process,
//!    against two processes `--shard a` and `--shard b` with half labelled
//!    `sharding.hossted.com/key` each and no unsharded process; fresh A each.
//!    Seconds to all Ready, RSS per process (peak, steady), peak helm
//!    children at once, CPU seconds; then the idle RSS of a third process
//!    `--shard c` that owns no HelmApp.
//! 4. `ten` (with `--ten-thousand` or `TEN_K=1`, or `--only ten`):
//!    `--apps-ten` (10,000) HelmApps, one process (and two shards too with
//!    `TEN_K_SHARDS=1`): seconds to all Ready, steady RSS; then a restart
//!    with every app settled: time to caches synced and to every app
//!    reconciled again, requests by verb, writes, helm runs.
//!
//! Prints one JSON line per run, and with `--markdown FILE` the report
//! section. `HOSSTED_OPERATOR_BIN` names the operator.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use chrono::{DateTime, Utc};
use common::{
    DELIVERY_CRDS, Operator, apply_crds, cpu_seconds, create_all, log_lines, logging_helm,
    proc_field, tree_cpu_seconds,
};
use envtest::{ChartRepo, ControlPlane};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The operator's user on A (group `system:masters`): the audit log of A
/// counts its requests — the operator's and its helm runs'.
const USER: &str = "bench-remote";
/// Where each remote cluster's deployer ServiceAccount lives.
const DEPLOYER_NS: &str = "hossted-remote";
/// Whom a remote cluster's kubeconfig authenticates as (cluster-admin
/// there): the operator's informers and its helm runs in that cluster; its
/// audit log counts this user's requests.
const DEPLOYER: &str = "system:serviceaccount:hossted-remote:deployer";
/// The shard label (docs/shards.md).
const KEY: &str = "sharding.hossted.com/key";
/// The Secret, in each HelmApp namespace of A, holding B's kubeconfig.
const CLUSTER_B: &str = "cluster-b";
const NAMESPACES: usize = 50;
/// Helm runs at once, per process.
const HELM_AT_ONCE: usize = 4;
/// Idle time after all are Ready before a steady RSS is read.
const SETTLE: Duration = Duration::from_secs(30);

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn rss_mib(pid: u32) -> f64 {
    mib(proc_field(pid, "VmRSS:").unwrap_or(0))
}

/// A control plane whose apiserver logs `user`'s requests (one record per
/// completed request; a watch when it ends) to the returned path, with room
/// for 65,000 Services and 800 requests in flight. bench_delivery_scale's
/// `control_plane` without its kube-controller-manager (`wait: false` needs
/// none): `common::audited_control_plane` takes no other apiserver flag,
/// and envtest's default Service range holds 253 Services. The audit log is
/// never rotated (the apiserver's default rotates it at 100 MB, which the
/// 10,000-app run passes).
async fn control_plane(dir: &Path, user: &str) -> (ControlPlane, PathBuf) {
    std::fs::create_dir_all(dir).expect("dir");
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        format!("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted, Panic]\nrules:\n- level: Metadata\n  users: [\"{user}\"]\n- level: None\n"),
    )
    .expect("policy");
    let audit = dir.join("audit.log");
    let cp = ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit.display()))
        .apiserver_arg("--audit-log-maxsize=1000000")
        .apiserver_arg("--service-cluster-ip-range=10.0.0.0/16")
        .apiserver_arg("--max-requests-inflight=800")
        .start()
        .await
        .expect("control plane");
    (cp, audit)
}

/// The operator's cluster A: the delivery CRDs, the operator's kubeconfig
/// ([`USER`], audited), the chart repository, and the helm wrapper every
/// operator process of the run shares (it logs each start to `helm_log`).
struct Home {
    cp: ControlPlane,
    audit: PathBuf,
    kubeconfig: PathBuf,
    repo: ChartRepo,
    dir: PathBuf,
    helm: PathBuf,
    helm_log: PathBuf,
}

impl Home {
    async fn start(dir: &Path) -> Home {
        std::fs::create_dir_all(dir).expect("dir");
        let (cp, audit) = control_plane(&dir.join("a"), USER).await;
        apply_crds(&cp, &DELIVERY_CRDS);
        let kubeconfig = cp
            .kubeconfig_for_user(USER, Some("system:masters"))
            .expect("kubeconfig");
        let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
        let repo = ChartRepo::start(&cp, &[&charts.join("podinfo")], None)
            .await
            .expect("repo");
        let (helm, helm_log) = logging_helm(&cp.helm_binary(), dir);
        Home {
            cp,
            audit,
            kubeconfig,
            repo,
            dir: dir.to_path_buf(),
            helm,
            helm_log,
        }
    }

    fn client(&self) -> Client {
        self.cp.client()
    }
}

/// A remote cluster: its own control plane auditing [`DEPLOYER`], and the
/// text of a kubeconfig for it (its https URL, its CA inline, a bound token
/// of the deployer) — as tests/it/delivery/remote.rs makes cluster B.
struct Remote {
    cp: ControlPlane,
    audit: PathBuf,
    kubeconfig: String,
}

async fn start_remote(dir: &Path) -> Remote {
    let (cp, audit) = control_plane(dir, DEPLOYER).await;
    let path = cp
        .kubeconfig_for_service_account(DEPLOYER_NS, "deployer")
        .await
        .expect("a token kubeconfig for the deployer");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "remote-deployer" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
        "subjects": [{ "kind": "ServiceAccount", "name": "deployer", "namespace": DEPLOYER_NS }]
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(cp.client())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding the deployer to cluster-admin");
    authorizer_allows(&cp, DEPLOYER, "list", "secrets").await;
    let kubeconfig = std::fs::read_to_string(path).expect("the deployer's kubeconfig");
    Remote {
        cp,
        audit,
        kubeconfig,
    }
}

/// Waits until `cp`'s authorizer lets `user` `verb` `resource` in every
/// namespace (RBAC changes reach it through its cache).
async fn authorizer_allows(cp: &ControlPlane, user: &str, verb: &str, resource: &str) {
    let reviews: Api<SubjectAccessReview> = Api::all(cp.client());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.into()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    resource: Some(resource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let allowed = reviews
            .create(&PostParams::default(), &review)
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| s.allowed);
        if allowed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the authorizer never let {user} {verb} {resource}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn ns_of(i: usize) -> String {
    format!("apps-{:02}", i % NAMESPACES)
}

fn app_name(i: usize) -> String {
    format!("app-{i:05}")
}

/// Creates namespaces `names` (already there is fine).
async fn namespaces(client: &Client, names: Vec<String>) {
    let objs: Vec<Namespace> = names
        .into_iter()
        .map(|name| Namespace {
            metadata: ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            ..Default::default()
        })
        .collect();
    create_all(
        |_| Api::<Namespace>::all(client.clone()),
        objs,
        "namespaces",
    )
    .await;
}

fn app_namespaces() -> Vec<String> {
    (0..NAMESPACES).map(ns_of).collect()
}

/// Secret `name` in each of `namespaces` of A, holding `kubeconfig` under
/// key `value`.
async fn kubeconfig_secrets(
    client: &Client,
    namespaces: Vec<String>,
    name: &str,
    kubeconfig: &str,
) {
    let objs: Vec<Secret> = namespaces
        .into_iter()
        .map(|ns| Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns),
                ..Default::default()
            },
            string_data: Some([("value".to_string(), kubeconfig.to_string())].into()),
            ..Default::default()
        })
        .collect();
    create_all(
        |ns| Api::<Secret>::namespaced(client.clone(), ns),
        objs,
        "kubeconfig Secrets",
    )
    .await;
}

/// A HelmApp of podinfo from `repo`, `wait: false`; released into the
/// cluster of Secret `cluster` when given, in shard `shard` when given.
fn helmapp(
    ns: &str,
    name: &str,
    repo: &str,
    cluster: Option<&str>,
    shard: Option<&str>,
) -> HelmApp {
    let mut v = json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "chart": { "repo": repo, "name": "podinfo", "version": "6.7.0" }, "wait": false }
    });
    if let Some(shard) = shard {
        v["metadata"]["labels"][KEY] = json!(shard);
    }
    if let Some(cluster) = cluster {
        v["spec"]["kubeConfig"] = json!({ "secretRef": { "name": cluster, "key": "value" } });
    }
    serde_json::from_value(v).expect("HelmApp")
}

fn is_ready(a: &HelmApp) -> bool {
    a.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

fn key_of(a: &HelmApp) -> String {
    format!(
        "{}/{}",
        a.metadata.namespace.as_deref().unwrap_or_default(),
        a.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Follows the HelmApps of `api` through a watch (no polling load on the
/// apiserver) until `n` are Ready; the instant they were. As
/// bench_delivery_scale's `until_ready`, but keeping the set of Ready keys
/// as events come instead of counting every HelmApp at each event (10,000
/// apps).
async fn until_ready(api: &Api<HelmApp>, n: usize) -> Instant {
    let limit = Duration::from_secs(3600u64.max(n as u64));
    let deadline = Instant::now() + limit;
    loop {
        assert!(
            Instant::now() < deadline,
            "not all {n} HelmApps Ready within {limit:?}"
        );
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(e) => {
                eprintln!("bench-remote: listing HelmApps: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut ready: HashSet<String> = list
            .items
            .iter()
            .filter(|a| is_ready(a))
            .map(key_of)
            .collect();
        if ready.len() >= n {
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
                    if is_ready(&a) {
                        ready.insert(key_of(&a));
                    } else {
                        ready.remove(&key_of(&a));
                    }
                }
                WatchEvent::Deleted(a) => {
                    ready.remove(&key_of(&a));
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(_) => break,
            }
            if ready.len() >= n {
                return Instant::now();
            }
        }
    }
}

/// Bytes of an audit log so far: where the records of a window that starts
/// after this call are (read the mark, then the window's start time).
fn audit_mark(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The requests of the audit log from byte `from` on whose stage time is
/// within `[start, end]`, counted by `key` of each record.
fn audit_window(
    path: &Path,
    from: u64,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    key: impl Fn(&Value) -> String,
) -> BTreeMap<String, u64> {
    use std::io::{BufRead, Seek};
    let mut by = BTreeMap::new();
    let Ok(mut file) = std::fs::File::open(path) else {
        return by;
    };
    if file.seek(std::io::SeekFrom::Start(from)).is_err() {
        return by;
    }
    for line in std::io::BufReader::new(file).lines().map_while(Result::ok) {
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let at = v["stageTimestamp"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
        if at.is_some_and(|t| t >= start && t <= end) {
            *by.entry(key(&v)).or_default() += 1;
        }
    }
    by
}

fn verb(v: &Value) -> String {
    v["verb"].as_str().unwrap_or("?").to_string()
}

/// `verb resource[/subresource] by agent` of an audit record: which program
/// (helm, the operator) asked for what (bench_delivery_scale's
/// `verb_resource_agent`).
fn what(v: &Value) -> String {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("");
    let agent = s("/userAgent").split(['/', ' ']).next().unwrap_or("?");
    let sub = match s("/objectRef/subresource") {
        "" => String::new(),
        sub => format!("/{sub}"),
    };
    let resource = match s("/objectRef/resource") {
        "" => s("/requestURI").split('?').next().unwrap_or("").to_string(),
        r => r.to_string(),
    };
    format!("{} {resource}{sub} by {agent}", s("/verb"))
}

fn total(by: &BTreeMap<String, u64>) -> u64 {
    by.values().sum()
}

fn writes(by: &BTreeMap<String, u64>) -> u64 {
    ["create", "update", "patch", "delete", "deletecollection"]
        .iter()
        .map(|v| by.get(*v).copied().unwrap_or(0))
        .sum()
}

/// How many processes each of `pids` is the parent of (helm runs: the
/// logging wrapper execs helm).
fn child_counts(pids: &[u32]) -> Vec<u64> {
    let mut counts = vec![0u64; pids.len()];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return counts;
    };
    for e in dir.flatten() {
        if !e
            .file_name()
            .to_str()
            .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if let Some(i) = ppid.and_then(|pp| pids.iter().position(|p| *p == pp)) {
            counts[i] += 1;
        }
    }
    counts
}

/// Samples operator processes every 100 ms until dropped: the peak VmRSS of
/// each, the peak count of each one's children, and the peak count of all
/// their children at once. (bench_delivery_scale's `Sampler` follows one
/// process's tree memory; here several processes and their helm counts.)
struct Sampler {
    stop: Arc<AtomicBool>,
    rss: Arc<Vec<AtomicU64>>,
    children: Arc<Vec<AtomicU64>>,
    children_all: Arc<AtomicU64>,
}

impl Sampler {
    fn start(pids: Vec<u32>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let rss: Arc<Vec<AtomicU64>> = Arc::new(pids.iter().map(|_| AtomicU64::new(0)).collect());
        let children: Arc<Vec<AtomicU64>> =
            Arc::new(pids.iter().map(|_| AtomicU64::new(0)).collect());
        let children_all = Arc::new(AtomicU64::new(0));
        let (s, r, c, a) = (
            Arc::clone(&stop),
            Arc::clone(&rss),
            Arc::clone(&children),
            Arc::clone(&children_all),
        );
        std::thread::spawn(move || {
            while !s.load(Relaxed) {
                let counts = child_counts(&pids);
                for (i, pid) in pids.iter().enumerate() {
                    r[i].fetch_max(proc_field(*pid, "VmRSS:").unwrap_or(0), Relaxed);
                    c[i].fetch_max(counts[i], Relaxed);
                }
                a.fetch_max(counts.iter().sum(), Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler {
            stop,
            rss,
            children,
            children_all,
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

/// An operator process on `home`, delivery alone, taking shard `shard`
/// (none: the unlabelled HelmApps), with a work directory and a log of its
/// own — bench_delivery_scale's `start_operator`, plus `--shard`.
fn start_operator(bin: &str, home: &Home, name: &str, shard: Option<&str>) -> Operator {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.dir.join(format!("operator-{name}.log")))
        .expect("log");
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", &home.kubeconfig)
        .env("RUST_LOG", "warn")
        .env("POD_NAME", name)
        .args([
            "run",
            "--controllers",
            "delivery",
            "--privileged-namespaces=*",
        ])
        .arg(format!("--max-concurrent-helm={HELM_AT_ONCE}"))
        .arg("--helm-binary")
        .arg(&home.helm)
        .arg("--work-dir")
        .arg(home.dir.join(format!("work-{name}")))
        .stdout(Stdio::null())
        .stderr(log);
    if let Some(shard) = shard {
        cmd.args(["--shard", shard]);
    }
    Operator::spawn(cmd)
}

/// Waits for `op`'s `/readyz` (its caches synced), failing after `limit`.
async fn ready(op: &Operator, name: &str, limit: Duration) {
    if tokio::time::timeout(limit, op.ready()).await.is_err() {
        panic!("operator {name} not ready within {limit:?} (its log: operator-{name}.log)");
    }
}

/// The sum of the series of metric `name` whose labels include `label`
/// (`controller="helmapp"`, or "" for any), 0 when none. (`Operator::metric`
/// matches a line's start, and a shard's constant label may come first.)
async fn metric_sum(op: &Operator, name: &str, label: &str) -> f64 {
    let Some((_, text)) = op.get("/metrics").await else {
        return 0.0;
    };
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// HelmApp reconciles of `op` so far, whatever their result.
async fn reconciles(op: &Operator) -> f64 {
    metric_sum(op, "hossted_reconcile_total", "controller=\"helmapp\"").await
}

/// One operator process of a run and the HelmApps it owns.
struct Proc {
    name: String,
    shard: Option<String>,
    apps: usize,
    op: Operator,
}

/// Starts `layout` (name, shard, apps owned) on `home`, each ready.
async fn start_all(
    bin: &str,
    home: &Home,
    layout: &[(String, Option<String>, usize)],
) -> Vec<Proc> {
    let procs: Vec<Proc> = layout
        .iter()
        .map(|(name, shard, apps)| Proc {
            name: name.clone(),
            shard: shard.clone(),
            apps: *apps,
            op: start_operator(bin, home, name, shard.as_deref()),
        })
        .collect();
    let limit = Duration::from_secs(600);
    for p in &procs {
        ready(&p.op, &p.name, limit).await;
    }
    procs
}

fn stop_all(procs: Vec<Proc>) {
    for p in procs {
        p.op.stop();
    }
}

/// Creates `apps` in A (24 at a time, common's `create_all`) while following
/// them until all are Ready. Measures, between the first create and the last
/// Ready: the seconds, the requests to A (and to `remote`'s apiserver), the
/// helm runs, and per process its peak RSS, peak helm children and CPU;
/// with `settle`, each process's RSS after [`SETTLE`] idle too.
async fn install(
    home: &Home,
    procs: &[Proc],
    apps: Vec<HelmApp>,
    remote: Option<&Remote>,
    settle: bool,
) -> Value {
    let n = apps.len();
    let client = home.client();
    let pids: Vec<u32> = procs.iter().map(|p| p.op.pid()).collect();
    let sampler = Sampler::start(pids.clone());
    let cpu0: Vec<(f64, f64)> = pids
        .iter()
        .map(|p| (cpu_seconds(*p), tree_cpu_seconds(*p)))
        .collect();
    let helm0 = log_lines(&home.helm_log).len();
    let mark_a = audit_mark(&home.audit);
    let mark_b = remote.map(|r| audit_mark(&r.audit));
    let t0 = Utc::now();
    let started = Instant::now();
    let all: Api<HelmApp> = Api::all(client.clone());
    let ((), done) = tokio::join!(
        create_all(
            |ns| Api::<HelmApp>::namespaced(client.clone(), ns),
            apps,
            "HelmApps"
        ),
        until_ready(&all, n)
    );
    let t1 = Utc::now();
    let secs = done.duration_since(started).as_secs_f64();
    let helm_runs = log_lines(&home.helm_log).len() - helm0;
    let mut processes: Vec<Value> = procs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (own0, tree0) = cpu0[i];
            json!({ "name": p.name, "shard": p.shard, "apps": p.apps,
                    "rss_peak_mib": mib(sampler.rss[i].load(Relaxed)),
                    "helm_children_peak": sampler.children[i].load(Relaxed),
                    "cpu_secs": cpu_seconds(pids[i]) - own0,
                    "tree_cpu_secs": tree_cpu_seconds(pids[i]) - tree0 })
        })
        .collect();
    let children_all = sampler.children_all.load(Relaxed);
    drop(sampler);
    eprintln!("bench-remote:   {n} apps Ready in {secs:.1}s");
    // The audit log is written as each request completes: a moment for
    // the last ones before reading the window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests_a = audit_window(&home.audit, mark_a, (t0, t1), verb);
    let what_a = audit_window(&home.audit, mark_a, (t0, t1), what);
    let (requests_b, what_b) = match (remote, mark_b) {
        (Some(r), Some(m)) => (
            audit_window(&r.audit, m, (t0, t1), verb),
            audit_window(&r.audit, m, (t0, t1), what),
        ),
        _ => Default::default(),
    };
    if settle {
        tokio::time::sleep(SETTLE).await;
        for (i, p) in processes.iter_mut().enumerate() {
            p["rss_steady_mib"] = json!(rss_mib(pids[i]));
        }
    }
    let tree_cpu: f64 = processes
        .iter()
        .filter_map(|p| p["tree_cpu_secs"].as_f64())
        .sum();
    let (a, b) = (total(&requests_a), total(&requests_b));
    json!({
        "apps": n, "secs": secs, "helm_runs": helm_runs,
        "requests_a_total": a, "requests_b_total": b,
        "requests_per_release": (a + b) as f64 / n as f64,
        "requests_a": requests_a, "requests_b": requests_b,
        "requests_a_by_what": what_a, "requests_b_by_what": what_b,
        "helm_children_peak_all": children_all, "tree_cpu_secs_total": tree_cpu,
        "processes": processes,
    })
}

// ---------------------------------------------------------------- part 1

/// `n` HelmApps into A (`into_b` false) or into B, on fresh A and B.
async fn remote_run(bin: &str, root: &Path, n: usize, into_b: bool) -> Value {
    let run = if into_b { "remote" } else { "local" };
    eprintln!("bench-remote: {n} apps, {run}");
    let dir = root.join(format!("remote-{run}"));
    let home = Home::start(&dir).await;
    let b = start_remote(&dir.join("b")).await;
    let client = home.client();
    namespaces(&client, app_namespaces()).await;
    if into_b {
        namespaces(&b.cp.client(), app_namespaces()).await;
        kubeconfig_secrets(&client, app_namespaces(), CLUSTER_B, &b.kubeconfig).await;
    }
    let procs = start_all(bin, &home, &[("main".into(), None, n)]).await;
    let cluster = into_b.then_some(CLUSTER_B);
    let apps = (0..n)
        .map(|i| helmapp(&ns_of(i), &app_name(i), home.repo.url(), cluster, None))
        .collect();
    let mut r = install(&home, &procs, apps, Some(&b), false).await;
    r["part"] = json!("remote");
    r["run"] = json!(run);
    stop_all(procs);
    drop((home, b));
    let _ = std::fs::remove_dir_all(dir);
    println!("{r}");
    r
}

async fn remote_part(bin: &str, root: &Path, n: usize) -> Value {
    let local = remote_run(bin, root, n, false).await;
    let remote = remote_run(bin, root, n, true).await;
    let ratio =
        remote["secs"].as_f64().unwrap_or(f64::NAN) / local["secs"].as_f64().unwrap_or(f64::NAN);
    json!({ "part": "remote", "apps": n, "local": local, "remote": remote, "time_ratio": ratio })
}

// ---------------------------------------------------------------- part 2

/// The numbers of remote clusters measured: 0, 1, 3, 5 up to `remotes`,
/// and `remotes` itself.
fn steps(remotes: usize) -> Vec<usize> {
    let mut s: Vec<usize> = [0, 1, 3, 5].into_iter().filter(|k| *k <= remotes).collect();
    if s.last() != Some(&remotes) {
        s.push(remotes);
    }
    s
}

async fn memory_part(bin: &str, root: &Path, remotes: usize, window: Duration) -> Value {
    eprintln!("bench-remote: memory with up to {remotes} remote clusters");
    let dir = root.join("memory");
    let home = Home::start(&dir).await;
    let mut clusters = Vec::new();
    for k in 1..=remotes {
        eprintln!("bench-remote:   starting remote cluster {k}");
        clusters.push(start_remote(&dir.join(format!("b{k}"))).await);
    }
    let client = home.client();
    let ns = "memory".to_string();
    namespaces(&client, vec![ns.clone()]).await;
    for (k, b) in clusters.iter().enumerate() {
        namespaces(&b.cp.client(), vec![ns.clone()]).await;
        kubeconfig_secrets(
            &client,
            vec![ns.clone()],
            &format!("cluster-{}", k + 1),
            &b.kubeconfig,
        )
        .await;
    }
    let procs = start_all(bin, &home, &[("main".into(), None, 1 + remotes)]).await;
    let op = &procs[0].op;
    let api: Api<HelmApp> = Api::namespaced(client.clone(), &ns);
    let url = home.repo.url().to_string();
    api.create(
        &PostParams::default(),
        &helmapp(&ns, "local", &url, None, None),
    )
    .await
    .expect("create");
    let (mut rows, mut made) = (Vec::new(), 0);
    for k in steps(remotes) {
        for j in made + 1..=k {
            let secret = format!("cluster-{j}");
            let app = helmapp(&ns, &format!("app-{j}"), &url, Some(secret.as_str()), None);
            api.create(&PostParams::default(), &app)
                .await
                .expect("create");
        }
        made = k;
        until_ready(&api, 1 + k).await;
        tokio::time::sleep(SETTLE).await;
        let rss = rss_mib(op.pid());
        let running = metric_sum(op, "hossted_remote_clusters", "").await;
        let marks: Vec<u64> = clusters[..k].iter().map(|b| audit_mark(&b.audit)).collect();
        let mark_a = audit_mark(&home.audit);
        let t0 = Utc::now();
        tokio::time::sleep(window).await;
        let t1 = Utc::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let per_min = |by: &BTreeMap<String, u64>| total(by) as f64 * 60.0 / window.as_secs_f64();
        let remote_idle: Vec<BTreeMap<String, u64>> = clusters[..k]
            .iter()
            .zip(&marks)
            .map(|(b, m)| audit_window(&b.audit, *m, (t0, t1), what))
            .collect();
        let a_idle = audit_window(&home.audit, mark_a, (t0, t1), what);
        let row = json!({
            "part": "memory", "remote_clusters": k, "helmapps": 1 + k, "clusters_running_metric": running,
            "rss_settled_mib": rss, "rss_after_window_mib": rss_mib(op.pid()),
            "idle_window_secs": window.as_secs(),
            "idle_requests_per_min_each_remote": remote_idle.iter().map(per_min).collect::<Vec<_>>(),
            "idle_requests_per_min_a": per_min(&a_idle),
            "idle_requests_each_remote": remote_idle, "idle_requests_a": a_idle,
        });
        eprintln!("bench-remote:   {k} remote clusters: {rss:.1} MiB");
        println!("{row}");
        rows.push(row);
    }
    stop_all(procs);
    drop((home, clusters));
    let _ = std::fs::remove_dir_all(dir);
    // (remote clusters, settled RSS) of each step: the deltas per cluster.
    let points: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (f(r, "/remote_clusters"), f(r, "/rss_settled_mib")))
        .collect();
    for (row, pair) in rows.iter_mut().skip(1).zip(points.windows(2)) {
        let ((k0, rss0), (k1, rss1)) = (pair[0], pair[1]);
        row["delta_per_cluster_step_mib"] = json!((rss1 - rss0) / (k1 - k0));
        row["delta_per_cluster_from_none_mib"] = json!((rss1 - points[0].1) / k1);
    }
    json!({ "part": "memory", "remotes": remotes, "steps": rows })
}

// ---------------------------------------------------------------- part 3

/// The processes of a run and the apps each owns: one unsharded, or shards
/// `a` and `b` (no unsharded process) with the apps alternating.
fn layout(n: usize, two: bool) -> Vec<(String, Option<String>, usize)> {
    if two {
        vec![
            ("shard-a".into(), Some("a".into()), n - n / 2),
            ("shard-b".into(), Some("b".into()), n / 2),
        ]
    } else {
        vec![("main".into(), None, n)]
    }
}

fn sharded_apps(n: usize, two: bool, repo: &str) -> Vec<HelmApp> {
    (0..n)
        .map(|i| {
            let shard = two.then_some(if i % 2 == 0 { "a" } else { "b" });
            helmapp(&ns_of(i), &app_name(i), repo, None, shard)
        })
        .collect()
}

async fn shards_run(bin: &str, root: &Path, n: usize, two: bool) -> Value {
    let run = if two { "2 shards" } else { "1 process" };
    eprintln!("bench-remote: {n} apps, {run}");
    let dir = root.join(format!("shards-{}", if two { 2 } else { 1 }));
    let home = Home::start(&dir).await;
    namespaces(&home.client(), app_namespaces()).await;
    let procs = start_all(bin, &home, &layout(n, two)).await;
    // The process's RSS idle on the cluster before any HelmApp.
    tokio::time::sleep(SETTLE).await;
    let empty_idle: Vec<f64> = procs.iter().map(|p| rss_mib(p.op.pid())).collect();
    let apps = sharded_apps(n, two, home.repo.url());
    let mut r = install(&home, &procs, apps, None, true).await;
    r["part"] = json!("shards");
    r["run"] = json!(run);
    r["rss_idle_before_apps_mib"] = json!(empty_idle);
    if two {
        // What a shard costs at idle: one more that owns no HelmApp.
        let idle = start_all(bin, &home, &[("shard-c".into(), Some("c".into()), 0)]).await;
        tokio::time::sleep(SETTLE).await;
        r["idle_shard_rss_mib"] = json!(rss_mib(idle[0].op.pid()));
        r["idle_shard_reconciles"] = json!(reconciles(&idle[0].op).await);
        stop_all(idle);
    }
    stop_all(procs);
    drop(home);
    let _ = std::fs::remove_dir_all(dir);
    println!("{r}");
    r
}

async fn shards_part(bin: &str, root: &Path, n: usize) -> Value {
    let one = shards_run(bin, root, n, false).await;
    let two = shards_run(bin, root, n, true).await;
    let ratio = two["secs"].as_f64().unwrap_or(f64::NAN) / one["secs"].as_f64().unwrap_or(f64::NAN);
    json!({ "part": "shards", "apps": n, "one": one, "two": two, "time_ratio": ratio })
}

// ---------------------------------------------------------------- part 4

/// A restart with every app settled: the processes stopped (SIGTERM) and
/// started again; seconds until every process's caches synced, and until
/// each had reconciled as many HelmApps as it owns; in the window from the
/// start to 10 s after that: requests by verb, writes, helm runs.
async fn restart(bin: &str, home: &Home, procs: Vec<Proc>) -> (Value, Vec<Proc>) {
    let layout: Vec<(String, Option<String>, usize)> = procs
        .iter()
        .map(|p| (p.name.clone(), p.shard.clone(), p.apps))
        .collect();
    stop_all(procs);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let helm0 = log_lines(&home.helm_log).len();
    let mark = audit_mark(&home.audit);
    let t0 = Utc::now();
    let started = Instant::now();
    let procs = start_all(bin, home, &layout).await;
    let synced = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let mut behind = false;
        for p in &procs {
            behind |= reconciles(&p.op).await < p.apps as f64;
        }
        if !behind {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every app reconciled after the restart"
        );
        // Each look scrapes /metrics, whose per-app series cost the
        // operator CPU in proportion to its HelmApps (30,000 series at
        // 10,000): looked at 10 times a second while the answer may be
        // near, then once a second — the figure is the operator's work,
        // not its scrapes.
        let since = started.elapsed();
        tokio::time::sleep(if since < Duration::from_secs(10) {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(1)
        })
        .await;
    }
    let reconciled = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t1 = Utc::now();
    let helm_runs = log_lines(&home.helm_log).len() - helm0;
    let rss: Vec<f64> = procs.iter().map(|p| rss_mib(p.op.pid())).collect();
    let cpu: Vec<f64> = procs.iter().map(|p| cpu_seconds(p.op.pid())).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let by = audit_window(&home.audit, mark, (t0, t1), verb);
    let by_what = audit_window(&home.audit, mark, (t0, t1), what);
    let r = json!({ "start_to_synced_secs": synced, "synced_to_all_reconciled_secs": reconciled - synced,
        "start_to_all_reconciled_secs": reconciled, "window_secs": (t1 - t0).num_milliseconds() as f64 / 1000.0,
        "requests": total(&by), "writes": writes(&by), "helm_runs": helm_runs, "requests_by_verb": by,
        "requests_by_what": by_what, "rss_mib": rss, "cpu_secs": cpu });
    (r, procs)
}

async fn ten_run(bin: &str, root: &Path, n: usize, two: bool) -> Value {
    let run = if two { "2 shards" } else { "1 process" };
    eprintln!("bench-remote: {n} apps, {run}");
    let dir = root.join(format!("ten-{}", if two { 2 } else { 1 }));
    let home = Home::start(&dir).await;
    namespaces(&home.client(), app_namespaces()).await;
    let procs = start_all(bin, &home, &layout(n, two)).await;
    let apps = sharded_apps(n, two, home.repo.url());
    let mut r = install(&home, &procs, apps, None, true).await;
    r["part"] = json!("ten");
    r["run"] = json!(run);
    eprintln!("bench-remote:   restarting");
    let (restarted, procs) = restart(bin, &home, procs).await;
    r["restart"] = restarted;
    stop_all(procs);
    drop(home);
    let _ = std::fs::remove_dir_all(dir);
    println!("{r}");
    r
}

async fn ten_part(bin: &str, root: &Path, n: usize, shards_too: bool) -> Value {
    let mut runs = vec![ten_run(bin, root, n, false).await];
    if shards_too {
        runs.push(ten_run(bin, root, n, true).await);
    }
    json!({ "part": "ten", "apps": n, "runs": runs })
}

// ---------------------------------------------------------------- main

fn number(flag: &str, v: &str) -> usize {
    match v.parse() {
        Ok(n) => n,
        Err(_) => panic!("{flag} wants a number, not {v:?}"),
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let (mut apps_remote, mut apps_shards, mut apps_ten, mut remotes) = (200, 1000, 10_000, 5);
    let mut idle_window = 60;
    let mut markdown = None::<PathBuf>;
    let mut only: Vec<String> = Vec::new();
    let mut ten = std::env::var("TEN_K").is_ok_and(|v| v == "1");
    let ten_shards = std::env::var("TEN_K_SHARDS").is_ok_and(|v| v == "1");
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut args = argv.iter();
    while let Some(a) = args.next() {
        if a == "--ten-thousand" {
            ten = true;
            continue;
        }
        let v = args.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--apps-remote" => apps_remote = number(a, &v),
            "--apps-shards" => apps_shards = number(a, &v),
            "--apps-ten" => apps_ten = number(a, &v),
            "--remotes" => remotes = number(a, &v),
            "--idle-window-secs" => idle_window = number(a, &v),
            "--markdown" => markdown = Some(v.into()),
            "--only" => only.extend(
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty()),
            ),
            other => eprintln!("bench-remote: ignoring {other}"),
        }
    }
    for part in &only {
        assert!(
            ["remote", "memory", "shards", "ten"].contains(&part.as_str()),
            "--only takes remote, memory, shards, ten; not {part:?}"
        );
    }
    let runs = |part: &str| {
        if only.is_empty() {
            part != "ten" || ten
        } else {
            only.iter().any(|p| p == part)
        }
    };
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let root = std::env::temp_dir().join(format!("bench-remote-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("dir");
    let mut parts = Vec::new();
    if runs("remote") {
        parts.push(remote_part(&bin, &root, apps_remote).await);
    }
    if runs("memory") {
        let window = Duration::from_secs(idle_window as u64);
        parts.push(memory_part(&bin, &root, remotes, window).await);
    }
    if runs("shards") {
        parts.push(shards_part(&bin, &root, apps_shards).await);
    }
    if runs("ten") {
        parts.push(ten_part(&bin, &root, apps_ten, ten_shards).await);
    }
    let _ = std::fs::remove_dir_all(root);
    if let Some(path) = markdown {
        let shown: Vec<&String> = argv
            .iter()
            .scan(false, |skip, a| {
                let show = !*skip && a != "--markdown";
                *skip = a == "--markdown";
                Some((show, a))
            })
            .filter_map(|(show, a)| show.then_some(a))
            .collect();
        let args = shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        std::fs::write(path, report(&parts, &args)).expect("markdown");
    }
}

// ---------------------------------------------------------------- report

fn f(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

/// The environment knobs of `hack/bench-remote.sh` this run was given.
fn knobs() -> String {
    [
        "APPS_REMOTE",
        "APPS_SHARDS",
        "APPS_TEN",
        "REMOTES",
        "IDLE_WINDOW_SECS",
        "ONLY",
        "TEN_K",
        "TEN_K_SHARDS",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v} ")))
    .collect()
}

fn report(parts: &[Value], args: &str) -> String {
    let mut out = format!(
        "## Remote clusters and shards\n\n`{}hack/bench-remote.sh` (`examples/bench_remote.rs {args}`): \
         the operator binary (`--controllers delivery`, `--max-concurrent-helm {HELM_AT_ONCE}`, no leader election) on envtest \
         control planes (etcd + kube-apiserver, no kube-controller-manager), `examples/charts/podinfo` (6 objects) served on \
         loopback, HelmApps with `wait: false` (Ready once helm has installed) across {NAMESPACES} namespaces, created 24 at a time. \
         Requests are counted from each apiserver's audit log, one record per completed request (a watch counts when it ends): \
         on the operator's cluster A those of the operator's user (the operator and its helm runs); on a remote cluster those of \
         its kubeconfig's ServiceAccount `{DEPLOYER}` (the operator's informers there and its helm runs). RSS is the operator \
         process's VmRSS (its helm children apart), sampled every 100 ms for a peak; steady: after {} s idle. CPU: utime + stime, \
         \"+ helm\" with the helm runs it waited for. 2 cores shared by everything, every control plane included.\n\n",
        knobs(),
        SETTLE.as_secs()
    );
    for part in parts {
        match part["part"].as_str() {
            Some("remote") => out.push_str(&remote_report(part)),
            Some("memory") => out.push_str(&memory_report(part)),
            Some("shards") => out.push_str(&shards_report(part)),
            Some("ten") => out.push_str(&ten_report(part)),
            _ => {}
        }
    }
    out.push_str(&format!(
        "Raw results (one JSON line per part):\n\n```\n{}\n```\n",
        parts
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    ));
    out
}

fn remote_report(p: &Value) -> String {
    let n = &p["apps"];
    let mut out = format!(
        "### Releasing into a remote cluster: {n} apps\n\n\
         Two runs, each on fresh control planes A (the operator's) and B. *local*: {n} HelmApps released into A. \
         *remote*: {n} HelmApps in A whose `spec.kubeConfig` names a Secret of their namespace holding a kubeconfig of B \
         (https server, CA and the deployer's token inline; the deployer is cluster-admin in B): releases, storage and objects \
         in B, status and Events in A. B runs, idle, in the local run too. Requests: those completed between the first create \
         and the last Ready.\n\n\
         | run | apps | to all Ready (s) | time / local | requests to A | requests to B | requests per release (A + B) | operator RSS peak (MiB) | operator CPU (s) | operator + helm CPU (s) | helm runs |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    let local_secs = f(p, "/local/secs");
    for run in ["local", "remote"] {
        let r = &p[run];
        out.push_str(&format!(
            "| {run} | {} | {:.1} | {:.2} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
            r["apps"],
            f(r, "/secs"),
            f(r, "/secs") / local_secs,
            r["requests_a_total"],
            r["requests_b_total"],
            f(r, "/requests_per_release"),
            f(r, "/processes/0/rss_peak_mib"),
            f(r, "/processes/0/cpu_secs"),
            f(r, "/processes/0/tree_cpu_secs"),
            r["helm_runs"],
        ));
    }
    let (l, r) = (&p["local"], &p["remote"]);
    let per = |v: &Value, k: &str| f(v, k) / f(v, "/apps");
    out.push_str(&format!(
        "\nInto B, the {n} apps were Ready in {:.1} s against {:.1} s into A: {:.2}× the local time, measured in the same run. \
         Per release the operator and its helm runs made {:.1} requests ({:.1} to A, {:.1} to B) against {:.1} (all to A) locally; \
         the operator's peak RSS was {:.1} MiB against {:.1} MiB. Requests by verb and by resource and program are in the raw results.\n\n",
        f(r, "/secs"),
        f(l, "/secs"),
        f(p, "/time_ratio"),
        f(r, "/requests_per_release"),
        per(r, "/requests_a_total"),
        per(r, "/requests_b_total"),
        f(l, "/requests_per_release"),
        f(r, "/processes/0/rss_peak_mib"),
        f(l, "/processes/0/rss_peak_mib"),
    ));
    out
}

fn memory_report(p: &Value) -> String {
    let rows = p["steps"].as_array().cloned().unwrap_or_default();
    let window = rows
        .first()
        .map(|r| r["idle_window_secs"].to_string())
        .unwrap_or_default();
    let mut out = format!(
        "### Memory per remote cluster\n\n\
         One operator on A; {} more control planes started once, each with a kubeconfig Secret in A. One local HelmApp \
         throughout (so that the chart's first fetch and the operator's own caches are in every figure); then clusters added, \
         one HelmApp released into each new one, all Ready, {} s idle, RSS read; then the requests each remote cluster got \
         from the operator over {window} s more of idle, per minute.\n\n\
         | remote clusters | HelmApps | clusters running (`hossted_remote_clusters`) | operator RSS settled (MiB) | Δ per cluster since the previous step (MiB) | Δ per cluster from none (MiB) | idle requests/min to each remote (min – max) | idle requests/min to A |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n",
        p["remotes"],
        SETTLE.as_secs()
    );
    let mut rates = Vec::new();
    for r in &rows {
        let each: Vec<f64> = r["idle_requests_per_min_each_remote"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        rates.extend(each.iter().copied());
        let range = match (
            each.iter().copied().reduce(f64::min),
            each.iter().copied().reduce(f64::max),
        ) {
            (Some(lo), Some(hi)) => format!("{lo:.1} – {hi:.1}"),
            _ => "—".into(),
        };
        let delta = |k: &str| {
            r.get(k)
                .and_then(Value::as_f64)
                .map(|d| format!("{d:.1}"))
                .unwrap_or("—".into())
        };
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} | {range} | {:.1} |\n",
            r["remote_clusters"],
            r["helmapps"],
            r["clusters_running_metric"],
            f(r, "/rss_settled_mib"),
            delta("delta_per_cluster_step_mib"),
            delta("delta_per_cluster_from_none_mib"),
            f(r, "/idle_requests_per_min_a"),
        ));
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && rows.len() > 1
    {
        let lo = rates.iter().copied().reduce(f64::min).unwrap_or(f64::NAN);
        let hi = rates.iter().copied().reduce(f64::max).unwrap_or(f64::NAN);
        out.push_str(&format!(
            "\nFrom none to {} remote clusters the operator's settled RSS went from {:.1} MiB to {:.1} MiB: {:.1} MiB per cluster; \
             at idle a remote cluster got {lo:.1} to {hi:.1} requests a minute from the operator (over {window} s; which requests: \
             the raw results).\n\n",
            last["remote_clusters"],
            f(first, "/rss_settled_mib"),
            f(last, "/rss_settled_mib"),
            f(last, "/delta_per_cluster_from_none_mib"),
        ));
    }
    out
}

fn shards_report(p: &Value) -> String {
    let n = &p["apps"];
    let (one, two) = (&p["one"], &p["two"]);
    let mut out = format!(
        "### Shards: {n} apps\n\n\
         Two runs on fresh control planes: one unsharded process with {n} unlabelled HelmApps; two processes `--shard a` and \
         `--shard b` (no unsharded process) with half the HelmApps labelled `{KEY}` with each. Every process has \
         `--max-concurrent-helm {HELM_AT_ONCE}` and a work directory of its own: the two shards may run twice as many helm at once \
         on the same 2 cores.\n\n\
         | run | process | apps | to all Ready (s) | time / 1 process | RSS peak / steady (MiB) | peak helm children at once | process + helm CPU (s) | requests to A |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    );
    let one_secs = f(one, "/secs");
    for (run, r) in [("1 process", one), ("2 shards", two)] {
        let procs = r["processes"].as_array().cloned().unwrap_or_default();
        for q in &procs {
            out.push_str(&format!(
                "| {run} | {} | {} | | | {:.1} / {:.1} | {} | {:.1} | |\n",
                q["name"].as_str().unwrap_or("?"),
                q["apps"],
                f(q, "/rss_peak_mib"),
                f(q, "/rss_steady_mib"),
                q["helm_children_peak"],
                f(q, "/tree_cpu_secs"),
            ));
        }
        let sum = |k: &str| procs.iter().map(|q| f(q, k)).sum::<f64>();
        out.push_str(&format!(
            "| **{run}** | all | {} | {:.1} | {:.2} | {:.1} / {:.1} (summed) | {} | {:.1} | {} |\n",
            r["apps"],
            f(r, "/secs"),
            f(r, "/secs") / one_secs,
            sum("/rss_peak_mib"),
            sum("/rss_steady_mib"),
            r["helm_children_peak_all"],
            f(r, "/tree_cpu_secs_total"),
            r["requests_a_total"],
        ));
    }
    let steady = |r: &Value| {
        r["processes"]
            .as_array()
            .map(|a| a.iter().map(|q| f(q, "/rss_steady_mib")).sum::<f64>())
            .unwrap_or(f64::NAN)
    };
    out.push_str(&format!(
        "\nTwo shards had the {n} apps Ready in {:.1} s against {:.1} s for one process: {:.2}×, measured in the same run; \
         at most {} helm runs at once against {}, {:.1} CPU-s against {:.1}, and a steady RSS of {:.1} MiB for both processes \
         together against {:.1} MiB for the one.\n\n\
         What a shard costs at idle: a third process `--shard c`, owning no HelmApp, started in the 2-shard cluster once its \
         {n} releases were settled, had an RSS of {:.1} MiB after {} s idle ({} HelmApp reconciles). Before any HelmApp existed, \
         the processes had settled at {} MiB (the one process) and {} MiB (the two shards), {} s after starting. (A shard watches the Helm storage and the \
         release objects of the whole cluster: docs/shards.md.)\n\n",
        f(two, "/secs"),
        f(one, "/secs"),
        f(p, "/time_ratio"),
        two["helm_children_peak_all"],
        one["helm_children_peak_all"],
        f(two, "/tree_cpu_secs_total"),
        f(one, "/tree_cpu_secs_total"),
        steady(two),
        steady(one),
        f(two, "/idle_shard_rss_mib"),
        SETTLE.as_secs(),
        two["idle_shard_reconciles"],
        mib_list(&one["rss_idle_before_apps_mib"]),
        mib_list(&two["rss_idle_before_apps_mib"]),
        SETTLE.as_secs(),
    ));
    out
}

/// `[12.3, 14.5]` as `12.3, 14.5`.
fn mib_list(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| format!("{:.1}", x.as_f64().unwrap_or(f64::NAN)))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn ten_report(p: &Value) -> String {
    let n = &p["apps"];
    let mut out = format!(
        "### {n} apps, and a restart\n\n\
         A fresh control plane per run; {n} HelmApps across {NAMESPACES} namespaces; all Ready, {} s idle for the steady RSS; \
         then every process stopped (SIGTERM) and started again with every app settled. \"Reconciled again\": each process's \
         `hossted_reconcile_total{{controller=\"helmapp\"}}` reached the number of HelmApps it owns. The restart window runs \
         from the new processes' start to 10 s after that.\n\n\
         | run | apps | to all Ready (s) | RSS peak / steady (MiB, per process) | restart: start → caches synced (s) | synced → every app reconciled (s) | requests in the restart window | writes (target 0) | helm runs (target 0) |\n\
         | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
        SETTLE.as_secs()
    );
    let runs = p["runs"].as_array().cloned().unwrap_or_default();
    for r in &runs {
        let rss = r["processes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|q| {
                        format!(
                            "{}: {:.1} / {:.1}",
                            q["name"].as_str().unwrap_or("?"),
                            f(q, "/rss_peak_mib"),
                            f(q, "/rss_steady_mib")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default();
        let rs = &r["restart"];
        out.push_str(&format!(
            "| {} | {} | {:.1} | {rss} | {:.1} | {:.1} | {} | {} | {} |\n",
            r["run"].as_str().unwrap_or("?"),
            r["apps"],
            f(r, "/secs"),
            f(rs, "/start_to_synced_secs"),
            f(rs, "/synced_to_all_reconciled_secs"),
            rs["requests"],
            rs["writes"],
            rs["helm_runs"],
        ));
    }
    for r in &runs {
        let rs = &r["restart"];
        out.push_str(&format!(
            "\n{} ({n} apps): after the restart, caches were synced {:.1} s after the start and every app reconciled {:.1} s \
             after that, with {} writes and {} helm runs; the {:.0} s window held {} requests, by verb {}.\n",
            r["run"].as_str().unwrap_or("?"),
            f(rs, "/start_to_synced_secs"),
            f(rs, "/synced_to_all_reconciled_secs"),
            rs["writes"],
            rs["helm_runs"],
            f(rs, "/window_secs"),
            rs["requests"],
            rs["requests_by_verb"],
        ));
    }
    out.push('\n');
    out
}
