//! Flags and environment variables (docs/inventory.md's names), validated into what
//! the manager and the controllers take. A bad value is one line naming it.

mod api;
mod delivery;
mod flag;
mod manager;
mod tenancy;

use clap::{Args, Parser, Subcommand};
use runtime::ManagerOptions;

use crate::inventory::Settings;
use crate::inventory::poster::ApiConfig;
pub use api::ApiArgs;
pub use delivery::DeliveryArgs;
pub use manager::{ControllerName, ManagerArgs};
pub use tenancy::TenancyArgs;

/// Keeps an inventory of every Helm release in a cluster — its pods,
/// services, volumes and ingresses — and reports it to the Hossted API
/// (`--controllers inventory`, the default); installs, upgrades and
/// uninstalls the Helm charts HelmApps declare (`--controllers delivery`,
/// which alone needs no API settings).
#[derive(Debug, Parser)]
#[command(
    name = "hossted-operator",
    version,
    about = "Keeps an inventory of every Helm release in a cluster and reports it to the Hossted API (--controllers inventory, the default); installs, upgrades and uninstalls the Helm charts that HelmApps declare (--controllers delivery: alone, it needs none of the API settings)",
    long_about = None
)]
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
    /// helm's post-renderer (run by helm, not by hand): manifests on stdin,
    /// post-rendered on stdout, as the settings file says.
    #[command(name = "post-render", hide = true)]
    PostRender {
        /// The settings file the operator wrote for this helm run.
        config: std::path::PathBuf,
    },
    /// Flux HelmReleases (v2) and their HelmRepository / OCIRepository /
    /// HelmChart sources, from files or stdin, written as HelmApps on
    /// stdout; what does not convert is said on stderr.
    Convert {
        /// YAML files (`-` or none: stdin).
        files: Vec<std::path::PathBuf>,
    },
    /// `kubectl hossted ui`: a web view with your kubeconfig's rights, on 127.0.0.1 (docs/ui.md).
    Ui(Box<crate::ui::UiArgs>),
    /// Write the API reference (one Markdown file per CRD, from its OpenAPI
    /// schema) into `--out` (`docs/reference`).
    Docs {
        /// What to write: `reference`.
        #[arg(value_parser = ["reference"])]
        what: String,
        /// The directory to write into.
        #[arg(long, default_value = "docs/reference")]
        out: std::path::PathBuf,
    },
    /// Print the operator's CustomResourceDefinitions as YAML (one document each).
    Crd {
        /// Only this one, e.g. `helmapps.hossted.com`.
        name: Option<String>,
        /// As the template of the operator's chart (`charts/hossted-operator`).
        #[arg(long)]
        chart: bool,
    },
}

/// The flags of `run`, in groups: each group is validated into the
/// settings of what it configures.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub manager: ManagerArgs,
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(flatten)]
    pub delivery: DeliveryArgs,
    #[command(flatten)]
    pub tenancy: TenancyArgs,
}

/// Everything `run` needs, validated.
pub struct RunConfig {
    pub manager: ManagerOptions,
    /// `Some` when `--controllers` includes `inventory`.
    pub inventory: Option<(Settings, ApiConfig)>,
    /// `Some` when `--controllers` includes `delivery`.
    pub delivery: Option<crate::delivery::Settings>,
}

impl RunArgs {
    /// Validates the flags of the controllers that run (delivery alone asks
    /// for no API settings); `Err` is the one line to print before exit 2.
    pub fn validate(self) -> Result<RunConfig, String> {
        let m = &self.manager;
        let resync = m.resync()?;
        let shard = m.shard()?;
        if !shard.is_unsharded() && m.runs(ControllerName::Inventory) {
            return Err(format!(
                "--shard {}: the inventory runs in the unsharded process only; give this one --controllers delivery",
                m.shard.as_deref().unwrap_or_default()
            ));
        }
        let delivery = match m.runs(ControllerName::Delivery) {
            true => {
                let tenancy = self.tenancy.validate(&m.operator_namespace)?;
                Some(self.delivery.validate(resync, tenancy, shard)?)
            }
            false => None,
        };
        let inventory = if m.runs(ControllerName::Inventory) {
            Some(self.api.validate(resync)?)
        } else {
            None
        };
        Ok(RunConfig {
            manager: m.validate()?,
            inventory,
            delivery,
        })
    }
}
