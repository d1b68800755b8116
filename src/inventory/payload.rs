//! The JSON bodies sent to the Hossted API (`docs/inventory.md`). Lists are
//! always present (`[]`, never `null`).

use std::collections::BTreeMap;

use serde::Serialize;

pub use crate::lean::trivy::{Summary, Vulnerability};
pub use crate::lean::workloads::SecretKeyRef;

/// `POST {api}/apps`: one Helm release.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct AppPayload {
    pub app_api_info: AppApiInfo,
    pub app_info: AppInfo,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct AppApiInfo {
    pub cluster_uuid: String,
    pub app_uuid: String,
    pub app_name: String,
    pub email_id: String,
    /// Always `k8s`.
    #[serde(rename = "type")]
    pub kind: String,
    pub hossted_helm: bool,
    /// `HOSSTED_ORG_ID`.
    pub org_id: String,
    pub options_state: AppOptionsState,
}

/// `app_api_info.options_state` (Go 0.7.6's shape).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct AppOptionsState {
    pub monitoring: MonitoringState,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct MonitoringState {
    /// `spec.monitoring.enable` (the Go operator always sends true).
    pub enabled: bool,
    /// Always empty.
    pub grafana_product_name: String,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct AppInfo {
    pub helm_info: HelmInfo,
    pub pod_info: Vec<PodInfo>,
    pub service_info: Vec<ServiceInfo>,
    pub volume_info: Vec<VolumeInfo>,
    pub ingress_info: Vec<IngressInfo>,
    pub deployment_info: Vec<DeploymentInfo>,
    pub statefulset_info: Vec<StatefulSetInfo>,
    pub configmap_info: Vec<ConfigMapInfo>,
    pub secret_info: Vec<SecretInfo>,
    pub helmvalue_info: HelmValueInfo,
    pub access_info: AccessInfo,
    pub security_info: Vec<PodSecurity>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct HelmInfo {
    pub name: String,
    pub namespace: String,
    pub revision: i64,
    pub updated: String,
    pub status: String,
    pub chart: String,
    #[serde(rename = "appVersion")]
    pub app_version: String,
    #[serde(rename = "appUUID")]
    pub app_uuid: String,
    pub hossted_helm: bool,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub status: String,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    pub name: String,
    pub namespace: String,
    pub port: i32,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct VolumeInfo {
    pub name: String,
    pub namespace: String,
    /// Requested storage in bytes.
    pub size: i64,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct IngressInfo {
    pub name: String,
    pub namespace: String,
    pub domain: String,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct DeploymentInfo {
    pub name: String,
    pub namespace: String,
    /// The first `secretKeyRef` of the pod template (`null` when none).
    #[serde(rename = "secretRef")]
    pub secret_ref: Option<SecretKeyRef>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct StatefulSetInfo {
    pub name: String,
    pub namespace: String,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ConfigMapInfo {
    pub name: String,
    /// `{}` unless `--report-configmap-data`.
    pub data: BTreeMap<String, String>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub name: String,
    pub namespace: String,
    /// Always `{}`: a Secret's values are never sent (the Go operator sends
    /// them, base64).
    pub data: BTreeMap<String, String>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct HelmValueInfo {
    pub chart_name: String,
    /// Always `{}`: user values can hold credentials.
    pub chart_values: BTreeMap<String, String>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessInfo {
    pub urls: Vec<AccessUrl>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AccessUrl {
    pub url: String,
}

/// `security_info`: one pod's containers that have a vulnerability report.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct PodSecurity {
    pub pod_name: String,
    pub pod_namespace: String,
    pub containers: Vec<ContainerSecurity>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ContainerSecurity {
    pub container_image: String,
    /// Always `k8s`.
    #[serde(rename = "type")]
    pub kind: String,
    pub summary: Summary,
    /// CRITICAL and HIGH only.
    pub vulnerabilities: Vec<Vulnerability>,
}

/// `POST {api}/clusters/{cluster_uuid}/register`.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ClusterRegistration {
    /// Always `k8s`.
    #[serde(rename = "type")]
    pub kind: String,
    pub org_id: String,
    pub context_name: String,
    pub email_id: String,
    pub options_state: OptionsState,
}

/// Mirrors `spec.{monitoring,logging,cve,ingress}.enable`.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct OptionsState {
    pub monitoring: bool,
    pub logging: bool,
    pub cve_scan: bool,
    pub ingress: bool,
}
