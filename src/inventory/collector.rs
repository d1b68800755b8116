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

use super::payload::{AccessInfo, AppInfo, AppPayload, HelmInfo, HelmValueInfo};
use crate::cached::helm::ReleaseSummary;
use crate::cached::objects::{
    HelmRelease, HelmReleaseConfigMap, Ingress, Namespace, PersistentVolumeClaim, Pod, Service,
    UuidSecret,
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

/// One release as the caches show it: its `helm_info` (with the app UUID),
/// which is what decides whether it is sent. Its payload is built by
/// [`App::payload`] only when it is sent: a round that sends one app of
/// 10,000 reads the members of that one (collection stays a pass over the
/// releases, not over every pod of the cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// The release's `helm_info` and app UUID, as the status and a later
    /// removal need them.
    pub status: StatusHelmInfo,
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

    /// The `POST /apps` payload: the release with its members as the caches
    /// hold them now.
    pub fn payload(&self, c: &Caches, ctx: &Context<'_>) -> AppPayload {
        app::payload(c, ctx, &self.status)
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
    /// `ConfigMap` when Helm's configmap driver stored it, else `Secret`.
    pub kind: &'static str,
    /// Its UID (for the Warning on it), when the cache has it.
    pub uid: Option<String>,
    /// Its `resourceVersion`: it is warned about once per version.
    pub resource_version: String,
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
    let secrets = c.releases.list();
    let configmaps = c
        .release_configmaps
        .as_ref()
        .map(|s| s.list())
        .unwrap_or_default();
    let stored = secrets
        .iter()
        .map(|r| (r.as_ref(), false))
        .chain(configmaps.iter().map(|cm| (&cm.0, true)));
    let mut out = Collection::default();
    for ((namespace, name), (storage, in_configmap)) in latest_revisions(c, ctx, stored) {
        match &storage.release {
            Ok(release) => out.apps.push(App {
                status: app::helm_info(c, ctx, namespace, release),
            }),
            Err(error) => out.invalid.push(InvalidRelease {
                namespace: namespace.to_string(),
                secret: storage
                    .metadata
                    .name
                    .clone()
                    .unwrap_or_else(|| name.to_string()),
                kind: if in_configmap { "ConfigMap" } else { "Secret" },
                uid: storage.metadata.uid.clone(),
                resource_version: storage
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default(),
                release: name.to_string(),
                error: error.clone(),
            }),
        }
    }
    out
}

/// A release: `(namespace, name)`.
type ReleaseKey<'a> = (&'a str, &'a str);
/// A revision's storage, and whether Helm's configmap driver stored it.
type Stored<'a> = (&'a HelmRelease, bool);

/// The latest revision of each release in a namespace that exists and is
/// not denied, `(namespace, name) → (storage, stored by the configmap
/// driver)`, sorted: the same caches give the same result (new UUIDs
/// included). Borrowed, not copied: this runs over every stored revision.
fn latest_revisions<'a>(
    c: &Caches,
    ctx: &Context<'_>,
    stored: impl Iterator<Item = (&'a HelmRelease, bool)>,
) -> Vec<(ReleaseKey<'a>, Stored<'a>)> {
    let mut reported_namespace: HashMap<&str, bool> = HashMap::new();
    let mut latest: HashMap<ReleaseKey<'a>, Stored<'a>> = HashMap::new();
    for (r, in_configmap) in stored {
        let ns = r.metadata.namespace.as_deref().unwrap_or_default();
        let reported = *reported_namespace.entry(ns).or_insert_with(|| {
            !ctx.deny_namespaces.iter().any(|d| d == ns) && c.namespaces.get(ns).is_some()
        });
        let name = r.release_name();
        if !reported || name.is_empty() {
            continue;
        }
        match latest.get(&(ns, name)) {
            Some((seen, _)) if seen.version() >= r.version() => {}
            _ => {
                latest.insert((ns, name), (r, in_configmap));
            }
        }
    }
    let mut latest: Vec<_> = latest.into_iter().collect();
    latest.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    latest
}

/// docs/inventory.md's rule: the UUID already recorded for this release; else, for a
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
        app_api_info: app::app_api_info(ctx, &known.app_uuid, &known.name, known.hossted_helm),
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

mod app;
#[cfg(test)]
mod tests;
