//! Charts from HTTP(S) repositories: the `index.yaml` read, the version
//! chosen, the archive downloaded (verified by the index's digest) and
//! cached in the private work directory.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use apis::helmapp::ChartSource;
use sha2::{Digest, Sha256};

use super::{Credentials, LocalChart, RepoCache, SourceError, choose_version};
use crate::cached::hex::hex;

/// The largest index or chart archive downloaded.
const MAX_DOWNLOAD: u64 = 64 * 1024 * 1024;

/// Resolves `chart.repo` over the network (blocking: run it off the async
/// workers) into `work_dir/charts/`, and remembers it in `cache`.
pub fn fetch_from_repo(
    chart: &ChartSource,
    credentials: &Credentials,
    work_dir: &Path,
    cache: &RepoCache,
) -> Result<LocalChart, SourceError> {
    let repo = chart.repo.trim_end_matches('/').to_string();
    let fail = |message: String| SourceError::Repo {
        repo: repo.clone(),
        message,
    };
    let http = Http::new(credentials).map_err(&fail)?;
    let get = |url: &str| http.get(url).map_err(&fail);

    let index = get(&format!("{repo}/index.yaml"))?;
    let entry = choose(&index, &chart.name, &chart.version).map_err(fail)?;
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
    let dir = work_dir
        .join("charts")
        .join(&hex(&Sha256::digest(repo.as_bytes()))[..16]);
    let file = dir.join(format!("{}-{}.tgz", chart.name, entry.version));
    let cached = std::fs::read(&file)
        .ok()
        .filter(|b| entry.digest.is_empty() || hex(&Sha256::digest(b)) == entry.digest);
    let bytes = match cached {
        Some(b) => b,
        None => {
            let b = get(&url)?;
            let digest = hex(&Sha256::digest(&b));
            if !entry.digest.is_empty() && digest != entry.digest {
                return Err(fail(format!(
                    "{url}: digest {digest} is not the index's {}",
                    entry.digest
                )));
            }
            std::fs::create_dir_all(&dir)
                .and_then(|_| std::fs::write(&file, &b))
                .map_err(|e| fail(format!("cannot cache the chart in {}: {e}", dir.display())))?;
            b
        }
    };
    let local = LocalChart {
        path: file,
        version: entry.version,
        digest: hex(&Sha256::digest(&bytes)),
    };
    cache.remember(chart, &credentials.scope, &local);
    Ok(local)
}

/// A repository's HTTP client, with its credentials.
struct Http {
    agent: ureq::Agent,
    /// The `Authorization` header, when credentials have a username and password.
    auth: Option<String>,
}

impl Http {
    fn new(credentials: &Credentials) -> Result<Self, String> {
        let mut config = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(120)))
            .http_status_as_error(false)
            .user_agent(concat!("hossted-operator/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &credentials.ca {
            config = config
                .tls_config(crate::tls::with_extra_ca(ca).map_err(|e| format!("ca.crt {e}"))?);
        }
        let auth = match (&credentials.username, &credentials.password) {
            (Some(u), Some(p)) => {
                use base64::Engine;
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
                ))
            }
            _ => None,
        };
        Ok(Http {
            agent: config.build().into(),
            auth,
        })
    }

    /// The body of `url` (at most [`MAX_DOWNLOAD`] bytes); `Err` says the
    /// URL and the status or error.
    fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut req = self.agent.get(url);
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let mut resp = req.call().map_err(|e| format!("GET {url}: {e}"))?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(format!(
                "GET {url} answered {status}: check credentialsSecretRef"
            ));
        }
        if !(200..300).contains(&status) {
            return Err(format!("GET {url} answered {status}"));
        }
        resp.body_mut()
            .with_config()
            .limit(MAX_DOWNLOAD)
            .read_to_vec()
            .map_err(|e| format!("GET {url}: {e}"))
    }
}

/// One chart version of a repository index.
#[derive(Debug, Clone, serde::Deserialize)]
struct IndexEntry {
    version: String,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    digest: String,
}

/// The entry of `name` in a repository index that `wanted` asks for.
fn choose(index: &[u8], name: &str, wanted: &str) -> Result<IndexEntry, String> {
    #[derive(serde::Deserialize)]
    struct Index {
        #[serde(default)]
        entries: HashMap<String, Vec<IndexEntry>>,
    }
    let index: Index = serde_yaml_ng::from_slice(index).map_err(|e| format!("index.yaml: {e}"))?;
    let entries = index
        .entries
        .get(name)
        .ok_or_else(|| format!("no chart named {name:?} in index.yaml"))?;
    let versions: Vec<String> = entries.iter().map(|e| e.version.clone()).collect();
    let version = choose_version(&versions, name, wanted)?;
    entries
        .iter()
        .find(|e| e.version == version)
        .cloned()
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
        let v = |w: &str| choose(index, "web", w).map(|e| e.version);
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
        assert!(
            choose(index, "api", "")
                .unwrap_err()
                .contains("no chart named")
        );
    }
}
