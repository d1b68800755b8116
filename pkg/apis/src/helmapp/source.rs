//! What a release is made from and waits for: the chart's source and
//! verification, values references, dependencies.

use super::*;

/// Where the chart comes from: exactly one of `repo`, `oci`, `path`, `git`.
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
    /// A chart directory in a Git repository (docs/sources.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// The chart must be signed (docs/verification.md): cosign for `oci`,
    /// a `.prov` provenance file for `repo`. A chart that fails is never
    /// given to helm: `VerificationFailed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<ChartVerification>,
}

/// A directory of a Git repository at a ref, fetched over HTTPS
/// (docs/sources.md).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// `https://host/path.git` (or `http://` for a local server).
    #[schemars(length(max = 2048))]
    pub url: String,
    /// What to check out; empty: the branch `main`.
    #[serde(default, rename = "ref")]
    pub reference: GitRef,
    /// The chart's directory in the repository (empty: its root). For
    /// `valuesSource.git`, unused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub path: String,
    /// A Secret of the HelmApp's namespace: `username` and `password`
    /// (basic auth), or `bearerToken`; `ca.crt` trusted besides the
    /// system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

/// A Git ref: at most one of its fields (none: branch `main`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 255))]
    pub branch: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 255))]
    pub tag: String,
    /// A semver range over the repository's tags (`>=1.0.0 <2`): the
    /// highest match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 255))]
    pub semver: String,
    /// A full commit id (40 hex).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^([0-9a-f]{40})?$"))]
    pub commit: String,
}

/// Where `valuesFiles` are read from when the chart is not from Git.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
}

/// How encrypted values are decrypted (docs/sources.md).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decryption {
    /// `sops`.
    #[schemars(regex(pattern = r"^sops$"))]
    pub provider: String,
    /// A Secret of the HelmApp's namespace: every key ending in
    /// `.agekey` holds age identities (`AGE-SECRET-KEY-1…` lines).
    pub secret_ref: LocalObjectReference,
    /// Accept a file whose MAC leaves something out — `mac_only_encrypted`,
    /// null or empty values (`null`, `""`, `{}`, `[]`), or a value left in
    /// the clear (by `unencrypted_suffix`, `encrypted_regex`…, whose key
    /// sops does not authenticate) — as sops itself does. Off: such a file
    /// is refused (`DecryptionFailed`, naming the path), since anyone who
    /// can write the file could add or rename those values without the key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unauthenticated: bool,
}

/// How a chart's signature is checked.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartVerification {
    /// `cosign` (an OCI chart's signature; the default) or `helm` (an HTTP
    /// repository's `.prov` file). Not read for `chart.git`.
    #[serde(default)]
    #[schemars(with = "String", regex(pattern = r"^(cosign|helm)$"))]
    pub provider: VerifyProvider,
    /// `chart.git` only (source-controller's `verify.mode`): `HEAD` — the
    /// commit's signature; `Tag` — the annotated tag's (`ref.tag` or
    /// `ref.semver`); `TagAndHEAD` — both. The keys are those of
    /// `secretRef`: `.gpg`/`.asc` OpenPGP keyrings and `.pub` SSH public
    /// keys (one per line, as in `authorized_keys`); `provider` is not read.
    #[serde(default, skip_serializing_if = "head_only")]
    #[schemars(with = "String", regex(pattern = r"^(HEAD|Tag|TagAndHEAD)$"))]
    pub mode: GitVerifyMode,
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
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.literal) || !self.literal || (has(self.targetPath) && self.targetPath != '')",
    "message": "literal needs targetPath: a whole values document is never a literal"
}]))]
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
    /// With `targetPath`: the key's content goes there verbatim, always a
    /// string (helm's `--set-literal`, Flux's `literal`) — not typed, and
    /// quotes around it kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub literal: bool,
}

/// Something that must be Ready first: a HelmApp or HelmAppSet (the
/// default kind, `apiVersion` left out), or any object named by
/// `apiVersion` and `kind` (docs/dependencies.md).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// Empty for a HelmApp or HelmAppSet; the object's API version
    /// (`postgresql.cnpg.io/v1`, `v1`) otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub api_version: String,
    /// `HelmApp` (default), `HelmAppSet`, or the object's kind.
    #[serde(default = "default_dependency_kind")]
    #[schemars(length(max = 63))]
    pub kind: String,
    pub name: String,
    /// Default: the namespace of the one that depends (ignored for a
    /// cluster-scoped kind).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// A CEL expression over `dep` (the object) and `self` (this
    /// HelmApp) that says when the dependency is ready enough; instead of
    /// `healthCheckExprs` or kstatus.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub ready_expr: String,
}

/// What a `dependsOn` entry names, read from its `apiVersion` and `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependencyTarget<'a> {
    HelmApp,
    HelmAppSet,
    /// An object of any other kind (`api_version` may be empty: an
    /// error the operator reports).
    Object {
        api_version: &'a str,
        kind: &'a str,
    },
}

/// The API group of HelmApps and HelmAppSets.
const OWN_GROUP: &str = "hossted.com";

impl Dependency {
    /// A HelmApp of that name (the namespace: the dependent's).
    pub fn helmapp(name: impl Into<String>) -> Self {
        Dependency {
            kind: "HelmApp".into(),
            name: name.into(),
            ..Default::default()
        }
    }

    /// A HelmAppSet of that name (the namespace: the dependent's).
    pub fn helmappset(name: impl Into<String>) -> Self {
        Dependency {
            kind: "HelmAppSet".into(),
            ..Dependency::helmapp(name)
        }
    }

    /// What this entry names.
    pub fn target(&self) -> DependencyTarget<'_> {
        let group = self.api_version.rsplit_once('/').map(|(g, _)| g);
        let ours = self.api_version.is_empty() || group == Some(OWN_GROUP);
        match self.kind.as_str() {
            "HelmApp" if ours => DependencyTarget::HelmApp,
            "HelmAppSet" if ours => DependencyTarget::HelmAppSet,
            kind => DependencyTarget::Object {
                api_version: &self.api_version,
                kind,
            },
        }
    }

    /// The API group of an object dependency (`""`: the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

/// How objects of one kind are judged, by CEL expressions over `self`
/// (the object): `failed` true → failed; `inProgress` true → not yet;
/// `current` true → ready; else not yet (Flux's `healthCheckExprs`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckExpr {
    #[schemars(length(max = 253))]
    pub api_version: String,
    #[schemars(length(max = 63))]
    pub kind: String,
    #[schemars(length(max = 4096))]
    pub current: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub in_progress: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub failed: String,
}

/// Whether `mode` is the default (`HEAD`): not written out.
fn head_only(mode: &GitVerifyMode) -> bool {
    *mode == GitVerifyMode::Head
}
