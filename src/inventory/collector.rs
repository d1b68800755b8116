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
    AppApiInfo, AppInfo, AppPayload, HelmInfo, IngressInfo, PodInfo, ServiceInfo, VolumeInfo,
};
use crate::cached::helm::ReleaseSummary;
use crate::cached::objects::{
    HelmRelease, HelmReleaseConfigMap, INSTANCE_LABEL, Ingress, MANAGED_BY_LABEL, Namespace,
    PersistentVolumeClaim, Pod, Service, UuidSecret, label,
};

/// Index of pods, services, PVCs and ingresses by `namespace/<instance label>`.
pub const RELEASE_INDEX: &str = "release";

/// The [`RELEASE_INDEX`] function: an object belongs to the release named by
/// its `app.kubernetes.io/instance` label, in its own namespace.
pub fn release_index<K: Resource>() -> IndexFn<K> {
    Arc::new(|obj: &K| {
        let meta = obj.meta();
        let instance = label(meta, INSTANCE_LABEL);
        match (&meta.namespace, instance.is_empty()) {
            (Some(ns), false) => vec![format!("{ns}/{instance}")],
            _ => Vec::new(),
        }
    })
}

/// The caches the collector reads. Pods, services, PVCs and ingresses must
/// carry the [`RELEASE_INDEX`].
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
        };
        c.pods.add_index(RELEASE_INDEX, release_index());
        c.services.add_index(RELEASE_INDEX, release_index());
        c.pvcs.add_index(RELEASE_INDEX, release_index());
        c.ingresses.add_index(RELEASE_INDEX, release_index());
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
    pub deny_namespaces: &'a [String],
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

fn app(c: &Caches, ctx: &Context<'_>, namespace: &str, r: &ReleaseSummary) -> App {
    let key = format!("{namespace}/{}", r.name);
    let helm_managed = |meta: &kube::api::ObjectMeta| label(meta, MANAGED_BY_LABEL) == "Helm";
    let name_of = |meta: &kube::api::ObjectMeta| meta.name.clone().unwrap_or_default();

    let mut pod_info: Vec<PodInfo> = c
        .pods
        .by_index(RELEASE_INDEX, &key)
        .iter()
        .filter(|p| helm_managed(&p.metadata))
        .map(|p| PodInfo {
            name: name_of(&p.metadata),
            namespace: namespace.to_string(),
            image: p.image.clone(),
            status: p.phase.clone(),
        })
        .collect();
    pod_info.sort_by(|a, b| a.name.cmp(&b.name));
    let mut service_info: Vec<ServiceInfo> = c
        .services
        .by_index(RELEASE_INDEX, &key)
        .iter()
        .filter(|s| helm_managed(&s.metadata))
        .map(|s| ServiceInfo {
            name: name_of(&s.metadata),
            namespace: namespace.to_string(),
            port: s.port,
        })
        .collect();
    service_info.sort_by(|a, b| a.name.cmp(&b.name));
    // Volumes come from StatefulSet claim templates, which carry the instance
    // label but not managed-by: no managed-by filter here (API.md).
    let mut volume_info: Vec<VolumeInfo> = c
        .pvcs
        .by_index(RELEASE_INDEX, &key)
        .iter()
        .map(|v| VolumeInfo {
            name: name_of(&v.metadata),
            namespace: namespace.to_string(),
            size: v.size,
        })
        .collect();
    volume_info.sort_by(|a, b| a.name.cmp(&b.name));
    let mut ingress_info: Vec<IngressInfo> = c
        .ingresses
        .by_index(RELEASE_INDEX, &key)
        .iter()
        .filter(|i| helm_managed(&i.metadata))
        .map(|i| IngressInfo {
            name: name_of(&i.metadata),
            namespace: namespace.to_string(),
            domain: i.domain.clone(),
        })
        .collect();
    ingress_info.sort_by(|a, b| a.name.cmp(&b.name));

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
            app_api_info: AppApiInfo {
                cluster_uuid: ctx.cluster_uuid.to_string(),
                app_uuid,
                app_name: r.name.clone(),
                email_id: ctx.email_id.to_string(),
                kind: "k8s".to_string(),
                hossted_helm: r.hossted_helm,
            },
            app_info: AppInfo {
                helm_info: HelmInfo {
                    name: r.name.clone(),
                    namespace: namespace.to_string(),
                    revision: r.version,
                    updated: r.updated.clone(),
                    status: r.status.clone(),
                    chart: r.chart.clone(),
                    app_version: r.app_version.clone(),
                },
                pod_info,
                service_info,
                volume_info,
                ingress_info,
            },
        },
    }
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
    cluster_uuid: &str,
    email_id: &str,
) -> AppPayload {
    // The chart, app version and time come from memory when this process
    // saw that revision; the compact status does not keep them.
    let seen = last_seen.filter(|s| s.revision == known.revision);
    let detail = |f: fn(&StatusHelmInfo) -> &String| seen.map(f).cloned().unwrap_or_default();
    AppPayload {
        app_api_info: AppApiInfo {
            cluster_uuid: cluster_uuid.to_string(),
            app_uuid: known.app_uuid.clone(),
            app_name: known.name.clone(),
            email_id: email_id.to_string(),
            kind: "k8s".into(),
            hossted_helm: known.hossted_helm,
        },
        app_info: AppInfo {
            helm_info: HelmInfo {
                name: known.name.clone(),
                namespace: known.namespace.clone(),
                revision: known.revision,
                updated: detail(|s| &s.updated),
                status: "uninstalled".into(),
                chart: detail(|s| &s.chart),
                app_version: detail(|s| &s.app_version),
            },
            pod_info: Vec::new(),
            service_info: Vec::new(),
            volume_info: Vec::new(),
            ingress_info: Vec::new(),
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
