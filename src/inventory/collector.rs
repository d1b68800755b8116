//! Builds one app per Helm release from the informers' caches.
//!
//! A pure function of its inputs: no API calls, no clock, no randomness
//! (new app UUIDs come from the caller), so it is tested on in-memory stores.
//! Unlike the Go operator it builds an app per *release* — each with its own
//! pods, services, volumes and ingresses — not one per namespace.

use std::collections::HashMap;
use std::sync::Arc;

use apis::HelmInfo as StatusHelmInfo;
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
    /// `status.helmStatus`: where app UUIDs already given are kept.
    pub known: &'a [StatusHelmInfo],
}

/// One release, ready to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// What `status.helmStatus` records once this app is delivered.
    pub status: StatusHelmInfo,
    pub payload: AppPayload,
}

/// A release whose latest revision could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRelease {
    pub namespace: String,
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
/// denied, from the release's latest revision. `new_uuid(namespace, name)`
/// gives the UUID (without the `A-` prefix) of a release that has none yet —
/// the caller keeps it stable until it is delivered.
pub fn collect(
    c: &Caches,
    ctx: &Context<'_>,
    new_uuid: &mut dyn FnMut(&str, &str) -> String,
) -> Collection {
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
            Ok(release) => out.apps.push(app(c, ctx, &namespace, release, new_uuid)),
            Err(error) => out.invalid.push(InvalidRelease {
                namespace,
                secret: storage.metadata.name.clone().unwrap_or(name),
                error: error.clone(),
            }),
        }
    }
    out
}

fn app(
    c: &Caches,
    ctx: &Context<'_>,
    namespace: &str,
    r: &ReleaseSummary,
    new_uuid: &mut dyn FnMut(&str, &str) -> String,
) -> App {
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

    let app_uuid = app_uuid(c, ctx, namespace, r, new_uuid);
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
/// `A-` + that Secret's `uuid`; else a new one.
fn app_uuid(
    c: &Caches,
    ctx: &Context<'_>,
    namespace: &str,
    r: &ReleaseSummary,
    new_uuid: &mut dyn FnMut(&str, &str) -> String,
) -> String {
    if let Some(known) = ctx
        .known
        .iter()
        .find(|k| k.name == r.name && k.namespace == namespace && !k.app_uuid.is_empty())
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
    format!("A-{}", new_uuid(namespace, &r.name))
}

/// Whether `app` must be POSTed: it is new, or its revision or status
/// differs from what was delivered.
pub fn needs_report(app: &App, known: &[StatusHelmInfo]) -> bool {
    !known.iter().any(|k| {
        k.name == app.status.name
            && k.namespace == app.status.namespace
            && k.revision == app.status.revision
            && k.status == app.status.status
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    fn helm_labels(instance: &str) -> Vec<(&str, &str)> {
        vec![(INSTANCE_LABEL, instance), (MANAGED_BY_LABEL, "Helm")]
    }

    fn release(ns: &str, name: &str, version: i64, status: &str, marker: bool) -> Arc<HelmRelease> {
        Arc::new(HelmRelease {
            metadata: meta(
                ns,
                &format!("sh.helm.release.v1.{name}.v{version}"),
                &[("owner", "helm")],
            ),
            release: Ok(ReleaseSummary {
                name: name.into(),
                namespace: ns.into(),
                version,
                status: status.into(),
                updated: format!("2024-02-28T01:32:3{version}.338988+05:30"),
                chart: format!("{name}-chart"),
                app_version: "1.0".into(),
                hossted_helm: marker,
            }),
        })
    }

    fn namespace(c: &Caches, ns: &str) {
        c.namespaces.upsert(Arc::new(Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
        }));
    }

    fn pod(ns: &str, name: &str, labels: &[(&str, &str)], image: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: meta(ns, name, labels),
            image: image.into(),
            phase: "Running".into(),
        })
    }

    /// Two releases sharing a namespace, plus noise.
    fn cluster() -> Caches {
        let c = Caches::new();
        for ns in ["default", "denied"] {
            namespace(&c, ns);
        }
        c.releases
            .upsert(release("default", "test", 1, "superseded", false));
        c.releases
            .upsert(release("default", "test", 2, "deployed", false));
        c.releases
            .upsert(release("default", "other", 1, "deployed", false));
        c.releases
            .upsert(release("denied", "hidden", 1, "deployed", false));
        c.releases
            .upsert(release("gone", "orphan", 1, "deployed", false)); // namespace not cached
        c.pods.upsert(pod(
            "default",
            "test-keycloak-1",
            &helm_labels("test"),
            "keycloak:23",
        ));
        c.pods.upsert(pod(
            "default",
            "test-keycloak-0",
            &helm_labels("test"),
            "keycloak:23",
        ));
        c.pods
            .upsert(pod("default", "other-0", &helm_labels("other"), "nginx:1"));
        c.pods.upsert(pod(
            "default",
            "test-by-hand",
            &[(INSTANCE_LABEL, "test")],
            "x",
        )); // not managed by Helm
        c.pods
            .upsert(pod("default", "no-containers", &helm_labels("other"), ""));
        c.services.upsert(Arc::new(Service {
            metadata: meta("default", "test-keycloak", &helm_labels("test")),
            port: 80,
        }));
        c.services.upsert(Arc::new(Service {
            metadata: meta("default", "test-headless", &helm_labels("test")),
            port: 0,
        }));
        // Claim templates carry the instance label only.
        c.pvcs.upsert(Arc::new(PersistentVolumeClaim {
            metadata: meta(
                "default",
                "data-test-postgresql-0",
                &[(INSTANCE_LABEL, "test")],
            ),
            size: 8_589_934_592,
        }));
        c.ingresses.upsert(Arc::new(Ingress {
            metadata: meta("default", "keycloak", &helm_labels("test")),
            domain: "keycloak.example.com".into(),
        }));
        c
    }

    fn counter() -> impl FnMut(&str, &str) -> String {
        let mut n = 0;
        move |_, _| {
            n += 1;
            format!("00000000-0000-4000-8000-{n:012}")
        }
    }

    fn ctx<'a>(deny: &'a [String], known: &'a [StatusHelmInfo]) -> Context<'a> {
        Context {
            cluster_uuid: "K-6f1c2a4e-8a51-4d0b-9a54-2b7f0e3c9d11",
            email_id: "ops@example.com",
            deny_namespaces: deny,
            known,
        }
    }

    #[test]
    fn one_app_per_release_with_its_own_objects_from_its_latest_revision() {
        let deny = vec!["denied".to_string()];
        let got = collect(&cluster(), &ctx(&deny, &[]), &mut counter());
        assert!(got.invalid.is_empty());
        let names: Vec<_> = got.apps.iter().map(|a| a.status.name.as_str()).collect();
        assert_eq!(
            names,
            ["other", "test"],
            "denied and vanished namespaces are left out"
        );

        let test = serde_json::to_value(&got.apps[1].payload).unwrap();
        assert_eq!(
            test,
            json!({
                "app_api_info": {
                    "cluster_uuid": "K-6f1c2a4e-8a51-4d0b-9a54-2b7f0e3c9d11",
                    "app_uuid": "A-00000000-0000-4000-8000-000000000002",
                    "app_name": "test",
                    "email_id": "ops@example.com",
                    "type": "k8s",
                    "hossted_helm": false
                },
                "app_info": {
                    "helm_info": {
                        "name": "test", "namespace": "default", "revision": 2,
                        "updated": "2024-02-28T01:32:32.338988+05:30", "status": "deployed",
                        "chart": "test-chart", "appVersion": "1.0"
                    },
                    "pod_info": [
                        { "name": "test-keycloak-0", "namespace": "default", "image": "keycloak:23", "status": "Running" },
                        { "name": "test-keycloak-1", "namespace": "default", "image": "keycloak:23", "status": "Running" }
                    ],
                    "service_info": [
                        { "name": "test-headless", "namespace": "default", "port": 0 },
                        { "name": "test-keycloak", "namespace": "default", "port": 80 }
                    ],
                    "volume_info": [
                        { "name": "data-test-postgresql-0", "namespace": "default", "size": 8589934592u64 }
                    ],
                    "ingress_info": [
                        { "name": "keycloak", "namespace": "default", "domain": "keycloak.example.com" }
                    ]
                }
            })
        );
        let other = serde_json::to_value(&got.apps[0].payload.app_info).unwrap();
        assert_eq!(
            other["pod_info"],
            json!([
                { "name": "no-containers", "namespace": "default", "image": "", "status": "Running" },
                { "name": "other-0", "namespace": "default", "image": "nginx:1", "status": "Running" }
            ])
        );
        for list in ["service_info", "volume_info", "ingress_info"] {
            assert_eq!(other[list], json!([]), "{list} is [] not null");
        }
        assert_eq!(got.apps[1].status.revision, 2);
        assert_eq!(
            got.apps[1].status.app_uuid,
            got.apps[1].payload.app_api_info.app_uuid
        );
    }

    #[test]
    fn app_uuids_are_kept_then_taken_from_the_uuid_secret_then_new() {
        let c = Caches::new();
        for ns in ["a", "b"] {
            namespace(&c, ns);
            c.uuid_secrets.upsert(Arc::new(UuidSecret {
                metadata: meta(ns, "uuid", &[]),
                uuid: Some(format!("{ns}{ns}{ns}-secret")),
            }));
        }
        c.releases
            .upsert(release("a", "known", 1, "deployed", true));
        c.releases
            .upsert(release("a", "marked", 1, "deployed", true));
        c.releases
            .upsert(release("b", "unmarked", 1, "deployed", false));
        let known = vec![StatusHelmInfo {
            name: "known".into(),
            namespace: "a".into(),
            app_uuid: "A-recorded".into(),
            ..Default::default()
        }];
        let got = collect(&c, &ctx(&[], &known), &mut counter());
        let uuids: Vec<(&str, &str)> = got
            .apps
            .iter()
            .map(|a| (a.status.name.as_str(), a.status.app_uuid.as_str()))
            .collect();
        assert_eq!(
            uuids,
            [
                ("known", "A-recorded"),
                ("marked", "A-aaa-secret"),
                ("unmarked", "A-00000000-0000-4000-8000-000000000001"),
            ]
        );
    }

    #[test]
    fn a_corrupt_latest_revision_is_reported_and_the_others_still_collected() {
        let c = cluster();
        c.releases.upsert(Arc::new(HelmRelease {
            metadata: meta(
                "default",
                "sh.helm.release.v1.test.v3",
                &[("name", "test"), ("version", "3")],
            ),
            release: Err("the release's gzip stream is corrupt".into()),
        }));
        let got = collect(&c, &ctx(&[], &[]), &mut counter());
        assert_eq!(
            got.invalid,
            [InvalidRelease {
                namespace: "default".into(),
                secret: "sh.helm.release.v1.test.v3".into(),
                error: "the release's gzip stream is corrupt".into(),
            }]
        );
        let names: Vec<_> = got.apps.iter().map(|a| a.status.name.as_str()).collect();
        assert_eq!(names, ["other", "hidden"], "sorted by namespace, then name");
    }

    #[test]
    fn a_report_is_needed_for_new_apps_and_changed_revision_or_status() {
        let got = collect(&cluster(), &ctx(&[], &[]), &mut counter());
        let test = got.apps.iter().find(|a| a.status.name == "test").unwrap();
        assert!(needs_report(test, &[]));
        let delivered = vec![test.status.clone()];
        assert!(!needs_report(test, &delivered));
        let mut older = test.status.clone();
        older.revision = 1;
        assert!(needs_report(test, &[older]));
        let mut failed = test.status.clone();
        failed.status = "failed".into();
        assert!(needs_report(test, &[failed]));
    }
}
