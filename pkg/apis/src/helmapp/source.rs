//! What a release is made from and waits for: the chart's source and
//! verification, values references, dependencies.

use super::*;

/// Where the chart comes from: exactly one of `repo`, `oci`, `path`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartSource {
    /// An HTTP(S) chart repository (with an `index.yaml`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub repo: String,
    /// The chart's name in `repo` (letters, digits, `.`, `_`, `-`; never a
    /// path).
    #[serde(default)]
    #[schemars(regex(pattern = r"^([A-Za-z0-9][A-Za-z0-9._-]*)?$"))]
    pub name: String,
    /// An exact version or a semver range; empty: the latest.
    #[serde(default)]
    pub version: String,
    /// `oci://registry/path/chart`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oci: String,
    /// A chart directory or `.tgz` under `--chart-path-root`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// A Secret of the HelmApp's namespace: `username`, `password`, `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<LocalObjectReference>,
    /// OCI over plain HTTP (local registries).
    #[serde(default)]
    pub insecure: bool,
    /// Pins the exact artifact: the chart archive's SHA-256, or for `oci`
    /// also the manifest's digest (`sha256:<64 hex>`). A chart whose digest
    /// differs is never given to helm: `VerificationFailed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^(sha256:[a-f0-9]{64})?$"))]
    pub digest: String,
    /// The chart must be signed (docs/verification.md): cosign for `oci`,
    /// a `.prov` provenance file for `repo`. A chart that fails is never
    /// given to helm: `VerificationFailed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<ChartVerification>,
}

/// How a chart's signature is checked.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartVerification {
    /// `cosign` (an OCI chart's signature) or `helm` (an HTTP repository's
    /// `.prov` file).
    #[schemars(with = "String", regex(pattern = r"^(cosign|helm)$"))]
    pub provider: VerifyProvider,
    /// A Secret of the HelmApp's namespace. cosign: every key ending in
    /// `.pub` is a PEM public key, any one of which verifies. helm: every
    /// key ending in `.gpg` or `.asc` is an OpenPGP public keyring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// cosign keyless (no `secretRef`): the signing certificate's OIDC
    /// issuer and subject must match one entry (regular expressions,
    /// anchored).
    #[serde(
        default,
        rename = "matchOIDCIdentity",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub match_oidc_identity: Vec<OidcIdentityMatch>,
    /// cosign keyless: a Secret whose `trusted_root.json` replaces the
    /// public Sigstore trust root (private Fulcio and Rekor; offline
    /// installations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_root_secret_ref: Option<LocalObjectReference>,
}

/// A keyless signer: OIDC issuer and subject, each an anchored regular
/// expression.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct OidcIdentityMatch {
    pub issuer: String,
    pub subject: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectReference {
    pub name: String,
}

/// A values document in a Secret or ConfigMap key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesReference {
    /// `Secret` or `ConfigMap`.
    #[schemars(with = "String", regex(pattern = r"^(Secret|ConfigMap)$"))]
    pub kind: ValuesKind,
    pub name: String,
    /// Default `values.yaml`.
    #[serde(default = "default_values_key")]
    pub key: String,
    /// A missing object or key is not an error.
    #[serde(default)]
    pub optional: bool,
    /// Put the key's content, as a string, at this path of the values
    /// (`--set` path syntax: `a.b[0].c`) instead of merging it as a
    /// document.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 250))]
    pub target_path: String,
}

/// Something that must be Ready first.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Dependency {
    /// `HelmApp` or `HelmAppSet`.
    #[serde(default)]
    #[schemars(with = "String", default = "default_dependency_kind")]
    pub kind: DependencyKind,
    pub name: String,
    /// Default: the namespace of the one that depends.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}
