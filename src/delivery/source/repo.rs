//! Charts from HTTP(S) repositories: the `index.yaml` read, the version
//! chosen, the archive downloaded (verified by the index's digest) and
//! cached in the private work directory.

use apis::helmapp::ChartSource;
use sha2::{Digest, Sha256};

use super::http::{Http, HttpError, without_credentials};
use super::index::{IndexEntry, carve_entries, read_entries};
use super::verify::{self, Trust};
use super::{Credentials, FetchContext, LocalChart, SourceError, archive, choose_version};
use crate::lean::hex::hex;

/// Resolves `chart.repo` over the network (blocking: run it off the async
/// workers, through [`super::Sources::fetch`]) into the chart cache, and
/// remembers it.
pub fn fetch_from_repo(
    chart: &ChartSource,
    credentials: &Credentials,
    trust: Option<&Trust>,
    sources: &FetchContext<'_>,
) -> Result<LocalChart, SourceError> {
    let repo = chart.repo.trim_end_matches('/').to_string();
    let shown = without_credentials(&repo);
    let fail = |message: String| SourceError::Repo {
        repo: shown.clone(),
        message,
    };
    let limits = &sources.limits;
    let http =
        Http::new(&repo, credentials, &limits.policy, limits.fetch_timeout).map_err(&fail)?;
    let to_error = |e: HttpError| source_error(&shown, e);
    let get = |url: &str, limit: u64| http.get(url, limit).map_err(to_error);

    let entries =
        index_entries(&http, &repo, &chart.name, limits.max_index_size).map_err(to_error)?;
    let (entry, latest) = choose(entries, &chart.name, &chart.version).map_err(&fail)?;
    let url = match entry.urls.first() {
        Some(u) if u.contains("://") => u.clone(),
        Some(u) => format!("{repo}/{}", u.trim_start_matches('/')),
        None => {
            return Err(fail(format!(
                "{} {} has no download URL",
                chart.name, entry.version
            )));
        }
    };
    // The cache is content-addressed: a file is named by its bytes' digest
    // (hashed with the source and chart), so a repository serving other
    // bytes for the same version to another app writes another file —
    // never over the one a verified resolution points helm at.
    let cached = Some(entry.digest.as_str())
        .filter(|d| !d.is_empty())
        .and_then(|d| {
            sources
                .cache
                .read(&sources.cache.path(&repo, &chart.name, d), d)
        });
    let fetched = cached.is_none();
    let bytes = match cached {
        Some(b) => b,
        None => {
            let b = get(&url, archive::MAX_PACKED)?;
            check_archive(&b, &entry, &url, &shown, &chart.name)?;
            b
        }
    };
    let digest = hex(&Sha256::digest(&bytes));
    let file = sources.cache.path(&repo, &chart.name, &digest);
    if fetched {
        sources.cache.store(&file, &bytes).map_err(&fail)?;
    }
    // Before it is handed on: a cached archive is verified all the same.
    let verified = trust
        .map(|trust| {
            sources
                .verified
                .get_or_verify(&format!("sha256:{digest}"), trust, || {
                    let what = format!("{} {} (sha256:{digest})", chart.name, entry.version);
                    provenance(&http, &url, &bytes, trust, &shown, &what)
                })
        })
        .transpose()?;
    let local = LocalChart {
        path: file,
        version: entry.version,
        digest,
        manifest_digest: String::new(),
        latest,
        verified: verified.map(std::sync::Arc::new),
        ..Default::default()
    };
    sources.resolved.remember(chart, &credentials.scope, &local);
    Ok(local)
}

/// A client's error as the source's (`shown`: the repository URL).
fn source_error(shown: &str, e: HttpError) -> SourceError {
    match e {
        HttpError::Refused(message) => SourceError::Refused {
            repo: shown.to_string(),
            message,
        },
        HttpError::NotFound(message) | HttpError::Failed(message) => SourceError::Repo {
            repo: shown.to_string(),
            message,
        },
    }
}

/// Whether a downloaded archive of chart `name` is the index's `entry`
/// and a sound archive.
fn check_archive(
    bytes: &[u8],
    entry: &IndexEntry,
    url: &str,
    shown: &str,
    name: &str,
) -> Result<(), SourceError> {
    let digest = hex(&Sha256::digest(bytes));
    if !entry.digest.is_empty() && digest != entry.digest {
        return Err(SourceError::Repo {
            repo: shown.to_string(),
            message: format!(
                "{}: digest {digest} is not the index's {}",
                without_credentials(url),
                entry.digest
            ),
        });
    }
    archive::check(bytes).map_err(|message| SourceError::Invalid {
        repo: shown.to_string(),
        message: format!("{name} {}: {message}", entry.version),
    })
}

/// Checks the `.prov` beside `url` against `archive` and `trust`; names
/// who signed. `what`: the chart, its version and digest, for messages.
fn provenance(
    http: &Http,
    url: &str,
    archive: &[u8],
    trust: &Trust,
    shown: &str,
    what: &str,
) -> Result<String, SourceError> {
    let refused = |message: String| SourceError::Verification {
        repo: shown.to_string(),
        message: format!("{what}: {message}"),
    };
    let prov = match http.get(&format!("{url}.prov"), verify::provenance::MAX_PROV) {
        Ok(p) => p,
        Err(HttpError::NotFound(_)) => {
            return Err(refused(format!(
                "no provenance file {}.prov (verify.provider helm needs the chart signed with helm package --sign)",
                without_credentials(url)
            )));
        }
        Err(e) => return Err(source_error(shown, e)),
    };
    verify::provenance::verify(&prov, archive, trust).map_err(refused)
}

/// The versions of chart `name` in `repo`'s index, read as it arrives:
/// only the wanted chart's versions are kept. An index the quick reading
/// does not know the shape of is read again with the full parser.
fn index_entries(
    http: &Http,
    repo: &str,
    name: &str,
    limit: u64,
) -> Result<Vec<IndexEntry>, HttpError> {
    let url = format!("{repo}/index.yaml");
    match http.get_streamed(&url, limit, |body| carve_entries(body, name))? {
        Some(entries) => Ok(entries),
        None => http.get_streamed(&url, limit, |body| read_entries(body, name)),
    }
}

/// The entry of `name` in a repository index that `wanted` asks for.
/// With the newest stable version of all (empty: none), whatever `wanted`
/// allows: `status.latestAvailable`.
fn choose(
    entries: Vec<IndexEntry>,
    name: &str,
    wanted: &str,
) -> Result<(IndexEntry, String), String> {
    if entries.is_empty() {
        return Err(format!("no chart named {name:?} in index.yaml"));
    }
    let versions: Vec<String> = entries.iter().map(|e| e.version.clone()).collect();
    let version = choose_version(&versions, name, wanted)?;
    let latest = choose_version(&versions, name, "").unwrap_or_default();
    entries
        .into_iter()
        .find(|e| e.version == version)
        .map(|e| (e, latest))
        .ok_or_else(|| format!("no version of {name} matches {wanted:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_chosen_exact_by_range_or_latest_stable() {
        let index = br#"
apiVersion: v1
entries:
  web:
    - { version: 1.10.0, urls: [web-1.10.0.tgz], digest: a }
    - { version: 1.9.2, urls: [web-1.9.2.tgz] }
    - { version: 2.0.0-rc.1, urls: [web-2.0.0-rc.1.tgz] }
    - { version: 1.2.0, urls: [web-1.2.0.tgz] }
"#;
        let of = |name: &str| crate::delivery::source::index::entries_of(index, name).unwrap();
        let v = |w: &str| choose(of("web"), "web", w).map(|(e, _)| e.version);
        assert_eq!(
            v(""),
            Ok("1.10.0".into()),
            "semver order, not text; no pre-release"
        );
        assert_eq!(v("1.9.2"), Ok("1.9.2".into()));
        assert_eq!(v("~1.9"), Ok("1.9.2".into()));
        assert_eq!(v(">=1.0, <1.5"), Ok("1.2.0".into()));
        assert_eq!(
            v("2.0.0-rc.1"),
            Ok("2.0.0-rc.1".into()),
            "exact even if pre-release"
        );
        assert!(v("3.x").unwrap_err().contains("no version"));
        let latest = |w: &str| choose(of("web"), "web", w).map(|(_, l)| l);
        assert_eq!(
            latest("~1.9"),
            Ok("1.10.0".into()),
            "the newest stable whatever is pinned"
        );
        assert!(
            choose(of("api"), "api", "")
                .unwrap_err()
                .contains("no chart named")
        );
    }
}
