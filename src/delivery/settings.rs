//! How delivery runs (validated from flags by `crate::cli`).

use std::path::PathBuf;
use std::time::Duration;

use super::helm::HelmConfig;
use super::source::SourceLimits;
use super::tenancy::Tenancy;

/// How delivery runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which HelmApps and HelmAppSets this process takes (`--shard`).
    pub shard: super::Shard,
    pub helm: HelmConfig,
    /// `chart.path` must be under this (`--chart-path-root`; none: refused).
    pub chart_path_root: Option<PathBuf>,
    /// Who helm runs as; what a HelmApp may reference. Its
    /// `operator_namespace` also holds `hossted-platform-charts`.
    pub tenancy: Tenancy,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Safety resync of every HelmApp.
    pub resync: Duration,
    /// How charts are fetched from repositories and registries.
    pub sources: SourceLimits,
    /// Longest `spec.timeout` honoured (`--max-helm-timeout`); a longer one
    /// is clamped with a Warning.
    pub max_helm_timeout: Duration,
    /// Remote clusters served at once (`--max-remote-clusters`).
    pub max_remote_clusters: usize,
    /// Of those, started by one unprivileged namespace's HelmApps
    /// (`--max-remote-clusters-per-namespace`).
    pub max_remote_clusters_per_namespace: usize,
    /// The webhook receiver (`--webhook-bind-address`; `None`: off).
    pub webhook: Option<super::webhook::WebhookConfig>,
}
