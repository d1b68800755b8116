//! `chart.oci`: a chart pushed to an OCI registry (`helm push`), pulled by
//! the operator with the `oci-client` crate — helm only ever gets the local
//! `.tgz`, and never the registry's credentials.
//!
//! - The version: an exact `chart.version` is the tag (Helm writes `+` of
//!   semver build metadata as `_` in tags); a range or an empty version
//!   lists the repository's tags and takes the highest match (no
//!   pre-release for "latest"), as for HTTP repositories.
//! - The chart layer (`application/vnd.cncf.helm.chart.content.v1.tar+gzip`)
//!   is verified against the manifest's digest by the client while it is
//!   read, and cached in the work directory under that digest: a later pull
//!   of the same tag reads the manifest only.
//! - `credentialsSecretRef` gives basic auth (`username`, `password`) and a
//!   CA (`ca.crt`, trusted besides the system's roots); `chart.insecure`
//!   speaks plain HTTP (local registries).

use std::time::Duration;

use apis::helmapp::ChartSource;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::{Credentials, LocalChart, SourceError, Sources, archive, choose_version};

/// The media type of a Helm chart's content layer.
pub const CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// The largest chart layer pulled.
const MAX_LAYER: i64 = 64 * 1024 * 1024;

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

/// Pulls `chart.oci` at the version `chart.version` asks for into
/// `work_dir/charts/`, and remembers it in `cache` for its `interval`.
pub async fn fetch(
    chart: &ChartSource,
    credentials: &Credentials,
    sources: &Sources,
) -> Result<LocalChart, SourceError> {
    let fail = |message: String| failed(chart, message);
    let (registry, repository) = split(&chart.oci).map_err(&fail)?;
    let client = client_for(chart, credentials);
    let auth = match (&credentials.username, &credentials.password) {
        (Some(u), Some(p)) => RegistryAuth::Basic(u.clone(), p.clone()),
        _ => RegistryAuth::Anonymous,
    };
    let reference = |tag: &str| -> Result<Reference, SourceError> {
        format!("{registry}/{repository}:{}", tag.replace('+', "_"))
            .parse::<Reference>()
            .map_err(|e| fail(format!("tag {tag:?}: {e}")))
    };
    let wanted = chart.version.trim();
    let version = if is_exact(wanted) {
        wanted.to_string()
    } else {
        let tags = list_tags(&client, &reference("latest")?, &auth)
            .await
            .map_err(|e| explain(chart, "listing tags", e))?;
        let versions: Vec<String> = tags.into_iter().map(|t| t.replace('_', "+")).collect();
        let name = repository.rsplit('/').next().unwrap_or(&repository);
        choose_version(&versions, name, wanted).map_err(&fail)?
    };
    let image = reference(&version)?;
    let (manifest, _) = client
        .pull_image_manifest(&image, &auth)
        .await
        .map_err(|e| explain(chart, &format!("manifest of {version}"), e))?;
    let layer = manifest
        .layers
        .iter()
        .find(|l| l.media_type == CHART_LAYER)
        .ok_or_else(|| {
            fail(format!(
                "{version} holds no Helm chart layer ({CHART_LAYER})"
            ))
        })?;
    let digest = checked_digest(layer, &version).map_err(&fail)?;
    let file = sources.cache.path(&chart.oci, "", &digest);
    if sources.cache.read(&file, &digest).is_none() {
        // Counted as it arrives: the registry may send more than it
        // declared, and the client checks the digest only at the end.
        let mut sink = Bounded::new(layer.size.clamp(0, MAX_LAYER) as usize);
        client
            .pull_blob(&image, layer, &mut sink)
            .await
            .map_err(|e| match sink.overflowed {
                true => fail(format!(
                    "the chart layer of {version} is larger than the {} bytes its manifest declares",
                    layer.size
                )),
                false => explain(chart, &format!("chart layer of {version}"), e),
            })?;
        archive::check(&sink.bytes).map_err(|message| SourceError::Invalid {
            repo: chart.oci.clone(),
            message: format!("{version}: {message}"),
        })?;
        sources.cache.store(&file, &sink.bytes).map_err(&fail)?;
    }
    let local = LocalChart {
        path: file,
        version,
        digest,
    };
    sources.resolved.remember(chart, &credentials.scope, &local);
    Ok(local)
}

fn failed(chart: &ChartSource, message: String) -> SourceError {
    SourceError::Repo {
        repo: chart.oci.clone(),
        message,
    }
}

/// A registry client for `chart`: HTTPS (or plain HTTP when `insecure`),
/// trusting `credentials`' CA besides the system's roots.
fn client_for(chart: &ChartSource, credentials: &Credentials) -> Client {
    // reqwest is built without a crypto provider of its own: the one the
    // rest of the operator uses (ring) serves it too. Installing twice is
    // harmless (the first wins).
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig {
        protocol: if chart.insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: credentials
            .ca
            .iter()
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect(),
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(60)),
        user_agent: concat!("hossted-operator/", env!("CARGO_PKG_VERSION")),
        ..Default::default()
    })
}

/// The chart layer's sha256 digest, once its declared size is within bounds.
fn checked_digest(
    layer: &oci_client::manifest::OciDescriptor,
    version: &str,
) -> Result<String, String> {
    if layer.size > MAX_LAYER {
        return Err(format!(
            "the chart layer of {version} is {} bytes, more than {MAX_LAYER}",
            layer.size
        ));
    }
    layer
        .digest
        .strip_prefix("sha256:")
        .map(str::to_string)
        .ok_or_else(|| format!("layer digest {} is not sha256", layer.digest))
}

/// A registry error with its causes (reqwest keeps a TLS or connection
/// error in the chain) and a hint that follows its kind.
fn explain(chart: &ChartSource, what: &str, e: OciDistributionError) -> SourceError {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    let hint = hint(&e);
    failed(chart, format!("{what}: {text}{hint}"))
}

/// What to do about `e`, told by what kind of error it is — never by its
/// text, which holds the registry's address (a port such as 40119 reads
/// as "401").
fn hint(e: &OciDistributionError) -> &'static str {
    const CREDENTIALS: &str = ": check credentialsSecretRef's username and password";
    const CA: &str =
        ": the registry's certificate is not trusted; put its CA in credentialsSecretRef's ca.crt";
    match e {
        OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => CREDENTIALS,
        OciDistributionError::RegistryError { envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            CREDENTIALS
        }
        OciDistributionError::RequestError(e) if untrusted_certificate(e) => CA,
        _ => "",
    }
}

/// Whether a rustls certificate error is somewhere in `e`'s causes. The
/// TLS error travels inside `io::Error`s (reqwest nests two), whose
/// `source()` skips what they wrap, so each one is opened as well.
fn untrusted_certificate(e: &(dyn std::error::Error + 'static)) -> bool {
    let is_certificate = |e: &(dyn std::error::Error + 'static)| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidCertificate(_))
        )
    };
    let mut next = Some(e);
    while let Some(e) = next {
        let mut wrapped = Some(e);
        while let Some(w) = wrapped {
            if is_certificate(w) {
                return true;
            }
            wrapped = w
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static));
        }
        next = e.source();
    }
    false
}

/// Pages of tags read, at most.
const MAX_TAG_PAGES: usize = 10;
/// Tags kept, at most.
const MAX_TAGS: usize = 10_000;

/// The repository's tags, page by page: at most [`MAX_TAG_PAGES`] pages
/// and [`MAX_TAGS`] tags (a registry that pages without end, or answers a
/// page of a million tags, is cut off).
async fn list_tags(
    client: &Client,
    image: &Reference,
    auth: &RegistryAuth,
) -> Result<Vec<String>, OciDistributionError> {
    const PAGE: usize = 1000;
    let mut tags: Vec<String> = Vec::new();
    for _ in 0..MAX_TAG_PAGES {
        let page = client
            .list_tags(image, auth, Some(PAGE), tags.last().map(String::as_str))
            .await?;
        let n = page.tags.len();
        let before = tags.last().cloned();
        tags.extend(page.tags.into_iter().take(MAX_TAGS - tags.len()));
        // A short page ends the list; so does one that does not move on.
        if n < PAGE || tags.len() >= MAX_TAGS || tags.last() == before.as_ref() {
            break;
        }
    }
    Ok(tags)
}

/// Where a blob is pulled to: fails the write past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl Bounded {
    fn new(limit: usize) -> Self {
        Bounded {
            bytes: Vec::with_capacity(limit.min(1 << 20)),
            limit,
            overflowed: false,
        }
    }
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.limit {
            self.overflowed = true;
            return std::task::Poll::Ready(Err(std::io::ErrorKind::FileTooLarge.into()));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
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
    fn the_hint_follows_the_kind_of_error_not_the_port_in_its_url() {
        let url = "https://127.0.0.1:40119/v2/charts/tiny/manifests/0.1.0".to_string();
        let not_found = OciDistributionError::ServerError {
            code: 404,
            url: url.clone(),
            message: "not found".into(),
        };
        assert_eq!(hint(&not_found), "");
        let refused = OciDistributionError::ServerError {
            code: 403,
            url: url.clone(),
            message: String::new(),
        };
        assert!(hint(&refused).contains("username and password"));
        assert!(hint(&OciDistributionError::UnauthorizedError { url }).contains("password"));
    }

    #[test]
    fn a_certificate_error_is_found_inside_the_io_error_that_carries_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Connect(#[source] std::io::Error);
        // As reqwest gives it: Other(InvalidData(rustls error)).
        let tls = std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        assert!(untrusted_certificate(&Connect(tls)));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!untrusted_certificate(&Connect(refused)));
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
