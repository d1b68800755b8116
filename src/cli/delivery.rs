//! Delivery's flags: how helm runs and what a HelmApp may reference.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::delivery::{HelmConfig, Settings, Tenancy};

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Delivery (--controllers delivery)")]
pub struct DeliveryArgs {
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
}

impl DeliveryArgs {
    /// Delivery's settings.
    pub fn validate(self, resync: Duration, tenancy: Tenancy) -> Settings {
        Settings {
            helm: HelmConfig {
                binary: self.helm_binary,
                work_dir: self.work_dir,
                kubeconfig: None,
                max_concurrent: self.max_concurrent_helm.max(1),
            },
            chart_path_root: self.chart_path_root,
            tenancy,
            // Twice the helm slots: a worker's steps around helm (finalizer,
            // status write) must not leave a slot idle — with one worker
            // per slot, 100 new HelmApps took 1.36x as long as 100 bare
            // installs 4 at a time (bench/REPORT.md "delivery"). The
            // semaphore in the runner still caps helm processes.
            workers: self.max_concurrent_helm.max(1) * 2,
            resync,
        }
    }
}
