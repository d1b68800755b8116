//! Where a HelmApp's chart comes from, resolved to a local chart helm can
//! read (helm never fetches anything and never sees a credential).
//!
//! This build resolves `chart.path` (a chart directory or `.tgz` under
//! `--chart-path-root`); `chart.repo` and `chart.oci` are refused with a
//! clear condition until their fetchers land (issue 13 stays open for them).

use std::path::{Path, PathBuf};

use apis::helmapp::ChartSource;
use sha2::{Digest, Sha256};

/// A chart ready for helm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalChart {
    pub path: PathBuf,
    /// `version` of its Chart.yaml (empty for a `.tgz`: helm reports it).
    pub version: String,
    /// SHA-256 of the chart's files: a changed chart is a new release.
    pub digest: String,
}

/// Why a chart could not be had.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    #[error("chart.path is refused: the operator runs without --chart-path-root")]
    NoPathRoot,
    #[error("chart.path {0:?} is outside --chart-path-root")]
    OutsideRoot(String),
    #[error("chart.path {path:?}: {message}")]
    Unreadable { path: String, message: String },
    #[error("chart.{0} is not supported by this build yet; use chart.path")]
    Unsupported(&'static str),
    #[error("set exactly one of chart.repo, chart.oci, chart.path")]
    NotExactlyOne,
}

/// The largest chart read for its digest.
const MAX_CHART_BYTES: u64 = 16 * 1024 * 1024;

/// Resolves `chart` to a local chart.
pub fn resolve(chart: &ChartSource, path_root: Option<&Path>) -> Result<LocalChart, SourceError> {
    let set = [&chart.repo, &chart.oci, &chart.path]
        .iter()
        .filter(|s| !s.is_empty())
        .count();
    if set != 1 {
        return Err(SourceError::NotExactlyOne);
    }
    if !chart.repo.is_empty() {
        return Err(SourceError::Unsupported("repo"));
    }
    if !chart.oci.is_empty() {
        return Err(SourceError::Unsupported("oci"));
    }
    let root = path_root.ok_or(SourceError::NoPathRoot)?;
    let unreadable = |message: String| SourceError::Unreadable {
        path: chart.path.clone(),
        message,
    };
    let root = root
        .canonicalize()
        .map_err(|e| unreadable(format!("--chart-path-root: {e}")))?;
    let wanted = Path::new(&chart.path);
    let joined = if wanted.is_absolute() {
        wanted.to_path_buf()
    } else {
        root.join(wanted)
    };
    // Canonical: `..` and symlinks cannot leave the root.
    let path = joined
        .canonicalize()
        .map_err(|e| unreadable(e.to_string()))?;
    if !path.starts_with(&root) {
        return Err(SourceError::OutsideRoot(chart.path.clone()));
    }
    let mut hasher = Sha256::new();
    let mut budget = MAX_CHART_BYTES;
    digest_tree(&path, &path, &mut hasher, &mut budget).map_err(unreadable)?;
    let version = if path.is_dir() {
        std::fs::read_to_string(path.join("Chart.yaml"))
            .ok()
            .and_then(|t| serde_yaml_ng::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("version").and_then(|v| v.as_str()).map(String::from))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(LocalChart {
        path,
        version,
        digest: hex(&hasher.finalize()),
    })
}

/// Hashes every file under `dir` (relative path, then content), in order.
fn digest_tree(
    base: &Path,
    at: &Path,
    hasher: &mut Sha256,
    budget: &mut u64,
) -> Result<(), String> {
    if at.is_file() {
        let meta = std::fs::metadata(at).map_err(|e| e.to_string())?;
        if meta.len() > *budget {
            return Err(format!("the chart is larger than {MAX_CHART_BYTES} bytes"));
        }
        *budget -= meta.len();
        let rel = at.strip_prefix(base).unwrap_or(at);
        hasher.update(rel.to_string_lossy().as_bytes());
        hasher.update([0]);
        hasher.update(std::fs::read(at).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(at)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        digest_tree(base, &e, hasher, budget)?;
    }
    Ok(())
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_source(p: &str) -> ChartSource {
        ChartSource {
            path: p.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_chart_under_the_root_resolves_with_its_version_and_digest() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
        let web = resolve(&path_source("web"), Some(&root)).unwrap();
        assert_eq!(web.version, "1.2.0");
        assert_eq!(web.digest.len(), 64);
        let again = resolve(&path_source(&web.path.display().to_string()), Some(&root)).unwrap();
        assert_eq!(again.digest, web.digest, "absolute or relative, same chart");
        let tiny = resolve(&path_source("tiny"), Some(&root)).unwrap();
        assert_ne!(tiny.digest, web.digest);
    }

    #[test]
    fn paths_outside_the_root_and_other_sources_are_refused() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
        assert_eq!(
            resolve(&path_source("../../src"), Some(&root)),
            Err(SourceError::OutsideRoot("../../src".into()))
        );
        assert_eq!(
            resolve(&path_source("web"), None),
            Err(SourceError::NoPathRoot)
        );
        let both = ChartSource {
            repo: "https://x".into(),
            path: "web".into(),
            ..Default::default()
        };
        assert_eq!(resolve(&both, Some(&root)), Err(SourceError::NotExactlyOne));
        assert!(matches!(
            resolve(&path_source("missing"), Some(&root)),
            Err(SourceError::Unreadable { .. })
        ));
    }
}
