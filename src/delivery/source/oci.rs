//! `chart.oci`: a chart pushed to an OCI registry (`helm push`), pulled by
//! the operator over the same bounded client as chart repositories
//! ([`super::http`]) — helm only ever gets the local `.tgz`, and never the
//! registry's credentials.
//!
//! The pull is the distribution API's read side, four requests: the
//! manifest (≤ 4 MiB), the tag list (≤ 10 pages of ≤ 1,000, 10,000 tags),
//! the chart layer (counted as it arrives, cut past its declared size and
//! 64 MiB, verified by digest, checked as an archive), and, on a 401, the
//! challenge's answer: basic credentials, or a bearer token from the
//! challenge's realm — with the credentials only when the realm is the
//! registry's own host. (oci-client, used before, pulls through reqwest,
//! where no address policy, body bound or redirect rule can be applied.)
//!
//! - The version: an exact `chart.version` is the tag (Helm writes `+` of
//!   semver build metadata as `_` in tags); a range or an empty version
//!   lists the repository's tags and takes the highest match (no
//!   pre-release for "latest"), as for HTTP repositories.
//! - `credentialsSecretRef` gives basic auth (`username`, `password`) and a
//!   CA (`ca.crt`, trusted besides the system's roots); `chart.insecure`
//!   speaks plain HTTP (local registries).
//! - A blob may be redirected to another host of the same scheme (a
//!   registry's storage): no credential or token goes there.

use apis::helmapp::ChartSource;
use sha2::{Digest, Sha256};

use super::http::{Get, Http, HttpError, Reply, origin, without_credentials};
use super::signatures;
use super::verify::{self, Trust};
use super::{Credentials, FetchContext, LocalChart, SourceError, archive, choose_version};
use crate::lean::hex::hex;

/// The media type of a Helm chart's content layer.
pub const CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// What a manifest is asked as.
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// What an index is asked as (a signature's referrers).
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The largest chart layer pulled.
const MAX_LAYER: u64 = 64 * 1024 * 1024;
/// The largest manifest, tag page or token answer read.
const MAX_DOCUMENT: u64 = 4 * 1024 * 1024;
/// Pages of tags read, at most.
const MAX_TAG_PAGES: usize = 10;
/// Tags kept, at most.
const MAX_TAGS: usize = 10_000;
/// Tags asked per page.
const PAGE: usize = 1000;

/// `oci://host[:port]/path/name` → (`host[:port]`, `path/name`).
pub fn split(oci: &str) -> Result<(String, String), String> {
    let rest = oci
        .strip_prefix("oci://")
        .ok_or_else(|| format!("{oci:?} does not start with oci://"))?;
    let (host, repo) = rest
        .trim_end_matches('/')
        .split_once('/')
        .ok_or_else(|| format!("{oci:?} names no repository after the registry"))?;
    if host.is_empty() || repo.is_empty() || repo.contains(':') || repo.contains('@') {
        return Err(format!(
            "{oci:?} is not oci://registry/path/chart (the version goes in chart.version)"
        ));
    }
    Ok((host.to_string(), repo.to_string()))
}

/// Pulls `chart.oci` at the version `chart.version` asks for into the
/// chart cache, and remembers it for its `interval` (blocking: run it off
/// the async workers, through [`super::Sources::fetch`]).
pub fn fetch(
    chart: &ChartSource,
    credentials: &Credentials,
    trust: Option<&Trust>,
    sources: &FetchContext<'_>,
) -> Result<LocalChart, SourceError> {
    let fail = |message: String| failed(chart, message);
    let (host, repository) = split(&chart.oci).map_err(&fail)?;
    let scheme = if chart.insecure { "http" } else { "https" };
    let base = format!("{scheme}://{host}");
    let limits = &sources.limits;
    let mut registry = Registry {
        http: Http::new(&base, credentials, &limits.policy, limits.fetch_timeout).map_err(&fail)?,
        base,
        repository,
        token: None,
        chart,
    };
    let wanted = chart.version.trim();
    let name = registry
        .repository
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    // The tags are listed for the newest version whatever the spec pins
    // (bounded as every tag list); a pinned tag does not need them, so a
    // registry that refuses the list still serves it.
    let tags = registry.tags().map(|t| {
        t.into_iter()
            .map(|t| t.replace('_', "+"))
            .collect::<Vec<_>>()
    });
    let latest = tags
        .as_ref()
        .ok()
        .and_then(|v| choose_version(v, &name, "").ok())
        .unwrap_or_default();
    let version = if is_exact(wanted) {
        wanted.to_string()
    } else {
        choose_version(&tags?, &name, wanted).map_err(&fail)?
    };
    let tag = version.replace('+', "_");
    let manifest = registry.get(
        &format!("manifests/{tag}"),
        Some(MANIFEST),
        MAX_DOCUMENT,
        false,
    )?;
    let manifest_digest = format!("sha256:{}", hex(&Sha256::digest(&manifest)));
    // Before a byte of the chart is pulled: an unsigned artifact is
    // never stored for helm.
    let verified = trust
        .map(|trust| {
            sources.verified.get_or_verify(&manifest_digest, trust, || {
                verify_signatures(&mut registry, &manifest_digest, &version, trust)
            })
        })
        .transpose()?;
    let layer = chart_layer(&manifest, &version).map_err(&fail)?;
    let file = sources.cache.path(&chart.oci, "", &layer.digest);
    if sources.cache.read(&file, &layer.digest).is_none() {
        registry.store_layer(&layer, &version, &file, sources.cache)?;
    }
    let local = LocalChart {
        path: file,
        version,
        digest: layer.digest,
        manifest_digest,
        latest,
        verified: verified.map(std::sync::Arc::new),
        ..Default::default()
    };
    sources.resolved.remember(chart, &credentials.scope, &local);
    Ok(local)
}

/// Checks the cosign signatures of `manifest_digest` against `trust`;
/// names who signed.
fn verify_signatures(
    registry: &mut Registry<'_>,
    manifest_digest: &str,
    version: &str,
    trust: &Trust,
) -> Result<String, SourceError> {
    let refused = |message: String| SourceError::Verification {
        repo: registry_name(registry.chart),
        message: format!("{version} ({manifest_digest}): {message}"),
    };
    let Some(signers) = &trust.signers else {
        return Err(refused(format!(
            "verify.provider {} does not verify an OCI chart (use cosign)",
            trust.provider
        )));
    };
    let found = signatures::collect(registry, manifest_digest)?;
    if found.is_empty() {
        return Err(refused(
            "no cosign signature is published for it (neither a bundle referring to it nor a .sig tag)".into(),
        ));
    }
    let signer = verify::cosign::verify(
        &found,
        manifest_digest,
        signers,
        std::time::SystemTime::now(),
    )
    .map_err(refused)?;
    Ok(signer)
}

fn registry_name(chart: &ChartSource) -> String {
    chart.oci.clone()
}

fn failed(chart: &ChartSource, message: String) -> SourceError {
    SourceError::Repo {
        repo: chart.oci.clone(),
        message,
    }
}

/// One repository of a registry, with the token its challenge gave.
struct Registry<'a> {
    http: Http,
    /// `scheme://host[:port]`.
    base: String,
    repository: String,
    /// `Bearer …` once a challenge was answered.
    token: Option<String>,
    chart: &'a ChartSource,
}

impl Registry<'_> {
    /// Pulls the chart `layer` of `version` (bounded, checked by digest and
    /// as an archive) into the cache's `file`.
    fn store_layer(
        &mut self,
        layer: &Layer,
        version: &str,
        file: &std::path::Path,
        cache: &super::cache::ChartCache,
    ) -> Result<(), SourceError> {
        let limit = layer.size.min(MAX_LAYER);
        let bytes = self.get(&format!("blobs/sha256:{}", layer.digest), None, limit, true)?;
        let digest = hex(&Sha256::digest(&bytes));
        if digest != layer.digest {
            return Err(failed(
                self.chart,
                format!(
                    "the chart layer of {version} has digest {digest}, not the manifest's {}",
                    layer.digest
                ),
            ));
        }
        archive::check(&bytes).map_err(|message| SourceError::Invalid {
            repo: self.chart.oci.clone(),
            message: format!("{version}: {message}"),
        })?;
        cache.store(file, &bytes).map_err(|e| failed(self.chart, e))
    }

    /// `GET /v2/<repository>/<path>`, answering one 401 challenge.
    fn get(
        &mut self,
        path: &str,
        accept: Option<&str>,
        limit: u64,
        blob: bool,
    ) -> Result<Vec<u8>, SourceError> {
        let url = format!("{}/v2/{}/{path}", self.base, self.repository);
        self.find(path, accept, limit, blob)?.ok_or_else(|| {
            failed(
                self.chart,
                format!(
                    "GET {} answered 404, expected 200",
                    without_credentials(&url)
                ),
            )
        })
    }

    /// [`Registry::get`], with a 404 an answer (`None`): what may well not
    /// be there (a signature).
    fn find(
        &mut self,
        path: &str,
        accept: Option<&str>,
        limit: u64,
        blob: bool,
    ) -> Result<Option<Vec<u8>>, SourceError> {
        let url = format!("{}/v2/{}/{path}", self.base, self.repository);
        for attempt in 0..2 {
            let get = Get {
                accept,
                authorization: self.token.as_deref(),
                limit,
                other_host_redirect: blob,
            };
            match self.http.request(&url, &get) {
                Ok(Reply::Body(body)) => return Ok(Some(body)),
                Ok(Reply::Challenge(challenge)) if attempt == 0 => {
                    self.token = Some(self.answer(challenge.as_deref())?);
                }
                Ok(Reply::Challenge(_)) => break,
                Err(HttpError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(self.error(e)),
            }
        }
        Err(failed(
            self.chart,
            format!(
                "GET {} answered 401: check credentialsSecretRef's username and password",
                without_credentials(&url)
            ),
        ))
    }

    /// The `Authorization` answering a 401's `WWW-Authenticate`.
    fn answer(&self, challenge: Option<&str>) -> Result<String, SourceError> {
        let challenge = challenge.unwrap_or_default();
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            // Basic: the client sent its credentials already, or has none.
            return Err(failed(
                self.chart,
                format!(
                    "the registry {} asks for credentials: check credentialsSecretRef's username and password",
                    self.base
                ),
            ));
        }
        let param = |name: &str| challenge_param(params, name);
        let realm = param("realm").unwrap_or_default();
        if origin(&realm).is_err() {
            return Err(failed(
                self.chart,
                "the registry's challenge names no token service".into(),
            ));
        }
        let mut query = Vec::new();
        if let Some(service) = param("service") {
            query.push(format!("service={}", encode(&service)));
        }
        let scope =
            param("scope").unwrap_or_else(|| format!("repository:{}:pull", self.repository));
        query.push(format!("scope={}", encode(&scope)));
        let sep = if realm.contains('?') { '&' } else { '?' };
        let url = format!("{realm}{sep}{}", query.join("&"));
        // The client's credentials go with it only if the realm is the
        // registry's own host (Http's rule).
        let get = Get {
            limit: MAX_DOCUMENT,
            ..Get::default()
        };
        let body = match self.http.request(&url, &get).map_err(|e| self.error(e))? {
            Reply::Body(b) => b,
            Reply::Challenge(_) => {
                return Err(failed(
                    self.chart,
                    format!(
                        "the token service {} refused: check credentialsSecretRef's username and password",
                        without_credentials(&realm)
                    ),
                ));
            }
        };
        #[derive(serde::Deserialize)]
        struct Token {
            #[serde(default)]
            token: String,
            #[serde(default)]
            access_token: String,
        }
        let t: Token = serde_json::from_slice(&body).map_err(|_| {
            failed(
                self.chart,
                format!(
                    "the token service {} answered no token",
                    without_credentials(&realm)
                ),
            )
        })?;
        let token = if t.token.is_empty() {
            t.access_token
        } else {
            t.token
        };
        if token.is_empty() {
            return Err(failed(
                self.chart,
                "the token service answered an empty token".into(),
            ));
        }
        Ok(format!("Bearer {token}"))
    }

    /// The repository's tags, page by page: at most [`MAX_TAG_PAGES`]
    /// pages and [`MAX_TAGS`] tags (a registry that pages without end, or
    /// answers one enormous page, is cut off).
    fn tags(&mut self) -> Result<Vec<String>, SourceError> {
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let mut tags: Vec<String> = Vec::new();
        for _ in 0..MAX_TAG_PAGES {
            let path = match tags.last() {
                None => format!("tags/list?n={PAGE}"),
                Some(last) => format!("tags/list?n={PAGE}&last={}", encode(last)),
            };
            let body = self.get(&path, None, MAX_DOCUMENT, false)?;
            let page: Page = serde_json::from_slice(&body).map_err(|_| {
                failed(
                    self.chart,
                    "the tag list is not the distribution API's JSON".into(),
                )
            })?;
            let page = page.tags.unwrap_or_default();
            let n = page.len();
            let before = tags.last().cloned();
            tags.extend(page.into_iter().take(MAX_TAGS - tags.len()));
            // A short page ends the list; so does one that does not move on.
            if n < PAGE || tags.len() >= MAX_TAGS || tags.last() == before.as_ref() {
                break;
            }
        }
        Ok(tags)
    }

    fn error(&self, e: HttpError) -> SourceError {
        match e {
            HttpError::Refused(message) => SourceError::Refused {
                repo: self.chart.oci.clone(),
                message,
            },
            HttpError::NotFound(message) | HttpError::Failed(message) => {
                failed(self.chart, message)
            }
        }
    }
}

impl signatures::Registry for Registry<'_> {
    fn manifest(&mut self, reference: &str) -> Result<Option<Vec<u8>>, SourceError> {
        self.find(
            &format!("manifests/{reference}"),
            Some(MANIFEST),
            MAX_DOCUMENT,
            false,
        )
    }

    fn index(&mut self, path: &str) -> Result<Option<Vec<u8>>, SourceError> {
        self.find(path, Some(INDEX), MAX_DOCUMENT, false)
    }

    fn blob(&mut self, digest: &str, limit: u64) -> Result<Option<Vec<u8>>, SourceError> {
        self.find(&format!("blobs/{digest}"), None, limit, true)
    }
}

/// A layer of a manifest: its sha256 (hex) and declared size.
#[derive(Debug, PartialEq, Eq)]
struct Layer {
    digest: String,
    size: u64,
}

/// The chart layer of a manifest, once its declared size is in bounds.
fn chart_layer(manifest: &[u8], version: &str) -> Result<Layer, String> {
    #[derive(serde::Deserialize)]
    struct Descriptor {
        #[serde(rename = "mediaType", default)]
        media_type: String,
        #[serde(default)]
        digest: String,
        #[serde(default)]
        size: i64,
    }
    #[derive(serde::Deserialize)]
    struct Manifest {
        #[serde(default)]
        layers: Vec<Descriptor>,
    }
    let m: Manifest = serde_json::from_slice(manifest)
        .map_err(|_| format!("the manifest of {version} is not an OCI image manifest"))?;
    let layer = m
        .layers
        .into_iter()
        .find(|l| l.media_type == CHART_LAYER)
        .ok_or_else(|| format!("{version} holds no Helm chart layer ({CHART_LAYER})"))?;
    let size = u64::try_from(layer.size).unwrap_or(0);
    if size > MAX_LAYER {
        return Err(format!(
            "the chart layer of {version} is {size} bytes, more than {MAX_LAYER}"
        ));
    }
    let digest = layer
        .digest
        .strip_prefix("sha256:")
        .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| "the chart layer's digest is not sha256:<64 hex>".to_string())?;
    Ok(Layer {
        digest: digest.to_ascii_lowercase(),
        size,
    })
}

/// The value of `name` in a challenge's `k="v",k2="v2"` list.
fn challenge_param(params: &str, name: &str) -> Option<String> {
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().trim_start_matches(',').trim();
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => after.split_once(',').unwrap_or((after, "")),
        };
        if key.eq_ignore_ascii_case(name) {
            return Some(value.to_string());
        }
        rest = after.trim_start_matches([',', ' ']);
    }
    None
}

/// Percent-encoding of a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether `wanted` names one version (a tag) rather than a range.
fn is_exact(wanted: &str) -> bool {
    semver::Version::parse(wanted.trim_start_matches('v')).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oci_url_splits_into_registry_and_repository() {
        assert_eq!(
            split("oci://127.0.0.1:5000/charts/tiny"),
            Ok(("127.0.0.1:5000".into(), "charts/tiny".into()))
        );
        assert_eq!(
            split("oci://ghcr.io/org/charts/web/"),
            Ok(("ghcr.io".into(), "org/charts/web".into()))
        );
        assert!(split("https://ghcr.io/x").unwrap_err().contains("oci://"));
        assert!(
            split("oci://ghcr.io")
                .unwrap_err()
                .contains("no repository")
        );
        assert!(
            split("oci://ghcr.io/x/web:1.0")
                .unwrap_err()
                .contains("chart.version")
        );
    }

    #[test]
    fn a_challenge_is_read_quoted_or_not() {
        let p = r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#;
        assert_eq!(
            challenge_param(p, "realm").as_deref(),
            Some("https://auth.example/token")
        );
        assert_eq!(
            challenge_param(p, "service").as_deref(),
            Some("registry.example")
        );
        assert_eq!(
            challenge_param(p, "scope").as_deref(),
            Some("repository:a/b:pull,push")
        );
        assert_eq!(
            challenge_param("realm=x,service=y", "service").as_deref(),
            Some("y")
        );
        assert_eq!(challenge_param(p, "nope"), None);
        assert_eq!(encode("repository:a/b:pull"), "repository%3Aa%2Fb%3Apull");
    }

    #[test]
    fn the_chart_layer_is_found_and_its_declared_size_bounded() {
        let d = "ab".repeat(32);
        let m = |size: i64, digest: &str| {
            serde_json::json!({ "layers": [
                { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:00", "size": 1 },
                { "mediaType": CHART_LAYER, "digest": digest, "size": size } ] })
            .to_string()
            .into_bytes()
        };
        assert_eq!(
            chart_layer(&m(1024, &format!("sha256:{d}")), "1.0.0"),
            Ok(Layer {
                digest: d.clone(),
                size: 1024
            })
        );
        assert!(
            chart_layer(&m(1 << 30, &format!("sha256:{d}")), "1.0.0")
                .unwrap_err()
                .contains("more than")
        );
        assert!(
            chart_layer(&m(10, "sha256:../../x"), "1.0.0")
                .unwrap_err()
                .contains("64 hex")
        );
        assert!(
            chart_layer(b"<html>secret</html>", "1.0.0")
                .unwrap_err()
                .contains("not an OCI")
        );
    }

    #[test]
    fn an_exact_version_is_a_tag_and_a_range_is_not() {
        assert!(is_exact("1.2.3"));
        assert!(is_exact("1.2.3+build.1"));
        assert!(is_exact("v1.2.3"));
        assert!(!is_exact(""));
        assert!(!is_exact("~1.2"));
        assert!(!is_exact(">=1.0, <2"));
    }
}
