//! `HelmApp` (`hossted.com/v1alpha1`, namespaced, short name `happ`): one
//! Helm release the operator installs, upgrades and uninstalls. The
//! contract is `docs/delivery.md`; the defaults below live in the
//! generated CRD's schema.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod actions;
mod drift;
mod render;
mod source;
mod status;
mod windows;

pub use actions::*;
pub use drift::*;
pub use render::*;
pub use source::*;
pub use status::*;
pub use windows::*;

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
    printcolumn = r#"{"name":"Chart","type":"string","jsonPath":".status.chartName"}"#,
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
    /// The release goes to the cluster this kubeconfig names instead of
    /// the operator's own (Flux's `kubeConfig`; docs/remote-clusters.md).
    /// `serviceAccountName` is then impersonated in that cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<KubeConfigReference>,
    pub chart: ChartSource,
    /// Inline values (any YAML object, at most 64 levels deep).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::values::deserialize"
    )]
    #[schemars(schema_with = "any_object")]
    pub values: Option<serde_json::Value>,
    /// Values files from `chart.git` (else from `valuesSource.git`),
    /// paths from the repository's root, merged first, in order
    /// (docs/sources.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 1024)))]
    pub values_files: Vec<String>,
    /// A missing values file is skipped instead of an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_missing_values_files: bool,
    /// The Git source of `valuesFiles` when the chart is not from Git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_source: Option<ValuesSource>,
    /// SOPS-encrypted values files and `valuesFrom` keys are decrypted
    /// with these keys (docs/sources.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
    /// Values from Secrets or ConfigMaps of the HelmApp's namespace, applied
    /// in order after `values` (before it with `inlineValuesLast`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesReference>,
    /// `values` merged after `valuesFrom` instead of before (Flux's order:
    /// an inline value wins over the same key from a Secret or ConfigMap).
    /// `convert` sets it for a HelmRelease that has both.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline_values_last: bool,
    /// A base64-encoded YAML values document, applied after `valuesFrom`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub values_base64: String,
    /// Helm `--set` strings, applied last: at most 200, each at most
    /// 4 KiB, 64 path steps and list indexes up to 1,000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 200), inner(length(max = 4096)))]
    pub set: Vec<String>,
    /// Install only after these are Ready (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub depends_on: Vec<Dependency>,
    /// CEL health checks by kind, for the release's own objects (with
    /// `wait`) and for `dependsOn` objects: instead of kstatus for that
    /// kind (docs/dependencies.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub health_check_exprs: Vec<HealthCheckExpr>,
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
    /// Settings of the install (the first run: `helm install` of a release
    /// with no revision).
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
    /// Applied, in order, to what helm renders, inside the helm run (at
    /// most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub post_renderers: Vec<PostRenderer>,
    /// Whether the post-renderers (and `commonMetadata`) change the
    /// chart's hooks too (Flux's `postRenderStrategy`, docs/helm.md):
    /// `combined` (default, helm 4's): hooks and templates alike;
    /// `nohooks` (helm 3's): hooks stay as the chart has them; `separate`:
    /// hooks and templates each on their own — the same objects as
    /// `combined`, since every change here is made object by object.
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_post_render_strategy",
        regex(pattern = r"^(nohooks|combined|separate)$")
    )]
    pub post_render_strategy: PostRenderStrategy,
}

impl HelmApp {
    /// What the chart is called where a person reads it (the CHART column
    /// of `kubectl hossted get`, the web view): its own name as the last
    /// install or upgrade made the release (`status.chartName`, from its
    /// Chart.yaml), else the spec's name, else the last part of its OCI
    /// reference, Git path or local path.
    pub fn chart_label(&self) -> &str {
        if let Some(name) = self
            .status
            .as_ref()
            .map(|s| s.chart_name.as_str())
            .filter(|n| !n.is_empty())
        {
            return name;
        }
        let c = &self.spec.chart;
        fn last(s: &str) -> Option<&str> {
            s.trim_end_matches('/')
                .rsplit('/')
                .next()
                .filter(|p| !p.is_empty())
        }
        if !c.name.is_empty() {
            return &c.name;
        }
        last(&c.oci)
            .or_else(|| c.git.as_ref().and_then(|g| last(&g.path)))
            .or_else(|| last(&c.path))
            .unwrap_or("-")
    }
}

impl HelmAppSpec {
    /// Whether `wait` waits for the release's Jobs, after a run whose
    /// action was `last_action` (`status.lastAction`): an install's
    /// `disableWaitForJobs`, a rollback's, or else an upgrade's.
    pub fn waits_for_jobs(&self, last_action: &str) -> bool {
        if HistoryAction::Install.as_str() == last_action {
            !self.install.disable_wait_for_jobs
        } else if HistoryAction::Rollback.as_str() == last_action {
            !self.rollback.disable_wait_for_jobs
        } else {
            !self.upgrade.disable_wait_for_jobs
        }
    }

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
    /// What of a Git chart's commit is verified (`chart.git` with
    /// `chart.verify`): the commit's own signature, the annotated tag's, or
    /// both.
    GitVerifyMode { Head = "HEAD", Tag = "Tag", TagAndHead = "TagAndHEAD" } default Head
);
spelled!(
    /// Where a `valuesFrom` document is.
    ValuesKind { Secret = "Secret", ConfigMap = "ConfigMap" } default Secret
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
    /// What follows a failed install or upgrade (Flux's strategy names):
    /// remediation (`spec.remediation`), or the same action again at
    /// `retryInterval`, for ever, with no remediation.
    StrategyName { RemediateOnFailure = "RemediateOnFailure", RetryOnFailure = "RetryOnFailure" } default RemediateOnFailure
);
spelled!(
    /// Which rendered objects post-rendering changes (Flux's
    /// `postRenderStrategy`).
    PostRenderStrategy { NoHooks = "nohooks", Combined = "combined", Separate = "separate" } default Combined
);
spelled!(
    /// What an upgrade to a chart of another name does (Flux's
    /// `chartNameChangeStrategy`): uninstall the release and install the
    /// new chart, or upgrade in place.
    ChartNameChangeStrategy { Reinstall = "Reinstall", InPlaceUpdate = "InPlaceUpdate" } default Reinstall
);
spelled!(
    /// What is done once an upgrade's retries are spent.
    OnFailure { Rollback = "rollback", Uninstall = "uninstall", None = "none" } default Rollback
);

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
fn default_post_render_strategy() -> String {
    "combined".into()
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

/// A remote cluster's kubeconfig (docs/remote-clusters.md).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigReference {
    pub secret_ref: KubeConfigSecretRef,
}

/// A key of a Secret in the HelmApp's namespace, read as the HelmApp's
/// identity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigSecretRef {
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// The key holding the kubeconfig (empty: `value`, then `value.yaml`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253), regex(pattern = r"^([-._a-zA-Z0-9]+)?$"))]
    pub key: String,
}
