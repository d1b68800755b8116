//! The one piece of delivery that runs when delivery does not
//! (`--controllers` without `delivery`): a Hosstedproject that asks for
//! delivery — `spec.helm` entries or a platform toggle — is told it will not
//! get it, `Delivering=False, DeliveryDisabled` and one Warning Event; the
//! condition goes when either side changes.
//!
//! The inventory writes `Ready` on the same object. Each applies only its
//! own condition under its own field manager (server-side apply on a map
//! list keyed by `type`), so neither removes the other's from a stale copy.
//! When delivery runs, the project controller removes a `Delivering`
//! condition left from a run without it ([`clear`]).

use std::sync::Arc;

use apis::{Hosstedproject, HosstedprojectStatus, PROJECT_DELIVERING};
use cache::{Event, HandlerFn, InformerOptions, SharedInformer, Store};
use kube::ResourceExt;
use record::{EventRecorder, EventType};
use runtime::{Action, Controller, Manager, Reconciler, StatusWriter};

use crate::condition;
use crate::delivery::helmapp::decide::conditions::Reason;

/// Delivery's field manager for the `Delivering` condition.
pub const FIELD_MANAGER: &str = "hossted-delivery";

const MESSAGE: &str = "spec.helm or a platform toggle (monitoring, ingress) asks for Helm delivery, but this operator runs without it: add delivery to --controllers (and apply manifests/delivery)";

/// The status writer of the `Delivering` condition, following `projects`.
pub(super) fn writer(
    manager: &Manager,
    projects: &SharedInformer<Hosstedproject>,
) -> StatusWriter<Hosstedproject, HosstedprojectStatus> {
    let writer = StatusWriter::new(manager.client(), |hp: &Hosstedproject| hp.status.clone())
        .owning_conditions(FIELD_MANAGER, &[PROJECT_DELIVERING]);
    writer.follow(projects);
    writer
}

/// Removes `Delivering` from `hp` (delivery runs now, or nothing is asked).
pub(super) async fn clear(
    writer: &StatusWriter<Hosstedproject, HosstedprojectStatus>,
    hp: &Hosstedproject,
) -> Result<(), kube::Error> {
    let mut status = writer.current(hp);
    if status
        .conditions
        .iter()
        .any(|c| c.type_ == PROJECT_DELIVERING)
    {
        status.conditions.retain(|c| c.type_ != PROJECT_DELIVERING);
        writer.write(hp, &status).await?;
    }
    Ok(())
}

/// Says `DeliveryDisabled` on the projects that ask for delivery.
pub struct DeliveryDisabled {
    projects: Store<Hosstedproject>,
    status: StatusWriter<Hosstedproject, HosstedprojectStatus>,
    recorder: EventRecorder,
}

/// The controller: one worker, keyed by project name. Every project looks
/// again when one comes or goes (which one reports may have changed).
pub fn controller(manager: &Manager) -> Controller<DeliveryDisabled> {
    let factory = manager.factory();
    let projects = factory
        .existing::<Hosstedproject>(&InformerOptions::default())
        .unwrap_or_else(|| factory.optional_informer(InformerOptions::default()));
    let reconciler = DeliveryDisabled {
        projects: projects.store(),
        status: writer(manager, &projects),
        recorder: manager.recorder(),
    };
    let controller = Controller::new(manager, "delivery-disabled", reconciler).workers(1);
    let queue = controller.queue();
    let store = projects.store();
    projects.add_event_handler(HandlerFn(move |e: &Event<Hosstedproject>| match e {
        Event::Add(_) | Event::Delete(_) => {
            for p in store.list() {
                queue.add(p.name_any());
            }
        }
        Event::Update { old, new } => {
            if old.metadata.generation != new.metadata.generation {
                queue.add(new.name_any());
            }
        }
    }));
    controller
}

/// Whether `hp` asks for delivery: `spec.helm` entries or a platform toggle.
fn asks_for_delivery(hp: &Hosstedproject) -> bool {
    let spec = &hp.spec;
    !spec.helm.is_empty() || spec.monitoring.enable || spec.ingress.enable
}

impl Reconciler for DeliveryDisabled {
    type Error = kube::Error;

    async fn reconcile(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(hp) = self.projects.get(key) else {
            self.status.forget_key(key);
            return Ok(Action::done("gone"));
        };
        // Only the reporting project would deliver (the rule both jobs share).
        let projects = self.projects.list();
        let reporting = apis::reporting_project(projects.iter().map(Arc::as_ref))
            .is_some_and(|p| p.name_any() == key);
        if !(reporting && asks_for_delivery(&hp)) {
            clear(&self.status, &hp).await?;
            return Ok(Action::done("asks for no delivery"));
        }
        let mut status = self.status.current(&hp);
        let reason = Reason::DeliveryDisabled.as_str();
        if condition::has(&status.conditions, PROJECT_DELIVERING, false, reason) {
            return Ok(Action::done("already told"));
        }
        let generation = hp.metadata.generation;
        condition::set(
            &mut status.conditions,
            PROJECT_DELIVERING,
            false,
            reason,
            MESSAGE,
            generation,
        );
        self.status.write(&hp, &status).await?;
        self.recorder
            .event(hp.as_ref(), EventType::Warning, reason, MESSAGE);
        Ok(Action::done("told: delivery is disabled"))
    }
}
