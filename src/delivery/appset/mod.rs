//! The HelmAppSet controller: a set's `apps[]` kept as child HelmApps
//! `<set>-<name>` (owned by the set, labelled with it), each depending on
//! the one before when `sequenced`, all depending on the set's `dependsOn`;
//! `status.ready` counts the children that are Ready. Deleting the set
//! deletes its children one at a time in reverse order — each one's own
//! finalizer uninstalls its release — and lets the set go after the last.
//!
//! Wiring as in `k8s.io/sample-controller`: [`controller`] registers
//! handlers that only enqueue the set's key (its own spec or deletion
//! changed; a child appeared, went, or changed its Ready condition);
//! [`AppSets::reconcile`] holds the logic. The helm work itself is the
//! HelmApp controller's: this one only writes HelmApps.

mod desired;

use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::HelmApp;
use apis::helmappset::{HelmAppSet, HelmAppSetStatus};
use cache::{Event, HandlerFn, Store};
use kube::{Api, Client, ResourceExt};
use record::{EventRecorder, EventType};
use runtime::{Action, Controller, Manager, Reconciler, StatusWriter};

use super::children;
use super::shard::Shard;
use crate::condition;
use crate::delivery::helmapp::decide::conditions::Reason;
pub use desired::{SET_LABEL, child_name};

/// Held by a set until its children are gone, in reverse order.
pub const SET_FINALIZER: &str = "hossted.com/ordered-uninstall";
/// Index of HelmApps by the set that owns them: `namespace/set`.
pub const OWNER_INDEX: &str = "owner-set";

/// Why a set's reconcile must be retried.
#[derive(Debug, thiserror::Error)]
pub enum AppSetError {
    #[error("writing to the API: {0}")]
    Kube(#[from] kube::Error),
}

/// The HelmAppSet controller's [`Reconciler`].
pub struct AppSets {
    client: Client,
    sets: Store<HelmAppSet>,
    apps: Store<HelmApp>,
    status: StatusWriter<HelmAppSet, HelmAppSetStatus>,
    recorder: EventRecorder,
}

/// The HelmAppSet controller, its informers requested from `manager`'s
/// factory (the HelmApp informer is the delivery controller's, shared).
pub fn controller(manager: &Manager, workers: usize, shard: &Shard) -> Controller<AppSets> {
    let factory = manager.factory();
    let sets = factory.optional_informer::<HelmAppSet>(shard.helmappsets());
    let apps = factory.optional_informer::<HelmApp>(shard.helmapps());
    apps.store().add_index(
        OWNER_INDEX,
        Arc::new(|a: &HelmApp| owner_of(a).into_iter().collect()),
    );
    let reconciler = AppSets {
        client: manager.client(),
        sets: sets.store(),
        apps: apps.store(),
        status: {
            let writer = StatusWriter::new(manager.client(), |s: &HelmAppSet| s.status.clone());
            writer.follow(&sets);
            writer
        },
        recorder: manager.recorder(),
    };
    let controller = Controller::new(manager, "helmappset", reconciler)
        .max_backoff(Duration::from_secs(300))
        .workers(workers);

    // The set: new, gone, its spec changed or its deletion begun.
    let queue = controller.queue();
    sets.add_event_handler(HandlerFn(move |e: &Event<HelmAppSet>| match e {
        Event::Add(s) | Event::Delete(s) => queue.add(cache::object_key(s.as_ref())),
        Event::Update { old, new } => {
            if old.metadata.generation != new.metadata.generation
                || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
            {
                queue.add(cache::object_key(new.as_ref()));
            }
        }
    }));
    // A child: appeared, went, its Ready changed, or someone edited it.
    let queue = controller.queue();
    apps.add_event_handler(HandlerFn(move |e: &Event<HelmApp>| {
        let owner = match e {
            Event::Add(a) | Event::Delete(a) => owner_of(a),
            Event::Update { old, new } => {
                let ready = |a: &HelmApp| {
                    a.status.as_ref().and_then(|s| {
                        s.conditions
                            .iter()
                            .find(|c| c.type_ == "Ready")
                            .map(|c| (c.status.clone(), c.reason.clone()))
                    })
                };
                (ready(old) != ready(new)
                    || old.metadata.generation != new.metadata.generation
                    || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp)
                    .then(|| owner_of(new))
                    .flatten()
            }
        };
        if let Some(key) = owner {
            queue.add(key);
        }
    }));
    controller
}

/// `namespace/set` of the set that owns `app`, by its label.
fn owner_of(app: &HelmApp) -> Option<String> {
    let set = app.labels().get(SET_LABEL)?;
    Some(format!("{}/{set}", app.namespace().unwrap_or_default()))
}

impl Reconciler for AppSets {
    type Error = AppSetError;

    async fn reconcile(&self, key: &str) -> Result<Action, AppSetError> {
        let Some(set) = self.sets.get(key) else {
            return Ok(Action::done("gone"));
        };
        let children = self.apps.by_index(OWNER_INDEX, key);
        if set.metadata.deletion_timestamp.is_some() {
            return self.delete_in_reverse(&set, &children).await;
        }
        if !set.finalizers().iter().any(|f| f == SET_FINALIZER) {
            self.set_finalizer(&set, true).await?;
        }
        let mut status = self.status.current(&set);
        status.observed_generation = set.metadata.generation;
        if let Some(message) = desired::invalid_name(&set) {
            return self
                .refuse(&set, status, Reason::InvalidName, &message)
                .await;
        }
        if let Some(message) = self.apply_children(&set, key).await? {
            return self.refuse(&set, status, Reason::NameTaken, &message).await;
        }
        let names = desired::child_names(&set);
        self.remove_unwanted(&set, &children, &names).await?;
        let ns = set.namespace().unwrap_or_default();
        let cached: Vec<Option<Arc<HelmApp>>> = names
            .iter()
            .map(|c| self.apps.get(&format!("{ns}/{c}")))
            .collect();
        let refs: Vec<Option<&HelmApp>> = cached.iter().map(|c| c.as_deref()).collect();
        let (ready, value, reason, message) = desired::readiness(&names, &refs);
        status.ready = format!("{ready}/{}", names.len());
        let generation = status.observed_generation;
        condition::set(
            &mut status.conditions,
            "Ready",
            value,
            &reason,
            &message,
            generation,
        );
        self.status.write(&set, &status).await?;
        Ok(Action::done(format!("{ready}/{} ready", names.len())))
    }
}

impl AppSets {
    /// Creates or replaces each child `set` wants; a HelmApp of a child's
    /// name that is not this set's is reported, not taken.
    async fn apply_children(
        &self,
        set: &HelmAppSet,
        key: &str,
    ) -> Result<Option<String>, AppSetError> {
        let ns = set.namespace().unwrap_or_default();
        let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &ns);
        for wanted in desired::children(set) {
            let name = wanted.name_any();
            let existing = self.apps.get(&format!("{ns}/{name}"));
            if let Some(e) = &existing
                && owner_of(e).as_deref() != Some(key)
            {
                return Ok(Some(format!(
                    "HelmApp {ns}/{name} exists and is not this set's: rename the app or remove that HelmApp"
                )));
            }
            children::create_or_replace(&api, existing.as_deref(), wanted).await?;
        }
        Ok(None)
    }

    /// Children whose app left `spec.apps`: deleted (their finalizer
    /// uninstalls).
    async fn remove_unwanted(
        &self,
        set: &HelmAppSet,
        children: &[Arc<HelmApp>],
        wanted: &[String],
    ) -> Result<(), AppSetError> {
        let api: Api<HelmApp> =
            Api::namespaced(self.client.clone(), &set.namespace().unwrap_or_default());
        for child in children {
            let name = child.name_any();
            if wanted.contains(&name) || child.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let message = format!(
                "{name} is no longer in spec.apps: deleting it (its release is uninstalled)"
            );
            self.recorder.event(
                set,
                EventType::Normal,
                Reason::AppRemoved.as_str(),
                &message,
            );
            children::delete(&api, &name).await?;
        }
        Ok(())
    }

    /// One child at a time, last first; each must be gone (its release
    /// uninstalled by its own finalizer) before the one before it is
    /// deleted. The set goes after its last child.
    async fn delete_in_reverse(
        &self,
        set: &Arc<HelmAppSet>,
        children: &[Arc<HelmApp>],
    ) -> Result<Action, AppSetError> {
        if !set.finalizers().iter().any(|f| f == SET_FINALIZER) {
            return Ok(Action::done("deleted"));
        }
        let order = desired::child_names(set);
        // Children no longer in the spec first, then the apps last to first.
        let position = |c: &Arc<HelmApp>| {
            order
                .iter()
                .position(|n| *n == c.name_any())
                .map_or(usize::MAX, |p| p)
        };
        let Some(next) = children.iter().max_by_key(|c| position(c)) else {
            self.set_finalizer(set, false).await?;
            self.status.forget(set);
            return Ok(Action::done("every app uninstalled; set released"));
        };
        if next.metadata.deletion_timestamp.is_none() {
            let message = format!(
                "deleting {} ({} app(s) left, last first)",
                next.name_any(),
                children.len()
            );
            self.recorder.event(
                set.as_ref(),
                EventType::Normal,
                Reason::Uninstalling.as_str(),
                &message,
            );
            let api = Api::namespaced(self.client.clone(), &set.namespace().unwrap_or_default());
            children::delete(&api, &next.name_any()).await?;
        }
        // Its disappearance re-queues the set.
        Ok(Action::done(format!(
            "waiting for {} to be gone",
            next.name_any()
        )))
    }

    /// Ready=False with `reason`, a Warning Event when new, no retry (a
    /// change of the set re-queues it).
    async fn refuse(
        &self,
        set: &HelmAppSet,
        mut status: HelmAppSetStatus,
        reason: Reason,
        message: &str,
    ) -> Result<Action, AppSetError> {
        let reason = reason.as_str();
        if !condition::has(&status.conditions, "Ready", false, reason) {
            self.recorder
                .event(set, EventType::Warning, reason, message);
        }
        let generation = status.observed_generation;
        condition::set(
            &mut status.conditions,
            "Ready",
            false,
            reason,
            message,
            generation,
        );
        self.status.write(set, &status).await?;
        Ok(Action::done(format!("{reason}: {message}")))
    }

    async fn set_finalizer(&self, set: &HelmAppSet, present: bool) -> Result<(), AppSetError> {
        let api: Api<HelmAppSet> =
            Api::namespaced(self.client.clone(), &set.namespace().unwrap_or_default());
        super::finalizer::set(&api, set, SET_FINALIZER, present).await?;
        Ok(())
    }
}
