//! The `Hosstedproject` custom resource, `hossted.com/v1`, cluster-scoped,
//! short name `hp` — the same resource the Go operator defined, so objects
//! created for it load unchanged. The CRD (schema, status subresource,
//! printer columns) is generated from these types: see [`crd_yaml`].

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, ValidationRule,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod delivered;
pub mod helmapp;
pub mod helmappset;
pub mod reference;
pub mod values;
pub use delivered::{DecodeError, DeliveredApp, decode_apps, encode_apps};
pub use helmapp::{HelmApp, HelmAppSpec, HelmAppStatus};
pub use helmappset::{HelmAppSet, HelmAppSetSpec, HelmAppSetStatus};

/// What the operator should do for this cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "hossted.com",
    version = "v1",
    kind = "Hosstedproject",
    plural = "hosstedprojects",
    singular = "hosstedproject",
    shortname = "hp",
    status = "HosstedprojectStatus",
    printcolumn = r#"{"name":"Cluster UUID","type":"string","jsonPath":".status.clusterUUID"}"#,
    printcolumn = r#"{"name":"Apps","type":"integer","jsonPath":".status.appCount","description":"Helm releases reported"}"#,
    printcolumn = r#"{"name":"Stopped","type":"boolean","jsonPath":".spec.stop"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Last Change","type":"date","jsonPath":".status.lastReconcileTimestamp","description":"When the status last changed: a reconcile that finds nothing new writes nothing"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HosstedprojectSpec {
    /// Stop reporting: nothing is collected or sent while true.
    #[serde(default)]
    pub stop: bool,
    /// Namespaces whose Helm releases are never reported.
    #[serde(default)]
    pub deny_namespaces: Vec<String>,
    #[serde(default)]
    pub monitoring: Toggle,
    #[serde(default)]
    pub logging: Toggle,
    #[serde(default)]
    pub cve: Toggle,
    #[serde(default)]
    pub ingress: Toggle,
    /// Helm installs requested of the Go operator. Kept so that Go-era
    /// objects load and round-trip unchanged; this operator does not act on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub helm: Vec<HelmInstall>,
}

/// A Helm install requested in a Go-era spec (see [`HosstedprojectSpec::helm`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmInstall {
    #[serde(default)]
    pub release_name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub values: Vec<String>,
    #[serde(default)]
    pub repo_name: String,
    #[serde(default)]
    pub chart_name: String,
    #[serde(default)]
    pub repo_url: String,
}

/// An on/off option, reported in the cluster registration's `options_state`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Toggle {
    #[serde(default)]
    pub enable: bool,
}

/// The Hosstedproject condition the inventory writes.
pub const PROJECT_READY: &str = "Ready";
/// The Hosstedproject condition delivery writes (`False`, `DeliveryDisabled`,
/// while a project asks for delivery that does not run).
pub const PROJECT_DELIVERING: &str = "Delivering";

/// What the operator has delivered. Written only after the Hossted API
/// accepted it, so a restart neither loses nor repeats a report.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HosstedprojectStatus {
    /// `K-<uuid>`, created once and never changed.
    #[serde(
        rename = "clusterUUID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_uuid: String,
    /// RFC 3339 time of the last reconcile that changed something (one that
    /// finds nothing new writes nothing, so this is the last change).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_reconcile_timestamp: String,
    /// The releases delivered, compact: namespace → its releases as
    /// `name:revision:appUUID[:status[:h]]`, space-separated (see
    /// [`delivered`]). What is needed never to repeat a report, small enough
    /// for 10,000 releases.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub apps: BTreeMap<String, String>,
    /// Written by the Go operator: one entry per release. Read once (to keep
    /// its app UUIDs and not repeat its reports), then removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub helm_status: Vec<HelmInfo>,
    /// Written by the Go operator; removed on the first write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revision: Vec<i64>,
    /// Written by the Go operator (`namespace/name` → revision); removed on
    /// the first write.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reconcile_helm_releases: BTreeMap<String, String>,
    /// Kept from the Go operator's status; not used here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dns_updated: bool,
    /// Whether the cluster registration was delivered.
    #[serde(default)]
    pub cluster_registered: bool,
    /// The toggles the delivered registration carried: a change of
    /// `spec` toggles re-sends the registration once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_options: Option<RegisteredOptions>,
    /// How many apps `apps` holds (the `Apps` column).
    #[serde(default)]
    pub app_count: i64,
    /// The generation of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (reasons `Reporting`, `Stopped`, `ApiUnavailable`,
    /// `ApiRejected`, ...), written by the inventory; `Delivering`, written
    /// by delivery. A map list keyed by `type`: each writer applies its own
    /// entries (server-side apply) and cannot remove the other's.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The `options_state` of a delivered registration.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisteredOptions {
    #[serde(default)]
    pub monitoring: bool,
    #[serde(default)]
    pub logging: bool,
    #[serde(default)]
    pub cve_scan: bool,
    #[serde(default)]
    pub ingress: bool,
}

impl HosstedprojectStatus {
    /// What was delivered: `apps`, or for a status the Go operator wrote,
    /// its `helmStatus`. Entries that cannot be read come back as errors.
    pub fn delivered(&self) -> (Vec<DeliveredApp>, Vec<DecodeError>) {
        if self.apps.is_empty() && !self.helm_status.is_empty() {
            let apps = self
                .helm_status
                .iter()
                .map(|h| DeliveredApp {
                    namespace: h.namespace.clone(),
                    name: h.name.clone(),
                    revision: h.revision,
                    status: h.status.clone(),
                    app_uuid: h.app_uuid.clone(),
                    hossted_helm: h.hossted_helm,
                })
                .collect();
            return (apps, Vec::new());
        }
        decode_apps(&self.apps)
    }

    /// Records `apps` as what was delivered (and drops the Go operator's
    /// fields, which they replace).
    pub fn set_delivered(&mut self, apps: &[DeliveredApp]) {
        self.apps = encode_apps(apps);
        self.app_count = apps.len() as i64;
        self.helm_status.clear();
        self.revision.clear();
        self.reconcile_helm_releases.clear();
    }
}

/// One Helm release as the Go operator's `helmStatus` lists it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct HelmInfo {
    pub name: String,
    pub namespace: String,
    /// `A-<uuid>`, stable for the life of the release.
    #[serde(rename = "appUUID", default)]
    pub app_uuid: String,
    #[serde(default)]
    pub revision: i64,
    /// `info.last_deployed`, RFC 3339 with the offset Helm stored.
    #[serde(default)]
    pub updated: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub chart: String,
    #[serde(rename = "appVersion", default)]
    pub app_version: String,
    #[serde(default)]
    pub hossted_helm: bool,
}

/// The Hosstedproject that reports (and delivers) for the cluster among
/// `projects`: the oldest live one, by creation time, then name.
pub fn reporting_project<'a>(
    projects: impl IntoIterator<Item = &'a Hosstedproject>,
) -> Option<&'a Hosstedproject> {
    projects
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .min_by_key(|p| {
            (
                p.metadata.creation_timestamp.clone().map(|t| t.0),
                p.metadata.name.clone().unwrap_or_default(),
            )
        })
}

/// The Hosstedproject CustomResourceDefinition.
pub fn crd() -> CustomResourceDefinition {
    Hosstedproject::crd()
}

/// Every CustomResourceDefinition of the operator, Hosstedproject first.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![crd(), helmapp_crd(), helmappset_crd()]
}

/// The CEL rule on a HelmApp spec's `chart`: exactly one source.
fn exactly_one_chart_source() -> Option<Vec<ValidationRule>> {
    serde_json::from_value(serde_json::json!([{
        "rule": "(has(self.repo) && self.repo != '' ? 1 : 0) + (has(self.oci) && self.oci != '' ? 1 : 0) + (has(self.path) && self.path != '' ? 1 : 0) + (has(self.git) ? 1 : 0) == 1",
        "message": "set exactly one of chart.repo, chart.oci, chart.path, chart.git"
    }, {
        "rule": "!(has(self.path) && self.path != '' && has(self.verify))",
        "message": "chart.verify cannot be met by chart.path: a directory has no signature; remove verify, or use a signed chart from chart.repo or chart.oci"
    }]))
    .ok()
}

/// `spec.timeout` of at most a day: four HelmApps with a hook that never
/// ends and a `1000h` timeout would hold every helm slot for weeks.
fn timeout_at_most_a_day() -> Option<Vec<ValidationRule>> {
    serde_json::from_value(serde_json::json!([{
        "rule": "duration(self) <= duration('24h')",
        "message": "spec.timeout must be at most 24h"
    }]))
    .ok()
}

/// The schema of `object.properties[name]`, if any.
fn property<'a>(
    object: Option<&'a mut JSONSchemaProps>,
    name: &str,
) -> Option<&'a mut JSONSchemaProps> {
    object?.properties.as_mut()?.get_mut(name)
}

/// The `openAPIV3Schema.properties.spec` of every version of `crd`.
fn specs(crd: &mut CustomResourceDefinition) -> impl Iterator<Item = &mut JSONSchemaProps> {
    crd.spec.versions.iter_mut().filter_map(|v| {
        property(
            v.schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut()),
            "spec",
        )
    })
}

/// The HelmApp CustomResourceDefinition, with the CEL rules the derive
/// cannot express: exactly one chart source, a timeout of at most a day.
pub fn helmapp_crd() -> CustomResourceDefinition {
    let mut crd = HelmApp::crd();
    for spec in specs(&mut crd) {
        app_spec_rules(spec);
    }
    crd
}

/// The CEL rules of a HelmApp spec (a HelmApp's, or an app's of a set).
fn app_spec_rules(spec: &mut JSONSchemaProps) {
    if let Some(timeout) = property(Some(spec), "timeout") {
        timeout.x_kubernetes_validations = timeout_at_most_a_day();
    }
    if let Some(chart) = property(Some(spec), "chart") {
        chart.x_kubernetes_validations = exactly_one_chart_source();
    }
}

/// The HelmAppSet CustomResourceDefinition, with the CEL rules the derive
/// cannot express: app names unique, and each app's chart exactly one
/// source.
pub fn helmappset_crd() -> CustomResourceDefinition {
    let mut crd = HelmAppSet::crd();
    let unique = serde_json::json!([{
        "rule": "self.all(a, self.exists_one(b, b.name == a.name))",
        "message": "apps[].name must be unique in the set"
    }]);
    for spec in specs(&mut crd) {
        let Some(apps) = property(Some(spec), "apps") else {
            continue;
        };
        apps.x_kubernetes_validations = serde_json::from_value(unique.clone()).ok();
        let item = match apps.items.as_mut() {
            Some(JSONSchemaPropsOrArray::Schema(s)) => Some(s.as_mut()),
            _ => None,
        };
        if let Some(spec) = property(item, "spec") {
            app_spec_rules(spec);
        }
    }
    crd
}

/// Where the checked-in YAML of CRD `name` lives, relative to the
/// repository: the inventory's CRD in the base install
/// (`manifests/base/crd/`), the delivery kinds in the delivery overlay
/// (`manifests/delivery/crd/`).
pub fn crd_manifest_path(name: &str) -> String {
    let dir = if name == "hosstedprojects.hossted.com" {
        "manifests/base/crd"
    } else {
        "manifests/delivery/crd"
    };
    format!("{dir}/{name}.yaml")
}

/// One CRD as YAML, as [`crd_manifest_path`] holds it.
pub fn crd_yaml_of(crd: &CustomResourceDefinition) -> String {
    let body = serde_yaml_ng::to_string(crd).unwrap_or_else(|e| {
        // Serializing a value built from our own types cannot fail; say so
        // loudly if it ever does rather than print half a manifest.
        panic!("the generated CRD does not serialize to YAML: {e}")
    });
    format!(
        "# Generated from pkg/apis by hack/update-crds.sh (hossted-operator crd). Do not edit.\n{body}"
    )
}

/// Where the operator's own chart (`charts/hossted-operator`) holds CRD
/// `name`: a template, not `crds/` — helm never upgrades `crds/`, so
/// fields added later would never reach a cluster.
pub fn crd_chart_path(name: &str) -> String {
    format!("charts/hossted-operator/templates/crds/{name}.yaml")
}

/// One CRD as the chart's template at [`crd_chart_path`]: rendered when
/// `crds.install` (delivery's only with `delivery` among `controllers`),
/// and kept by helm on uninstall (`helm.sh/resource-policy: keep`: deleting
/// a CRD deletes every object of it).
pub fn crd_chart_template_of(crd: &CustomResourceDefinition) -> String {
    let mut crd = crd.clone();
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("helm.sh/resource-policy".into(), "keep".into());
    let condition = if crd.metadata.name.as_deref() == Some("hosstedprojects.hossted.com") {
        ".Values.crds.install".to_string()
    } else {
        "(and .Values.crds.install (has \"delivery\" .Values.controllers))".to_string()
    };
    let body = crd_yaml_of(&crd);
    format!("{{{{- if {condition} }}}}\n{body}{{{{- end }}}}\n")
}

/// The Hosstedproject CRD as YAML.
pub fn crd_yaml() -> String {
    crd_yaml_of(&crd())
}
