//! The one place that spawns `helm`. Every run:
//! - gets its values on standard input (`--values -`), never in arguments;
//! - has `HELM_CACHE_HOME`, `HELM_CONFIG_HOME` and `HELM_DATA_HOME` in the
//!   operator's writable directory (the root filesystem is read-only);
//! - runs in its own process group, killed whole at its timeout or when the
//!   operator loses its lease;
//! - holds one of `--max-concurrent-helm` slots, and its release's lock:
//!   never two runs on one release;
//! - keeps stderr for the condition and the Warning Event (the caller
//!   redacts values from it).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

pub use super::args::{Flags, GetManifest, PostRender, Rollback, Test, Uninstall, Upgrade};

/// How the operator runs helm.
#[derive(Debug, Clone)]
pub struct HelmConfig {
    /// The helm binary (`--helm-binary`).
    pub binary: PathBuf,
    /// The writable directory for helm's homes and the chart cache.
    pub work_dir: PathBuf,
    /// Given to helm as `--kubeconfig` (out of cluster); in a Pod helm uses
    /// the in-cluster configuration.
    pub kubeconfig: Option<PathBuf>,
    /// `--max-concurrent-helm`.
    pub max_concurrent: usize,
    /// The program helm runs as `--post-renderer` (`--post-renderer-binary`,
    /// default the operator's own binary); `None`: a HelmApp that asks for
    /// post-rendering fails with a message saying so.
    pub post_renderer: Option<PathBuf>,
    /// The command line `binary` speaks: asked at start
    /// ([`super::detect::detect`], by `crate::delivery::add_to`).
    pub cli: super::HelmCli,
}

mod output;

pub use output::{HelmError, Released, Rendered, says_release_not_found};
use output::{manifest_of, parse_release};

/// Runs helm; shared by every reconcile of the delivery controller.
pub struct Helm {
    config: HelmConfig,
    metrics: crate::delivery::metrics::HelmMetrics,
    slots: Semaphore,
    /// Releases (`namespace/name`) a helm process runs on now.
    busy: Mutex<HashSet<String>>,
    /// When the last helm action of this process on each release ended
    /// (one entry per release it ever ran on).
    ended: Mutex<HashMap<String, chrono::DateTime<chrono::Utc>>>,
    /// Process groups of running helm processes (killed on lease loss).
    groups: Arc<Mutex<HashSet<i32>>>,
    /// `GOMAXPROCS` for each helm process, unless the operator's own
    /// environment sets it (see [`child_max_procs`]).
    child_procs: usize,
    /// Asked right before each helm process starts, slot and lock held:
    /// `false` (the API server does not answer) starts none.
    gate: std::sync::OnceLock<Gate>,
}

/// Whether a helm process may start now (whether the API server answers:
/// a helm that cannot reach it only fails, and costs a process).
pub type Gate = Arc<dyn Fn() -> futures::future::BoxFuture<'static, bool> + Send + Sync>;

/// The cluster a helm run acts on.
#[derive(Clone, Copy)]
pub enum On<'a> {
    /// The operator's own (`HelmConfig::kubeconfig`, or in-cluster).
    Own,
    /// A remote cluster of a HelmApp's `kubeConfig` (docs/remote-clusters.md).
    Remote(&'a RemoteRun),
}

impl On<'_> {
    /// The key of the release lock and of the last ends: a release of the
    /// same name in another cluster is another release.
    fn release_key(&self, namespace: &str, release: &str) -> String {
        match self {
            On::Own => format!("{namespace}/{release}"),
            On::Remote(remote) => format!("remote:{}|{namespace}/{release}", remote.id),
        }
    }
}

/// How a run reaches a remote cluster.
pub struct RemoteRun {
    /// The cluster's id (the start of its kubeconfig's digest).
    pub id: String,
    /// The cluster and credentials (`crate::delivery::remote::kubeconfig`).
    /// Each run gets them as a kubeconfig of its own, naming the address
    /// its host resolved to at the run's start, checked against `policy`
    /// ([`RemoteRun::kubeconfig`]) — written to a file of mode 0600,
    /// removed when the run ends, never in argv, the environment or a log.
    pub access: Arc<crate::delivery::remote::kubeconfig::RemoteAccess>,
    /// `--deny-chart-source-cidrs`, for each run's address.
    pub policy: crate::delivery::source::address::AddressPolicy,
    /// How the host is resolved.
    pub lookup: crate::delivery::remote::connect::Lookup,
    /// The proxy every connection of helm goes through, its target
    /// checked against `policy` (a redirect of the server's would
    /// otherwise go anywhere).
    pub egress: Arc<crate::delivery::remote::egress::Egress>,
    /// Whether that cluster's API server answers (no helm starts if not).
    pub gate: Gate,
}

impl RemoteRun {
    /// The kubeconfig of one run: the server's host resolved now, every
    /// address of the answer allowed, helm handed the first
    /// (`crate::delivery::remote::connect`: helm would otherwise resolve
    /// the name again, to wherever it answers then), through the egress
    /// proxy (`crate::delivery::remote::egress`).
    pub async fn kubeconfig(&self) -> Result<String, RunRefusal> {
        use crate::delivery::remote::connect;
        let addresses = connect::checked(&self.lookup, &self.policy, &self.access.host).await?;
        let address = connect::first_answering(&addresses, self.access.port).await;
        let proxy = self
            .egress
            .proxy_url(
                &self.id,
                std::net::SocketAddr::new(address, self.access.port),
            )
            .await
            .map_err(RunRefusal::NoProxy)?;
        Ok(self
            .access
            .pinned_to(address)
            .helm_kubeconfig_through(Some(&proxy)))
    }
}

/// Why a remote run gets no kubeconfig (and starts no helm).
#[derive(Debug, thiserror::Error)]
pub enum RunRefusal {
    #[error(transparent)]
    Address(#[from] crate::delivery::remote::connect::Refusal),
    #[error("the operator's egress proxy for helm does not listen: {0}")]
    NoProxy(std::io::Error),
}

impl std::fmt::Debug for RemoteRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRun")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A remote run's kubeconfig file: created new (never through a link),
/// readable by the operator alone, removed on drop.
struct RunKubeconfig {
    path: PathBuf,
}

impl RunKubeconfig {
    /// Where they are written: the work directory's `kubeconfigs/`.
    fn dir(work_dir: &std::path::Path) -> PathBuf {
        work_dir.join("kubeconfigs")
    }

    /// Removes what a process killed mid-run left (a kill skips `Drop`):
    /// at start, before any run.
    fn sweep(work_dir: &std::path::Path) {
        let dir = Self::dir(work_dir);
        if dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            log::warn!("{}: not removed ({e}): remove it by hand", dir.display());
        }
    }

    fn write(work_dir: &std::path::Path, content: &str) -> std::io::Result<Self> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let dir = Self::dir(work_dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        // Whoever made it first, it is the operator's alone.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let path = dir.join(format!("{}.yaml", uuid::Uuid::new_v4()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let file_guard = RunKubeconfig { path };
        file.write_all(content.as_bytes())?;
        Ok(file_guard)
    }
}

impl Drop for RunKubeconfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The cores this process may use, shared among the helm processes that may
/// run at once (at least one each). Go sizes its scheduler and collector by
/// the cores it sees: `max_concurrent` helm processes each sized for all of
/// them oversubscribe the CPU when they are all at work.
pub fn child_max_procs(cores: usize, max_concurrent: usize) -> usize {
    (cores / max_concurrent.max(1)).max(1)
}

/// The release lock: released on drop.
struct Busy<'a> {
    helm: &'a Helm,
    key: String,
}

/// No slot can be had: the semaphore is closed (never while running).
fn closed(action: &'static str) -> HelmError {
    HelmError::Output {
        action,
        message: "the helm slots are closed".into(),
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut busy = self.helm.busy.lock();
        busy.remove(&self.key);
        self.helm
            .ended
            .lock()
            .insert(self.key.clone(), chrono::Utc::now());
    }
}

impl Helm {
    pub fn new(config: HelmConfig, metrics: crate::delivery::metrics::HelmMetrics) -> Self {
        RunKubeconfig::sweep(&config.work_dir);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let child_procs = child_max_procs(cores, config.max_concurrent);
        Helm {
            metrics,
            slots: Semaphore::new(config.max_concurrent.max(1)),
            config,
            busy: Mutex::default(),
            ended: Mutex::default(),
            groups: Arc::default(),
            child_procs,
            gate: Default::default(),
        }
    }

    /// One of the `--max-concurrent-helm` slots, its wait recorded. `None`:
    /// the slots are closed (never, while the process runs).
    async fn slot(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let asked = std::time::Instant::now();
        let slot = self.slots.acquire().await.ok()?;
        self.metrics.waited_for_slot(asked.elapsed().as_secs_f64());
        Some(slot)
    }

    /// Sets the [`Gate`] every helm start asks (once; later calls are
    /// ignored).
    pub fn set_gate(&self, gate: Gate) {
        let _ = self.gate.set(gate);
    }

    /// When the last helm action of this process on `namespace/release`
    /// ended, if one did: a revision it left `pending-*` (its end could not
    /// be written — the API server went away) is held by no helm.
    pub fn last_ended(
        &self,
        on: On<'_>,
        namespace: &str,
        release: &str,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        self.ended
            .lock()
            .get(&on.release_key(namespace, release))
            .copied()
    }

    /// Whether a helm process of ours runs on `namespace/release` now.
    pub fn is_busy(&self, on: On<'_>, namespace: &str, release: &str) -> bool {
        self.busy
            .lock()
            .contains(&on.release_key(namespace, release))
    }

    /// Kills every running helm process group (the lease is lost, or the
    /// work ended on a shutdown: another replica takes over and must not
    /// race a helm of ours).
    pub fn kill_all(&self) {
        for pgid in self.groups.lock().drain() {
            // SAFETY: kill(2) with a negative pid signals that process group;
            // no memory is involved.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }

    /// [`kill_all`](Self::kill_all), then waits up to `within` until no
    /// process of those groups is left running (a killed one that is not
    /// reaped yet — ours, or a grandchild whose new parent is slow to reap
    /// it — runs nothing): what a shutdown does before it releases the
    /// Lease. Says so in the log when one outlived the wait.
    pub fn kill_all_and_wait(&self, within: std::time::Duration) {
        let groups: Vec<i32> = self.groups.lock().iter().copied().collect();
        self.kill_all();
        let deadline = std::time::Instant::now() + within;
        while groups.iter().any(|g| group_runs(*g)) {
            if std::time::Instant::now() >= deadline {
                log::warn!("a killed helm process group outlived {within:?}");
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `helm upgrade --install`, waiting for a slot and the release's lock.
    /// `None`: another run holds the release (retry later).
    pub async fn upgrade(&self, u: &Upgrade<'_>) -> Option<Result<Released, HelmError>> {
        self.upgrade_on(u, On::Own).await
    }

    /// [`Self::upgrade`] on the cluster `on` names.
    pub async fn upgrade_on(
        &self,
        u: &Upgrade<'_>,
        on: On<'_>,
    ) -> Option<Result<Released, HelmError>> {
        if let Err(e) = named("upgrade", u.namespace, u.release) {
            return Some(Err(e));
        }
        let _busy = self.lock(on, u.namespace, u.release)?;
        let _slot = self.slot().await?;
        if let Err(e) = self.post_renderer_ready(u) {
            return Some(Err(e));
        }
        let values = serde_json::to_string(u.values).unwrap_or_else(|_| "{}".into());
        Some(
            self.run(
                "upgrade",
                u.args(self.config.cli),
                Some(values),
                u.timeout,
                on,
            )
            .await
            .and_then(|out| parse_release("upgrade", &out)),
        )
    }

    /// `helm uninstall --ignore-not-found`: a release that is already gone
    /// counts as done (helm says so by its exit status, not by a message to
    /// read). `None`: another run holds the release.
    pub async fn uninstall(&self, u: &Uninstall<'_>) -> Option<Result<(), HelmError>> {
        self.uninstall_on(u, On::Own).await
    }

    /// [`Self::uninstall`] on the cluster `on` names.
    pub async fn uninstall_on(
        &self,
        u: &Uninstall<'_>,
        on: On<'_>,
    ) -> Option<Result<(), HelmError>> {
        if let Err(e) = named("uninstall", u.namespace, u.release) {
            return Some(Err(e));
        }
        let _busy = self.lock(on, u.namespace, u.release)?;
        let _slot = self.slot().await?;
        Some(
            self.run("uninstall", u.args(), None, u.timeout, on)
                .await
                .map(|_| ()),
        )
    }

    /// `helm rollback` (to the last revision that succeeded: the one before
    /// may be a failed one). `None`: another run holds the release.
    pub async fn rollback(&self, r: &Rollback<'_>) -> Option<Result<(), HelmError>> {
        self.rollback_on(r, On::Own).await
    }

    /// [`Self::rollback`] on the cluster `on` names.
    pub async fn rollback_on(&self, r: &Rollback<'_>, on: On<'_>) -> Option<Result<(), HelmError>> {
        if let Err(e) = named("rollback", r.namespace, r.release) {
            return Some(Err(e));
        }
        let _busy = self.lock(on, r.namespace, r.release)?;
        let _slot = self.slot().await?;
        Some(
            self.run("rollback", r.args(self.config.cli), None, r.timeout, on)
                .await
                .map(|_| ()),
        )
    }

    /// `helm test`: the chart's test hooks run and must succeed. `None`:
    /// another run holds the release.
    pub async fn test(&self, t: &Test<'_>) -> Option<Result<(), HelmError>> {
        self.test_on(t, On::Own).await
    }

    /// [`Self::test`] on the cluster `on` names.
    pub async fn test_on(&self, t: &Test<'_>, on: On<'_>) -> Option<Result<(), HelmError>> {
        if let Err(e) = named("test", t.namespace, t.release) {
            return Some(Err(e));
        }
        let _busy = self.lock(on, t.namespace, t.release)?;
        let _slot = self.slot().await?;
        Some(
            self.run("test", t.args(), None, t.timeout, on)
                .await
                .map(|_| ()),
        )
    }

    /// What `u` would apply, by a dry run: the manifest helm renders now
    /// (post-rendered). Holds a slot but not the release: it changes
    /// nothing.
    pub async fn render(&self, u: &Upgrade<'_>) -> Result<Rendered, HelmError> {
        self.render_on(u, On::Own).await
    }

    /// [`Self::render`] on the cluster `on` names.
    pub async fn render_on(&self, u: &Upgrade<'_>, on: On<'_>) -> Result<Rendered, HelmError> {
        named("render", u.namespace, u.release)?;
        let _slot = self.slot().await.ok_or_else(|| closed("render"))?;
        self.post_renderer_ready(u)?;
        let values = serde_json::to_string(u.values).unwrap_or_else(|_| "{}".into());
        let out = self
            .run(
                "render",
                u.dry_run_args(self.config.cli),
                Some(values),
                u.timeout,
                on,
            )
            .await?;
        manifest_of("render", &out)
    }

    /// The manifest of the release's newest revision (empty: no release).
    pub async fn manifest(&self, g: &GetManifest<'_>) -> Result<String, HelmError> {
        self.manifest_on(g, On::Own).await
    }

    /// [`Self::manifest`] on the cluster `on` names.
    pub async fn manifest_on(&self, g: &GetManifest<'_>, on: On<'_>) -> Result<String, HelmError> {
        named("get", g.namespace, g.release)?;
        let _slot = self.slot().await.ok_or_else(|| closed("get"))?;
        match self
            .run("get", g.args(), None, Duration::from_secs(60), on)
            .await
        {
            Err(HelmError::Failed { stderr, .. }) if output::says_release_not_found(&stderr) => {
                Ok(String::new())
            }
            other => other,
        }
    }

    /// `helm show crds` of a local chart: the YAML of its `crds/` directory
    /// (no cluster access; holds a slot but no release).
    pub async fn show_crds(&self, chart: &std::path::Path) -> Result<String, HelmError> {
        let _slot = self.slot().await.ok_or_else(|| closed("show"))?;
        let args = vec![
            "show".into(),
            "crds".into(),
            "--".into(),
            chart.display().to_string(),
        ];
        self.run("show", args, None, Duration::from_secs(60), On::Own)
            .await
    }

    /// helm 4's post-renderer plugin written afresh when `u` names it
    /// (see [`super::plugin::install_post_renderer`]).
    fn post_renderer_ready(&self, u: &Upgrade<'_>) -> Result<(), HelmError> {
        match (&u.post_renderer, self.config.cli) {
            (Some(p), super::HelmCli::V4) => {
                super::plugin::install_post_renderer(&self.config.work_dir, p.binary).map_err(
                    |message| HelmError::Spawn {
                        binary: self.config.binary.display().to_string(),
                        source: std::io::Error::other(message),
                    },
                )
            }
            _ => Ok(()),
        }
    }

    fn lock(&self, on: On<'_>, namespace: &str, release: &str) -> Option<Busy<'_>> {
        let key = on.release_key(namespace, release);
        self.busy
            .lock()
            .insert(key.clone())
            .then(|| Busy { helm: self, key })
    }

    /// helm with `args`: its homes in the work directory, its own process
    /// group, and what it needs of the environment and nothing else of the
    /// operator's (the API token among it).
    fn command(&self, args: &[String], stdin: bool, on: On<'_>) -> tokio::process::Command {
        let home = &self.config.work_dir;
        let mut cmd = tokio::process::Command::new(&self.config.binary);
        let remote = matches!(on, On::Remote(_));
        if let On::Remote(run) = on {
            // client-go's discovery and HTTP caches are keyed by the
            // server's URL — the pinned address, which clusters behind one
            // front end share: each remote cluster (and credential) gets
            // its own, never another tenant's.
            cmd.env("KUBECACHEDIR", home.join("kubecache").join(&run.id));
        }
        cmd.args(args)
            .env_clear()
            .envs(
                std::env::vars()
                    .filter(|(k, _)| helm_needs(k) && !(remote && reaches_a_cluster(k))),
            )
            .env("HELM_CACHE_HOME", home.join("helm/cache"))
            .env("HELM_CONFIG_HOME", home.join("helm/config"))
            .env("HELM_DATA_HOME", home.join("helm/data"))
            .env("HELM_PLUGINS", super::plugin::plugins_dir(home))
            .envs(
                std::env::var_os("GOMAXPROCS")
                    .is_none()
                    .then(|| ("GOMAXPROCS", self.child_procs.to_string())),
            )
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: prctl(2) is async-signal-safe; nothing else runs between
        // fork and exec. Helm dies with the operator even when the operator
        // is SIGKILLed outside a container (where its pod would take helm
        // along): a pending release is unlocked by the next operator at
        // once, so no helm of a dead one may still run on it. The signal
        // follows the spawning thread, a runtime worker that lives as long
        // as the process (no helm is spawned from a blocking-pool thread).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        cmd
    }

    /// The kubeconfig a run on `on` is given: the operator's own (none in
    /// a Pod), or a remote cluster's, written for this run alone — the file
    /// is removed when the returned guard drops.
    async fn kubeconfig_for(
        &self,
        action: &'static str,
        on: On<'_>,
    ) -> Result<(Option<PathBuf>, Option<RunKubeconfig>), HelmError> {
        match on {
            On::Own => Ok((self.config.kubeconfig.clone(), None)),
            On::Remote(remote) => {
                let text =
                    remote
                        .kubeconfig()
                        .await
                        .map_err(|refusal| HelmError::AddressRefused {
                            action,
                            message: refusal.to_string(),
                        })?;
                let file =
                    RunKubeconfig::write(&self.config.work_dir, &text).map_err(|source| {
                        HelmError::Spawn {
                            binary: self.config.binary.display().to_string(),
                            source,
                        }
                    })?;
                Ok((Some(file.path.clone()), Some(file)))
            }
        }
    }

    async fn run(
        &self,
        action: &'static str,
        mut args: Vec<String>,
        stdin: Option<String>,
        timeout: Duration,
        on: On<'_>,
    ) -> Result<String, HelmError> {
        let gate = match on {
            On::Own => self.gate.get(),
            On::Remote(remote) => Some(&remote.gate),
        };
        if action != "show"
            && let Some(gate) = gate
            && !gate().await
        {
            return Err(HelmError::Unreachable { action });
        }
        // Removed when the run ends, however it ends.
        let (kubeconfig, _kubeconfig_file) = self.kubeconfig_for(action, on).await?;
        if let Some(k) = kubeconfig.as_ref().filter(|_| action != "show") {
            // A flag: before the `--` that starts the names.
            let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
            args.splice(at..at, ["--kubeconfig".into(), k.display().to_string()]);
        }
        let mut child = self
            .command(&args, stdin.is_some(), on)
            .spawn()
            .map_err(|source| HelmError::Spawn {
                binary: self.config.binary.display().to_string(),
                source,
            })?;
        let pgid = child.id().map(|p| p as i32);
        if let Some(p) = pgid {
            self.groups.lock().insert(p);
        }
        // Helm's own --timeout bounds its waits; this bounds helm (plus a
        // margin for its start and its last API calls) — the values written
        // on its stdin and its output read included.
        let limit = timeout + Duration::from_secs(30);
        let started = std::time::Instant::now();
        let (input, out, err) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let io = async move {
            let write = async {
                if let (Some(values), Some(mut pipe)) = (stdin, input) {
                    // helm reads the whole document before it starts; a
                    // failed write shows as helm's own error.
                    let _ = pipe.write_all(values.as_bytes()).await;
                }
            };
            let ((), out, err) = tokio::join!(write, read_capped(out), read_capped(err));
            (child.wait().await, out, err)
        };
        let result = tokio::time::timeout(limit, io).await;
        let ok = matches!(&result, Ok((Ok(status), _, _)) if status.success());
        self.metrics
            .ran(action, ok, started.elapsed().as_secs_f64());
        if let Some(p) = pgid {
            self.groups.lock().remove(&p);
        }
        let (status, stdout, stderr) = match result {
            Ok((Ok(status), out, err)) => (status, out, err),
            Ok((Err(source), _, _)) => {
                return Err(HelmError::Spawn {
                    binary: self.config.binary.display().to_string(),
                    source,
                });
            }
            Err(_) => {
                if let Some(p) = pgid {
                    // SAFETY: signals the process group helm leads.
                    unsafe {
                        libc::kill(-p, libc::SIGKILL);
                    }
                }
                return Err(HelmError::Timeout { action, timeout });
            }
        };
        if !status.success() {
            let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
            return Err(HelmError::Failed { action, stderr });
        }
        Ok(String::from_utf8_lossy(&stdout).into_owned())
    }
}

/// At most this much of helm's stdout and of its stderr is kept; the rest
/// is read and dropped (so helm never blocks on a full pipe).
pub const MAX_OUTPUT: u64 = 1024 * 1024;

/// Reads `pipe` to its end, keeping its first [`MAX_OUTPUT`] bytes.
async fn read_capped(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut kept = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = (&mut pipe).take(MAX_OUTPUT).read_to_end(&mut kept).await;
        let _ = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await;
    }
    kept
}

/// The variables of the operator's environment that helm gets: how to
/// find binaries and its home, how to reach the cluster (a kubeconfig, or
/// the in-cluster service), and helm's own settings — but never where
/// helm keeps its releases (`HELM_DRIVER*`): the operator watches and
/// checks Helm's storage in Secrets (docs/tenancy.md), and a release
/// stored elsewhere would be one it never saw nor checked.
fn helm_needs(name: &str) -> bool {
    let storage = name.starts_with("HELM_DRIVER");
    matches!(
        name,
        "PATH" | "HOME" | "KUBECONFIG" | "KUBERNETES_SERVICE_HOST" | "KUBERNETES_SERVICE_PORT"
    // Go's runtime settings, for the helm processes (set them on the
    // operator's container to bound what its helm children hold, or how
    // many threads each may run at once).
        | "GOGC" | "GOMEMLIMIT" | "GOMAXPROCS"
    ) || (name.starts_with("HELM_") && !storage)
}

/// Whether helm reads `name` to choose a cluster or an identity: never
/// given to a run on a remote cluster, whose kubeconfig alone says both —
/// an admin's `HELM_KUBETOKEN` or the pod's in-cluster address must not
/// send a tenant's remote run to the operator's own cluster.
fn reaches_a_cluster(name: &str) -> bool {
    name.starts_with("HELM_KUBE") || name.starts_with("KUBERNETES_SERVICE_") || name == "KUBECONFIG"
}

#[cfg(test)]
mod tests;

/// Whether a process of group `pgid` runs (a zombie does not): from
/// `/proc/<pid>/stat`, or — without `/proc` — whether the group exists.
fn group_runs(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // SAFETY: kill(2) with signal 0 only asks whether the group exists.
        return unsafe { libc::kill(-pgid, 0) } == 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .any(|stat| {
            // After the command's closing parenthesis: state, ppid, pgrp.
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("Z");
            let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
            pgrp == Some(pgid) && !matches!(state, "Z" | "X")
        })
}

/// [`super::check_release_name`] as the error of `action`: no helm starts.
fn named(action: &'static str, namespace: &str, release: &str) -> Result<(), HelmError> {
    super::check_release_name(release, namespace)
        .map_err(|message| HelmError::InvalidName { action, message })
}
