//! The HelmApp controller, in the shape of `k8s.io/sample-controller`:
//! [`controller`] asks the manager's shared factory for its informers and
//! registers handlers that only enqueue keys ([`wiring`]); [`HelmApps`]'s
//! `reconcile` is one loop:
//!
//! [`observe`] (reads: caches, Helm's storage, the chart) → [`decide`]
//! (pure: `state`, then `plan`'s next step) → [`act`] (does that step, says
//! how it ended) → decide again, until a step finishes → write the status
//! once.
//!
//! `decide/` is pure and tested as tables; `act/` is one action per file,
//! tested as a table with helm scripted ([`helm_runs`]). Flux's
//! helm-controller splits the same way only in part: its
//! `DetermineReleaseState` reads the cluster itself, where our `decide/`
//! reads only what `observe/` gathered. Beside the pipeline: [`context`]
//! (what every part reads and writes through), [`drift_cache`] and
//! [`watched_kinds`] (what lives as long as the process), [`reachability`]
//! (no helm while the API server is away).

pub mod act;
pub mod cluster;
mod cluster_informers;
mod context;
pub mod decide;
pub mod drift_cache;
pub mod helm_runs;
pub mod observe;
mod reachability;
pub mod remote;
mod remote_client;
pub mod watched_kinds;
mod wiring;

use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use cache::{Event, HandlerFn, IndexFn, InformerOptions};
use kube::ResourceExt;
use runtime::{Action, Controller, Manager, Reconciler, StatusWriter};

use crate::delivery::helm::Helm;
use crate::delivery::metrics::HelmMetrics;
use crate::delivery::names::{
    DEPENDS_ON_INDEX, FINALIZER, RELEASE_INDEX, TARGET_INDEX, VALUES_FROM_INDEX,
};
pub use crate::delivery::pushed::PushTrigger;
use crate::delivery::settings::Settings;
use crate::delivery::source::fetch::Sources;
use crate::lean::digests::{ConfigMapDigests, SecretDigests};
use crate::lean::storage::HelmRelease;
use crate::lean::storage::helm_storage_options;
pub use act::{DeliveryError, Outcome};
pub use cluster::Members;
pub use context::Context;
pub use decide::target::Target;

/// The most steps one reconcile takes: unlock, render and record a run of
/// ours left unrecorded, then install or upgrade, test, record what the
/// runs left, and report it (or what a failure calls for) — seven; one
/// spare.
const MAX_STEPS: usize = 8;

/// The HelmApp controller's [`Reconciler`].
pub struct HelmApps {
    ctx: Context,
}

impl HelmApps {
    /// The webhook receiver's way in ([`PushTrigger`]); `queue`: this
    /// controller's.
    pub fn nudge(&self, queue: Arc<runtime::RateLimitingQueue<String>>) -> PushTrigger {
        PushTrigger {
            queue,
            apps: self.ctx.apps.clone(),
            sources: self.ctx.sources.clone(),
        }
    }
}

impl Reconciler for HelmApps {
    type Error = DeliveryError;

    async fn reconcile(&self, key: &str) -> Result<Action, DeliveryError> {
        let ctx = &self.ctx;
        ctx.leading_since.get_or_init(chrono::Utc::now);
        if ctx.own.reachability.is_down() {
            // Nothing can be read or written, and a helm would fail to
            // connect: the key waits for the probe, spending no retry.
            ctx.own.reachability.park(key);
            return Ok(Action::done("the API server does not answer: waits"));
        }
        match self.sync(key).await {
            // A read or write the API server did not answer: the key waits
            // for it like the others, instead of retrying at the rate
            // limiter's pace through the outage.
            Err(DeliveryError::Kube(e))
                if crate::delivery::helmapp::reachability::unanswered(&e)
                    && !ctx.own.reachability.answers().await =>
            {
                log::debug!("{key}: the API server does not answer ({e}): waits");
                ctx.own.reachability.park(key);
                Ok(Action::done("the API server does not answer: waits"))
            }
            // Its remote cluster's (docs/remote-clusters.md): it waits for
            // that one.
            Err(DeliveryError::Kube(e))
                if crate::delivery::helmapp::reachability::unanswered(&e)
                    && let Some(remote) = ctx.remotes.last_of(key)
                    && !remote.reachability.answers().await =>
            {
                log::debug!("{key}: its remote cluster does not answer ({e}): waits");
                // Parked, it is not reconciled until the remote answers:
                // a record held for its rollout goes to this cluster's
                // API now, not after the outage.
                if let Some(app) = ctx.apps.get(key) {
                    self.write_held(&app).await?;
                }
                remote.reachability.park(key);
                Ok(Action::done("the remote cluster does not answer: waits"))
            }
            result => result,
        }
    }

    const LAST_WRITES: bool = true;

    /// A clean shutdown: the records held for their rollout
    /// (`decide::ready::hold`) are written, not left for the next process
    /// to prove by a render.
    async fn drained(&self) {
        let written = self.ctx.status.flush_held().await;
        if written > 0 {
            log::info!("helmapp: wrote {written} records held for their rollout");
        }
    }
}

impl HelmApps {
    /// observe → state → plan → act, then the status written once.
    async fn sync(&self, key: &str) -> Result<Action, DeliveryError> {
        let ctx = &self.ctx;
        let Some(app) = ctx.apps.get(key) else {
            ctx.own.drift.forget(key);
            if let Some(remote) = ctx.remotes.last_of(key) {
                remote.drift.forget(key);
            }
            ctx.remotes.forget(key);
            ctx.forget_runs(key);
            ctx.watched.retain();
            return Ok(Action::done("gone"));
        };
        if app.metadata.generation != ctx.status.current(&app).observed_generation {
            // Its dependsOn may name other kinds now.
            ctx.watched.retain();
        }
        let deleting = app.metadata.deletion_timestamp.is_some();
        let held = app.finalizers().iter().any(|f| f == FINALIZER);
        match (deleting, held) {
            (true, false) => return Ok(Action::done("deleted")),
            // Before the first helm run: deleting the HelmApp uninstalls.
            (false, false) => {
                crate::delivery::finalizer::set(&ctx.api_of(&app), &app, FINALIZER, true).await?
            }
            _ => {}
        }
        // A record held past its end is written before anything that may
        // fail (a read, a remote cluster): an error's retries never keep
        // it longer.
        let hold_ended = ctx
            .status
            .held_until(&app)
            .is_some_and(|until| until <= std::time::Instant::now());
        if deleting || hold_ended {
            self.write_held(&app).await?;
        }
        let mut observed = observe::gather(ctx, &app).await?;
        let mut outcome = Ok(Outcome::Replan);
        let mut settled = false;
        // The last step: it says whether what this process remembers of
        // the app's refusals is let go.
        let mut last = decide::plan::Step::Nothing { why: "no step" };
        for _ in 0..MAX_STEPS {
            let decided = decide::state::decide(&observed, &app);
            log::debug!(
                "{}: {decided:?} (newest {:?}, missing {:?})",
                observed.target.key(),
                observed.newest.as_ref().map(|n| n.revision),
                observed.missing
            );
            let step = decide::plan::next(&decided, &observed, &app);
            settled |= step.settles_approval();
            last = step.clone();
            outcome = act::run(ctx, &app, &mut observed, step).await;
            if !matches!(outcome, Ok(Outcome::Replan)) {
                break;
            }
            observe::after_step(ctx, &app, &mut observed).await;
        }
        if decide::plan::refusals_let_go(&last, &observed) {
            ctx.refused.lock().remove(&context::run_key(&app));
        }
        if observed.done.helm_ran && !observed.done.recorded {
            act::record_storage(ctx, &app, &mut observed).await;
        }
        if settled && !deleting {
            act::settle_approval(&app, &mut observed);
        }
        let mut held_for = None;
        if !deleting {
            observe::updates::notice(ctx, &app, &mut observed);
            held_for = self.hold_or_write(&app, &observed).await?;
        }
        match outcome? {
            Outcome::Finished(action) => Ok(come_back_by(action, &app, &observed, held_for)),
            Outcome::Retry { reason, message } => Err(DeliveryError::Failed { reason, message }),
            Outcome::Replan => Ok(Action::requeue_after(
                decide::plan::HELM_HOLDS,
                "plan again",
            )),
        }
    }

    /// A record held for its rollout (`decide::ready::hold`) goes to the
    /// server before anything of the uninstall: a stop during it must find
    /// the run recorded, not prove it by a render of a chart a deleting app
    /// no longer reads.
    async fn write_held(&self, app: &HelmApp) -> Result<(), DeliveryError> {
        let status = &self.ctx.status;
        if status.held_until(app).is_some() {
            status.write(app, &status.current(app)).await?;
        }
        Ok(())
    }

    /// Writes the reconcile's status, or holds it back when
    /// `decide::ready::hold` says so: then for how long (the key comes
    /// back by then at the latest).
    async fn hold_or_write(
        &self,
        app: &HelmApp,
        observed: &decide::observed::Observed,
    ) -> Result<Option<Duration>, DeliveryError> {
        let status = &self.ctx.status;
        let now = std::time::Instant::now();
        let published = status.published(app);
        let until = decide::ready::hold(observed, &published, status.held_until(app), now);
        // Shutting down: nothing more is held (the drain writes what was).
        if let Some(until) = until.filter(|_| !self.ctx.stopping.is_set())
            && status.hold(app, observed.status.clone(), until)
        {
            return Ok(Some(until - now));
        }
        status.write(app, &observed.status).await?;
        Ok(None)
    }
}

/// `action`, back no later than a look at objects the record after a run
/// could not prove (`drift::recheck_unverified`) or the end of a hold
/// (`held_for`). Only after a run that released: a refused run's wait
/// (`plan::refused_again_after`) is never cut short by it — a refused
/// uninstall whose app's inventory had an unverified object ran helm
/// again a second later.
fn come_back_by(
    mut action: Action,
    app: &HelmApp,
    observed: &decide::observed::Observed,
    held_for: Option<Duration>,
) -> Action {
    use decide::observed::RunEnded;
    let released = matches!(
        observed.done.run_ended,
        Some(RunEnded::Released { .. } | RunEnded::Tested { .. })
    );
    let recheck = (observed.done.helm_ran && released)
        .then(|| observe::drift::recheck_unverified(app, observed))
        .flatten();
    for soon in recheck.into_iter().chain(held_for) {
        action.requeue_after = Some(action.requeue_after.map_or(soon, |a| a.min(soon)));
    }
    action
}

/// The HelmApp controller, its informers requested from `manager`'s shared
/// factory and its handlers registered; `manager.add` it. The [`Helm`] it
/// runs is returned too: `kill_all` it when the manager stops.
pub fn controller(
    manager: &Manager,
    settings: Settings,
    sources: Arc<Sources>,
) -> (Controller<HelmApps>, Arc<Helm>) {
    let factory = manager.factory();
    let apps = factory.optional_informer::<HelmApp>(settings.shard.helmapps());
    index_helmapps(&apps.store());
    let metrics = HelmMetrics::register(manager, apps.store());
    let drift = drift_cache::DriftCache::new(metrics.clone());
    let helm = Arc::new(Helm::new(settings.helm.clone(), metrics.clone()));
    let sets = factory.optional_informer::<HelmAppSet>(settings.shard.helmappsets());
    let releases = factory.informer::<HelmRelease>(helm_storage_options());
    releases
        .store()
        .ensure_index(RELEASE_INDEX, cluster_informers::release_by_name());
    // Everything but Helm's own storage, as digests (never the content).
    let secrets =
        factory.informer::<SecretDigests>(InformerOptions::default().labels("owner!=helm"));
    let configmaps =
        factory.informer::<ConfigMapDigests>(InformerOptions::default().labels("owner!=helm"));
    let members = cluster_informers::member_informers(factory);
    let queue = Controller::<HelmApps>::new_queue(manager, "helmapp", Duration::from_secs(300));
    let reachability = crate::delivery::helmapp::reachability::Reachability::new(
        manager.client(),
        manager,
        queue.clone(),
    );
    let own = Arc::new(cluster::Cluster {
        remote: None,
        client: manager.client(),
        releases: releases.store(),
        members: members.stores(),
        secrets: secrets.store(),
        configmaps: configmaps.store(),
        drift,
        reachability: reachability.clone(),
        helm: helm.clone(),
    });
    let remotes = remote_clusters(manager, &settings, &helm, &metrics, &queue, &apps.store());
    let ctx = Context {
        client: manager.client(),
        apps: apps.store(),
        sets: sets.store(),
        own,
        remotes,
        secrets: secrets.store(),
        configmaps: configmaps.store(),
        sources,
        queue: queue.clone(),
        status: {
            let writer = StatusWriter::new(manager.client(), |a: &HelmApp| a.status.clone());
            writer.follow(&apps);
            crate::delivery::metrics::register_records_held(manager, writer.held_count());
            writer
        },
        stopping: manager.stopping(),
        recorder: manager.recorder(),
        settings: settings.clone(),
        watched: watched_kinds(manager, apps.store(), queue.clone()),
        leading_since: std::sync::OnceLock::new(),
        made: Default::default(),
        produced: Default::default(),
        applied: Default::default(),
        interrupted: Default::default(),
        refused: Default::default(),
    };
    gate_on_reachability(&helm, &reachability);
    let controller = Controller::with_queue(manager, "helmapp", HelmApps { ctx }, queue)
        .workers(settings.workers)
        .resync_every(settings.resync, &apps);

    let to = wiring::Handlers {
        queue: controller.queue(),
        apps: apps.store(),
        vias: None,
    };
    wire(&to, &apps, &releases, &sets, &secrets, &configmaps);
    members.wire(&to);
    (controller, helm)
}

/// The registry of the remote clusters HelmApps name (`spec.kubeConfig`),
/// sharing the controller's helm, metrics, queue and HelmApp cache, with
/// its gauge `hossted_remote_clusters`.
fn remote_clusters(
    manager: &Manager,
    settings: &Settings,
    helm: &Arc<Helm>,
    metrics: &HelmMetrics,
    queue: &Arc<runtime::RateLimitingQueue<String>>,
    apps: &cache::Store<HelmApp>,
) -> Arc<remote::RemoteClusters> {
    use crate::delivery::remote::{connect, egress};
    let lookup = connect::system_lookup();
    Arc::new(remote::RemoteClusters::new(remote::Shared {
        helm: helm.clone(),
        metrics: metrics.clone(),
        queue: queue.clone(),
        apps: apps.clone(),
        policy: settings.sources.policy.clone(),
        lookup: lookup.clone(),
        egress: egress::Egress::new(settings.sources.policy.clone(), lookup),
        max: settings.max_remote_clusters,
        max_per_namespace: settings.max_remote_clusters_per_namespace,
        running: {
            let gauge = prometheus_client::metrics::gauge::Gauge::default();
            manager.metrics().register(
                "remote_clusters",
                "Remote clusters (HelmApps' kubeConfig) served now, each with its own client and informers",
                gauge.clone(),
            );
            gauge
        },
    }))
}

/// Registers the handlers that only enqueue ([`wiring`]) on the HelmApp
/// controller's own informers.
fn wire(
    to: &wiring::Handlers,
    apps: &cache::SharedInformer<HelmApp>,
    releases: &cache::SharedInformer<HelmRelease>,
    sets: &cache::SharedInformer<HelmAppSet>,
    secrets: &cache::SharedInformer<SecretDigests>,
    configmaps: &cache::SharedInformer<ConfigMapDigests>,
) {
    let h = to.clone();
    apps.add_event_handler(HandlerFn(move |e: &Event<HelmApp>| h.on_helmapp(e)));
    let h = to.clone();
    sets.add_event_handler(HandlerFn(move |e: &Event<HelmAppSet>| h.on_dependency(e)));
    let h = to.clone();
    secrets.add_event_handler(HandlerFn(move |e: &Event<SecretDigests>| {
        if let Some(o) = e.changed() {
            h.on_values_source("Secret", &o.metadata);
        }
    }));
    let h = to.clone();
    configmaps.add_event_handler(HandlerFn(move |e: &Event<ConfigMapDigests>| {
        if let Some(o) = e.changed() {
            h.on_values_source("ConfigMap", &o.metadata);
        }
    }));
    cluster_informers::wire_cluster(to, releases, secrets, configmaps);
}

/// The informers of the kinds `dependsOn` names, with their gauge and
/// counter (`hossted_dependency_informers`,
/// `hossted_dependency_informers_started_total`).
fn watched_kinds(
    manager: &Manager,
    apps: cache::Store<HelmApp>,
    queue: Arc<runtime::RateLimitingQueue<String>>,
) -> Arc<crate::delivery::helmapp::watched_kinds::WatchedKinds> {
    let watched = Arc::new(crate::delivery::helmapp::watched_kinds::WatchedKinds::new(
        manager.client(),
        apps,
        queue,
    ));
    let weak = Arc::downgrade(&watched);
    let counts = Arc::new(move || weak.upgrade().map_or((0, 0), |w| w.informers()));
    crate::delivery::metrics::register_dependency_informers(manager, counts);
    watched
}

/// No helm starts while the API server does not answer: `helm` asks
/// `reachability` right before each process starts (with the slot held: a
/// run that waited for one may start long after it was decided).
fn gate_on_reachability(
    helm: &crate::delivery::helm::Helm,
    reachability: &Arc<crate::delivery::helmapp::reachability::Reachability>,
) {
    let reachability = reachability.clone();
    helm.set_gate(Arc::new(move || {
        let reachability = reachability.clone();
        Box::pin(async move { reachability.answers_before_start().await })
    }));
}

/// The HelmApp indexes: by what `valuesFrom` names, by what it depends on,
/// by its target release.
fn index_helmapps(apps: &cache::Store<HelmApp>) {
    let refs: IndexFn<HelmApp> = Arc::new(|a: &HelmApp| {
        let ns = a.namespace().unwrap_or_default();
        // The kubeconfig's Secret too: a change to it resolves the cluster
        // again (docs/remote-clusters.md).
        a.spec
            .values_from
            .iter()
            .map(|r| format!("{}/{ns}/{}", r.kind, r.name))
            .chain(
                a.spec
                    .kube_config
                    .iter()
                    .map(|k| format!("Secret/{ns}/{}", k.secret_ref.name)),
            )
            .collect()
    });
    let deps: IndexFn<HelmApp> = Arc::new(|a: &HelmApp| {
        let ns = a.namespace().unwrap_or_default();
        a.spec
            .depends_on
            .iter()
            .map(|d| crate::delivery::helmapp::decide::dependencies::index_key(&ns, d))
            .collect()
    });
    apps.add_index(DEPENDS_ON_INDEX, deps);
    apps.add_index(VALUES_FROM_INDEX, refs);
    apps.add_index(
        TARGET_INDEX,
        Arc::new(|a: &HelmApp| vec![Target::of(a).index_key()]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::helmapp::decide::observed::{RunEnded, RunKind};
    use crate::delivery::helmapp::decide::state::tests::observed;

    /// An unverified object brings a released app back within a second;
    /// a refused run keeps the wait its plan chose.
    #[test]
    fn only_a_release_cuts_the_wait_short_for_an_unverified_object() {
        // The spec's defaults (drift detection on) as the API server gives them.
        let app: HelmApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "a", "namespace": "n" },
            "spec": { "chart": { "path": "tiny" } }
        }))
        .unwrap();
        assert_ne!(app.spec.drift_mode(), apis::helmapp::DriftMode::Disabled);
        let mut o = observed();
        o.status.inventory.push(apis::helmapp::InventoryEntry {
            kind: "ConfigMap".into(),
            api_version: "v1".into(),
            name: "c".into(),
            checked: observe::drift::UNVERIFIED.into(),
            ..Default::default()
        });
        o.done.helm_ran = true;
        let wait = || Action::requeue_after(Duration::from_secs(2), "refused");
        o.done.run_ended = Some(RunEnded::Forbidden {
            message: "m".into(),
        });
        assert_eq!(
            come_back_by(wait(), &app, &o, None).requeue_after,
            Some(Duration::from_secs(2)),
            "a refusal"
        );
        o.done.run_ended = Some(RunEnded::Released {
            run: RunKind::Upgrade,
            revision: 2,
            before: 1,
        });
        assert_eq!(
            come_back_by(wait(), &app, &o, None).requeue_after,
            Some(Duration::from_secs(1)),
            "a release"
        );
    }
}
