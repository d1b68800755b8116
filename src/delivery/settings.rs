//! How delivery runs (validated from flags by `crate::cli`).

use std::path::PathBuf;
use std::time::Duration;

use super::helm::HelmConfig;

/// How delivery runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub helm: HelmConfig,
    /// `chart.path` must be under this (`--chart-path-root`; none: refused).
    pub chart_path_root: Option<PathBuf>,
    /// `--no-cross-namespace-refs`.
    pub no_cross_namespace_refs: bool,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Safety resync of every HelmApp.
    pub resync: Duration,
    /// The operator's namespace: where `hossted-platform-charts` lives.
    pub operator_namespace: String,
}
