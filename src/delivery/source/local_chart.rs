//! A chart as a source resolved it, ready for helm: where it is on disk,
//! what it is (version, digests, verification, Git commit) and the values
//! files read beside it — data the pure decision code reads, so no I/O here.

use std::path::PathBuf;

use apis::helmapp::ChartSource;

use super::verify;

/// A chart ready for helm.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalChart {
    pub path: PathBuf,
    /// `version` of its Chart.yaml (empty for a `.tgz`: helm reports it).
    pub version: String,
    /// SHA-256 of the chart archive (of its files, for a chart by path):
    /// a changed chart is a new release.
    pub digest: String,
    /// `sha256:<hex>` of the OCI manifest it was pulled by (empty: not
    /// from a registry).
    pub manifest_digest: String,
    /// The newest stable version the source offers, whatever the spec
    /// pins (empty: not known — a chart by path, or a registry that would
    /// not list its tags). Read from what the resolution fetched anyway.
    pub latest: String,
    /// Its signature's verification (`None`: `chart.verify` is not set).
    pub verified: Option<std::sync::Arc<verify::Verified>>,
    /// The Git commit it was read from (empty: not from Git).
    pub revision: String,
    /// `valuesFiles`, in order, as read from Git (still encrypted, if
    /// they are).
    pub values_files: Vec<ValuesFile>,
}

/// One of `valuesFiles`, read.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ValuesFile {
    pub path: String,
    /// `None`: not in the repository (`ignoreMissingValuesFiles`).
    pub content: Option<Vec<u8>>,
}

impl std::fmt::Debug for ValuesFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the content: it may hold secrets, encrypted or not.
        f.debug_struct("ValuesFile")
            .field("path", &self.path)
            .field("bytes", &self.content.as_ref().map(Vec::len))
            .finish()
    }
}

impl LocalChart {
    /// `sha256:<hex>` of the archive (what `status.chartDigest` shows).
    pub fn chart_digest(&self) -> String {
        format!("sha256:{}", self.digest)
    }

    /// Whether it is the artifact `chart.digest` pins (no pin: any is).
    /// `Err` says what was expected and what was found.
    pub fn check_pin(&self, chart: &ChartSource) -> Result<(), String> {
        let pin = chart.digest.as_str();
        if pin.is_empty() || pin == self.chart_digest() || pin == self.manifest_digest {
            return Ok(());
        }
        let found = match self.manifest_digest.as_str() {
            "" => self.chart_digest(),
            manifest => format!("{} (manifest {manifest})", self.chart_digest()),
        };
        let source = match (chart.oci.as_str(), chart.repo.as_str()) {
            ("", "") => chart.path.clone(),
            ("", repo) => format!("{} of {repo}", chart.name),
            (oci, _) => oci.to_string(),
        };
        Err(format!(
            "chart {source} {} is not the pinned artifact: chart.digest is {pin}, the source served {found}",
            self.version
        ))
    }
}
