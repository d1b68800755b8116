//! The JSON bodies sent to the Hossted API (`../shared/API.md`). Lists are
//! always present (`[]`, never `null`).

use serde::Serialize;

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
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct AppInfo {
    pub helm_info: HelmInfo,
    pub pod_info: Vec<PodInfo>,
    pub service_info: Vec<ServiceInfo>,
    pub volume_info: Vec<VolumeInfo>,
    pub ingress_info: Vec<IngressInfo>,
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
