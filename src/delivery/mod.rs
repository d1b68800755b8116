//! Job 2, delivery: `HelmApp`s installed, upgraded and uninstalled with
//! the real `helm` binary (`docs/delivery.md`). This module only wires
//! its controllers:
//!
//! - [`helmapp`]: one HelmApp's release (observe → state → plan → act);
//! - [`appset`]: a HelmAppSet's child HelmApps;
//! - [`project`]: a Hosstedproject's `spec.helm` and platform toggles, as
//!   HelmApps.
//!
//! When delivery does not run, [`disabled`] alone tells a Hosstedproject
//! that asks for it ([`add_disabled_to`]).
//!
//! Beside them: [`helm`] (the one place helm is spawned, values), [`source`]
//! (chart sources), [`names`] (finalizer, labels, annotations, indexes).

pub mod appset;
mod children;
pub mod disabled;
mod finalizer;
pub mod helm;
pub mod helmapp;
pub mod metrics;
pub mod names;
pub mod project;
pub mod pushed;
pub mod reason;
pub mod remote;
pub mod selector;
mod settings;
pub mod shard;
pub mod source;
pub mod tenancy;
pub mod webhook;

use std::sync::Arc;

use runtime::Manager;

pub use helm::{Helm, HelmCli, HelmConfig, values};
pub use helmapp::{DeliveryError, HelmApps};
pub use names::{FINALIZER, HASH_LABEL, RECONCILE_AT, UID_LABEL};
pub use settings::Settings;
pub use shard::{SHARD_LABEL, Shard, ShardName};
pub use source::SourceLimits;
pub use tenancy::{Identity, Privileged, Tenancy};
pub use webhook::WebhookConfig;

/// What [`add_to`] started.
pub struct Added {
    /// The helm runner: `kill_all` it when the manager stops.
    pub helm: Arc<Helm>,
    /// The HelmApp controller's counters.
    pub stats: Arc<runtime::ControllerStats>,
    /// What the webhook receiver asks of the HelmApp controller.
    pub nudge: helmapp::PushTrigger,
}

/// Adds every delivery controller to `manager` — HelmApp, HelmAppSet and
/// the Hosstedproject's `spec.helm` and toggles — and kills running helm
/// process groups the moment the lease is lost (the next leader may run
/// helm on the same releases). First asks the helm binary its version
/// (every command line is built for it) and, for helm 4, writes the
/// post-renderer plugin: an error says why delivery cannot start.
pub fn add_to(manager: &mut Manager, mut settings: Settings) -> Result<Added, String> {
    settings.helm.cli = helm::detect::detect(&settings.helm.binary)?;
    if let (HelmCli::V4, Some(binary)) = (settings.helm.cli, &settings.helm.post_renderer) {
        helm::plugin::install_post_renderer(&settings.helm.work_dir, binary)?;
    }
    log::info!(
        "delivery runs {} (command lines for {:?})",
        settings.helm.binary.display(),
        settings.helm.cli
    );
    let (workers, resync) = (settings.workers, settings.resync);
    let namespace = settings.tenancy.operator_namespace.clone();
    let shard = settings.shard.clone();
    // One fetch pool and chart cache for every controller.
    let sources = Arc::new(source::fetch::Sources::new(
        &settings.helm.work_dir,
        settings.sources.clone(),
    ));
    manager.metrics().register(
        "chart_verifications",
        "Chart signature checks run (a digest verified once is not checked again), by provider and result",
        sources.verified.runs.clone(),
    );
    manager.metrics().register(
        "chart_verification_seconds",
        "Time a chart signature check took, its signatures fetched, by the kind of signer trusted",
        sources.verified.seconds.clone(),
    );
    let (apps, helm) = helmapp::controller(manager, settings, sources.clone());
    let stats = apps.stats();
    let nudge = apps.reconciler().nudge(apps.queue());
    manager.add(apps);
    manager.add(appset::controller(manager, workers.clamp(1, 2), &shard));
    // A Hosstedproject's HelmApps carry no shard label: the unsharded
    // process makes them, and reconciles them.
    if shard.is_unsharded() {
        manager.add(project::controller(manager, &namespace, sources, resync));
    }
    let on_lost = helm.clone();
    manager.on_lease_lost(move || on_lost.kill_all());
    // A shutdown: what still runs past the drain is killed, and gone,
    // before the Lease is released — a standby must never start a helm on
    // a release whose previous helm is still running.
    let on_ended = helm.clone();
    manager.on_work_ended(move |left| {
        on_ended.kill_all_and_wait(left.min(std::time::Duration::from_secs(5)))
    });
    Ok(Added { helm, stats, nudge })
}

/// Delivery off (`--controllers` without `delivery`): adds only the piece
/// that tells a Hosstedproject asking for delivery that it is disabled.
pub fn add_disabled_to(manager: &mut Manager) {
    manager.add(disabled::controller(manager));
}
