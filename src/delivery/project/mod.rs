//! The Go operator's delivery, drop-in: `Hosstedproject.spec.helm[]` and
//! the platform toggles (`spec.monitoring.enable`, `spec.ingress.enable`)
//! kept as HelmApps, which the HelmApp controller installs, upgrades and
//! uninstalls.
//!
//! - Only the reporting Hosstedproject (the oldest) delivers; `stop` pauses
//!   reporting only.
//! - A `spec.helm` entry is a HelmApp in the operator's namespace, named
//!   `<namespace>-<releaseName>-<hash8>`, targeting release `<releaseName>`
//!   in `<namespace>` (created first), with `adopt: true` — the Go operator
//!   installed such releases without our labels. Its chart version is
//!   pinned once, when the HelmApp is created: the adopted release's
//!   version, else the repository's latest; a Go-era app is never upgraded
//!   by surprise.
//! - An enabled toggle delivers the apps its key of the ConfigMap
//!   `hossted-platform-charts` (operator namespace) lists: a YAML list of
//!   `{name, namespace, spec}`, `spec` a HelmApp spec.
//! - What leaves the spec (an entry removed, a toggle turned off) is
//!   deleted, and its release uninstalled. Deleting the Hosstedproject
//!   removes its HelmApps *without* uninstalling.
//!
//! Every HelmApp made here carries `hossted.com/project: <project>` and
//! `hossted.com/delivered-for: helm | monitoring | ingress`.

mod context;
mod ensure;
mod wanted;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use apis::Hosstedproject;
use apis::helmapp::HelmApp;
use cache::{Event, HandlerFn, InformerOptions, Store};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use record::EventType;
use runtime::{Action, Controller, Manager, Reconciler};
use serde_json::json;

use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::source::fetch::Sources;
use crate::lean::storage::HelmRelease;
use crate::lean::storage::helm_storage_options;
use context::PROJECT_INDEX;
pub use context::{PLATFORM_CONFIGMAP, PROJECT_LABEL, ProjectDelivery, ProjectError, SOURCE_LABEL};

/// The controller; `operator_namespace` holds [`PLATFORM_CONFIGMAP`].
pub fn controller(
    manager: &Manager,
    operator_namespace: &str,
    sources: Arc<Sources>,
    resync: Duration,
) -> Controller<ProjectDelivery> {
    let factory = manager.factory();
    // The inventory's informer when it runs (same options: one watch);
    // alone, delivery serves spec.helm only while the CRD exists.
    let projects = factory
        .existing::<Hosstedproject>(&InformerOptions::default())
        .unwrap_or_else(|| factory.optional_informer(InformerOptions::default()));
    // Only the unsharded process runs this: its HelmApp informer.
    let apps = factory.optional_informer::<HelmApp>(crate::delivery::Shard::Unsharded.helmapps());
    apps.store().add_index(
        PROJECT_INDEX,
        Arc::new(|a: &HelmApp| a.labels().get(PROJECT_LABEL).cloned().into_iter().collect()),
    );
    let platform = factory.namespaced_informer::<ConfigMap>(
        operator_namespace,
        InformerOptions::default().fields(&format!("metadata.name={PLATFORM_CONFIGMAP}")),
    );
    let releases = factory.informer::<HelmRelease>(helm_storage_options());
    let reconciler = ProjectDelivery {
        client: manager.client(),
        projects: projects.store(),
        apps: apps.store(),
        platform: platform.store(),
        releases: releases.store(),
        recorder: manager.recorder(),
        sources,
        operator_namespace: operator_namespace.to_string(),
        delivering: super::disabled::writer(manager, &projects),
    };
    let controller = Controller::new(manager, "project-delivery", reconciler)
        .max_backoff(Duration::from_secs(300))
        .workers(1)
        .resync_every(resync, &projects);

    let to = Enqueue {
        queue: controller.queue(),
        projects: projects.store(),
    };
    let h = to.clone();
    projects.add_event_handler(HandlerFn(move |e: &Event<Hosstedproject>| h.on_project(e)));
    let h = to.clone();
    apps.add_event_handler(HandlerFn(move |e: &Event<HelmApp>| h.on_helmapp(e)));
    platform.add_event_handler(HandlerFn(move |e: &Event<ConfigMap>| {
        if e.changed().is_some() || matches!(e, Event::Delete(_)) {
            to.all();
        }
    }));
    controller
}

/// The project controller's handlers: each maps an object to project names.
#[derive(Clone)]
struct Enqueue {
    queue: Arc<runtime::RateLimitingQueue<String>>,
    projects: Store<Hosstedproject>,
}

impl Enqueue {
    /// Every project looks again (the platform charts changed, or which
    /// project delivers may have).
    fn all(&self) {
        for p in self.projects.list() {
            self.queue.add(p.name_any());
        }
    }

    /// A project new or gone changes which one delivers — all look again; a
    /// spec change or a deletion begun, that one.
    fn on_project(&self, e: &Event<Hosstedproject>) {
        match e {
            Event::Add(p) | Event::Delete(p) => {
                self.queue.add(p.name_any());
                self.all();
            }
            Event::Update { old, new } => {
                if old.metadata.generation != new.metadata.generation
                    || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                {
                    self.queue.add(new.name_any());
                }
            }
        }
    }

    /// One of its HelmApps deleted or edited by someone: put it back. A
    /// HelmApp that appears — on start, those of a project deleted while
    /// the operator was down — has its project look again (and let it go).
    fn on_helmapp(&self, e: &Event<HelmApp>) {
        let app = match e {
            Event::Add(a) | Event::Delete(a) => a,
            Event::Update { old, new } => {
                if old.metadata.generation == new.metadata.generation
                    && old.metadata.deletion_timestamp == new.metadata.deletion_timestamp
                {
                    return;
                }
                new
            }
        };
        if let Some(project) = app.labels().get(PROJECT_LABEL) {
            self.queue.add(project.clone());
        }
    }
}

impl Reconciler for ProjectDelivery {
    type Error = ProjectError;

    async fn reconcile(&self, key: &str) -> Result<Action, ProjectError> {
        // Only its place makes a HelmApp the project's: the label on one
        // anywhere else means nothing (one made under the earlier rule is
        // moved by `ensure` when its entry is still wanted).
        let owned: Vec<_> = self
            .apps
            .by_index(PROJECT_INDEX, key)
            .into_iter()
            .filter(|a| a.namespace().as_deref() == Some(self.operator_namespace.as_str()))
            .collect();
        let hp = self.projects.get(key);
        let Some(hp) = hp.filter(|h| h.metadata.deletion_timestamp.is_none()) else {
            return self.let_go(&owned).await;
        };
        // Delivery runs: whatever a run without it said no longer holds.
        super::disabled::clear(&self.delivering, &hp).await?;
        let projects = self.projects.list();
        let reporting =
            apis::reporting_project(projects.iter().map(|p| p.as_ref())).map(|p| p.name_any());
        if reporting.as_deref() != Some(key) {
            return Ok(Action::done(
                "not the reporting Hosstedproject: delivers nothing",
            ));
        }

        let (wanted, unreadable) = self.wanted(&hp);
        let mut created = 0;
        for w in &wanted {
            if self.ensure(&hp, w).await? {
                created += 1;
            }
        }
        // What left the spec goes (and is uninstalled) — but never the
        // apps of a toggle whose list could not be read: that loses nothing.
        let keep: HashSet<(String, String)> = wanted
            .iter()
            .map(|w| (self.operator_namespace.clone(), w.app_name()))
            .collect();
        let mut removed = 0;
        for app in &owned {
            let source = app.labels().get(SOURCE_LABEL).cloned().unwrap_or_default();
            let id = (app.namespace().unwrap_or_default(), app.name_any());
            if keep.contains(&id)
                || unreadable.contains(source.as_str())
                || app.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            self.recorder.event(
                hp.as_ref(),
                EventType::Normal,
                Reason::DeliveryRemoved.as_str(),
                &format!(
                    "HelmApp {}/{} ({source}) is no longer asked for: deleted, its release uninstalled",
                    id.0, id.1
                ),
            );
            let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &id.0);
            ignore_missing(api.delete(&id.1, &DeleteParams::default()).await)?;
            removed += 1;
        }
        Ok(Action::done(format!(
            "{} HelmApp(s) asked for, {created} created, {removed} removed",
            wanted.len()
        )))
    }
}

impl ProjectDelivery {
    /// The project is gone: its HelmApps are removed, their releases left
    /// installed.
    async fn let_go(&self, owned: &[Arc<HelmApp>]) -> Result<Action, ProjectError> {
        for app in owned {
            let api: Api<HelmApp> =
                Api::namespaced(self.client.clone(), &app.namespace().unwrap_or_default());
            if app.spec.uninstall_on_delete {
                ignore_missing(
                    api.patch(
                        &app.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "spec": { "uninstallOnDelete": false } })),
                    )
                    .await
                    .map(|_| ()),
                )?;
            }
            if app.metadata.deletion_timestamp.is_none() {
                ignore_missing(
                    api.delete(&app.name_any(), &DeleteParams::default())
                        .await
                        .map(|_| ()),
                )?;
            }
        }
        Ok(Action::done(format!(
            "project gone: {} HelmApp(s) removed, releases left installed",
            owned.len()
        )))
    }
}

fn ignore_missing<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    runtime::ignore_not_found(r).map(|_| ())
}
