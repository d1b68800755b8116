//! What is done about objects of the release changed or deleted by hand.

use super::*;

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
