//! How helm's actions run: install, upgrade, rollback, uninstall and test
//! settings, and what a failed upgrade leads to.

use super::*;

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
    /// `--disable-openapi-validation`: the rendered objects are not checked
    /// against the API server's OpenAPI schema before they are applied
    /// (the API server still checks what it stores).
    #[serde(default, rename = "disableOpenAPIValidation")]
    pub disable_openapi_validation: bool,
    /// helm 4's `--server-side`: the objects are applied by the API server
    /// (field ownership per manager). Default true, helm 4's; helm 3
    /// applies client-side whatever this says.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub server_side_apply: bool,
    /// helm's `--timeout` for an install (default: `spec.timeout`), bounded
    /// by the operator's `--max-helm-timeout` as that one is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+)?$"))]
    pub timeout: String,
    /// helm 4's `--force-conflicts` whenever the objects are applied
    /// server-side: a field another manager owns (a hand edit, `kubectl
    /// scale`, an HPA's `spec.replicas`) is taken back to the chart's value
    /// instead of failing the run with a conflict. Default true: Flux
    /// always forces conflicts on server-side apply. False: such a field
    /// fails the run (`InstallFailed`) until its manager gives it up.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub force_conflicts: bool,
    /// With `spec.wait`, Jobs are not waited for (Flux's
    /// `disableWaitForJobs`): the revision this action made is Ready once
    /// its other objects are, whether or not its Jobs have completed.
    #[serde(default)]
    pub disable_wait_for_jobs: bool,
    /// What follows a failure of this action (Flux's `strategy`; default
    /// `RemediateOnFailure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ActionStrategy>,
}

impl Default for InstallSettings {
    fn default() -> Self {
        InstallSettings {
            disable_hooks: false,
            skip_schema_validation: false,
            disable_openapi_validation: false,
            server_side_apply: true,
            timeout: String::new(),
            force_conflicts: true,
            disable_wait_for_jobs: false,
            strategy: None,
        }
    }
}

fn default_true() -> bool {
    true
}

/// `spec.upgrade`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
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
    /// `--disable-openapi-validation`: the rendered objects are not checked
    /// against the API server's OpenAPI schema before they are applied
    /// (the API server still checks what it stores).
    #[serde(default, rename = "disableOpenAPIValidation")]
    pub disable_openapi_validation: bool,
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
    /// helm's `--timeout` for an upgrade (and a drift repair, an upgrade too) (default: `spec.timeout`), bounded
    /// by the operator's `--max-helm-timeout` as that one is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+)?$"))]
    pub timeout: String,
    /// helm 4's `--force-conflicts` whenever the objects are applied
    /// server-side: a field another manager owns (a hand edit, `kubectl
    /// scale`, an HPA's `spec.replicas`) is taken back to the chart's value
    /// instead of failing the run with a conflict. Default true: Flux
    /// always forces conflicts on server-side apply. False: such a field
    /// fails the run (`UpgradeFailed`) until its manager gives it up.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub force_conflicts: bool,
    /// With `spec.wait`, Jobs are not waited for (Flux's
    /// `disableWaitForJobs`): the revision this action made is Ready once
    /// its other objects are, whether or not its Jobs have completed.
    #[serde(default)]
    pub disable_wait_for_jobs: bool,
    /// What follows a failure of this action (Flux's `strategy`; default
    /// `RemediateOnFailure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ActionStrategy>,
    /// When the chart's name differs from the release's (Flux's
    /// `chartNameChangeStrategy`): `Reinstall` (default, as Flux's)
    /// uninstalls the release — its objects go, a PersistentVolumeClaim of
    /// the chart's among them — and installs the new chart as revision 1;
    /// `InPlaceUpdate` upgrades the release to it (docs/delivery.md).
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_chart_name_change_strategy",
        regex(pattern = r"^(Reinstall|InPlaceUpdate)$")
    )]
    pub chart_name_change_strategy: ChartNameChangeStrategy,
}

impl Default for UpgradeSettings {
    fn default() -> Self {
        UpgradeSettings {
            disable_hooks: false,
            force: false,
            cleanup_on_fail: false,
            skip_schema_validation: false,
            disable_openapi_validation: false,
            server_side_apply: ServerSideApply::default(),
            timeout: String::new(),
            force_conflicts: true,
            disable_wait_for_jobs: false,
            strategy: None,
            chart_name_change_strategy: ChartNameChangeStrategy::default(),
        }
    }
}

fn default_chart_name_change_strategy() -> String {
    ChartNameChangeStrategy::default().as_str().into()
}

fn default_server_side_apply() -> String {
    ServerSideApply::default().as_str().into()
}

/// `spec.install.strategy` / `spec.upgrade.strategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.retryInterval) || self.name == 'RetryOnFailure'",
    "message": "retryInterval can only be set when name is RetryOnFailure"
}]))]
pub struct ActionStrategy {
    /// `RemediateOnFailure` (default): a failed install is uninstalled
    /// before it is tried again, a failed upgrade retried with backoff and
    /// then remediated (`spec.remediation`). `RetryOnFailure`: the same
    /// action is tried again every `retryInterval`, for ever, with no
    /// uninstall, rollback or exhaustion.
    #[schemars(
        with = "String",
        regex(pattern = r"^(RemediateOnFailure|RetryOnFailure)$")
    )]
    pub name: StrategyName,
    /// How long after a failure `RetryOnFailure` tries again (default
    /// `5m`, Flux's); refused with `RemediateOnFailure`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+)?$"))]
    pub retry_interval: String,
}

/// `spec.rollback`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
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
    /// helm 4's `--server-side` for a rollback: `auto` (default) applies as
    /// the revision rolled back to was applied, `enabled` server-side,
    /// `disabled` client-side.
    #[serde(default)]
    #[schemars(
        with = "String",
        default = "default_server_side_apply",
        regex(pattern = r"^(auto|enabled|disabled)$")
    )]
    pub server_side_apply: ServerSideApply,
    /// helm's `--timeout` for a rollback (default: `spec.timeout`), bounded
    /// by the operator's `--max-helm-timeout` as that one is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+)?$"))]
    pub timeout: String,
    /// helm 4's `--force-conflicts` whenever the objects are applied
    /// server-side: a field another manager owns (a hand edit, `kubectl
    /// scale`, an HPA's `spec.replicas`) is taken back to the chart's value
    /// instead of failing the run with a conflict. Default true: Flux
    /// always forces conflicts on server-side apply. False: such a field
    /// fails the rollback until its manager gives it up.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub force_conflicts: bool,
    /// helm's `--wait` (helm 4: its `watcher`): the rollback succeeds only
    /// once the objects it returns to are ready, within its timeout (Flux's
    /// rollback without `disableWait`). Default false: the rollback ends
    /// when helm has applied them.
    #[serde(default)]
    pub wait: bool,
    /// Jobs are not waited for after a rollback (Flux's
    /// `disableWaitForJobs`): no `--wait-for-jobs` with `wait`, and with
    /// `spec.wait` the release is Ready once its other objects are.
    #[serde(default)]
    pub disable_wait_for_jobs: bool,
}

impl Default for RollbackSettings {
    fn default() -> Self {
        RollbackSettings {
            disable_hooks: false,
            force: false,
            cleanup_on_fail: false,
            server_side_apply: ServerSideApply::default(),
            timeout: String::new(),
            force_conflicts: true,
            wait: false,
            disable_wait_for_jobs: false,
        }
    }
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
    /// helm's `--timeout` for an uninstall (default: `spec.timeout`), bounded
    /// by the operator's `--max-helm-timeout` as that one is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+)?$"))]
    pub timeout: String,
    /// helm's `--wait`: the uninstall ends once its objects are gone, within
    /// its timeout (Flux's uninstall without `disableWait`). Default false:
    /// it ends when helm has asked for their deletion.
    #[serde(default)]
    pub wait: bool,
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
    /// Which test hooks run (helm's `--filter`, Flux's `test.filters`):
    /// with a filter naming a test, only the named ones run; `exclude`
    /// leaves a test out. Empty: every test.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub filters: Vec<TestFilter>,
}

/// One entry of `spec.test.filters`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestFilter {
    /// The test hook's name (its object's `metadata.name`).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Leave this test out instead of running only the named ones.
    #[serde(default)]
    pub exclude: bool,
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
