//! Where a HelmApp's chart comes from, resolved to a local chart helm can
//! read (helm never fetches anything and never sees a credential).
//!
//! - `chart.path`: a chart directory or `.tgz` under `--chart-path-root`.
//! - `chart.repo`: an HTTP(S) repository: its `index.yaml` read, the version
//!   chosen (exact, a semver range, or the latest), the `.tgz` downloaded
//!   (with the credentials and CA of `credentialsSecretRef`), checked
//!   against the index's digest and cached in the private work directory.
//!   A resolution is remembered for `interval`: a reconcile in between does
//!   no network I/O.
//! - `chart.oci`: an OCI registry ([`oci`]): the tag chosen like a
//!   repository's version, the chart layer pulled, verified by digest and
//!   cached the same way.

pub mod address;
pub mod archive;
pub mod cache;
pub mod fetch;
pub mod git;
pub mod git_ssh;
pub mod git_verify;
pub mod http;
pub mod index;
pub mod jobs;
pub mod local_chart;
pub mod oci;
pub mod pool;
pub mod repo;
pub mod schema;
pub mod signatures;
pub mod verify;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use apis::helmapp::ChartSource;
use sha2::{Digest, Sha256};

use self::address::AddressPolicy;
pub use self::local_chart::{LocalChart, ValuesFile};
use crate::lean::hex::hex;

/// Why a chart could not be had.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    #[error("chart.path is refused: the operator runs without --chart-path-root")]
    NoPathRoot,
    #[error("chart.path {0:?} is outside --chart-path-root")]
    OutsideRoot(String),
    #[error("chart.path {path:?}: {message}")]
    Unreadable { path: String, message: String },
    #[error("set exactly one of chart.repo, chart.oci, chart.path, chart.git")]
    NotExactlyOne,
    #[error("chart repository {repo}: {message}")]
    Repo { repo: String, message: String },
    /// The archive breaks a bound or rule of [`archive::check`].
    #[error("chart repository {repo}: {message}")]
    Invalid { repo: String, message: String },
    /// The address policy refused the source's address.
    #[error("chart repository {repo}: {message}")]
    Refused { repo: String, message: String },
    /// A Git source could not be fetched or read (`SourceUnavailable`).
    #[error("git repository {url}: {message}")]
    Git { url: String, message: String },
    /// The chart's signature did not verify (`chart.verify`).
    #[error("chart {repo}: {message}")]
    Verification { repo: String, message: String },
}

/// What `credentialsSecretRef` holds.
#[derive(Default, Clone)]
pub struct Credentials {
    /// `namespace/secret` they were read from (empty: none). Part of the
    /// [`RepoCache`] key: a chart fetched with one tenant's credentials is
    /// never handed to a HelmApp that has other credentials, or none.
    pub scope: String,
    pub username: Option<String>,
    pub password: Option<String>,
    /// `bearerToken` (a Git host's access token): sent instead of basic
    /// auth.
    pub token: Option<String>,
    /// `identity`: an SSH private key (Git over SSH).
    pub ssh_identity: Option<String>,
    /// `known_hosts`: the SSH host keys trusted (Git over SSH).
    pub known_hosts: Option<String>,
    /// `ca.crt`: trusted besides the system's roots.
    pub ca: Option<Vec<u8>>,
}

impl Credentials {
    /// A digest of what is presented to a server (empty: nothing): what
    /// keys a fetch shared on disk, so that only the same credentials
    /// reuse it.
    pub fn digest(&self) -> String {
        let parts = [
            self.username.as_deref(),
            self.password.as_deref(),
            self.token.as_deref(),
            self.ssh_identity.as_deref(),
            self.known_hosts.as_deref(),
        ];
        if parts.iter().all(Option::is_none) {
            return String::new();
        }
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update(part.map_or(u64::MAX, |p| p.len() as u64).to_le_bytes());
            hasher.update(part.unwrap_or_default());
        }
        hex(&hasher.finalize())
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Credentials")
            .field("scope", &self.scope)
            .field("username", &self.username)
            .field("ca", &self.ca.is_some())
            .finish()
    }
}

/// Chart repositories' resolutions, remembered for their `interval`.
/// Keyed by strings a tenant chooses (source, chart, version range): kept
/// to at most [`RepoCache::MAX_ENTRIES`] and [`RepoCache::MAX_BYTES`], the
/// least recently used going first — a churn of made-up sources costs a
/// bounded table, never a growing one.
#[derive(Debug, Default)]
pub struct RepoCache {
    resolved: Mutex<Resolutions>,
}

/// The table behind [`RepoCache`]. Invariants: `order` holds exactly one
/// `(used, key)` per entry, with that entry's `used`; `bytes` is the sum
/// of the entries' [`resolution_bytes`].
#[derive(Debug, Default)]
struct Resolutions {
    entries: HashMap<String, Resolution>,
    order: std::collections::BTreeMap<u64, String>,
    bytes: usize,
    /// The last use stamp given.
    clock: u64,
}

#[derive(Debug)]
struct Resolution {
    at: Instant,
    chart: LocalChart,
    used: u64,
    bytes: usize,
}

/// What one resolution costs, counted as its strings' lengths plus a
/// fixed overhead for the table's own bookkeeping.
fn resolution_bytes(key: &str, c: &LocalChart) -> usize {
    2 * key.len()
        + c.path.as_os_str().len()
        + c.version.len()
        + c.digest.len()
        + c.latest.len()
        + 128
}

impl Resolutions {
    fn touch(&mut self, key: &str) {
        self.clock += 1;
        let stamp = self.clock;
        if let Some(e) = self.entries.get_mut(key) {
            self.order.remove(&e.used);
            e.used = stamp;
            self.order.insert(stamp, key.to_string());
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(e) = self.entries.remove(key) {
            self.order.remove(&e.used);
            self.bytes -= e.bytes;
        }
    }

    fn insert(&mut self, key: String, chart: LocalChart) {
        self.remove(&key);
        let bytes = resolution_bytes(&key, &chart);
        self.clock += 1;
        let used = self.clock;
        self.order.insert(used, key.clone());
        self.bytes += bytes;
        let at = Instant::now();
        self.entries.insert(
            key,
            Resolution {
                at,
                chart,
                used,
                bytes,
            },
        );
        while self.entries.len() > RepoCache::MAX_ENTRIES || self.bytes > RepoCache::MAX_BYTES {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= e.bytes;
            }
        }
    }
}

impl RepoCache {
    /// Resolutions kept at most.
    pub const MAX_ENTRIES: usize = 4096;
    /// Bytes of resolutions kept at most ([`resolution_bytes`]).
    pub const MAX_BYTES: usize = 4 * 1024 * 1024;

    /// What tells one resolution from another: the source, the chart, the
    /// version asked and whose credentials.
    pub fn key(chart: &ChartSource, scope: &str) -> String {
        format!(
            "{}\n{}\n{}\n{}\n{}\n{scope}",
            chart.repo, chart.oci, chart.name, chart.version, chart.insecure
        )
    }

    /// A resolution of `chart` with the credentials of `scope` (see
    /// [`Credentials::scope`]) younger than `interval` whose file is still
    /// there.
    pub fn fresh(
        &self,
        chart: &ChartSource,
        scope: &str,
        interval: Duration,
    ) -> Option<LocalChart> {
        let key = Self::key(chart, scope);
        let mut map = self.resolved.lock();
        let found = map
            .entries
            .get(&key)
            .filter(|e| e.at.elapsed() < interval && e.chart.path.exists())
            .map(|e| e.chart.clone());
        if found.is_some() {
            map.touch(&key);
        }
        found
    }

    /// Drops every resolution of a chart from `source` (a repository URL
    /// or an `oci://` reference, compared without a trailing `/`): a chart
    /// was published there. Returns how many were dropped.
    pub fn forget(&self, source: &str) -> usize {
        let mut map = self.resolved.lock();
        let gone: Vec<String> = map
            .entries
            .keys()
            .filter(|key| from_source(key, source))
            .cloned()
            .collect();
        for key in &gone {
            map.remove(key);
        }
        gone.len()
    }

    /// How many resolutions are kept, and their bytes.
    pub fn size(&self) -> (usize, usize) {
        let map = self.resolved.lock();
        (map.entries.len(), map.bytes)
    }

    fn remember(&self, chart: &ChartSource, scope: &str, local: &LocalChart) {
        self.resolved
            .lock()
            .insert(Self::key(chart, scope), local.clone());
    }
}

/// Whether a [`RepoCache::key`] names a chart of `source` (its repository
/// or its OCI reference, without a trailing `/`).
pub fn from_source(key: &str, source: &str) -> bool {
    let source = source.trim_end_matches('/');
    let mut fields = key.split('\n');
    let (repo, oci) = (
        fields.next().unwrap_or_default(),
        fields.next().unwrap_or_default(),
    );
    !source.is_empty()
        && (repo.trim_end_matches('/') == source || oci.trim_end_matches('/') == source)
}

/// Whether chart version `latest` is a higher semver than `installed`
/// (`false` when either is not a version: not known, nothing installed).
pub fn is_newer(latest: &str, installed: &str) -> bool {
    let parse = |v: &str| semver::Version::parse(v.trim_start_matches('v')).ok();
    matches!((parse(latest), parse(installed)), (Some(l), Some(i)) if l > i)
}

/// The version of `name` among `versions` that `wanted` asks for: exact, a
/// semver range, or (empty) the highest release that is not a
/// pre-release. Shared by HTTP repositories and OCI tags.
pub(crate) fn choose_version(
    versions: &[String],
    name: &str,
    wanted: &str,
) -> Result<String, String> {
    let wanted = wanted.trim();
    if let Some(exact) = versions
        .iter()
        .find(|v| !wanted.is_empty() && v.as_str() == wanted)
    {
        return Ok(exact.clone());
    }
    let parsed = versions.iter().filter_map(|s| {
        semver::Version::parse(s.trim_start_matches('v'))
            .ok()
            .map(|v| (v, s))
    });
    let best = if wanted.is_empty() {
        parsed
            .filter(|(v, _)| v.pre.is_empty())
            .max_by(|a, b| a.0.cmp(&b.0))
    } else {
        let alternatives = version_ranges(wanted).map_err(|e| {
            format!("version {wanted:?} is neither a version of {name} nor a range: {e}")
        })?;
        parsed
            .filter(|(v, _)| alternatives.iter().any(|req| req.matches(v)))
            .max_by(|a, b| a.0.cmp(&b.0))
    };
    best.map(|(_, s)| s.clone())
        .ok_or_else(|| format!("no version of {name} matches {wanted:?}"))
}

/// A range as Helm and Flux users write it (Masterminds' syntax):
/// comparators separated by spaces or commas all hold, `||` separates
/// alternatives — each alternative in the `semver` crate's syntax.
fn version_ranges(wanted: &str) -> Result<Vec<semver::VersionReq>, semver::Error> {
    wanted
        .split("||")
        .map(|alternative| {
            let mut comparators: Vec<String> = Vec::new();
            let mut operator = String::new();
            for token in alternative.split([' ', ',']).filter(|t| !t.is_empty()) {
                if token.chars().all(|c| "<>=~^!".contains(c)) {
                    operator.push_str(token);
                } else {
                    comparators.push(std::mem::take(&mut operator) + token);
                }
            }
            semver::VersionReq::parse(&comparators.join(", "))
        })
        .collect()
}

/// The bounds of fetching (flags, docs/security.md).
#[derive(Debug, Clone)]
pub struct SourceLimits {
    /// Deadline of one whole fetch (`--chart-fetch-timeout`).
    pub fetch_timeout: Duration,
    /// Fetches at once (`--max-concurrent-fetches`).
    pub max_concurrent_fetches: usize,
    /// Bytes the chart cache may hold (`--chart-cache-size`).
    pub cache_size: u64,
    /// Bytes Git checkouts may hold on disk (`--git-checkouts-size`).
    pub git_checkouts_size: u64,
    /// Bytes of an `index.yaml` received, at most (`--max-index-size`).
    pub max_index_size: u64,
    /// Networks no chart is fetched from (`--deny-chart-source-cidrs`).
    pub policy: AddressPolicy,
}

impl Default for SourceLimits {
    fn default() -> Self {
        SourceLimits {
            fetch_timeout: Duration::from_secs(120),
            max_concurrent_fetches: 4,
            cache_size: 128 * 1024 * 1024,
            git_checkouts_size: 64 * 1024 * 1024,
            max_index_size: 64 * 1024 * 1024,
            policy: AddressPolicy::default(),
        }
    }
}

/// What one fetch from a repository or registry uses: a view of
/// [`fetch::Sources`] (apart from it: the fetchers do not name `Sources`,
/// which names them).
pub struct FetchContext<'a> {
    pub resolved: &'a RepoCache,
    pub verified: &'a verify::VerifiedCache,
    pub cache: &'a cache::ChartCache,
    pub limits: &'a SourceLimits,
}

/// The largest chart read for its digest.
const MAX_CHART_BYTES: u64 = 16 * 1024 * 1024;

/// Resolves a `chart.path` to a local chart (`chart.repo` goes through
/// [`repo::fetch_from_repo`], `chart.oci` through [`oci::fetch`]).
pub fn resolve(chart: &ChartSource, path_root: Option<&Path>) -> Result<LocalChart, SourceError> {
    let set = [&chart.repo, &chart.oci, &chart.path]
        .iter()
        .filter(|s| !s.is_empty())
        .count()
        + usize::from(chart.git.is_some());
    if set != 1 {
        return Err(SourceError::NotExactlyOne);
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
    let version = chart_version(&path);
    Ok(LocalChart {
        path,
        version,
        digest: hex(&hasher.finalize()),
        manifest_digest: String::new(),
        latest: String::new(),
        verified: None,
        ..Default::default()
    })
}

/// The `name` of the chart at `path` (a directory or a `.tgz`), from its
/// Chart.yaml.
pub fn chart_name(path: &Path) -> Result<String, String> {
    if path.is_dir() {
        let text = std::fs::read_to_string(path.join("Chart.yaml"))
            .map_err(|e| format!("Chart.yaml: {}", e.kind()))?;
        return archive::name_in_chart_yaml(&text);
    }
    let bytes = std::fs::read(path).map_err(|e| format!("the chart archive: {}", e.kind()))?;
    archive::chart_name(&bytes)
}

/// `version` of the Chart.yaml of chart directory `dir` (empty: not a
/// directory, or none said).
pub fn chart_version(dir: &Path) -> String {
    if !dir.is_dir() {
        return String::new();
    }
    std::fs::read_to_string(dir.join("Chart.yaml"))
        .ok()
        .filter(|t| crate::lean::yaml::check(t).is_ok())
        .and_then(|t| serde_yaml_ng::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("version").and_then(|v| v.as_str()).map(String::from))
        .unwrap_or_default()
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
    fn ranges_are_read_as_helm_writes_them() {
        let versions: Vec<String> = ["v1.0.0", "1.1.0", "1.4.2", "2.0.0", "3.1.0"]
            .iter()
            .map(|v| v.to_string())
            .collect();
        let pick = |w: &str| choose_version(&versions, "web", w);
        assert_eq!(pick(">=1.0.0 <2").unwrap(), "1.4.2");
        assert_eq!(pick(">=1.0.0, <2").unwrap(), "1.4.2");
        assert_eq!(pick(">= 1.0.0 < 1.2").unwrap(), "1.1.0");
        assert_eq!(pick("~1.0 || >=3").unwrap(), "3.1.0");
        assert_eq!(pick("<1.1").unwrap(), "v1.0.0");
        assert_eq!(pick("2.0.0").unwrap(), "2.0.0");
        assert!(pick(">=9").is_err());
        assert!(pick("not a range").is_err());
    }

    #[test]
    fn a_pin_accepts_the_archive_or_the_manifest_digest_and_nothing_else() {
        let hex64 = |c: char| std::iter::repeat_n(c, 64).collect::<String>();
        let local = LocalChart {
            version: "1.0.0".into(),
            digest: hex64('a'),
            manifest_digest: format!("sha256:{}", hex64('b')),
            ..Default::default()
        };
        let pinned = |pin: String| ChartSource {
            oci: "oci://registry.example/charts/web".into(),
            digest: pin,
            ..Default::default()
        };
        assert_eq!(local.check_pin(&pinned(String::new())), Ok(()));
        assert_eq!(local.check_pin(&pinned(local.chart_digest())), Ok(()));
        assert_eq!(
            local.check_pin(&pinned(local.manifest_digest.clone())),
            Ok(())
        );
        let other = format!("sha256:{}", hex64('c'));
        let refused = local.check_pin(&pinned(other.clone())).unwrap_err();
        for named in [&other, &local.chart_digest(), &local.manifest_digest] {
            assert!(refused.contains(named.as_str()), "{refused}");
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
    fn resolutions_are_bounded_and_the_least_recently_used_go_first() {
        let cache = RepoCache::default();
        let dir = std::env::temp_dir();
        let chart = |name: &str| ChartSource {
            repo: "https://charts.example".into(),
            name: name.into(),
            ..Default::default()
        };
        let local = LocalChart {
            path: dir.clone(),
            version: "1.0.0".into(),
            digest: "sha256:x".into(),
            manifest_digest: String::new(),
            latest: String::new(),
            verified: None,
            ..Default::default()
        };
        cache.remember(&chart("first"), "", &local);
        for i in 0..10_000 {
            cache.remember(&chart(&format!("churn-{i}")), "", &local);
            if i % 100 == 0 {
                // Used now and then: never the least recently used.
                let hour = Duration::from_secs(3600);
                assert!(cache.fresh(&chart("first"), "", hour).is_some(), "at {i}");
            }
        }
        let (entries, bytes) = cache.size();
        assert!(entries <= RepoCache::MAX_ENTRIES, "{entries}");
        assert!(bytes <= RepoCache::MAX_BYTES, "{bytes}");
        let hour = Duration::from_secs(3600);
        assert!(
            cache.fresh(&chart("churn-0"), "", hour).is_none(),
            "the oldest went"
        );
        assert!(cache.fresh(&chart("churn-9999"), "", hour).is_some());
        assert!(cache.fresh(&chart("first"), "", hour).is_some());
        assert_eq!(cache.forget("https://charts.example/"), entries);
        assert_eq!(cache.size(), (0, 0));
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
