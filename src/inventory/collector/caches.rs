//! What collection reads: the informers' stores, who is reporting, what
//! was delivered before — and the app UUID each release is given.

use std::collections::HashMap;
use std::sync::Arc;

use apis::DeliveredApp;
use cache::{IndexFn, Store};

use crate::lean::helm::ReleaseSummary;
use crate::lean::kinds::{Ingress, Namespace, PersistentVolumeClaim, Pod, Service};
use crate::lean::storage::{HelmRelease, HelmReleaseConfigMap, UuidSecret};
use crate::lean::trivy::VulnerabilityReport;
use crate::lean::workloads::{ConfigMap, Deployment, ReleaseSecret, StatefulSet};

/// Index of pods, services, PVCs and ingresses by `namespace/<instance
/// label>` (the one both jobs share: [`crate::lean::members`]).
pub use crate::lean::members::{MEMBER_INDEX as RELEASE_INDEX, member_index as release_index};

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

pub(super) fn workload_key(namespace: &str, kind: &str, name: &str, container: &str) -> String {
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

/// docs/inventory.md's rule: the UUID already recorded for this release; else, for a
/// release carrying the hossted marker in a namespace with a `uuid` Secret,
/// `A-` + that Secret's `uuid`; else derived — the same on every send,
/// retry, restart or change of leader, with nothing to remember.
pub(super) fn app_uuid(
    c: &Caches,
    ctx: &Context<'_>,
    namespace: &str,
    r: &ReleaseSummary,
) -> String {
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
