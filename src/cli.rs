//! Flags and environment variables (API.md's names), validated into what
//! the manager and the controllers take. A bad value is one line naming it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use runtime::{LeaderElection, LeaseTiming, ManagerOptions};

use crate::duration;
use crate::inventory::Settings;
use crate::inventory::poster::{ApiConfig, Token, check_url};

/// Keeps an inventory of every Helm release in a cluster — its pods,
/// services, volumes and ingresses — and reports it to the Hossted API.
#[derive(Debug, Parser)]
#[command(name = "hossted-operator", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Cmd>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the operator (the default).
    Run(Box<RunArgs>),
    /// Print the apps payloads for the current kubeconfig context as a JSON array, and exit.
    Collect {
        /// Owner e-mail copied into every payload.
        #[arg(long, env = "EMAIL_ID", default_value = "")]
        email_id: String,
        /// Organization id copied into every payload.
        #[arg(long, env = "HOSSTED_ORG_ID", default_value = "")]
        org_id: String,
        /// Also read Helm releases stored by the configmap driver.
        #[arg(long)]
        configmap_driver: bool,
        /// Send the data of releases' ConfigMaps in `configmap_info`.
        #[arg(long)]
        report_configmap_data: bool,
    },
    /// Print the operator's CustomResourceDefinitions as YAML (one document each).
    Crd {
        /// Only this one, e.g. `helmapps.hossted.com`.
        name: Option<String>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Base URL of the Hossted API, e.g. https://api.example.com/v1 (required unless --dry-run).
    #[arg(long, env = "HOSSTED_API_URL")]
    api_url: Option<String>,
    /// Bearer token for the Hossted API (this or --auth-token-file, unless --dry-run). Never logged.
    #[arg(long, env = "HOSSTED_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// A file holding the token, re-read for every request (a rotated Secret needs no restart).
    #[arg(long, env = "HOSSTED_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
    /// A PEM bundle trusted for the API besides the system's roots (a TLS-intercepting proxy).
    #[arg(long, env = "HOSSTED_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// Allow a plain http:// API URL that is not loopback (the token then crosses the network in clear text).
    #[arg(long)]
    allow_insecure_http: bool,
    /// Owner e-mail copied into every payload (required).
    #[arg(long, env = "EMAIL_ID")]
    email_id: Option<String>,
    /// Organisation id for cluster registration.
    #[arg(long, env = "HOSSTED_ORG_ID", default_value = "")]
    org_id: String,
    /// Human name of the cluster for registration.
    #[arg(long, env = "CONTEXT_NAME", default_value = "")]
    context_name: String,
    /// Safety resync period, Go duration syntax (10m, 30s, 1h).
    #[arg(long, env = "RECONCILE_DURATION", default_value = "10m")]
    reconcile_duration: String,
    /// Print each request as a JSON line on stdout instead of sending it.
    #[arg(long)]
    pub dry_run: bool,
    /// Concurrent reconciles.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Changes within this window after the first become one reconcile.
    #[arg(long, default_value = "500ms")]
    coalesce_window: String,
    /// Also watch Helm releases stored by the configmap driver.
    #[arg(long)]
    configmap_driver: bool,
    /// Send the data of releases' ConfigMaps in `configmap_info` (cached
    /// only then). Secret values are never read or sent.
    #[arg(long)]
    report_configmap_data: bool,
    /// On SIGTERM/SIGINT, how long in-flight reconciles may take to finish.
    #[arg(long, default_value = "30s")]
    shutdown_timeout: String,
    /// Where /metrics is served ("0" disables it).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_bind_address: String,
    /// Where /healthz and /readyz are served ("0" disables them).
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_probe_bind_address: String,
    /// Run only while holding a coordination.k8s.io Lease (several replicas: one reports).
    #[arg(long)]
    leader_elect: bool,
    /// The operator's namespace: the leader Lease, and the ConfigMap
    /// hossted-platform-charts that the platform toggles deliver from.
    #[arg(long, env = "POD_NAMESPACE", default_value = "hossted-operator")]
    leader_election_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, default_value = "hossted-operator")]
    leader_election_id: String,
    /// How long a standby waits after the leader's last renewal.
    #[arg(long, default_value = "15s")]
    leader_elect_lease_duration: String,
    /// How long the leader keeps working without renewing (< lease duration).
    #[arg(long, default_value = "10s")]
    leader_elect_renew_deadline: String,
    /// How often candidates try and the leader renews.
    #[arg(long, default_value = "2s")]
    leader_elect_retry_period: String,
    /// The controllers to run: `inventory` (always), `delivery` (HelmApps;
    /// needs the delivery RBAC and CRDs).
    #[arg(long, default_value = "inventory", value_delimiter = ',')]
    controllers: Vec<String>,
    /// The helm binary delivery runs.
    #[arg(long, default_value = "helm")]
    helm_binary: PathBuf,
    /// At most this many helm processes at once.
    #[arg(long, default_value_t = 4)]
    max_concurrent_helm: usize,
    /// `chart.path` must be under this directory (unset: chart.path is refused).
    #[arg(long)]
    chart_path_root: Option<PathBuf>,
    /// A writable directory for helm's homes and the chart cache.
    #[arg(long, default_value = "/tmp/hossted-operator")]
    work_dir: PathBuf,
    /// Refuse a HelmApp's targetNamespace, dependsOn and valuesFrom outside its namespace.
    #[arg(long)]
    no_cross_namespace_refs: bool,
}

/// Everything `run` needs, validated.
pub struct RunConfig {
    pub manager: ManagerOptions,
    pub inventory: Settings,
    pub api: ApiConfig,
    /// `Some` when `--controllers` includes `delivery`.
    pub delivery: Option<crate::delivery::Settings>,
}

impl RunArgs {
    /// Validates the flags; `Err` is the one line to print before exit 2.
    pub fn validate(self) -> Result<RunConfig, String> {
        let Some(email_id) = self.email_id.filter(|e| !e.is_empty()) else {
            return Err(
                "missing EMAIL_ID (or --email-id): the owner e-mail copied into every payload"
                    .into(),
            );
        };
        let token = match (
            self.auth_token.filter(|t| !t.is_empty()),
            self.auth_token_file.filter(|f| !f.as_os_str().is_empty()),
        ) {
            (Some(_), Some(_)) => {
                return Err(
                    "both HOSSTED_AUTH_TOKEN and HOSSTED_AUTH_TOKEN_FILE are set: give one".into(),
                );
            }
            (Some(t), None) => Some(Token::Inline(t)),
            (None, Some(f)) => Some(Token::File(f)),
            (None, None) => None,
        };
        let (base_url, token) = match (self.api_url.filter(|u| !u.is_empty()), token) {
            (Some(u), Some(t)) => {
                check_url(&u, self.allow_insecure_http)?;
                (u, t)
            }
            _ if self.dry_run => (String::new(), Token::Inline(String::new())),
            (None, _) => {
                return Err(
                    "missing HOSSTED_API_URL (or --api-url); use --dry-run to print requests instead"
                        .into(),
                );
            }
            (_, None) => {
                return Err(
                    "missing HOSSTED_AUTH_TOKEN or HOSSTED_AUTH_TOKEN_FILE (or --auth-token, --auth-token-file); use --dry-run to print requests instead"
                        .into(),
                );
            }
        };
        let parse = |name: &str, value: &str| -> Result<Duration, String> {
            duration::parse(value).map_err(|e| format!("{name}: {e}"))
        };
        let resync = parse("RECONCILE_DURATION", &self.reconcile_duration)?;
        if resync.is_zero() {
            return Err("RECONCILE_DURATION must be greater than zero".into());
        }
        let timing = LeaseTiming {
            lease_duration: parse(
                "--leader-elect-lease-duration",
                &self.leader_elect_lease_duration,
            )?,
            renew_deadline: parse(
                "--leader-elect-renew-deadline",
                &self.leader_elect_renew_deadline,
            )?,
            retry_period: parse(
                "--leader-elect-retry-period",
                &self.leader_elect_retry_period,
            )?,
        };
        if timing.renew_deadline >= timing.lease_duration || timing.retry_period.is_zero() {
            return Err(
                "--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration, and the retry period above zero"
                    .into(),
            );
        }
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "hossted-operator".into());
        let mut manager = ManagerOptions::new("hossted", "hossted-operator");
        manager.instance = instance;
        manager.metrics_address = address("--metrics-bind-address", &self.metrics_bind_address)?;
        manager.health_address = address(
            "--health-probe-bind-address",
            &self.health_probe_bind_address,
        )?;
        manager.drain_timeout = parse("--shutdown-timeout", &self.shutdown_timeout)?;
        manager.leader_election = self.leader_elect.then(|| LeaderElection {
            namespace: self.leader_election_namespace.clone(),
            name: self.leader_election_id.clone(),
            timing,
        });
        let mut delivery = false;
        for c in &self.controllers {
            match c.trim() {
                "inventory" => {}
                "delivery" => delivery = true,
                other => {
                    return Err(format!(
                        "--controllers: unknown controller {other:?} (known: inventory, delivery)"
                    ));
                }
            }
        }
        let delivery = delivery.then(|| crate::delivery::Settings {
            helm: crate::delivery::HelmConfig {
                binary: self.helm_binary.clone(),
                work_dir: self.work_dir.clone(),
                kubeconfig: None,
                max_concurrent: self.max_concurrent_helm.max(1),
            },
            chart_path_root: self.chart_path_root.clone(),
            no_cross_namespace_refs: self.no_cross_namespace_refs,
            operator_namespace: self.leader_election_namespace.clone(),
            // Twice the helm slots: a worker's steps around helm (finalizer,
            // status write) must not leave a slot idle — with one worker
            // per slot, 100 new HelmApps took 1.36x as long as 100 bare
            // installs 4 at a time (bench/REPORT.md "delivery"). The
            // semaphore in the runner still caps helm processes.
            workers: self.max_concurrent_helm.max(1) * 2,
            resync,
        });
        let delivery_enabled = delivery.is_some();
        Ok(RunConfig {
            manager,
            delivery,
            inventory: Settings {
                email_id,
                org_id: self.org_id,
                context_name: self.context_name,
                resync,
                coalesce: parse("--coalesce-window", &self.coalesce_window)?,
                configmap_driver: self.configmap_driver,
                report_configmap_data: self.report_configmap_data,
                workers: self.workers.max(1),
                delivery_enabled,
            },
            api: ApiConfig {
                base_url,
                token,
                ca_file: self.ca_file,
                dry_run: self.dry_run,
            },
        })
    }
}

/// `"0"` disables; anything else must be `host:port`.
fn address(flag: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "0" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|e| format!("{flag}: {value:?} is not an address like 0.0.0.0:8080 ({e})"))
}
