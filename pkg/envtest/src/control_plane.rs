//! The control plane itself: etcd and kube-apiserver started, their
//! clients and kubeconfigs, stopped on drop (see the crate's docs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::kubeconfig::Credentials;
use crate::process::{Spawner, Supervised};
use crate::util::*;
use crate::{Assets, Error, kubeconfig, pki};

/// How long a process may take to become ready by default. Generous: a
/// 2-core machine starting several control planes at once is slow.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);
/// Attempts with fresh ports when a port taken meanwhile makes a start fail.
const PORT_ATTEMPTS: usize = 3;

/// Options for starting a [`ControlPlane`].
#[derive(Debug, Clone)]
pub struct Builder {
    assets: Assets,
    apiserver_args: Vec<String>,
    etcd_args: Vec<String>,
    start_timeout: Duration,
}

impl Builder {
    /// Adds a `kube-apiserver` flag (e.g. `--watch-cache-sizes=pods#10`);
    /// a later flag overrides an earlier one of the same name.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Adds an `etcd` flag.
    pub fn etcd_arg(mut self, arg: impl Into<String>) -> Self {
        self.etcd_args.push(arg.into());
        self
    }

    /// How long each process may take to become ready (default 120 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Takes binaries from `assets` instead of [`Assets::locate`].
    pub fn assets(mut self, assets: Assets) -> Self {
        self.assets = assets;
        self
    }

    /// Starts etcd and kube-apiserver and waits until the apiserver's
    /// `/readyz` passes and the `default` namespace exists.
    pub async fn start(self) -> Result<ControlPlane, Error> {
        ControlPlane::start_with(self).await
    }
}

/// A running etcd + kube-apiserver; see the [crate docs](crate).
pub struct ControlPlane {
    // Processes first: `Drop` kills them before the directory goes.
    apiserver: Option<Supervised>,
    etcd: Supervised,
    spawner: Spawner,
    pub(crate) assets: Assets,
    pub(crate) ca: pki::Ca,
    apiserver_bin: PathBuf,
    apiserver_args: Vec<String>,
    start_timeout: Duration,
    pub(crate) server: String,
    etcd_url: String,
    kubeconfig_path: PathBuf,
    client: kube::Client,
    pub(crate) dir: tempfile::TempDir,
}

impl ControlPlane {
    /// Starts a control plane with default options.
    pub async fn start() -> Result<Self, Error> {
        Self::builder().start().await
    }

    /// Options for [`ControlPlane`].
    pub fn builder() -> Builder {
        Builder {
            assets: Assets::locate(),
            apiserver_args: Vec::new(),
            etcd_args: Vec::new(),
            start_timeout: DEFAULT_START_TIMEOUT,
        }
    }

    async fn start_with(opts: Builder) -> Result<Self, Error> {
        let apiserver_bin = opts.assets.binary("kube-apiserver")?;
        let etcd_bin = opts.assets.binary("etcd")?;
        let dir = tempfile::Builder::new()
            .prefix("hossted-envtest-")
            .tempdir()?;
        let d = dir.path();
        let ca = pki::Ca::generate()?;
        let admin_token = write_pki(d, &ca)?;
        let spawner = Spawner::new()?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let ports = Ports::free()?;
            let etcd_args = etcd_args(d, &ports, &opts.etcd_args);
            let apiserver_args = apiserver_args(d, &ports, &opts.apiserver_args);
            let server = format!("https://127.0.0.1:{}", ports.apiserver);
            let yaml = kubeconfig::render(
                &server,
                &ca.cert_pem(),
                "envtest-admin",
                Credentials::Token(&admin_token),
            );
            let kubeconfig_path = d.join("kubeconfig");
            std::fs::write(&kubeconfig_path, &yaml)?;
            let client = kubeconfig::client_from(&yaml).await?;
            let started = async {
                let mut etcd = spawner.spawn("etcd", &etcd_bin, &etcd_args, d.join("etcd.log"))?;
                wait_listening(&mut etcd, ports.etcd_client, opts.start_timeout).await?;
                let mut apiserver = spawner.spawn(
                    "kube-apiserver",
                    &apiserver_bin,
                    &apiserver_args,
                    d.join("kube-apiserver.log"),
                )?;
                wait_ready(&mut apiserver, &mut etcd, &client, opts.start_timeout).await?;
                Ok::<_, Error>((etcd, apiserver))
            }
            .await;
            match started {
                Ok((etcd, apiserver)) => {
                    return Ok(ControlPlane {
                        apiserver: Some(apiserver),
                        etcd,
                        spawner,
                        assets: opts.assets,
                        ca,
                        apiserver_bin,
                        apiserver_args,
                        start_timeout: opts.start_timeout,
                        server,
                        etcd_url: ports.etcd_url(),
                        kubeconfig_path,
                        client,
                        dir,
                    });
                }
                Err(e) if attempt < PORT_ATTEMPTS && port_clash(&e) => {
                    log::warn!("envtest: a port was taken meanwhile, retrying with new ports");
                    let _ = std::fs::remove_dir_all(d.join("etcd"));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The admin client (user `envtest-admin`, group `system:masters`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A kubeconfig file for the admin identity.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The apiserver URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// etcd's client URL, `http://127.0.0.1:<port>` (no TLS, no auth).
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The private directory (certificates, logs, kubeconfigs); removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Process ids of etcd and kube-apiserver (the latter `None` while stopped).
    pub fn pids(&self) -> (u32, Option<u32>) {
        (self.etcd.pid(), self.apiserver.as_ref().map(|a| a.pid()))
    }

    /// `kubectl` pointed at this control plane as admin.
    ///
    /// # Panics
    /// When `kubectl` is missing from the assets (the message says how to build it).
    pub fn kubectl(&self) -> Command {
        let bin = self
            .assets
            .binary("kubectl")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = Command::new(bin);
        cmd.env("KUBECONFIG", &self.kubeconfig_path)
            .env("KUBECACHEDIR", self.dir.path().join("kubectl-cache"));
        cmd
    }

    /// The path of the `kubectl` binary of the assets (for a script a test
    /// writes).
    ///
    /// # Panics
    /// When `kubectl` is missing from the assets.
    pub fn kubectl_binary(&self) -> PathBuf {
        self.assets
            .binary("kubectl")
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The path of the `helm` binary of the assets (for a program under test
    /// that runs helm itself).
    ///
    /// # Panics
    /// When `helm` is missing from the assets (the message says how to build it).
    pub fn helm_binary(&self) -> PathBuf {
        self.assets.binary("helm").unwrap_or_else(|e| panic!("{e}"))
    }

    /// The path of the assets' helm 3 (`helm3`, `HELM3_VERSION`): for the
    /// tests of releases made by helm 3 and of its command lines.
    ///
    /// # Panics
    /// When `helm3` is missing from the assets (the message says how to build it).
    pub fn helm3_binary(&self) -> PathBuf {
        self.assets
            .binary("helm3")
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `helm` pointed at this control plane as admin, with its cache, config
    /// and data directories private to this control plane.
    ///
    /// # Panics
    /// When `helm` is missing from the assets (the message says how to build it).
    pub fn helm(&self) -> Command {
        let bin = self.assets.binary("helm").unwrap_or_else(|e| panic!("{e}"));
        let home = self.dir.path().join("helm");
        let mut cmd = Command::new(bin);
        cmd.env("KUBECONFIG", &self.kubeconfig_path)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        cmd
    }

    /// Kills kube-apiserver (SIGKILL); etcd and the data stay. Clients see
    /// connection errors until [`Self::start_apiserver`].
    pub fn stop_apiserver(&mut self) {
        if let Some(mut a) = self.apiserver.take() {
            a.kill();
        }
    }

    /// Freezes kube-apiserver (SIGSTOP): its port accepts connections that
    /// then get no answer — a partitioned or hung server, not a refusing
    /// one — until [`Self::thaw_apiserver`]. No-op while it is stopped.
    pub fn freeze_apiserver(&self) {
        if let Some(pid) = self.pids().1 {
            signal(pid, libc::SIGSTOP);
        }
    }

    /// Lets a frozen kube-apiserver run again (SIGCONT).
    pub fn thaw_apiserver(&self) {
        if let Some(pid) = self.pids().1 {
            signal(pid, libc::SIGCONT);
        }
    }

    /// Freezes etcd (SIGSTOP): kube-apiserver answers, but every request
    /// that reaches storage waits, until [`Self::thaw_etcd`].
    pub fn freeze_etcd(&self) {
        signal(self.pids().0, libc::SIGSTOP);
    }

    /// Lets a frozen etcd run again (SIGCONT).
    pub fn thaw_etcd(&self) {
        signal(self.pids().0, libc::SIGCONT);
    }

    /// Starts kube-apiserver again on the same port with the same flags and
    /// waits until it is ready. No-op when it is running.
    pub async fn start_apiserver(&mut self) -> Result<(), Error> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        let mut apiserver = self.spawner.spawn(
            "kube-apiserver",
            &self.apiserver_bin,
            &self.apiserver_args,
            self.dir.path().join("kube-apiserver.log"),
        )?;
        wait_ready(
            &mut apiserver,
            &mut self.etcd,
            &self.client,
            self.start_timeout,
        )
        .await?;
        self.apiserver = Some(apiserver);
        Ok(())
    }
}

/// Sends `signal` to `pid`.
///
/// # Panics
/// When kill(2) fails: a fault the test asked for that did not happen must
/// not pass as one that did.
fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on a child's pid; no memory is involved.
    let done = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(
        done,
        0,
        "kill({pid}, {signal}): {}",
        std::io::Error::last_os_error()
    );
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The apiserver first, so it does not log etcd errors on its way out.
        self.stop_apiserver();
        self.etcd.kill();
    }
}

/// How many WATCH requests on `resource` (e.g. `"configmaps"`) the
/// apiserver is serving now, from its own `apiserver_longrunning_requests`
/// metric: the way to count reflectors from outside a process.
pub async fn open_watches(client: &kube::Client, resource: &str) -> Result<f64, Error> {
    let text = client
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .map_err(|e| Error::Kubeconfig(e.to_string()))?,
        )
        .await?;
    let resource = format!("resource=\"{resource}\"");
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_longrunning_requests{")
                && l.contains(&resource)
                && l.contains("verb=\"WATCH\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// The loopback ports of one start attempt.
struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
}

impl Ports {
    fn free() -> Result<Self, Error> {
        Ok(Ports {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
        })
    }

    fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_client)
    }
}

/// The CA, the serving certificate, the ServiceAccount key and the admin
/// token written to `d`; the token.
fn write_pki(d: &Path, ca: &pki::Ca) -> Result<String, Error> {
    let serving = ca.serving_cert()?;
    let sa_key = pki::service_account_key()?;
    let admin_token = random_hex(16)?;
    std::fs::write(d.join("ca.crt"), ca.cert_pem())?;
    std::fs::write(d.join("apiserver.crt"), &serving.cert)?;
    std::fs::write(d.join("apiserver.key"), &serving.key)?;
    std::fs::write(d.join("sa.pub"), &sa_key.cert)?;
    std::fs::write(d.join("sa.key"), &sa_key.key)?;
    std::fs::write(
        d.join("tokens.csv"),
        format!("{admin_token},envtest-admin,envtest-admin,\"system:masters\"\n"),
    )?;
    Ok(admin_token)
}

/// etcd's flags: one member on loopback, data in `d`, then `extra`.
fn etcd_args(d: &Path, ports: &Ports, extra: &[String]) -> Vec<String> {
    let etcd_url = ports.etcd_url();
    let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
    let mut args = vec![
        "--name=envtest".to_string(),
        format!("--data-dir={}", d.join("etcd").display()),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=envtest={peer_url}"),
        // Test data is thrown away: durability only costs time here.
        "--unsafe-no-fsync=true".to_string(),
        "--log-level=warn".to_string(),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// kube-apiserver's flags: loopback, the PKI in `d`, RBAC, then `extra`.
fn apiserver_args(d: &Path, ports: &Ports, extra: &[String]) -> Vec<String> {
    let file = |name: &str| d.join(name).display().to_string();
    let mut args = vec![
        format!("--etcd-servers={}", ports.etcd_url()),
        "--bind-address=127.0.0.1".to_string(),
        "--advertise-address=127.0.0.1".to_string(),
        format!("--secure-port={}", ports.apiserver),
        format!("--cert-dir={}", d.display()),
        format!("--tls-cert-file={}", file("apiserver.crt")),
        format!("--tls-private-key-file={}", file("apiserver.key")),
        format!("--client-ca-file={}", file("ca.crt")),
        format!("--token-auth-file={}", file("tokens.csv")),
        "--authorization-mode=RBAC".to_string(),
        "--service-cluster-ip-range=10.0.0.0/24".to_string(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
        format!("--service-account-key-file={}", file("sa.pub")),
        format!("--service-account-signing-key-file={}", file("sa.key")),
        // No controller-manager creates the `default` ServiceAccount of a
        // namespace, so this plugin would reject every pod.
        "--disable-admission-plugins=ServiceAccount".to_string(),
        "--allow-privileged=true".to_string(),
        "--profiling=false".to_string(),
    ];
    args.extend(extra.iter().cloned());
    args
}
