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
    /// Fields never counted as drift (at most 64 rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
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

/// Objects an ignore rule applies to (Flux's drift ignore target); an
/// empty field matches any. `group`, `version`, `kind`, `name` and
/// `namespace` are regular expressions matched against the whole value
/// (`web-.*`; a plain name matches itself); the selectors are label
/// selector strings (`app=web,tier in (a,b)`) matched against the labels
/// and annotations the chart renders for the object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftTarget {
    /// The API group (`apps`; the core group is empty, matched by `^$`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 63))]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub label_selector: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub annotation_selector: String,
}
