//! Builds one app per Helm release from the informers' caches.
//!
//! A pure function of its inputs: no API calls, no clock, no randomness
//! (new app UUIDs come from the caller), so it is tested on in-memory stores.
//! Unlike the Go operator it builds an app per *release* — each with its own
//! pods, services, volumes and ingresses — not one per namespace.

use std::collections::HashMap;
use std::sync::Arc;

use apis::{DeliveredApp, HelmInfo as StatusHelmInfo};
use cache::{IndexFn, Store};
use kube::Resource;

use super::payload::{
    AccessInfo, AccessUrl, AppApiInfo, AppInfo, AppOptionsState, AppPayload, ConfigMapInfo,
    ContainerSecurity, DeploymentInfo, HelmInfo, HelmValueInfo, IngressInfo, MonitoringState,
    PodInfo, PodSecurity, SecretInfo, ServiceInfo, StatefulSetInfo, VolumeInfo,
};
use crate::cached::helm::ReleaseSummary;
use crate::cached::objects::{
    HelmRelease, HelmReleaseConfigMap, Ingress, MANAGED_BY_LABEL, Namespace, PersistentVolumeClaim,
    Pod, Service, UuidSecret, label,
};
use crate::cached::trivy::VulnerabilityReport;
use crate::cached::workloads::{ConfigMap, Deployment, ReleaseSecret, StatefulSet};

/// Index of pods, services, PVCs and ingresses by `namespace/<instance
/// label>` (the one both jobs share: [`crate::cached::members`]).
pub use crate::cached::members::{MEMBER_INDEX as RELEASE_INDEX, member_index as release_index};

/// Index of vulnerability reports by `namespace/kind/name/container` of the
/// workload and container they are about.
pub const WORKLOAD_INDEX: &str = "workload";

/// The [`WORKLOAD_INDEX`] function.
pub fn workload_index() -> IndexFn<VulnerabilityReport> {
    Arc::new(|r: &VulnerabilityReport| {
        let ns = r.metadata.namespace.as_deref().unwrap_or_default();
        vec![workload_key(
            ns,
            &r.workload_kind,
            &r.workload_name,
            &r.container,
        )]
    })
}

fn workload_key(namespace: &str, kind: &str, name: &str, container: &str) -> String {
    format!("{namespace}/{kind}/{name}/{container}")
}

/// The caches the collector reads. Every kind of release member must carry
/// the [`RELEASE_INDEX`]; vulnerability reports the [`WORKLOAD_INDEX`].
#[derive(Clone)]
pub struct Caches {
    pub namespaces: Store<Namespace>,
    pub releases: Store<HelmRelease>,
    /// Releases of Helm's configmap storage driver, when it is watched.
    pub release_configmaps: Option<Store<HelmReleaseConfigMap>>,
    pub uuid_secrets: Store<UuidSecret>,
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub ingresses: Store<Ingress>,
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub configmaps: Store<ConfigMap>,
    pub secrets: Store<ReleaseSecret>,
    /// Empty while trivy-operator's CRD is absent.
    pub vulnerability_reports: Store<VulnerabilityReport>,
}

impl Caches {
    /// Empty caches with the indices the collector needs (for tests and
    /// for informers to fill).
    pub fn new() -> Self {
        let c = Caches {
            namespaces: Store::new(),
            releases: Store::new(),
            release_configmaps: None,
            uuid_secrets: Store::new(),
            pods: Store::new(),
            services: Store::new(),
            pvcs: Store::new(),
            ingresses: Store::new(),
            deployments: Store::new(),
            statefulsets: Store::new(),
            configmaps: Store::new(),
            secrets: Store::new(),
            vulnerability_reports: Store::new(),
        };
        c.pods.add_index(RELEASE_INDEX, release_index());
        c.services.add_index(RELEASE_INDEX, release_index());
        c.pvcs.add_index(RELEASE_INDEX, release_index());
        c.ingresses.add_index(RELEASE_INDEX, release_index());
        c.deployments.add_index(RELEASE_INDEX, release_index());
        c.statefulsets.add_index(RELEASE_INDEX, release_index());
        c.configmaps.add_index(RELEASE_INDEX, release_index());
        c.secrets.add_index(RELEASE_INDEX, release_index());
        c.vulnerability_reports
            .add_index(WORKLOAD_INDEX, workload_index());
        c
    }
}

impl Default for Caches {
    fn default() -> Self {
        Self::new()
    }
}

/// Who is reporting, and what was delivered before.
pub struct Context<'a> {
    pub cluster_uuid: &'a str,
    pub email_id: &'a str,
    pub org_id: &'a str,
    pub deny_namespaces: &'a [String],
    /// `spec.monitoring.enable`, for `options_state`.
    pub monitoring: bool,
    /// `spec.cve.enable`: whether `security_info` is filled.
    pub cve: bool,
    /// What `status.apps` says was delivered: where app UUIDs already given
    /// are kept.
    pub known: &'a Known,
}

/// What was delivered before, looked up by namespace and name (one hash
/// lookup per release, not a scan of the status per release).
#[derive(Debug, Default, Clone)]
pub struct Known(HashMap<String, HashMap<String, DeliveredApp>>);

impl Known {
    pub fn new(apps: impl IntoIterator<Item = DeliveredApp>) -> Self {
        let mut by_namespace: HashMap<String, HashMap<String, DeliveredApp>> = HashMap::new();
        for app in apps {
            by_namespace
                .entry(app.namespace.clone())
                .or_default()
                .insert(app.name.clone(), app);
        }
        Known(by_namespace)
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&DeliveredApp> {
        self.0.get(namespace).and_then(|m| m.get(name))
    }

    pub fn iter(&self) -> impl Iterator<Item = &DeliveredApp> {
        self.0.values().flat_map(|m| m.values())
    }
}

/// One release, ready to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// The release's `helm_info` and app UUID, as the status and a later
    /// removal need them.
    pub status: StatusHelmInfo,
    pub payload: AppPayload,
}

impl App {
    /// What `status.apps` records once this app is delivered.
    pub fn delivered(&self) -> DeliveredApp {
        let s = &self.status;
        DeliveredApp {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            revision: s.revision,
            status: s.status.clone(),
            app_uuid: s.app_uuid.clone(),
            hossted_helm: s.hossted_helm,
        }
    }
}

/// A release whose latest revision could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRelease {
    pub namespace: String,
    /// The release (from Helm's `name` label).
    pub release: String,
    /// The storage Secret (or ConfigMap) that could not be decoded.
    pub secret: String,
    pub error: String,
}

/// What [`collect`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collection {
    /// Sorted by namespace, then name.
    pub apps: Vec<App>,
    pub invalid: Vec<InvalidRelease>,
}

/// Builds one [`App`] per Helm release in a namespace that exists and is not
/// denied, from the release's latest revision.
pub fn collect(c: &Caches, ctx: &Context<'_>) -> Collection {
    // The latest revision of each release: (namespace, name) -> storage object.
    let mut latest: HashMap<(String, String), Arc<HelmRelease>> = HashMap::new();
    let from_configmaps = c
        .release_configmaps
        .iter()
        .flat_map(|s| s.list())
        .map(|cm| Arc::new(cm.0.clone()));
    for r in c.releases.list().into_iter().chain(from_configmaps) {
        let ns = r.metadata.namespace.clone().unwrap_or_default();
        if ctx.deny_namespaces.contains(&ns) || c.namespaces.get(&ns).is_none() {
            continue;
        }
        let key = (ns, r.release_name().to_string());
        if key.1.is_empty() {
            continue;
        }
        match latest.get(&key) {
            Some(seen) if seen.version() >= r.version() => {}
            _ => {
                latest.insert(key, r);
            }
        }
    }

    // In a fixed order, so that the same caches give the same result
    // (new UUIDs included).
    let mut latest: Vec<_> = latest.into_iter().collect();
    latest.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Collection::default();
    for ((namespace, name), storage) in latest {
        match &storage.release {
            Ok(release) => out.apps.push(app(c, ctx, &namespace, release)),
            Err(error) => out.invalid.push(InvalidRelease {
                namespace,
                secret: storage
                    .metadata
                    .name
                    .clone()
                    .unwrap_or_else(|| name.clone()),
                release: name,
                error: error.clone(),
            }),
        }
    }
    out
}

/// The release's members of one kind (API.md's membership rule: its
/// instance label, in its namespace, managed by Helm), sorted by name.
fn members<K: Resource + 'static>(store: &Store<K>, key: &str) -> Vec<Arc<K>> {
    let mut found: Vec<Arc<K>> = store
        .by_index(RELEASE_INDEX, key)
        .into_iter()
        .filter(|o| label(o.meta(), MANAGED_BY_LABEL) == "Helm")
        .collect();
    found.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    found
}

fn name_of(meta: &kube::api::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn app(c: &Caches, ctx: &Context<'_>, namespace: &str, r: &ReleaseSummary) -> App {
    let key = format!("{namespace}/{}", r.name);
    let ns = || namespace.to_string();
    let pods = members(&c.pods, &key);
    let pod_info = pods
        .iter()
        .map(|p| PodInfo {
            name: name_of(&p.metadata),
            namespace: ns(),
            image: p.image().to_string(),
            status: p.phase.clone(),
        })
        .collect();
    let service_info = members(&c.services, &key)
        .iter()
        .map(|s| ServiceInfo {
            name: name_of(&s.metadata),
            namespace: ns(),
            port: s.port,
        })
        .collect();
    // Volumes come from StatefulSet claim templates, which carry the instance
    // label but not managed-by: no managed-by filter here (API.md).
    let mut volume_info: Vec<VolumeInfo> = c
        .pvcs
        .by_index(RELEASE_INDEX, &key)
        .iter()
        .map(|v| VolumeInfo {
            name: name_of(&v.metadata),
            namespace: ns(),
            size: v.size,
        })
        .collect();
    volume_info.sort_by(|a, b| a.name.cmp(&b.name));
    let ingresses = members(&c.ingresses, &key);
    let ingress_info = ingresses
        .iter()
        .map(|i| IngressInfo {
            name: name_of(&i.metadata),
            namespace: ns(),
            domain: i.domain().to_string(),
        })
        .collect();
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
    let deployment_info = members(&c.deployments, &key)
        .iter()
        .map(|d| DeploymentInfo {
            name: name_of(&d.metadata),
            namespace: ns(),
            secret_ref: d.secret_ref.clone(),
        })
        .collect();
    let statefulset_info = members(&c.statefulsets, &key)
        .iter()
        .map(|s| StatefulSetInfo {
            name: name_of(&s.metadata),
            namespace: ns(),
        })
        .collect();
    let configmap_info = members(&c.configmaps, &key)
        .iter()
        .map(|m| ConfigMapInfo {
            name: name_of(&m.metadata),
            data: m.data.clone().unwrap_or_default(),
        })
        .collect();
    let secret_info = members(&c.secrets, &key)
        .iter()
        .map(|s| SecretInfo {
            name: name_of(&s.metadata),
            namespace: ns(),
            data: Default::default(),
        })
        .collect();
    let security_info = if ctx.cve {
        security(c, namespace, &pods)
    } else {
        Vec::new()
    };

    let app_uuid = app_uuid(c, ctx, namespace, r);
    App {
        status: StatusHelmInfo {
            name: r.name.clone(),
            namespace: namespace.to_string(),
            app_uuid: app_uuid.clone(),
            revision: r.version,
            updated: r.updated.clone(),
            status: r.status.clone(),
            chart: r.chart.clone(),
            app_version: r.app_version.clone(),
            hossted_helm: r.hossted_helm,
        },
        payload: AppPayload {
            app_api_info: app_api_info(ctx, &app_uuid, &r.name, r.hossted_helm),
            app_info: AppInfo {
                helm_info: HelmInfo {
                    name: r.name.clone(),
                    namespace: namespace.to_string(),
                    revision: r.version,
                    updated: r.updated.clone(),
                    status: r.status.clone(),
                    chart: r.chart.clone(),
                    app_version: r.app_version.clone(),
                    app_uuid,
                    hossted_helm: r.hossted_helm,
                },
                pod_info,
                service_info,
                volume_info,
                ingress_info,
                deployment_info,
                statefulset_info,
                configmap_info,
                secret_info,
                helmvalue_info: HelmValueInfo {
                    chart_name: r.chart.clone(),
                    chart_values: Default::default(),
                },
                access_info: AccessInfo { urls },
                security_info,
            },
        },
    }
}

fn app_api_info(ctx: &Context<'_>, app_uuid: &str, name: &str, hossted_helm: bool) -> AppApiInfo {
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

/// API.md's rule: the UUID already recorded for this release; else, for a
/// release carrying the hossted marker in a namespace with a `uuid` Secret,
/// `A-` + that Secret's `uuid`; else derived — the same on every send,
/// retry, restart or change of leader, with nothing to remember.
fn app_uuid(c: &Caches, ctx: &Context<'_>, namespace: &str, r: &ReleaseSummary) -> String {
    if let Some(known) = ctx
        .known
        .get(namespace, &r.name)
        .filter(|k| !k.app_uuid.is_empty())
    {
        return known.app_uuid.clone();
    }
    if r.hossted_helm
        && let Some(uuid) = c
            .uuid_secrets
            .get(&format!("{namespace}/uuid"))
            .and_then(|s| s.uuid.clone())
    {
        return format!("A-{uuid}");
    }
    derived_app_uuid(ctx.cluster_uuid, namespace, &r.name, &r.first_deployed)
}

/// `A-` + the version-5 UUID of `<namespace>/<name>/<first deployed>` in
/// the UUID namespace of the cluster UUID (the part after `K-`; the nil UUID
/// when there is none yet, as for `hossted-operator collect`). A release
/// installed again (a new first-deployed time) is a new app.
pub fn derived_app_uuid(
    cluster_uuid: &str,
    namespace: &str,
    name: &str,
    first_deployed: &str,
) -> String {
    let space = cluster_uuid
        .strip_prefix("K-")
        .and_then(|u| uuid::Uuid::parse_str(u).ok())
        .unwrap_or_default();
    let key = format!("{namespace}/{name}/{first_deployed}");
    format!("A-{}", uuid::Uuid::new_v5(&space, key.as_bytes()))
}

/// The payload that tells the API a delivered release is gone: what the
/// status recorded of it, with status `uninstalled` and empty lists (its
/// objects went with it).
pub fn uninstalled(
    known: &DeliveredApp,
    last_seen: Option<&StatusHelmInfo>,
    ctx: &Context<'_>,
) -> AppPayload {
    // The chart, app version and time come from memory when this process
    // saw that revision; the compact status does not keep them.
    let seen = last_seen.filter(|s| s.revision == known.revision);
    let detail = |f: fn(&StatusHelmInfo) -> &String| seen.map(f).cloned().unwrap_or_default();
    AppPayload {
        app_api_info: app_api_info(ctx, &known.app_uuid, &known.name, known.hossted_helm),
        app_info: AppInfo {
            helm_info: HelmInfo {
                name: known.name.clone(),
                namespace: known.namespace.clone(),
                revision: known.revision,
                updated: detail(|s| &s.updated),
                status: "uninstalled".into(),
                chart: detail(|s| &s.chart),
                app_version: detail(|s| &s.app_version),
                app_uuid: known.app_uuid.clone(),
                hossted_helm: known.hossted_helm,
            },
            pod_info: Vec::new(),
            service_info: Vec::new(),
            volume_info: Vec::new(),
            ingress_info: Vec::new(),
            deployment_info: Vec::new(),
            statefulset_info: Vec::new(),
            configmap_info: Vec::new(),
            secret_info: Vec::new(),
            helmvalue_info: HelmValueInfo {
                chart_name: detail(|s| &s.chart),
                chart_values: Default::default(),
            },
            access_info: AccessInfo::default(),
            security_info: Vec::new(),
        },
    }
}

/// Whether `app` must be POSTed: it is new, or its revision or status
/// differs from what was delivered.
pub fn needs_report(app: &App, known: Option<&DeliveredApp>) -> bool {
    !known.is_some_and(|k| k.revision == app.status.revision && k.status == app.status.status)
}

#[cfg(test)]
mod tests;
