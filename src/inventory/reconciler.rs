//! The business logic of one Hosstedproject, as named steps:
//! stopped? → cluster UUID → registration → collect → deliver → record
//! status → ready.

use std::time::Instant;

use apis::{DeliveredApp, Hosstedproject, HosstedprojectStatus, RegisteredOptions};
use cache::Store;
use kube::ResourceExt;
use record::{EventRecorder, EventType};
use runtime::{Action, Reconciler, StatusWriter, Stopping};

use super::api::HosstedApi;
use super::collector::{self, Caches, Collection, Context, Known};
use super::forged::ForgedNotices;
use super::ledger::{Ledger, ReleaseRef, Target};
use super::payload::{ClusterRegistration, OptionsState};
use super::poster::PostError;
use super::settings::Settings;
use super::status::{Reason, is_ready, now_rfc3339, set_ready};
use super::sync_error::SyncError;

/// The inventory's [`Reconciler`].
pub struct Inventory {
    pub(super) projects: Store<Hosstedproject>,
    pub(super) caches: Caches,
    pub(super) recorder: EventRecorder,
    pub(super) api: HosstedApi,
    pub(super) settings: Settings,
    pub(super) ledger: Ledger,
    /// Writes the status when it changed (`lastReconcileTimestamp` alone is
    /// no change), and reads back its last write while the lister lags.
    pub(super) status: StatusWriter<Hosstedproject, HosstedprojectStatus>,
    /// Shutdown has begun: start no new POST (the next run sends it).
    pub(super) stopping: Stopping,
    /// The Warning on each release storage object that is not reported.
    pub(super) forged: ForgedNotices,
}

/// One reconcile's view of its Hosstedproject.
pub(super) struct Run<'a> {
    pub(super) key: &'a str,
    pub(super) hp: &'a Hosstedproject,
    pub(super) status: HosstedprojectStatus,
    /// What the status says was delivered.
    pub(super) known: Known,
}

/// What the deliver step did.
#[derive(Default)]
pub(super) struct Delivered {
    /// `status.apps` after this round: delivered apps, and what was known
    /// of those that were not.
    pub(super) apps: Vec<DeliveredApp>,
    /// Releases POSTed this round.
    pub(super) reported: Vec<ReleaseRef>,
    /// The first failure (an unavailable API stops further POSTs).
    pub(super) failure: Option<PostError>,
}

impl Reconciler for Inventory {
    type Error = SyncError;

    async fn reconcile(&self, key: &str) -> Result<Action, SyncError> {
        let Some(hp) = self.projects.get(key) else {
            self.ledger.forget(key);
            self.status.forget_key(key);
            return Ok(Action::done("gone"));
        };
        let started = Instant::now();
        let status = self.status.current(&hp);
        let (known, unreadable) = status.delivered();
        for bad in unreadable {
            // Dropped at the next write; that release is sent again (with the
            // same derived UUID).
            log::warn!("Hosstedproject {key}: {bad}; ignoring that entry");
        }
        let mut run = Run {
            key,
            status,
            known: Known::new(known),
            hp: &hp,
        };
        if let Some(oldest) = self.older_project(&hp) {
            return self.duplicate(&mut run, &oldest).await;
        }
        if hp.spec.stop {
            return self.stopped(&mut run).await;
        }
        // Judged before this reconcile writes anything of its own.
        let go_era = go_written(&run.status);
        self.ensure_cluster_uuid(&mut run).await?;
        if let Err(e) = self.ensure_registered(&mut run, go_era).await? {
            return self.api_failed(run, e).await;
        }
        let read_ms = ms_since(started);
        let started = Instant::now();
        let collection = self.collect(&run);
        let collect_ms = ms_since(started);
        self.warn_invalid(&run, &collection);
        let started = Instant::now();
        let mut delivered = self.deliver(&run, &collection).await?;
        self.deliver_removals(&run, &collection, &mut delivered)
            .await?;
        let deliver_ms = ms_since(started);
        self.record(&mut run, &delivered);
        self.ledger.prune_rejected(key, |r| {
            collection
                .apps
                .iter()
                .any(|a| a.status.namespace == r.namespace && a.status.name == r.name)
        });
        if let Some(e) = delivered.failure {
            return self.api_failed(run, e).await;
        }
        let started = Instant::now();
        self.ready(&mut run).await?;
        let write_ms = ms_since(started);
        // Where a reconcile's time goes; "collected N in X ms" ends the line
        // (the scale benchmarks read it).
        Ok(Action::done(format!(
            "{} apps, {} posted in {deliver_ms:.1} ms, status read in {read_ms:.1} ms and written in {write_ms:.1} ms, collected {} in {collect_ms:.1} ms",
            run.status.app_count,
            delivered.reported.len(),
            collection.apps.len()
        )))
    }
}

impl Inventory {
    /// The Hosstedproject that reports instead of `hp`, if any: one reports
    /// for the cluster, the oldest (creation time, then name).
    fn older_project(&self, hp: &Hosstedproject) -> Option<String> {
        let projects = self.projects.list();
        apis::reporting_project(projects.iter().map(|p| p.as_ref()))
            .map(|p| p.name_any())
            .filter(|oldest| *oldest != hp.name_any())
    }

    /// Another Hosstedproject reports: say so once, send nothing.
    async fn duplicate(&self, run: &mut Run<'_>, oldest: &str) -> Result<Action, SyncError> {
        let message = format!(
            "the Hosstedproject {oldest} reports for this cluster (the oldest does); this one sends nothing — delete it"
        );
        let generation = run.hp.metadata.generation;
        let first = !is_ready(&run.status, false, Reason::Duplicate);
        set_ready(
            &mut run.status,
            false,
            Reason::Duplicate,
            &message,
            generation,
        );
        run.status.observed_generation = generation;
        self.write_status(run).await?;
        if first {
            self.event(run, EventType::Warning, Reason::Duplicate, &message);
        }
        Ok(Action::done(format!("duplicate of {oldest}")))
    }

    /// `spec.stop`: say so once, send nothing.
    async fn stopped(&self, run: &mut Run<'_>) -> Result<Action, SyncError> {
        if !is_ready(&run.status, false, Reason::Stopped) {
            let message = "reporting is stopped (spec.stop is true)";
            let generation = run.hp.metadata.generation;
            set_ready(&mut run.status, false, Reason::Stopped, message, generation);
            run.status.observed_generation = generation;
            self.write_status(run).await?;
            self.event(run, EventType::Normal, Reason::Stopped, message);
        }
        Ok(Action::done("stopped"))
    }

    /// The cluster UUID is made once and kept in status.
    async fn ensure_cluster_uuid(&self, run: &mut Run<'_>) -> Result<(), SyncError> {
        if run.status.cluster_uuid.is_empty() {
            run.status.cluster_uuid = format!("K-{}", uuid::Uuid::new_v4());
            self.write_status(run).await?;
        }
        Ok(())
    }

    /// Registers the cluster once. The outer error is a failed status write;
    /// the inner one an API failure to record.
    async fn ensure_registered(
        &self,
        run: &mut Run<'_>,
        go_era: bool,
    ) -> Result<Result<(), PostError>, SyncError> {
        let spec = &run.hp.spec;
        let options = RegisteredOptions {
            monitoring: spec.monitoring.enable,
            logging: spec.logging.enable,
            cve_scan: spec.cve.enable,
            ingress: spec.ingress.enable,
        };
        let status = &mut run.status;
        if go_era {
            // The Go operator registered this cluster; its status has no
            // record of the toggles it sent: take the current ones.
            status.cluster_registered = true;
        }
        if status.cluster_registered && status.registered_options.is_none() {
            status.registered_options = Some(options);
        }
        if status.cluster_registered && status.registered_options == Some(options) {
            return Ok(Ok(()));
        }
        let registration = ClusterRegistration {
            kind: "k8s".into(),
            org_id: self.settings.org_id.clone(),
            context_name: self.settings.context_name.clone(),
            email_id: self.settings.email_id.clone(),
            options_state: OptionsState {
                monitoring: options.monitoring,
                logging: options.logging,
                cve_scan: options.cve_scan,
                ingress: options.ingress,
            },
        };
        let path = format!("/clusters/{}/register", run.status.cluster_uuid);
        if let Err(e) = self
            .api
            .post(
                &self.ledger,
                run.key,
                Target::Registration,
                &path,
                &registration,
            )
            .await?
        {
            return Ok(Err(e));
        }
        run.status.cluster_registered = true;
        run.status.registered_options = Some(options);
        self.write_status(run).await?;
        let message = format!(
            "cluster {} registered with the Hossted API",
            run.status.cluster_uuid
        );
        self.event(run, EventType::Normal, Reason::ClusterRegistered, &message);
        Ok(Ok(()))
    }

    /// The apps as the caches show them now (pure).
    fn collect(&self, run: &Run<'_>) -> Collection {
        collector::collect(&self.caches, &self.context(run))
    }

    /// Who reports, and what was delivered: the collector's context.
    pub(super) fn context<'a>(&'a self, run: &'a Run<'_>) -> Context<'a> {
        Context {
            cluster_uuid: &run.status.cluster_uuid,
            email_id: &self.settings.email_id,
            org_id: &self.settings.org_id,
            deny_namespaces: &run.hp.spec.deny_namespaces,
            monitoring: run.hp.spec.monitoring.enable,
            cve: run.hp.spec.cve.enable,
            known: &run.known,
        }
    }

    fn warn_invalid(&self, run: &Run<'_>, collection: &Collection) {
        for bad in &collection.invalid {
            let message = format!(
                "cannot decode Helm release Secret {}/{}: {}; the other releases are still reported",
                bad.namespace, bad.secret, bad.error
            );
            self.event(run, EventType::Warning, Reason::InvalidRelease, &message);
            self.forged.warn(bad);
        }
    }

    /// Everything is delivered: `Ready=True`.
    async fn ready(&self, run: &mut Run<'_>) -> Result<(), SyncError> {
        run.status.last_reconcile_timestamp = now_rfc3339();
        let message = format!(
            "{} app(s) reported to the Hossted API",
            run.status.app_count
        );
        let generation = run.hp.metadata.generation;
        set_ready(
            &mut run.status,
            true,
            Reason::Reporting,
            &message,
            generation,
        );
        self.write_status(run).await
    }

    /// Records an API failure in status and events. Unavailable: retry with
    /// backoff (an error); rejected: wait for the payload to change (done).
    async fn api_failed(&self, mut run: Run<'_>, e: PostError) -> Result<Action, SyncError> {
        let (reason, retry) = match &e {
            PostError::Unavailable { .. } => (Reason::ApiUnavailable, true),
            PostError::Rejected { .. } => (Reason::ApiRejected, false),
        };
        let message = e.to_string();
        let generation = run.hp.metadata.generation;
        set_ready(&mut run.status, false, reason, &message, generation);
        self.event(&run, EventType::Warning, reason, &message);
        self.write_status(&run).await?;
        if retry {
            Err(e.into())
        } else {
            Ok(Action::done(format!("rejected: {message}")))
        }
    }

    /// Writes `run.status` when it changed; a failed write is a Warning.
    async fn write_status(&self, run: &Run<'_>) -> Result<(), SyncError> {
        if let Err(e) = self.status.write(run.hp, &run.status).await {
            let message = format!(
                "cannot write the status: {e}; what was delivered since is sent again, with the same app UUIDs, until it can"
            );
            self.event(run, EventType::Warning, Reason::StatusWriteFailed, &message);
            return Err(e.into());
        }
        Ok(())
    }

    pub(super) fn event(&self, run: &Run<'_>, kind: EventType, reason: Reason, message: &str) {
        self.recorder.event(run.hp, kind, reason.as_str(), message);
    }
}

fn ms_since(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

/// A status last written by the Go operator: a cluster UUID but none of the
/// fields this operator writes.
fn go_written(status: &HosstedprojectStatus) -> bool {
    !status.cluster_uuid.is_empty()
        && !status.cluster_registered
        && status.conditions.is_empty()
        && status.observed_generation.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::HelmInfo;

    #[test]
    fn a_status_the_go_operator_wrote_counts_as_registered_ours_does_not() {
        let go = HosstedprojectStatus {
            cluster_uuid: "K-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30".into(),
            helm_status: vec![HelmInfo::default()],
            ..Default::default()
        };
        assert!(go_written(&go));
        // Ours always carries a condition or an observed generation.
        let mut ours = go.clone();
        ours.observed_generation = Some(1);
        assert!(!go_written(&ours));
        assert!(
            !go_written(&HosstedprojectStatus::default()),
            "a new project"
        );
    }
}
