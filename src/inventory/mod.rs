//! Job 1, the inventory: every Helm release of the cluster, with its pods,
//! services, volumes and ingresses, reported to the Hossted API for each
//! Hosstedproject.
//!
//! [`controller`] wires it in the shape of `k8s.io/sample-controller`: it
//! asks the manager's shared factory for the informers and registers
//! handlers that only enqueue; [`Inventory`]'s `reconcile` holds the logic.
//!
//! Any relevant change — a Helm release, a pod, a service, a volume, an
//! ingress, a namespace, a `uuid` Secret — enqueues every Hosstedproject
//! after a short window, so a burst (a `helm upgrade` touching many objects)
//! becomes one reconcile. The safety resync enqueues them every
//! `RECONCILE_DURATION` as well; it is not the mechanism.

mod api;
pub mod collector;
mod deliver;
mod forged;
mod informers;
pub mod ledger;
pub mod payload;
pub mod poster;
mod reconciler;
mod settings;
pub mod status;
mod sync_error;

use std::sync::Arc;
use std::time::Duration;

use apis::Hosstedproject;
use cache::{Event, HandlerFn, InformerOptions, Object, SharedInformer, SharedInformerFactory};
use kube::{Api, Client, ResourceExt};
use runtime::{Controller, Manager, StatusWriter};

use crate::lean::objects::{INSTANCE_LABEL, Labelled};

pub use api::{ApiRequests, HosstedApi};
pub use informers::Informers;
pub use reconciler::Inventory;
pub use settings::Settings;
pub use sync_error::SyncError;

use collector::Context;
use ledger::Ledger;
use poster::Poster;

/// The inventory controller, its informers requested from `manager`'s
/// shared factory and its handlers registered; `manager.add` it.
pub fn controller(manager: &Manager, settings: Settings, poster: Poster) -> Controller<Inventory> {
    let factory = manager.factory();
    let projects = factory.informer::<Hosstedproject>(InformerOptions::default());
    let informers = Informers::new(factory, &settings);
    let api_requests = ApiRequests::default();
    manager.metrics().register(
        "api_requests",
        "Requests to the Hossted API by endpoint and HTTP status",
        api_requests.clone(),
    );
    let inventory = Inventory {
        projects: projects.store(),
        caches: informers.caches(),
        recorder: manager.recorder(),
        api: HosstedApi {
            poster: Arc::new(poster),
            requests: api_requests,
        },
        settings: settings.clone(),
        ledger: Ledger::default(),
        status: status_writer(manager, &projects),
        stopping: manager.stopping(),
        forged: forged::ForgedNotices::new(manager.recorder()),
    };
    let controller = Controller::new(manager, "hosstedproject", inventory)
        .max_backoff(MAX_BACKOFF)
        .workers(settings.workers)
        .resync_every(settings.resync, &projects);

    // A Hosstedproject: when its spec changes (its generation moves; our own
    // status writes do not move it). A new or deleted one may change which
    // is the oldest — the one that reports —: every one is looked at.
    let queue = controller.queue();
    let all = projects.store();
    projects.add_event_handler(HandlerFn(move |e: &Event<Hosstedproject>| match e {
        Event::Add(_) | Event::Delete(_) => all.list_keys().into_iter().for_each(|k| queue.add(k)),
        Event::Update { old, new } if old.metadata.generation != new.metadata.generation => {
            queue.add(new.name_any())
        }
        Event::Update { .. } => {}
    }));
    let i = &informers;
    let window = settings.coalesce;
    let on = |f: Filter| Trigger {
        controller: &controller,
        projects: &projects,
        window,
        filter: f,
    };
    on(Filter::Any).watch(&i.namespaces);
    on(Filter::Any).watch(&i.releases);
    on(Filter::Any).watch(&i.uuid_secrets);
    on(Filter::ReleaseMember).watch(&i.pods);
    on(Filter::ReleaseMember).watch(&i.services);
    on(Filter::ReleaseMember).watch(&i.pvcs);
    on(Filter::ReleaseMember).watch(&i.ingresses);
    if let Some(cm) = &i.release_configmaps {
        on(Filter::Any).watch(cm);
    }
    // Deployments, StatefulSets, ConfigMaps, Secrets and vulnerability
    // reports only fill in the payload of a release that is sent anyway
    // (docs/inventory.md: a change to them alone is no reason to send): no handler,
    // the next send reads them from the cache.
    controller
}

/// The cap of the backoff while the API is unavailable (docs/inventory.md).
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// Which objects of a kind can change a report.
#[derive(Clone, Copy)]
enum Filter {
    Any,
    /// Only objects with an `app.kubernetes.io/instance` label.
    ReleaseMember,
}

/// Enqueues every Hosstedproject, after the coalescing window, when an
/// object that can change a report changes.
struct Trigger<'a> {
    controller: &'a Controller<Inventory>,
    projects: &'a SharedInformer<Hosstedproject>,
    window: Duration,
    filter: Filter,
}

impl Trigger<'_> {
    /// Updates that change nothing (same resourceVersion: a resync or a
    /// relist) are ignored, and a project backing off (the API is
    /// unavailable) is left to its backoff: a change must not cut it short.
    fn watch<K>(self, informer: &SharedInformer<K>)
    where
        K: Object + Labelled,
    {
        let queue = self.controller.queue();
        let projects = self.projects.store();
        let (window, filter) = (self.window, self.filter);
        informer.add_event_handler(HandlerFn(move |e: &Event<K>| {
            let Some(obj) = e.changed() else {
                return;
            };
            if matches!(filter, Filter::ReleaseMember) && obj.label(INSTANCE_LABEL).is_empty() {
                return;
            }
            for key in projects.list_keys() {
                if queue.num_requeues(&key) == 0 {
                    queue.add_after(key, window);
                }
            }
        }));
    }
}

/// `hossted-operator collect`: the apps payloads for the cluster as it is
/// now, with the cluster UUID of an existing Hosstedproject if there is one.
pub async fn collect_once(
    client: Client,
    settings: &Settings,
    timeout: Duration,
) -> Result<Vec<payload::AppPayload>, String> {
    // A cluster without the CRD has no Hosstedproject: that is fine here.
    let project = match Api::<Hosstedproject>::all(client.clone())
        .list(&Default::default())
        .await
    {
        Ok(list) => list.items.into_iter().next(),
        Err(e) if runtime::is_not_found(&e) => None,
        Err(e) => return Err(format!("cannot list Hosstedprojects: {e}")),
    };
    let factory = SharedInformerFactory::new(client, None);
    let informers = Informers::new(&factory, settings);
    factory.start().map_err(|e| e.to_string())?;
    if !factory.wait_for_cache_sync(timeout).await {
        return Err(format!(
            "caches did not sync within {timeout:?}; check access to the cluster"
        ));
    }
    let status = project
        .as_ref()
        .and_then(|p| p.status.clone())
        .unwrap_or_default();
    let spec = project.map(|p| p.spec).unwrap_or_default();
    let known = collector::Known::new(status.delivered().0);
    let caches = informers.caches();
    let ctx = Context {
        cluster_uuid: &status.cluster_uuid,
        email_id: &settings.email_id,
        org_id: &settings.org_id,
        deny_namespaces: &spec.deny_namespaces,
        monitoring: spec.monitoring.enable,
        cve: spec.cve.enable,
        known: &known,
    };
    let collection = collector::collect(&caches, &ctx);
    for bad in &collection.invalid {
        log::warn!(
            "cannot decode Helm release Secret {}/{}: {}",
            bad.namespace,
            bad.secret,
            bad.error
        );
    }
    let payloads = collection
        .apps
        .iter()
        .map(|a| a.payload(&caches, &ctx))
        .collect();
    factory.shutdown();
    Ok(payloads)
}

/// The inventory's field manager for the Hosstedproject conditions it owns
/// (`Ready`); delivery applies `Delivering` under its own.
pub const FIELD_MANAGER: &str = "hossted-inventory";

/// The Hosstedproject status writer, following `projects`.
fn status_writer(
    manager: &Manager,
    projects: &SharedInformer<Hosstedproject>,
) -> StatusWriter<Hosstedproject, apis::HosstedprojectStatus> {
    let writer = StatusWriter::new(manager.client(), |hp: &Hosstedproject| hp.status.clone())
        .unchanged_when(same_but_timestamp)
        .owning_conditions(FIELD_MANAGER, &[apis::PROJECT_READY])
        .applying_whole_status();
    writer.follow(projects);
    writer
}

/// Statuses that differ only in `lastReconcileTimestamp` are the same: the
/// timestamp alone is no reason to write.
fn same_but_timestamp(a: &apis::HosstedprojectStatus, b: &apis::HosstedprojectStatus) -> bool {
    let strip = |s: &apis::HosstedprojectStatus| apis::HosstedprojectStatus {
        last_reconcile_timestamp: String::new(),
        ..s.clone()
    };
    strip(a) == strip(b)
}
