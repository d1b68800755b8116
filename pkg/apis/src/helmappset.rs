//! `HelmAppSet` (`hossted.com/v1alpha1`, namespaced, short name `happset`):
//! a group of HelmApps delivered together — optionally in sequence — and
//! uninstalled in reverse order. Each `apps[]` entry becomes a child
//! `HelmApp` named `<set>-<name>`, owned by the set. The contract is
//! `docs/delivery.md`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::helmapp::{Dependency, HelmAppSpec};

/// The longest child name: Helm's release-name limit (a child's release
/// name defaults to its name).
pub const MAX_CHILD_NAME: usize = 53;

/// The desired group.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "hossted.com",
    version = "v1alpha1",
    kind = "HelmAppSet",
    plural = "helmappsets",
    singular = "helmappset",
    shortname = "happset",
    namespaced,
    status = "HelmAppSetStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HelmAppSetSpec {
    /// Each app depends on the one before it.
    #[serde(default)]
    pub sequenced: bool,
    /// Like `HelmApp.dependsOn`, for every app of the set (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub depends_on: Vec<Dependency>,
    /// No helm operation for any app of the set.
    #[serde(default)]
    pub suspend: bool,
    /// The change windows of every app of the set that has none of its
    /// own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_windows: Option<crate::helmapp::ChangeWindows>,
    /// The apps, in order (at most 50: bounds the CEL uniqueness check).
    #[serde(default)]
    #[schemars(length(max = 50))]
    pub apps: Vec<SetApp>,
}

/// One app of a set: the child `HelmApp` `<set>-<name>`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SetApp {
    /// Unique in the set; `<set>-<name>` is at most 53 characters.
    #[schemars(
        length(min = 1, max = 52),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    pub spec: HelmAppSpec,
}

/// What the operator sees of the set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmAppSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready apps of all, e.g. `2/3`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ready: String,
    /// `Ready`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
