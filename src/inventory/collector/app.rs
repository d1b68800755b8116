//! One release's app: its status entry and its payload, from its members
//! in the caches (docs/inventory.md).

use std::sync::Arc;

use apis::HelmInfo as StatusHelmInfo;
use cache::Store;
use kube::Resource;

use crate::inventory::payload::{
    AccessInfo, AccessUrl, AppApiInfo, AppInfo, AppOptionsState, AppPayload, ConfigMapInfo,
    ContainerSecurity, DeploymentInfo, HelmInfo, HelmValueInfo, IngressInfo, MonitoringState,
    PodInfo, PodSecurity, SecretInfo, ServiceInfo, StatefulSetInfo, VolumeInfo,
};
use crate::lean::helm::ReleaseSummary;
use crate::lean::kinds::Pod;
use crate::lean::objects::{Labelled, MANAGED_BY_LABEL};

use super::caches::{Caches, Context, RELEASE_INDEX, WORKLOAD_INDEX, app_uuid, workload_key};

fn members<K: Resource + Labelled + 'static>(store: &Store<K>, key: &str) -> Vec<Arc<K>> {
    let mut found: Vec<Arc<K>> = store
        .by_index(RELEASE_INDEX, key)
        .into_iter()
        .filter(|o| o.label(MANAGED_BY_LABEL) == "Helm")
        .collect();
    found.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    found
}

fn name_of(meta: &kube::api::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// The release's `helm_info`, with its app UUID.
pub(super) fn helm_info(
    c: &Caches,
    ctx: &Context<'_>,
    namespace: &str,
    r: &ReleaseSummary,
) -> StatusHelmInfo {
    StatusHelmInfo {
        name: r.name.clone(),
        namespace: namespace.to_string(),
        app_uuid: app_uuid(c, ctx, namespace, r),
        revision: r.version,
        updated: r.updated.clone(),
        status: r.status.to_string(),
        chart: r.chart.clone(),
        app_version: r.app_version.clone(),
        hossted_helm: r.hossted_helm,
    }
}

/// The payload of the release `s` describes.
pub(super) fn payload(c: &Caches, ctx: &Context<'_>, s: &StatusHelmInfo) -> AppPayload {
    let helm_info = HelmInfo {
        name: s.name.clone(),
        namespace: s.namespace.clone(),
        revision: s.revision,
        updated: s.updated.clone(),
        status: s.status.clone(),
        chart: s.chart.clone(),
        app_version: s.app_version.clone(),
        app_uuid: s.app_uuid.clone(),
        hossted_helm: s.hossted_helm,
    };
    AppPayload {
        app_api_info: app_api_info(ctx, &s.app_uuid, &s.name, s.hossted_helm),
        app_info: app_info(c, ctx, s, helm_info),
    }
}

/// What the release is made of: its members in the caches (docs/inventory.md).
fn app_info(c: &Caches, ctx: &Context<'_>, s: &StatusHelmInfo, helm_info: HelmInfo) -> AppInfo {
    let namespace = s.namespace.as_str();
    let key = format!("{namespace}/{}", s.name);
    let ns = || namespace.to_string();
    let pods = members(&c.pods, &key);
    let ingresses = members(&c.ingresses, &key);
    AppInfo {
        helm_info,
        pod_info: pods.iter().map(|p| pod_info(p, namespace)).collect(),
        service_info: members(&c.services, &key)
            .iter()
            .map(|s| ServiceInfo {
                name: name_of(&s.metadata),
                namespace: ns(),
                port: s.port,
            })
            .collect(),
        volume_info: volumes(c, namespace, &key),
        ingress_info: ingresses
            .iter()
            .map(|i| IngressInfo {
                name: name_of(&i.metadata),
                namespace: ns(),
                domain: i.domain().to_string(),
            })
            .collect(),
        deployment_info: members(&c.deployments, &key)
            .iter()
            .map(|d| DeploymentInfo {
                name: name_of(&d.metadata),
                namespace: ns(),
                secret_ref: d.secret_ref.clone(),
            })
            .collect(),
        statefulset_info: members(&c.statefulsets, &key)
            .iter()
            .map(|s| StatefulSetInfo {
                name: name_of(&s.metadata),
                namespace: ns(),
            })
            .collect(),
        configmap_info: members(&c.configmaps, &key)
            .iter()
            .map(|m| ConfigMapInfo {
                name: name_of(&m.metadata),
                data: m.data.clone().unwrap_or_default(),
            })
            .collect(),
        secret_info: members(&c.secrets, &key)
            .iter()
            .map(|s| SecretInfo {
                name: name_of(&s.metadata),
                namespace: ns(),
                data: Default::default(),
            })
            .collect(),
        helmvalue_info: HelmValueInfo {
            chart_name: s.chart.clone(),
            chart_values: Default::default(),
        },
        access_info: AccessInfo {
            urls: access_urls(&ingresses),
        },
        security_info: if ctx.cve {
            security(c, namespace, &pods)
        } else {
            Vec::new()
        },
    }
}

fn pod_info(p: &Pod, namespace: &str) -> PodInfo {
    PodInfo {
        name: name_of(&p.metadata),
        namespace: namespace.to_string(),
        image: p.image().to_string(),
        status: p.phase.clone(),
    }
}

/// Volumes come from StatefulSet claim templates, which carry the instance
/// label but not managed-by: no managed-by filter here (docs/inventory.md).
fn volumes(c: &Caches, namespace: &str, key: &str) -> Vec<VolumeInfo> {
    let mut volume_info: Vec<VolumeInfo> = c
        .pvcs
        .by_index(RELEASE_INDEX, key)
        .iter()
        .map(|v| VolumeInfo {
            name: name_of(&v.metadata),
            namespace: namespace.to_string(),
            size: v.size,
        })
        .collect();
    volume_info.sort_by(|a, b| a.name.cmp(&b.name));
    volume_info
}

/// `http(s)://host` of each ingress host (https where TLS lists it), sorted,
/// once each.
fn access_urls(ingresses: &[std::sync::Arc<crate::lean::kinds::Ingress>]) -> Vec<AccessUrl> {
    let mut urls: Vec<AccessUrl> = ingresses
        .iter()
        .flat_map(|i| {
            i.hosts.iter().filter(|h| !h.is_empty()).map(|h| {
                let scheme = if i.tls_hosts.contains(h) {
                    "https"
                } else {
                    "http"
                };
                AccessUrl {
                    url: format!("{scheme}://{h}"),
                }
            })
        })
        .collect();
    urls.sort();
    urls.dedup();
    urls
}

pub(super) fn app_api_info(
    ctx: &Context<'_>,
    app_uuid: &str,
    name: &str,
    hossted_helm: bool,
) -> AppApiInfo {
    AppApiInfo {
        cluster_uuid: ctx.cluster_uuid.to_string(),
        app_uuid: app_uuid.to_string(),
        app_name: name.to_string(),
        email_id: ctx.email_id.to_string(),
        kind: "k8s".to_string(),
        hossted_helm,
        org_id: ctx.org_id.to_string(),
        options_state: AppOptionsState {
            monitoring: MonitoringState {
                enabled: ctx.monitoring,
                grafana_product_name: String::new(),
            },
        },
    }
}

/// `security_info`: per pod of the release (sorted by name), each container
/// that has a report for the pod's own workload — its controller, or the
/// pod itself — and that container's name. A pod gets its own findings
/// only (the Go operator gave each pod every earlier pod's).
fn security(c: &Caches, namespace: &str, pods: &[Arc<Pod>]) -> Vec<PodSecurity> {
    let mut out: Vec<PodSecurity> = pods
        .iter()
        .filter_map(|pod| {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let (kind, workload) = match &pod.controller {
                Some(o) => (o.kind.as_str(), o.name.as_str()),
                None => ("Pod", pod_name.as_str()),
            };
            let containers: Vec<ContainerSecurity> = pod
                .containers
                .iter()
                .filter_map(|container| {
                    let key = workload_key(namespace, kind, workload, &container.name);
                    let report = c
                        .vulnerability_reports
                        .by_index(WORKLOAD_INDEX, &key)
                        .into_iter()
                        .next()?;
                    Some(ContainerSecurity {
                        container_image: container.image.clone(),
                        kind: "k8s".into(),
                        summary: report.summary.clone(),
                        vulnerabilities: report.vulnerabilities.clone(),
                    })
                })
                .collect();
            (!containers.is_empty()).then(|| PodSecurity {
                pod_name: pod_name.clone(),
                pod_namespace: namespace.to_string(),
                containers,
            })
        })
        .collect();
    out.sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
    out
}
