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

use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::{Dependency, DependencyKind, HelmApp, HelmAppSpec};
use apis::helmappset::{HelmAppSet, HelmAppSetStatus, MAX_CHILD_NAME};
use cache::{Event, HandlerFn, InformerOptions, Store};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use record::{EventRecorder, EventType};
use runtime::{Action, Controller, Manager, Reconciler};
use serde_json::json;

use crate::condition;

/// On a child HelmApp: the name of the set that owns it.
pub const SET_LABEL: &str = "hossted.com/helmappset";
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
    recorder: EventRecorder,
}

/// The HelmAppSet controller, its informers requested from `manager`'s
/// factory (the HelmApp informer is the delivery controller's, shared).
pub fn controller(manager: &Manager, workers: usize) -> Controller<AppSets> {
    let factory = manager.factory();
    let sets = factory.informer::<HelmAppSet>(InformerOptions::default());
    let apps = factory.informer::<HelmApp>(InformerOptions::default());
    apps.store().add_index(
        OWNER_INDEX,
        Arc::new(|a: &HelmApp| owner_of(a).into_iter().collect()),
    );
    let reconciler = AppSets {
        client: manager.client(),
        sets: sets.store(),
        apps: apps.store(),
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

/// The child HelmApp name of `app` in `set`.
pub fn child_name(set: &str, app: &str) -> String {
    format!("{set}-{app}")
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
        let name = set.name_any();
        let ns = set.namespace().unwrap_or_default();
        let mut status = set.status.clone().unwrap_or_default();
        status.observed_generation = set.metadata.generation;

        if let Some(bad) = set
            .spec
            .apps
            .iter()
            .map(|a| child_name(&name, &a.name))
            .find(|c| c.len() > MAX_CHILD_NAME)
        {
            let message = format!(
                "child HelmApp {bad:?} is longer than {MAX_CHILD_NAME} characters (Helm's release-name limit): shorten the set's or the app's name"
            );
            return self.refuse(&set, status, "InvalidName", &message).await;
        }
        let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &ns);
        let mut previous: Option<String> = None;
        for app in &set.spec.apps {
            let child = child_name(&name, &app.name);
            let spec = desired_spec(&set, &app.spec, previous.as_deref());
            previous = Some(child.clone());
            match self.apps.get(&format!("{ns}/{child}")) {
                None => {
                    let object = HelmApp {
                        metadata: ObjectMeta {
                            name: Some(child.clone()),
                            namespace: Some(ns.clone()),
                            labels: Some([(SET_LABEL.to_string(), name.clone())].into()),
                            owner_references: Some(vec![owner_reference(&set)]),
                            ..Default::default()
                        },
                        spec,
                        status: None,
                    };
                    match api.create(&PostParams::default(), &object).await {
                        Ok(_) => {}
                        // The cache has not seen it yet: the next pass does.
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Some(existing) => {
                    if owner_of(&existing).as_deref() != Some(key) {
                        let message = format!(
                            "HelmApp {ns}/{child} exists and is not this set's: rename the app or remove that HelmApp"
                        );
                        return self.refuse(&set, status, "NameTaken", &message).await;
                    }
                    if existing.spec != spec && existing.metadata.deletion_timestamp.is_none() {
                        // Replace, with its resourceVersion: fields the
                        // set dropped are dropped from the child too.
                        let mut updated = (*existing).clone();
                        updated.spec = spec;
                        api.replace(&child, &PostParams::default(), &updated)
                            .await?;
                    }
                }
            }
        }
        // Apps removed from the spec: deleted (their finalizer uninstalls).
        let wanted: Vec<String> = set
            .spec
            .apps
            .iter()
            .map(|a| child_name(&name, &a.name))
            .collect();
        for child in &children {
            let child_name = child.name_any();
            if !wanted.contains(&child_name) && child.metadata.deletion_timestamp.is_none() {
                self.recorder.event(
                    set.as_ref(),
                    EventType::Normal,
                    "AppRemoved",
                    &format!("{child_name} is no longer in spec.apps: deleting it (its release is uninstalled)"),
                );
                delete(&api, &child_name).await?;
            }
        }

        // Ready: every app Ready; else the first that is not says why.
        let ready_children: Vec<Option<Arc<HelmApp>>> = wanted
            .iter()
            .map(|c| self.apps.get(&format!("{ns}/{c}")))
            .collect();
        let ready = ready_children
            .iter()
            .filter(|c| c.as_ref().is_some_and(|c| is_ready(c)))
            .count();
        status.ready = format!("{ready}/{}", wanted.len());
        let generation = status.observed_generation;
        if ready == wanted.len() {
            let message = format!("all {} app(s) are Ready", wanted.len());
            condition::set(
                &mut status.conditions,
                "Ready",
                true,
                "AppsReady",
                &message,
                generation,
            );
        } else {
            let (reason, message) = wanted
                .iter()
                .zip(&ready_children)
                .find(|(_, c)| !c.as_ref().is_some_and(|c| is_ready(c)))
                .map(|(name, c)| why_not_ready(name, c.as_deref()))
                .unwrap_or_default();
            condition::set(
                &mut status.conditions,
                "Ready",
                false,
                &reason,
                &message,
                generation,
            );
        }
        self.write_status(&set, status).await?;
        Ok(Action::done(format!("{ready}/{} ready", wanted.len())))
    }
}

/// The child spec of `app`: the set's `dependsOn` and `suspend` added, and
/// in a sequenced set a dependency on the app before it.
fn desired_spec(set: &HelmAppSet, app: &HelmAppSpec, previous: Option<&str>) -> HelmAppSpec {
    let mut spec = app.clone();
    for d in &set.spec.depends_on {
        if !spec.depends_on.contains(d) {
            spec.depends_on.push(d.clone());
        }
    }
    if let Some(previous) = previous.filter(|_| set.spec.sequenced) {
        spec.depends_on.push(Dependency {
            kind: DependencyKind::HelmApp,
            name: previous.into(),
            namespace: String::new(),
        });
    }
    spec.suspend |= set.spec.suspend;
    spec
}

fn is_ready(app: &HelmApp) -> bool {
    app.status
        .as_ref()
        .is_some_and(|s| condition::is_true(&s.conditions, "Ready"))
}

/// The Ready reason and message of a child that is not Ready.
fn why_not_ready(name: &str, child: Option<&HelmApp>) -> (String, String) {
    let Some(child) = child else {
        return ("Progressing".into(), format!("{name}: being created"));
    };
    child
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.reason.clone(), format!("{name}: {}", c.message)))
        .unwrap_or_else(|| ("Progressing".into(), format!("{name}: not reconciled yet")))
}

fn owner_reference(set: &HelmAppSet) -> OwnerReference {
    OwnerReference {
        api_version: HelmAppSet::api_version(&()).into_owned(),
        kind: HelmAppSet::kind(&()).into_owned(),
        name: set.name_any(),
        uid: set.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

async fn delete(api: &Api<HelmApp>, name: &str) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

impl AppSets {
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
        let name = set.name_any();
        let order: Vec<String> = set
            .spec
            .apps
            .iter()
            .map(|a| child_name(&name, &a.name))
            .collect();
        // Children no longer in the spec first, then the apps last to first.
        let position = |c: &Arc<HelmApp>| {
            order
                .iter()
                .position(|n| *n == c.name_any())
                .map_or(usize::MAX, |p| p)
        };
        let next = children.iter().max_by_key(|c| position(c));
        let Some(next) = next else {
            self.set_finalizer(set, false).await?;
            return Ok(Action::done("every app uninstalled; set released"));
        };
        if next.metadata.deletion_timestamp.is_none() {
            let ns = set.namespace().unwrap_or_default();
            self.recorder.event(
                set.as_ref(),
                EventType::Normal,
                "Uninstalling",
                &format!(
                    "deleting {} ({} app(s) left, last first)",
                    next.name_any(),
                    children.len()
                ),
            );
            delete(&Api::namespaced(self.client.clone(), &ns), &next.name_any()).await?;
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
        reason: &str,
        message: &str,
    ) -> Result<Action, AppSetError> {
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
        self.write_status(set, status).await?;
        Ok(Action::done(format!("{reason}: {message}")))
    }

    /// Writes `status` when it differs from the set's (conditions compared
    /// without their transition times).
    async fn write_status(
        &self,
        set: &HelmAppSet,
        status: HelmAppSetStatus,
    ) -> Result<(), AppSetError> {
        let current = set.status.clone().unwrap_or_default();
        if same_status(&current, &status) {
            return Ok(());
        }
        let api: Api<HelmAppSet> =
            Api::namespaced(self.client.clone(), &set.namespace().unwrap_or_default());
        api.patch_status(
            &set.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
        Ok(())
    }

    async fn set_finalizer(&self, set: &HelmAppSet, present: bool) -> Result<(), AppSetError> {
        let api: Api<HelmAppSet> =
            Api::namespaced(self.client.clone(), &set.namespace().unwrap_or_default());
        super::finalizer::set(&api, set, SET_FINALIZER, present).await?;
        Ok(())
    }
}

fn same_status(a: &HelmAppSetStatus, b: &HelmAppSetStatus) -> bool {
    let strip = |s: &HelmAppSetStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            );
        }
        s
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmappset::{HelmAppSetSpec, SetApp};

    fn set(sequenced: bool) -> HelmAppSet {
        let mut s = HelmAppSet::new(
            "stack",
            HelmAppSetSpec {
                sequenced,
                depends_on: vec![Dependency {
                    kind: DependencyKind::HelmAppSet,
                    name: "base".into(),
                    namespace: String::new(),
                }],
                suspend: false,
                apps: vec![SetApp {
                    name: "db".into(),
                    spec: HelmAppSpec::default(),
                }],
            },
        );
        s.metadata.namespace = Some("apps".into());
        s
    }

    #[test]
    fn a_child_depends_on_the_set_dependencies_and_in_sequence_on_the_app_before() {
        let app = HelmAppSpec::default();
        let first = desired_spec(&set(true), &app, None);
        assert_eq!(first.depends_on.len(), 1, "the set's own dependency");
        assert_eq!(first.depends_on[0].kind, DependencyKind::HelmAppSet);
        let second = desired_spec(&set(true), &app, Some("stack-db"));
        assert_eq!(second.depends_on.len(), 2);
        assert_eq!(second.depends_on[1].name, "stack-db");
        let unordered = desired_spec(&set(false), &app, Some("stack-db"));
        assert_eq!(unordered.depends_on.len(), 1, "not sequenced: no chain");
        let mut suspended = set(false);
        suspended.spec.suspend = true;
        assert!(desired_spec(&suspended, &app, None).suspend);
    }
}
