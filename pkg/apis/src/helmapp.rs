//! `HelmApp` (`hossted.com/v1alpha1`, namespaced, short name `happ`): one
//! Helm release the operator installs, upgrades and uninstalls. The
//! contract is `docs/delivery.md`; the defaults below live in the
//! generated CRD's schema.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired release.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "hossted.com",
    version = "v1alpha1",
    kind = "HelmApp",
    plural = "helmapps",
    singular = "helmapp",
    shortname = "happ",
    namespaced,
    status = "HelmAppStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".status.releaseName"}"#,
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".status.targetNamespace"}"#,
    printcolumn = r#"{"name":"Chart","type":"string","jsonPath":".spec.chart.name"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.chartVersion"}"#,
    printcolumn = r#"{"name":"Latest","type":"string","jsonPath":".status.latestAvailable"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HelmAppSpec {
    /// The Helm release name (default: metadata.name): Helm's own pattern,
    /// at most 53 characters — never something helm would read as a flag.
    #[serde(default)]
    #[schemars(
        length(max = 53),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
    )]
    pub release_name: String,
    /// Where the release is installed (default: metadata.namespace).
    #[serde(default)]
    pub target_namespace: String,
    /// Create the target namespace if it does not exist.
    #[serde(default)]
    pub create_namespace: bool,
    /// Every helm action runs impersonating this ServiceAccount of the
    /// HelmApp's namespace. Empty: the operator itself in a privileged
    /// namespace (`--privileged-namespaces`), else the namespace's
    /// `--default-service-account` (`hossted-deployer`).
    #[serde(default)]
    #[schemars(
        length(max = 253),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
    )]
    pub service_account_name: String,
    pub chart: ChartSource,
    /// Inline values (any YAML object, at most 64 levels deep).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::values::deserialize"
    )]
    #[schemars(schema_with = "any_object")]
    pub values: Option<serde_json::Value>,
    /// Values from Secrets or ConfigMaps of the HelmApp's namespace, applied
    /// in order after `values`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesReference>,
    /// A base64-encoded YAML values document, applied after `valuesFrom`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub values_base64: String,
    /// Helm `--set` strings, applied last: at most 200, each at most
    /// 4 KiB, 64 path steps and list indexes up to 1,000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 200), inner(length(max = 4096)))]
    pub set: Vec<String>,
    /// Install only after these are Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<Dependency>,
    /// Ready only when the release's workloads are ready.
    #[serde(default)]
    pub wait: bool,
    /// Per helm operation, and for readiness (Go duration: `5m`, `90s`).
    #[serde(default = "default_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: String,
    /// Drift check and version-range resolution period.
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: String,
    /// No helm operation at all (deletion still uninstalls).
    #[serde(default)]
    pub suspend: bool,
    /// When helm may change the release (docs/change-windows.md): outside
    /// an allowed window, or inside a denied one, installs, upgrades,
    /// rollbacks and uninstalls wait (`OutsideChangeWindow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_windows: Option<ChangeWindows>,
    #[serde(default)]
    pub remediation: Remediation,
    /// Recreate objects of the release that were deleted (`false`: as
    /// `drift.mode: disabled`).
    #[serde(default = "yes")]
    pub drift_repair: bool,
    /// Drift of the release's objects: found by events, reported or put
    /// back.
    #[serde(default)]
    pub drift: DriftSpec,
    /// Deleting the HelmApp uninstalls the release (false: leaves it).
    #[serde(default = "yes")]
    pub uninstall_on_delete: bool,
    /// Take over a release of that name that no live HelmApp owns.
    #[serde(default)]
    pub adopt: bool,
    /// `auto` (default): a new configuration or chart version is run at
    /// once. `manual`: it waits in `status.pendingChange` until the
    /// annotation `hossted.com/approve` equals its `configHash` (drift
    /// repair and uninstall on delete are not held back).
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_approval",
        regex(pattern = r"^(auto|manual)$")
    )]
    pub approval: Approval,
    /// The chart's `crds/` directory: `Skip`, `Create` or `CreateReplace`.
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_crds",
        regex(pattern = r"^(Skip|Create|CreateReplace)$")
    )]
    pub crds: CrdPolicy,
    /// Settings of the install (the first `helm upgrade --install`).
    #[serde(default)]
    pub install: InstallSettings,
    /// Settings of every upgrade (drift repair by helm included).
    #[serde(default)]
    pub upgrade: UpgradeSettings,
    /// Settings of a rollback (remediation).
    #[serde(default)]
    pub rollback: RollbackSettings,
    /// Settings of an uninstall (deletion, remediation).
    #[serde(default)]
    pub uninstall: UninstallSettings,
    /// Helm's `--history-max` on every upgrade and rollback: the storage
    /// revisions kept (0: all). Default 5.
    // Decoded without it, 5 too: a spec the operator builds must equal
    // the one the apiserver defaults (children are compared whole).
    #[serde(
        default = "default_max_history",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub max_history: Option<i32>,
    /// `helm test` after each install and upgrade.
    #[serde(default)]
    pub test: TestSettings,
    /// Labels and annotations added to every rendered object (after the
    /// post-renderers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,
    /// Applied, in order, to what helm renders, inside the helm run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_renderers: Vec<PostRenderer>,
}

impl HelmAppSpec {
    /// `maxHistory`, 5 when unset.
    pub fn max_history(&self) -> i32 {
        self.max_history.unwrap_or(DEFAULT_MAX_HISTORY).max(0)
    }

    /// Whether helm's output must go through the post-renderer.
    pub fn post_renders(&self) -> bool {
        !self.post_renderers.is_empty()
            || self
                .common_metadata
                .as_ref()
                .is_some_and(|m| !m.labels.is_empty() || !m.annotations.is_empty())
    }

    /// The drift mode in force: `driftRepair: false` is `disabled`; a
    /// spelling the schema does not allow is the default, `warn`.
    pub fn drift_mode(&self) -> DriftMode {
        match self.drift.mode {
            _ if !self.drift_repair => DriftMode::Disabled,
            DriftMode::Unknown => DriftMode::Warn,
            mode => mode,
        }
    }
}

/// The storage revisions kept when `maxHistory` is unset.
pub const DEFAULT_MAX_HISTORY: i32 = 5;

/// `spec.install`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallSettings {
    /// `--no-hooks`.
    #[serde(default)]
    pub disable_hooks: bool,
    /// `--skip-schema-validation`.
    #[serde(default)]
    pub skip_schema_validation: bool,
    /// helm 4's `--server-side`: the objects are applied by the API server
    /// (field ownership per manager). Default true, helm 4's; helm 3
    /// applies client-side whatever this says.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub server_side_apply: bool,
}

impl Default for InstallSettings {
    fn default() -> Self {
        InstallSettings {
            disable_hooks: false,
            skip_schema_validation: false,
            server_side_apply: true,
        }
    }
}

fn default_true() -> bool {
    true
}

/// `spec.upgrade`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeSettings {
    /// `--no-hooks`.
    #[serde(default)]
    pub disable_hooks: bool,
    /// `--force`: objects are replaced (deleted and made again) where a
    /// patch would not do.
    #[serde(default)]
    pub force: bool,
    /// `--cleanup-on-fail`: objects a failed upgrade made are deleted.
    #[serde(default)]
    pub cleanup_on_fail: bool,
    /// `--skip-schema-validation`.
    #[serde(default)]
    pub skip_schema_validation: bool,
    /// helm 4's `--server-side`: `auto` (default) applies as the release's
    /// previous revision was applied — client-side for a release helm 3
    /// made — `enabled` switches to server-side apply, `disabled` to
    /// client-side. helm 3 applies client-side whatever this says.
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_server_side_apply",
        regex(pattern = r"^(auto|enabled|disabled)$")
    )]
    pub server_side_apply: ServerSideApply,
}

fn default_server_side_apply() -> String {
    ServerSideApply::default().as_str().into()
}

/// `spec.rollback`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackSettings {
    /// `--no-hooks`.
    #[serde(default)]
    pub disable_hooks: bool,
    /// `--force`.
    #[serde(default)]
    pub force: bool,
    /// `--cleanup-on-fail`.
    #[serde(default)]
    pub cleanup_on_fail: bool,
}

/// `spec.uninstall`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UninstallSettings {
    /// `--no-hooks`.
    #[serde(default)]
    pub disable_hooks: bool,
    /// `--keep-history`: an `uninstalled` entry stays in Helm's storage.
    #[serde(default)]
    pub keep_history: bool,
    /// `--cascade`: `background` (default), `foreground` or `orphan`.
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_propagation",
        regex(pattern = r"^(background|foreground|orphan)$")
    )]
    pub deletion_propagation: DeletionPropagation,
}

/// `spec.test`: `helm test` after each install and upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestSettings {
    #[serde(default)]
    pub enable: bool,
    /// A failed test is reported, not remediated.
    #[serde(default)]
    pub ignore_failures: bool,
    /// `helm test --timeout` (default: `spec.timeout`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+)?$"))]
    pub timeout: String,
}

/// `spec.commonMetadata`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct CommonMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One post-renderer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PostRenderer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeRenderer>,
}

/// Kustomize-style changes of the rendered objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct KustomizeRenderer {
    /// Each a JSON 6902 operation list or a JSON merge patch, on the
    /// objects `target` names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<KustomizePatch>,
    /// Container images replaced by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<KustomizeImage>,
}

/// A patch and the objects it applies to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct KustomizePatch {
    /// A JSON (or YAML) list of JSON 6902 operations, or a JSON merge patch
    /// object.
    #[schemars(length(max = 65536))]
    pub patch: String,
    /// Which objects (empty fields: any; none: every object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PatchTarget>,
}

/// Objects a patch applies to; an empty field matches any.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PatchTarget {
    /// The API group (`apps`; empty matches any, core included).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// An image override (kustomize's `images`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeImage {
    /// The image name as the chart has it, without tag or digest.
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub new_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub new_tag: String,
    /// `sha256:…`; wins over `newTag`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
}

/// What is done about objects of the release that differ from its
/// manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftSpec {
    /// `enabled`: edited fields are put back; `warn` (default): reported
    /// only; `disabled`: nothing, not even deleted objects.
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_drift_mode",
        regex(pattern = r"^(enabled|warn|disabled)$")
    )]
    pub mode: DriftMode,
    /// Fields never counted as drift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<DriftIgnore>,
}

/// JSON pointers left out of drift, on every object or the ones `target`
/// names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftIgnore {
    /// JSON pointers (`/spec/replicas`); a pointer covers what is below it.
    #[schemars(length(max = 64), inner(regex(pattern = r"^(/[^/]*)+$")))]
    pub paths: Vec<String>,
    /// Which objects (empty fields: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<DriftTarget>,
}

/// Objects an ignore rule applies to; an empty field matches any.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DriftTarget {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

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

/// When changes may run: every time is allowed when `allow` is empty; a
/// `deny` window wins over an `allow` one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeWindows {
    /// The IANA time zone the schedules are read in (default `UTC`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time_zone: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub allow: Vec<ChangeWindow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub deny: Vec<ChangeWindow>,
    /// Drift is repaired outside the windows too.
    #[serde(default)]
    pub repair_anytime: bool,
}

/// A window: opens at each time `schedule` names, for `duration`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ChangeWindow {
    /// A cron expression: five fields (minute hour day month weekday), or
    /// six with seconds first.
    #[schemars(length(max = 128))]
    pub schedule: String,
    /// How long each opening lasts (Go syntax: `2h`, `30m`; at most `744h`).
    #[schemars(length(max = 32))]
    pub duration: String,
}

/// A chart's verified signature, as `kubectl hossted verify` shows it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationStatus {
    /// `cosign` or `helm`.
    pub provider: String,
    /// What was verified: the OCI manifest's or the archive's digest.
    pub digest: String,
    /// Who signed: a key (its Secret key and fingerprint) or an identity.
    pub signer: String,
    /// When the operator verified it (RFC 3339).
    pub verified_at: String,
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

/// What a failed upgrade leads to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Remediation {
    /// Retries of a failed upgrade before `onFailure`; -1: retry for ever
    /// (with backoff).
    #[serde(default = "default_retries")]
    #[schemars(range(min = -1))]
    pub retries: i32,
    /// `rollback`, `uninstall` or `none`, once the retries are spent.
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_on_failure",
        regex(pattern = r"^(rollback|uninstall|none)$")
    )]
    pub on_failure: OnFailure,
}

impl Default for Remediation {
    fn default() -> Self {
        Remediation {
            retries: default_retries(),
            on_failure: OnFailure::default(),
        }
    }
}

/// Declares a string enum of the spec: its JSON spellings are given, and
/// any other spelling decodes as `Unknown` — a stored object the schema no
/// longer allows still loads, and gets a condition naming the field
/// instead of failing the whole list. The CRD keeps the field a string with
/// a pattern (`#[schemars(with = "String")]` on the field).
macro_rules! spelled {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? } default $default:ident) => {
        $(#[$doc])*
        #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant,)+
            /// A spelling the schema does not allow.
            #[serde(other)]
            Unknown,
        }
        impl Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }
        impl $name {
            /// The JSON spelling (`"?"` for `Unknown`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Unknown => "?",
                }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

spelled!(
    /// The chart's `crds/` directory: helm skips it, creates it (helm's
    /// own behaviour), or the operator applies it on every run.
    CrdPolicy { Skip = "Skip", Create = "Create", CreateReplace = "CreateReplace" } default Create
);
spelled!(
    /// Who checks a chart's signature.
    VerifyProvider { Cosign = "cosign", Helm = "helm" } default Cosign
);
spelled!(
    /// Where a `valuesFrom` document is.
    ValuesKind { Secret = "Secret", ConfigMap = "ConfigMap" } default Secret
);
spelled!(
    /// What a `dependsOn` entry names.
    DependencyKind { HelmApp = "HelmApp", HelmAppSet = "HelmAppSet" } default HelmApp
);
spelled!(
    /// What is done about drift.
    DriftMode { Enabled = "enabled", Warn = "warn", Disabled = "disabled" } default Warn
);
spelled!(
    /// `helm uninstall --cascade`.
    DeletionPropagation { Background = "background", Foreground = "foreground", Orphan = "orphan" } default Background
);
spelled!(
    /// Whether a new configuration runs at once or waits for approval.
    Approval { Auto = "auto", Manual = "manual" } default Auto
);
spelled!(
    /// How an upgrade applies its objects (helm 4's `--server-side`).
    ServerSideApply { Auto = "auto", Enabled = "enabled", Disabled = "disabled" } default Auto
);
spelled!(
    /// What is done once an upgrade's retries are spent.
    OnFailure { Rollback = "rollback", Uninstall = "uninstall", None = "none" } default Rollback
);

/// What the operator did and sees.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmAppStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_namespace: String,
    /// The resolved chart version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_version: String,
    /// `sha256:<hex>` of the chart archive the release was last installed
    /// or upgraded from (for a chart by path: of its files).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_digest: String,
    /// The signature check of the chart last installed or upgraded
    /// (`chart.verify`): what was verified, against what, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationStatus>,
    /// The newest stable version the chart's repository or registry
    /// offers, also outside a pinned version or range (checked with each
    /// resolution, each `interval`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_available: String,
    /// While a change waits for a change window: when the next one opens
    /// (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_window: String,
    /// When a version range was last resolved.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_resolved: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub app_version: String,
    #[serde(default)]
    pub revision: i64,
    /// The hash of everything that decides the release's content.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_hash: String,
    /// `install`, `upgrade`, `rollback`, `uninstall`, `unlock` or `none`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_action: String,
    /// Consecutive failed attempts of the current configuration.
    #[serde(default)]
    pub failures: i32,
    /// The `hossted.com/reconcile-at` value last acted on (a new value
    /// restarts exhausted retries).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_handled_reconcile_at: String,
    /// The `hossted.com/force-at` value last acted on (a new value runs
    /// one upgrade with `--force`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_handled_force_at: String,
    /// The last 5 operations, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
    /// Every revision of the release in Helm's storage after the
    /// operator's last action on it, with the digest of its payload: each
    /// revision helm may read is checked against this before any helm run
    /// (reason `StorageTampered` when one differs or is not here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage_digests: Vec<StorageDigest>,
    /// Objects of the release that drifted (at most 20, newest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<DriftedObject>,
    /// With `approval: manual`: the change that waits for
    /// `hossted.com/approve` (no Secret value is ever in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_change: Option<PendingChange>,
    /// Every object of the current release, from its manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    /// The revision `inventory` was read from.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inventory_revision: i64,
    /// `Ready`, `Released`, `Drifted`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A change waiting for approval: what it would run and what it would
/// change, computed by the render `kubectl hossted diff` shows.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingChange {
    /// The chart version it would install.
    pub chart_version: String,
    /// Its configuration hash: the value `hossted.com/approve` must have.
    pub config_hash: String,
    /// The objects it adds, changes and removes: `Kind name`, or `Kind
    /// namespace/name` where the manifest gives a namespace.
    #[serde(default)]
    pub objects: PendingObjects,
    /// Lines of its unified diff (added and removed), Secret values masked.
    #[serde(default)]
    pub diff_lines: i64,
    /// When it was computed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub since: String,
}

/// The objects a pending change touches, at most 50 names each (the
/// `AwaitingApproval` Event gives the whole counts).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PendingObjects {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

/// An object of the release whose fields differ from its manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DriftedObject {
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// JSON pointers of the fields that differ.
    #[serde(default)]
    pub fields: Vec<String>,
}

/// One object of the release.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub kind: String,
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// A digest of the live object when drift was last decided on it
    /// (empty: not yet): an object whose digest has not moved since is not
    /// checked again.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checked: String,
}

/// One revision of the release as the operator left it in Helm's storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageDigest {
    pub revision: i64,
    /// `sha256:<hex>` of its storage's `data.release`.
    pub digest: String,
    /// `sha256:<hex>` of the release without its `info` (status, times,
    /// description): what helm itself rewrites when it supersedes a
    /// revision leaves this unchanged, an edit of what helm acts on does
    /// not (empty: recorded before this was).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content: String,
}

/// One helm operation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub action: String,
    #[serde(default)]
    pub revision: i64,
    #[serde(default)]
    pub chart_version: String,
    #[serde(default)]
    pub config_hash: String,
    /// `succeeded` or `failed`.
    pub result: String,
    /// RFC 3339.
    pub time: String,
    /// `sha256:<hex>` of the newest revision in Helm's storage after this
    /// operation (`data.release`): checked before the storage is trusted
    /// again (reason `StorageTampered` when it differs).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_digest: String,
}

fn yes() -> bool {
    true
}
fn default_timeout() -> String {
    "5m".into()
}
fn default_interval() -> String {
    "10m".into()
}
fn default_crds() -> String {
    "Create".into()
}
fn default_values_key() -> String {
    "values.yaml".into()
}
fn default_dependency_kind() -> String {
    "HelmApp".into()
}
fn default_approval() -> String {
    "auto".into()
}
fn default_drift_mode() -> String {
    "warn".into()
}
fn is_zero(n: &i64) -> bool {
    *n == 0
}
fn default_retries() -> i32 {
    3
}
fn default_max_history() -> Option<i32> {
    Some(DEFAULT_MAX_HISTORY)
}
fn default_propagation() -> String {
    "background".into()
}
fn default_on_failure() -> String {
    "rollback".into()
}

/// Inline values: any object, kept as written.
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
