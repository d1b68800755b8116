//! Decoding Helm's release storage.
//!
//! Helm 3 stores each revision of a release as a Secret
//! `sh.helm.release.v1.<name>.v<version>` (label `owner=helm`; or a ConfigMap
//! with the configmap driver) whose `release` entry is
//! `base64(gzip(JSON))`. This module turns that payload into the few fields
//! the operator reports, without trusting it: corrupt, truncated or hostile
//! input is an [`Error`], never a panic, and decompression stops at
//! [`MAX_DECOMPRESSED`] bytes.

use std::io::Read;

use base64::Engine;
use flate2::read::MultiGzDecoder;
use serde::Deserialize;

/// The most a release may decompress to. Helm's payloads fit a 1 MiB
/// Secret; JSON compresses about 10:1, so 32 MiB leaves room without letting
/// a gzip bomb exhaust memory.
pub const MAX_DECOMPRESSED: u64 = 32 * 1024 * 1024;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What the operator reports of one release revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSummary {
    pub name: String,
    pub namespace: String,
    /// The revision number (the `v<N>` of the Secret's name).
    pub version: i64,
    /// `info.status`.
    pub status: HelmStatus,
    /// `info.last_deployed` as Helm stored it (RFC 3339 with its offset).
    pub updated: String,
    /// `info.first_deployed` as Helm stored it: the same on every revision
    /// of one installation, new when the release is installed again.
    pub first_deployed: String,
    /// `chart.metadata.name`.
    pub chart: String,
    /// `chart.metadata.version` (empty when absent).
    pub chart_version: String,
    /// `chart.metadata.appVersion` (empty when the chart has none).
    pub app_version: String,
    /// Whether the rendered manifest carries `hossted_helm: true`.
    pub hossted_helm: bool,
    /// helm 4 applied it server-side (`apply_method: ssa`); helm 3's
    /// revisions, and helm 4's client-side ones, say nothing or `csa`.
    pub server_side: bool,
    /// The objects of the manifest that delivery notices being deleted;
    /// listed only for a release delivery owns (see [`decode_release_with`]).
    pub objects: Vec<crate::lean::manifest::ManifestObject>,
}

/// A release revision's `info.status`, as Helm writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelmStatus {
    Deployed,
    Failed,
    Superseded,
    Uninstalled,
    Uninstalling,
    PendingInstall,
    PendingUpgrade,
    PendingRollback,
    /// A spelling Helm does not write (empty: none), kept as it was.
    Other(String),
}

impl HelmStatus {
    /// Every status Helm writes, with its spelling.
    const SPELLINGS: [(HelmStatus, &'static str); 8] = [
        (HelmStatus::Deployed, "deployed"),
        (HelmStatus::Failed, "failed"),
        (HelmStatus::Superseded, "superseded"),
        (HelmStatus::Uninstalled, "uninstalled"),
        (HelmStatus::Uninstalling, "uninstalling"),
        (HelmStatus::PendingInstall, "pending-install"),
        (HelmStatus::PendingUpgrade, "pending-upgrade"),
        (HelmStatus::PendingRollback, "pending-rollback"),
    ];

    pub fn parse(s: &str) -> Self {
        Self::SPELLINGS
            .iter()
            .find(|(_, text)| *text == s)
            .map_or_else(
                || HelmStatus::Other(s.to_string()),
                |(status, _)| status.clone(),
            )
    }

    /// Helm's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            HelmStatus::Other(s) => s,
            known => Self::SPELLINGS
                .iter()
                .find(|(status, _)| status == known)
                .map_or("", |(_, text)| text),
        }
    }

    /// An action runs on it (`pending-install`, `-upgrade`, `-rollback`).
    pub fn is_pending(&self) -> bool {
        matches!(
            self,
            HelmStatus::PendingInstall | HelmStatus::PendingUpgrade | HelmStatus::PendingRollback
        )
    }
}

impl From<&str> for HelmStatus {
    fn from(s: &str) -> Self {
        HelmStatus::parse(s)
    }
}

/// No status (an undecodable revision).
impl Default for HelmStatus {
    fn default() -> Self {
        HelmStatus::Other(String::new())
    }
}

impl std::fmt::Display for HelmStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a release payload could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the release is empty")]
    Empty,
    #[error("the release is neither base64 nor JSON: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("the release's gzip stream is corrupt or truncated: {0}")]
    Gzip(std::io::Error),
    #[error("the release decompresses to more than {MAX_DECOMPRESSED} bytes")]
    TooLarge,
    #[error("the release is not a Helm release JSON document: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the release has no {0}")]
    Missing(&'static str),
    #[error("helm would read this release otherwise: {0}")]
    Ambiguous(String),
}

/// Helm's release document, reduced to what is read (serde skips the rest:
/// chart templates, values, hooks).
#[derive(Deserialize)]
struct Release {
    name: Option<String>,
    namespace: Option<String>,
    version: Option<i64>,
    #[serde(default)]
    info: Info,
    chart: Option<Chart>,
    #[serde(default)]
    manifest: String,
    #[serde(default)]
    apply_method: String,
}

#[derive(Deserialize, Default)]
struct Info {
    #[serde(default)]
    status: String,
    #[serde(default)]
    last_deployed: String,
    #[serde(default)]
    first_deployed: String,
}

#[derive(Deserialize)]
struct Chart {
    metadata: Option<ChartMetadata>,
}

#[derive(Deserialize)]
struct ChartMetadata {
    name: Option<String>,
    #[serde(default)]
    version: String,
    #[serde(rename = "appVersion", default)]
    app_version: String,
}

/// The JSON of the `release` entry of a Helm storage Secret or ConfigMap:
/// base64 of gzip of JSON as Helm writes it; also base64 of plain JSON, and
/// plain JSON.
pub fn release_json(data: &[u8]) -> Result<Vec<u8>, Error> {
    let data = data.trim_ascii();
    if data.is_empty() {
        return Err(Error::Empty);
    }
    Ok(if data.first() == Some(&b'{') {
        data.to_vec()
    } else {
        let raw = base64::engine::general_purpose::STANDARD.decode(data)?;
        if raw.starts_with(&GZIP_MAGIC) {
            gunzip(&raw)?
        } else {
            raw
        }
    })
}

/// The `release` entry Helm would write for `json`: base64 of gzip.
pub fn encode_release(json: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(json);
    let zipped = gz.finish().unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .encode(zipped)
        .into_bytes()
}

/// Decodes the `release` entry of a Helm storage Secret or ConfigMap (see
/// [`release_json`]) into what the operator reports of it.
pub fn decode_release(data: &[u8]) -> Result<ReleaseSummary, Error> {
    decode_release_with(data, false)
}

/// The rendered manifest of a release payload (helm's storage format).
pub fn release_manifest(data: &[u8]) -> Result<String, Error> {
    release_manifest_of_json(&release_json(data)?)
}

/// [`release_manifest`] of a payload already decoded to JSON.
pub fn release_manifest_of_json(json: &[u8]) -> Result<String, Error> {
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(default)]
        manifest: String,
    }
    crate::lean::go_keys::check(json).map_err(Error::Ambiguous)?;
    let r: Manifest = serde_json::from_slice(json)?;
    Ok(r.manifest)
}

/// Every manifest a release payload holds: the rendered one, then each
/// hook's (helm creates hooks from these on upgrade, rollback and
/// uninstall).
pub fn release_manifests(data: &[u8]) -> Result<Vec<String>, Error> {
    #[derive(Deserialize)]
    struct Hook {
        #[serde(default)]
        manifest: String,
    }
    #[derive(Deserialize)]
    struct Manifests {
        #[serde(default)]
        manifest: String,
        #[serde(default)]
        hooks: Option<Vec<Hook>>,
    }
    let json = release_json(data)?;
    crate::lean::go_keys::check(&json).map_err(Error::Ambiguous)?;
    let r: Manifests = serde_json::from_slice(&json)?;
    let hooks = r.hooks.unwrap_or_default().into_iter().map(|h| h.manifest);
    Ok(std::iter::once(r.manifest).chain(hooks).collect())
}

/// [`decode_release`], and with `list_objects` the manifest's
/// [`super::manifest::watched_objects`] (kept only for releases delivery
/// owns: the inventory's thousands of releases do not pay for it).
pub fn decode_release_with(data: &[u8], list_objects: bool) -> Result<ReleaseSummary, Error> {
    let json = release_json(data)?;
    crate::lean::go_keys::check(&json).map_err(Error::Ambiguous)?;
    let r: Release = serde_json::from_slice(&json)?;
    let meta = r.chart.and_then(|c| c.metadata);
    Ok(ReleaseSummary {
        name: r
            .name
            .filter(|n| !n.is_empty())
            .ok_or(Error::Missing("name"))?,
        namespace: r.namespace.unwrap_or_default(),
        version: r.version.ok_or(Error::Missing("version"))?,
        status: HelmStatus::parse(&r.info.status),
        updated: r.info.last_deployed,
        first_deployed: r.info.first_deployed,
        hossted_helm: crate::lean::marker::has_hossted_marker(&r.manifest),
        server_side: r.apply_method == "ssa",
        objects: if list_objects {
            crate::lean::manifest::watched_objects(&r.manifest)
        } else {
            Vec::new()
        },
        app_version: meta
            .as_ref()
            .map(|m| m.app_version.clone())
            .unwrap_or_default(),
        chart_version: meta.as_ref().map(|m| m.version.clone()).unwrap_or_default(),
        chart: meta
            .and_then(|m| m.name)
            .ok_or(Error::Missing("chart.metadata.name"))?,
    })
}

/// Decompresses at most [`MAX_DECOMPRESSED`] bytes.
fn gunzip(raw: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    // Every member, as Go's gzip reader (helm's) reads them.
    MultiGzDecoder::new(raw)
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut out)
        .map_err(Error::Gzip)?;
    if out.len() as u64 > MAX_DECOMPRESSED {
        return Err(Error::TooLarge);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn release_json(manifest: &str) -> String {
        serde_json::json!({
            "name": "test",
            "namespace": "default",
            "version": 3,
            "info": {
                "first_deployed": "2024-02-27T10:00:00.1+05:30",
                "last_deployed": "2024-02-28T01:32:37.338988+05:30",
                "status": "deployed",
                "notes": "lots of notes"
            },
            "chart": {
                "metadata": { "name": "keycloak", "version": "18.4.0", "appVersion": "23.0.5" },
                "templates": [{ "name": "templates/a.yaml", "data": "YWJj" }],
                "values": { "replicaCount": 1 }
            },
            "config": {},
            "manifest": manifest,
            "hooks": []
        })
        .to_string()
    }

    /// What Helm writes: base64(gzip(json)).
    fn helm_encode(json: &[u8]) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(json).unwrap();
        base64::engine::general_purpose::STANDARD
            .encode(gz.finish().unwrap())
            .into_bytes()
    }

    fn expected(hossted_helm: bool) -> ReleaseSummary {
        ReleaseSummary {
            name: "test".into(),
            namespace: "default".into(),
            version: 3,
            status: "deployed".into(),
            updated: "2024-02-28T01:32:37.338988+05:30".into(),
            first_deployed: "2024-02-27T10:00:00.1+05:30".into(),
            chart: "keycloak".into(),
            chart_version: "18.4.0".into(),
            app_version: "23.0.5".into(),
            hossted_helm,
            server_side: false,
            objects: Vec::new(),
        }
    }

    #[test]
    fn decodes_helm_storage_format() {
        let json = release_json(
            "---\nkind: ConfigMap\nmetadata:\n  labels:\n    hossted_helm: \"true\"\n",
        );
        assert_eq!(
            decode_release(&helm_encode(json.as_bytes())).unwrap(),
            expected(true)
        );
    }

    #[test]
    fn accepts_plain_json_and_base64_of_plain_json() {
        let json = release_json("kind: ConfigMap\n");
        assert_eq!(decode_release(json.as_bytes()).unwrap(), expected(false));
        let b64 = base64::engine::general_purpose::STANDARD.encode(json.as_bytes());
        assert_eq!(decode_release(b64.as_bytes()).unwrap(), expected(false));
    }

    #[test]
    fn a_chart_without_app_version_reports_an_empty_one() {
        let json = serde_json::json!({
            "name": "x", "namespace": "n", "version": 1,
            "info": { "status": "failed", "last_deployed": "2024-01-01T00:00:00Z" },
            "chart": { "metadata": { "name": "c" } }
        });
        let r = decode_release(json.to_string().as_bytes()).unwrap();
        assert_eq!(r.app_version, "");
        assert_eq!(r.status, HelmStatus::Failed);
        assert!(!r.hossted_helm);
    }

    #[test]
    fn a_status_reads_and_writes_helms_spelling_and_keeps_any_other() {
        for s in [
            "deployed",
            "failed",
            "superseded",
            "uninstalled",
            "uninstalling",
            "pending-install",
            "pending-upgrade",
            "pending-rollback",
            "someday",
            "",
        ] {
            assert_eq!(HelmStatus::parse(s).as_str(), s);
        }
        assert!(HelmStatus::parse("pending-upgrade").is_pending());
        assert!(!HelmStatus::parse("pending-later").is_pending());
        assert_eq!(
            HelmStatus::parse("someday"),
            HelmStatus::Other("someday".into())
        );
    }

    #[test]
    fn a_payload_helm_would_read_otherwise_is_no_release() {
        let planted =
            br#"{"name":"web","namespace":"apps","version":2,"info":{"status":"deployed"},
            "chart":{"metadata":{"name":"web"}},"manifest":"ours","Manifest":"planted"}"#;
        assert!(matches!(decode_release(planted), Err(Error::Ambiguous(_))));
        assert!(matches!(
            release_manifests(planted),
            Err(Error::Ambiguous(_))
        ));
        assert!(matches!(
            release_manifest(planted),
            Err(Error::Ambiguous(_))
        ));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(decode_release(b""), Err(Error::Empty)));
        assert!(matches!(decode_release(b"  \n"), Err(Error::Empty)));
        assert!(matches!(
            decode_release(b"!!not base64!!"),
            Err(Error::Base64(_))
        ));
        assert!(matches!(
            decode_release(b"{\"name\": "),
            Err(Error::Json(_))
        ));
        assert!(matches!(
            decode_release(b"{\"version\": 1}"),
            Err(Error::Missing("name"))
        ));
        let good = helm_encode(release_json("").as_bytes());
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&good)
            .unwrap();
        let truncated = base64::engine::general_purpose::STANDARD.encode(&raw[..raw.len() / 2]);
        assert!(matches!(
            decode_release(truncated.as_bytes()),
            Err(Error::Gzip(_))
        ));
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_cap() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        let zeros = vec![b' '; 1024 * 1024];
        for _ in 0..(MAX_DECOMPRESSED / zeros.len() as u64 + 2) {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        assert!(bomb.len() < 200_000, "the bomb is small: {}", bomb.len());
        assert!(matches!(
            decode_release(bomb.as_bytes()),
            Err(Error::TooLarge)
        ));
    }

    /// Property: for any bytes — random, or a valid payload truncated or with
    /// bits flipped — decoding returns (never panics), and a success is a
    /// plausible release.
    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut seed: u64 = 0x5DEE_CE66_D1CE_4E5B;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid = helm_encode(release_json("hossted_helm: true").as_bytes());
        let gz_raw = base64::engine::general_purpose::STANDARD
            .decode(&valid)
            .unwrap();
        for _ in 0..3000 {
            let input: Vec<u8> = match next() % 4 {
                0 => (0..next() % 512).map(|_| next() as u8).collect(),
                1 => valid[..(next() as usize % valid.len())].to_vec(),
                2 => {
                    let mut v = gz_raw.clone();
                    for _ in 0..1 + next() % 8 {
                        let i = next() as usize % v.len();
                        v[i] ^= 1 << (next() % 8);
                    }
                    base64::engine::general_purpose::STANDARD
                        .encode(v)
                        .into_bytes()
                }
                _ => {
                    let mut v = release_json("x").into_bytes();
                    let i = next() as usize % v.len();
                    v[i] = next() as u8;
                    v
                }
            };
            if let Ok(r) = decode_release(&input) {
                assert!(!r.name.is_empty() && !r.chart.is_empty());
            }
        }
    }
}
