//! What is changed in the rendered manifests before they are applied:
//! common labels and annotations, kustomize post-renderers.

use super::*;

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
    /// objects `target` names (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
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

/// Objects a patch applies to (kustomize's selector, as Flux has it); an
/// empty field matches any. `group`, `version`, `kind`, `name` and
/// `namespace` are regular expressions matched against the whole value (a
/// plain name matches only itself); the selectors are label selector
/// strings (`app=web,tier in (a,b)`) on the rendered object's labels and
/// annotations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchTarget {
    /// The API group (`apps`; empty matches any, core included).
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
