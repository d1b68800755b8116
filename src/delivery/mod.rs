//! Job 2, delivery: `HelmApp`s installed, upgraded and uninstalled with
//! the real `helm` binary (`../shared/DELIVERY.md`).
//!
//! [`controller`] wires it in the shape of `k8s.io/sample-controller`: the
//! HelmApp informer and Helm's release storage (the inventory's informer,
//! shared through the manager's factory) with handlers that only enqueue;
//! [`Delivery`]'s `reconcile` holds the logic, [`runner`] is the one place
//! that spawns helm, [`source`] finds charts, [`values`] merges values.
//!
//! The reconciler's parts: [`source`] (path, HTTP repository, OCI),
//! `inputs` (values, dependencies, the config hash), `readiness`,
//! `lifecycle` (remediation, unlock, uninstall), `crds` (the
//! `CreateReplace` policy) and `status`.

pub mod appset;
mod crds;
mod dependencies;
mod finalizer;
mod inputs;
mod lifecycle;
pub mod metrics;
pub mod project;
mod readiness;
pub mod reconciler;
pub mod runner;
pub mod source;
mod status;
pub mod values;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use cache::{Event, HandlerFn, IndexFn, InformerOptions};
use kube::ResourceExt;
use parking_lot::Mutex;
use runtime::{Controller, Manager};

use crate::cached::digests::{ConfigMapDigests, SecretDigests};
use crate::cached::objects::{
    HelmRelease, INSTANCE_LABEL, Ingress, Service, label, managed_by_helm_options,
};
use crate::cached::storage::helm_storage_options;
use crate::cached::workloads::{DaemonSet, Deployment, Job, ReleaseSecret, StatefulSet};

pub use reconciler::{Delivery, DeliveryError};
pub use runner::{Helm, HelmConfig};

/// Held by every HelmApp that may have a release: deleting it uninstalls
/// first.
pub const FINALIZER: &str = "hossted.com/helm-uninstall";
/// On the release's storage: the hash of its configuration.
pub const HASH_LABEL: &str = "hossted.com/config-hash";
/// On the release's storage: the UID of the HelmApp that owns it.
pub const UID_LABEL: &str = "hossted.com/helmapp-uid";
/// Asks for a reconcile when changed (it runs helm only if needed).
pub const RECONCILE_AT: &str = "hossted.com/reconcile-at";
/// Index of release storage by `namespace/release name`.
pub const RELEASE_INDEX: &str = "release-name";
/// Index of HelmApps by what their `valuesFrom` names: `Kind/namespace/name`.
pub const VALUES_FROM_INDEX: &str = "values-from";
/// Index of HelmApps by their release: `targetNamespace/releaseName`.
pub const TARGET_INDEX: &str = "target";
/// Index of a release's objects by `namespace/instance label` (the
/// inventory's, on the same shared informers).
pub use crate::inventory::collector::RELEASE_INDEX as MEMBER_INDEX;
/// Index of HelmApps by what they depend on: `HelmApp/namespace/name` or
/// `HelmAppSet/namespace/name`.
pub const DEPENDS_ON_INDEX: &str = "depends-on";

/// How delivery runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub helm: HelmConfig,
    /// `chart.path` must be under this (`--chart-path-root`; none: refused).
    pub chart_path_root: Option<PathBuf>,
    /// `--no-cross-namespace-refs`.
    pub no_cross_namespace_refs: bool,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Safety resync of every HelmApp.
    pub resync: Duration,
    /// The operator's namespace: where `hossted-platform-charts` lives.
    pub operator_namespace: String,
}

/// What [`add_to`] started.
pub struct Added {
    /// The helm runner: `kill_all` it when the manager stops.
    pub helm: Arc<Helm>,
    /// The HelmApp controller's counters.
    pub stats: Arc<runtime::ControllerStats>,
}

/// Adds every delivery controller to `manager` — HelmApp, HelmAppSet and
/// the Hosstedproject's `spec.helm` and toggles —
/// and kills running helm process groups the moment the lease is lost
/// (the next leader may run helm on the same releases).
pub fn add_to(manager: &mut Manager, settings: Settings) -> Added {
    let workers = settings.workers;
    let (namespace, work_dir) = (
        settings.operator_namespace.clone(),
        settings.helm.work_dir.clone(),
    );
    let (apps, helm) = controller(manager, settings);
    let stats = apps.stats();
    manager.add(apps);
    manager.add(appset::controller(manager, workers.clamp(1, 2)));
    manager.add(project::controller(manager, &namespace, work_dir));
    let on_lost = helm.clone();
    manager.on_lease_lost(move || on_lost.kill_all());
    Added { helm, stats }
}

/// The delivery controller, its informers requested from `manager`'s shared
/// factory and its handlers registered; `manager.add` it. The [`Helm`] it
/// runs is returned too: `kill_all` it when the manager stops.
pub fn controller(manager: &Manager, settings: Settings) -> (Controller<Delivery>, Arc<Helm>) {
    let factory = manager.factory();
    let apps = factory.informer::<HelmApp>(InformerOptions::default());
    let sets = factory.informer::<HelmAppSet>(InformerOptions::default());
    let releases = factory.informer::<HelmRelease>(helm_storage_options());
    let by_name: IndexFn<HelmRelease> = Arc::new(|r: &HelmRelease| {
        let ns = r.metadata.namespace.as_deref().unwrap_or_default();
        match r.release_name() {
            "" => Vec::new(),
            name => vec![format!("{ns}/{name}")],
        }
    });
    releases.store().add_index(RELEASE_INDEX, by_name);
    let refs: IndexFn<HelmApp> = Arc::new(|a: &HelmApp| {
        let ns = a.namespace().unwrap_or_default();
        a.spec
            .values_from
            .iter()
            .map(|r| format!("{}/{ns}/{}", r.kind, r.name))
            .collect()
    });
    let deps: IndexFn<HelmApp> = Arc::new(|a: &HelmApp| {
        let ns = a.namespace().unwrap_or_default();
        a.spec
            .depends_on
            .iter()
            .map(|d| {
                let dns = if d.namespace.is_empty() {
                    ns.as_str()
                } else {
                    d.namespace.as_str()
                };
                format!("{}/{dns}/{}", d.kind, d.name)
            })
            .collect()
    });
    apps.store().add_index(DEPENDS_ON_INDEX, deps);
    apps.store().add_index(VALUES_FROM_INDEX, refs);
    apps.store().add_index(
        TARGET_INDEX,
        Arc::new(|a: &HelmApp| vec![reconciler::target_key(a)]),
    );
    // Everything but Helm's own storage, as digests (never the content).
    let secrets =
        factory.informer::<SecretDigests>(InformerOptions::default().labels("owner!=helm"));
    let configmaps =
        factory.informer::<ConfigMapDigests>(InformerOptions::default().labels("owner!=helm"));
    let metrics = metrics::HelmMetrics::register(manager, apps.store());
    let helm = Arc::new(Helm::new(settings.helm.clone(), metrics.clone()));
    // The release's workloads, for `wait` and drift (the inventory's
    // informers: same options, one watch).
    let deployments = factory.informer::<Deployment>(managed_by_helm_options());
    let statefulsets = factory.informer::<StatefulSet>(managed_by_helm_options());
    // DaemonSets and Jobs are watched for `wait` alone.
    let daemonsets = factory.informer::<DaemonSet>(managed_by_helm_options());
    let jobs = factory.informer::<Job>(managed_by_helm_options());
    daemonsets
        .store()
        .add_index(MEMBER_INDEX, crate::inventory::collector::release_index());
    jobs.store()
        .add_index(MEMBER_INDEX, crate::inventory::collector::release_index());
    deployments
        .store()
        .add_index(MEMBER_INDEX, crate::inventory::collector::release_index());
    statefulsets
        .store()
        .add_index(MEMBER_INDEX, crate::inventory::collector::release_index());
    let drifted: Arc<Mutex<HashSet<String>>> = Arc::default();
    let delivery = Delivery {
        client: manager.client(),
        apps: apps.store(),
        sets: sets.store(),
        releases: releases.store(),
        deployments: deployments.store(),
        statefulsets: statefulsets.store(),
        daemonsets: daemonsets.store(),
        jobs: jobs.store(),
        secrets: secrets.store(),
        configmaps: configmaps.store(),
        helm: helm.clone(),
        repo_cache: Arc::default(),
        written: Default::default(),
        drifted: drifted.clone(),
        recorder: manager.recorder(),
        settings: settings.clone(),
    };
    let controller = Controller::new(manager, "helmapp", delivery)
        .max_backoff(Duration::from_secs(300))
        .workers(settings.workers)
        .resync_every(settings.resync, &apps);

    // A HelmApp: new, deleted, its spec changed (generation), its deletion
    // begun, or `hossted.com/reconcile-at` changed. Labels, other
    // annotations and our own status writes are not reasons.
    let queue = controller.queue();
    let store = apps.store();
    let ready = |a: &HelmApp| {
        a.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    apps.add_event_handler(HandlerFn(move |e: &Event<HelmApp>| {
        // Its dependents, when it appears, goes, or its Ready changes.
        let dependents = |a: &HelmApp| {
            let key = format!("HelmApp/{}", cache::object_key(a));
            for d in store.by_index(DEPENDS_ON_INDEX, &key) {
                queue.add(cache::object_key(d.as_ref()));
            }
        };
        match e {
            Event::Add(a) | Event::Delete(a) => {
                queue.add(cache::object_key(a.as_ref()));
                dependents(a);
            }
            Event::Update { old, new } => {
                if ready(old) != ready(new) {
                    dependents(new);
                }
                let asked = |a: &HelmApp| a.annotations().get(RECONCILE_AT).cloned();
                if old.metadata.generation != new.metadata.generation
                    || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                    || asked(old) != asked(new)
                {
                    queue.add(cache::object_key(new.as_ref()));
                }
            }
        }
    }));
    // A HelmAppSet that HelmApps depend on: appeared, went, or its Ready
    // changed — exactly its dependents look again.
    let (queue, store) = (controller.queue(), apps.store());
    sets.add_event_handler(HandlerFn(move |e: &Event<HelmAppSet>| {
        let changed = match e {
            Event::Add(s) | Event::Delete(s) => Some(s),
            Event::Update { old, new } => {
                let ready = |s: &HelmAppSet| {
                    s.status.as_ref().and_then(|st| {
                        st.conditions
                            .iter()
                            .find(|c| c.type_ == "Ready")
                            .map(|c| c.status.clone())
                    })
                };
                (ready(old) != ready(new)).then_some(new)
            }
        };
        if let Some(set) = changed {
            let key = format!("HelmAppSet/{}", cache::object_key(set.as_ref()));
            for d in store.by_index(DEPENDS_ON_INDEX, &key) {
                queue.add(cache::object_key(d.as_ref()));
            }
        }
    }));
    // A Secret or ConfigMap that a HelmApp's valuesFrom names: exactly
    // those HelmApps (they run helm only if the named key's digest moved).
    let users = |kind: &'static str| {
        let (apps, queue) = (apps.store(), controller.queue());
        move |meta: &kube::api::ObjectMeta| {
            let key = format!(
                "{kind}/{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            );
            for app in apps.by_index(VALUES_FROM_INDEX, &key) {
                queue.add(cache::object_key(app.as_ref()));
            }
        }
    };
    let of_secret = users("Secret");
    secrets.add_event_handler(HandlerFn(move |e: &Event<SecretDigests>| {
        if let Some(o) = e.changed() {
            of_secret(&o.metadata);
        }
    }));
    let of_configmap = users("ConfigMap");
    configmaps.add_event_handler(HandlerFn(move |e: &Event<ConfigMapDigests>| {
        if let Some(o) = e.changed() {
            of_configmap(&o.metadata);
        }
    }));
    // Drift: an object of a release deleted while no helm of ours runs on
    // it marks that release's HelmApps drifted and re-queues them (the
    // inventory's informers, shared through the factory).
    let drift = |kind: &'static str| {
        let (apps, queue, drifted, helm) = (
            apps.store(),
            controller.queue(),
            drifted.clone(),
            helm.clone(),
        );
        move |meta: &kube::api::ObjectMeta| {
            let (ns, release) = (
                meta.namespace.as_deref().unwrap_or_default(),
                label(meta, INSTANCE_LABEL),
            );
            if release.is_empty() || helm.is_busy(ns, release) {
                return;
            }
            for app in apps.by_index(TARGET_INDEX, &format!("{ns}/{release}")) {
                let key = cache::object_key(app.as_ref());
                log::info!(
                    "{key}: {kind} {ns}/{} of its release was deleted",
                    meta.name.as_deref().unwrap_or_default()
                );
                drifted.lock().insert(key.clone());
                queue.add(key);
            }
        }
    };
    // `wait`: a workload's rollout moved; its release's waiting HelmApps look again.
    let rollout = || {
        let (apps, queue) = (apps.store(), controller.queue());
        move |meta: &kube::api::ObjectMeta| {
            let (ns, release) = (
                meta.namespace.as_deref().unwrap_or_default(),
                label(meta, INSTANCE_LABEL),
            );
            for app in apps.by_index(TARGET_INDEX, &format!("{ns}/{release}")) {
                if app.spec.wait {
                    queue.add(cache::object_key(app.as_ref()));
                }
            }
        }
    };
    let on_deployment = rollout();
    deployments.add_event_handler(HandlerFn(move |e: &Event<Deployment>| {
        if let Some(o) = e.changed() {
            on_deployment(&o.metadata);
        }
    }));
    let on_daemonset = rollout();
    daemonsets.add_event_handler(HandlerFn(move |e: &Event<DaemonSet>| {
        if let Some(o) = e.changed() {
            on_daemonset(&o.metadata);
        }
    }));
    let on_job = rollout();
    jobs.add_event_handler(HandlerFn(move |e: &Event<Job>| {
        if let Some(o) = e.changed() {
            on_job(&o.metadata);
        }
    }));
    let on_statefulset = rollout();
    statefulsets.add_event_handler(HandlerFn(move |e: &Event<StatefulSet>| {
        if let Some(o) = e.changed() {
            on_statefulset(&o.metadata);
        }
    }));
    watch_deletions::<Deployment>(factory, drift("Deployment"));
    watch_deletions::<StatefulSet>(factory, drift("StatefulSet"));
    watch_deletions::<Service>(factory, drift("Service"));
    watch_deletions::<Ingress>(factory, drift("Ingress"));
    watch_deletions::<ReleaseSecret>(factory, drift("Secret"));
    (controller, helm)
}

/// Calls `on_delete` with the metadata of every deleted `K` managed by Helm.
fn watch_deletions<K: cache::Object>(
    factory: &cache::SharedInformerFactory,
    on_delete: impl Fn(&kube::api::ObjectMeta) + Send + Sync + 'static,
) {
    let informer = factory.informer::<K>(managed_by_helm_options());
    informer.add_event_handler(HandlerFn(move |e: &Event<K>| {
        if let Event::Delete(o) = e {
            on_delete(o.meta());
        }
    }));
}
