//! The business logic of one Hosstedproject, as named steps:
//! stopped? → cluster UUID → registration → collect → deliver → record
//! status → ready.

use std::collections::HashSet;
use std::time::Instant;

use apis::{DeliveredApp, Hosstedproject, HosstedprojectStatus, RegisteredOptions};
use cache::Store;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use record::{EventRecorder, EventType};
use runtime::{Action, Reconciler, Stopping};

use super::Settings;
use super::api::HosstedApi;
use super::collector::{self, Caches, Collection, Context, Known};
use super::ledger::{Ledger, ReleaseRef, Target};
use super::payload::{AppPayload, ClusterRegistration, OptionsState};
use super::poster::PostError;
use super::status::{Reason, is_ready, merge_patch, now_rfc3339, set_ready};

/// Why a reconcile must be retried (with backoff).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Api(#[from] PostError),
    #[error("writing status: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        source: serde_json::Error,
    },
}

/// The inventory's [`Reconciler`].
pub struct Inventory {
    pub(super) client: Client,
    pub(super) projects: Store<Hosstedproject>,
    pub(super) caches: Caches,
    pub(super) recorder: EventRecorder,
    pub(super) api: HosstedApi,
    pub(super) settings: Settings,
    pub(super) ledger: Ledger,
    /// Shutdown has begun: start no new POST (the next run sends it).
    pub(super) stopping: Stopping,
}

/// One reconcile's view of its Hosstedproject.
struct Run<'a> {
    key: &'a str,
    hp: &'a Hosstedproject,
    status: HosstedprojectStatus,
    /// What the status says was delivered.
    known: Known,
}

/// What the deliver step did.
#[derive(Default)]
struct Delivered {
    /// `status.apps` after this round: delivered apps, and what was known
    /// of those that were not.
    apps: Vec<DeliveredApp>,
    /// Releases POSTed this round.
    reported: Vec<ReleaseRef>,
    /// The first failure (an unavailable API stops further POSTs).
    failure: Option<PostError>,
}

impl Reconciler for Inventory {
    type Error = SyncError;

    async fn reconcile(&self, key: &str) -> Result<Action, SyncError> {
        let Some(hp) = self.projects.get(key) else {
            self.ledger.forget(key);
            return Ok(Action::done("gone"));
        };
        let status = self.ledger.newest_status(key, &hp);
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
        self.delivering(&mut run);
        if hp.spec.stop {
            return self.stopped(&mut run).await;
        }
        // Judged before this reconcile writes anything of its own.
        let go_era = go_written(&run.status);
        self.ensure_cluster_uuid(&mut run).await?;
        if let Err(e) = self.ensure_registered(&mut run, go_era).await? {
            return self.api_failed(run, e).await;
        }
        let started = Instant::now();
        let collection = self.collect(&run);
        let collect_ms = started.elapsed().as_secs_f64() * 1000.0;
        self.warn_invalid(&run, &collection);
        let mut delivered = self.deliver(&run, &collection).await?;
        self.deliver_removals(&run, &collection, &mut delivered)
            .await?;
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
        self.ready(&mut run).await?;
        Ok(Action::done(format!(
            "{} apps, {} posted, collected {} in {collect_ms:.1} ms",
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

    /// `Delivering=False, DeliveryDisabled` (and one Warning) while the
    /// project asks for delivery that this process does not run; the
    /// condition goes when either changes. Written with the next status
    /// write of this reconcile.
    fn delivering(&self, run: &mut Run<'_>) {
        let spec = &run.hp.spec;
        let asked = !spec.helm.is_empty() || spec.monitoring.enable || spec.ingress.enable;
        let reason = Reason::DeliveryDisabled.as_str();
        if asked && !self.settings.delivery_enabled {
            if !crate::condition::has(&run.status.conditions, "Delivering", false, reason) {
                let message = "spec.helm or a platform toggle (monitoring, ingress) asks for Helm delivery, but this operator runs without it: add delivery to --controllers (and apply manifests/delivery)";
                crate::condition::set(
                    &mut run.status.conditions,
                    "Delivering",
                    false,
                    reason,
                    message,
                    run.hp.metadata.generation,
                );
                self.event(run, EventType::Warning, Reason::DeliveryDisabled, message);
            }
        } else {
            run.status.conditions.retain(|c| c.type_ != "Delivering");
        }
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
    fn context<'a>(&'a self, run: &'a Run<'_>) -> Context<'a> {
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
        }
    }

    /// POSTs every app that is new or changed. Only what was delivered
    /// enters `status.apps`; once the API is unavailable, nothing more is
    /// sent.
    async fn deliver(
        &self,
        run: &Run<'_>,
        collection: &Collection,
    ) -> Result<Delivered, SyncError> {
        let mut out = Delivered::default();
        for app in &collection.apps {
            let release = ReleaseRef::new(&app.status.namespace, &app.status.name);
            self.ledger.saw(run.key, &release, &app.status);
            let known = run.known.get(&release.namespace, &release.name);
            if !settled(&app.status.status) {
                // Sent once it settles (deployed, failed, ...).
                out.apps.extend(known.cloned());
                continue;
            }
            if !collector::needs_report(app, known) {
                out.apps.push(app.delivered());
                continue;
            }
            self.send_app(
                run,
                &mut out,
                release,
                &app.payload,
                Some(app.delivered()),
                known,
            )
            .await?;
        }
        Ok(out)
    }

    /// Sends once, with status `uninstalled`, every delivered release that
    /// is gone (its storage deleted); forgets it once that is delivered.
    async fn deliver_removals(
        &self,
        run: &Run<'_>,
        collection: &Collection,
        out: &mut Delivered,
    ) -> Result<(), SyncError> {
        let deny = &run.hp.spec.deny_namespaces;
        // Releases still there: collected, or present but undecodable.
        let present: HashSet<(&str, &str)> = collection
            .apps
            .iter()
            .map(|a| (a.status.namespace.as_str(), a.status.name.as_str()))
            .chain(
                collection
                    .invalid
                    .iter()
                    .map(|i| (i.namespace.as_str(), i.release.as_str())),
            )
            .collect();
        let mut gone: Vec<&DeliveredApp> = run
            .known
            .iter()
            .filter(|k| !present.contains(&(k.namespace.as_str(), k.name.as_str())))
            .collect();
        gone.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        for known in gone {
            let release = ReleaseRef::new(&known.namespace, &known.name);
            if deny.contains(&known.namespace) {
                // No longer reported, not uninstalled: just dropped.
                self.ledger.forget_release(run.key, &release);
                continue;
            }
            let payload = collector::uninstalled(
                known,
                self.ledger.last_seen(run.key, &release).as_ref(),
                &self.context(run),
            );
            // Delivered: the release leaves the status (and memory).
            if self
                .send_app(run, out, release.clone(), &payload, None, Some(known))
                .await?
            {
                self.ledger.forget_release(run.key, &release);
            }
        }
        Ok(())
    }

    /// POSTs one app — unless the API is down (don't hammer it) or shutdown
    /// has begun — and says whether it was delivered. Delivered: `delivered`
    /// enters the status (`None`: the release leaves it); not: what was
    /// `known` stays.
    async fn send_app(
        &self,
        run: &Run<'_>,
        out: &mut Delivered,
        release: ReleaseRef,
        payload: &AppPayload,
        delivered: Option<DeliveredApp>,
        known: Option<&DeliveredApp>,
    ) -> Result<bool, SyncError> {
        let api_down = matches!(out.failure, Some(PostError::Unavailable { .. }));
        if api_down || self.stopping.is_set() {
            out.apps.extend(known.cloned());
            return Ok(false);
        }
        let target = Target::App(release.clone());
        match self
            .api
            .post(&self.ledger, run.key, target, "/apps", payload)
            .await?
        {
            Ok(()) => {
                out.apps.extend(delivered);
                out.reported.push(release);
                Ok(true)
            }
            Err(e) => {
                out.apps.extend(known.cloned());
                if !api_down {
                    out.failure = Some(e);
                }
                Ok(false)
            }
        }
    }

    /// Puts what was delivered into the status and the ledger.
    fn record(&self, run: &mut Run<'_>, delivered: &Delivered) {
        let status = &mut run.status;
        status.set_delivered(&delivered.apps);
        status.observed_generation = run.hp.metadata.generation;
        if !delivered.reported.is_empty() {
            let message = reported_message(&delivered.reported);
            self.event(run, EventType::Normal, Reason::AppsReported, &message);
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

    /// Replaces the status subresource with `run.status` — only when it
    /// changed (`lastReconcileTimestamp` alone is no change).
    async fn write_status(&self, run: &Run<'_>) -> Result<(), SyncError> {
        let previous = self.ledger.newest_status(run.key, run.hp);
        let unchanged = {
            let (mut a, mut b) = (run.status.clone(), previous.clone());
            a.last_reconcile_timestamp.clear();
            b.last_reconcile_timestamp.clear();
            a == b
        };
        if unchanged {
            return Ok(());
        }
        let patch = merge_patch(&run.status, &previous).map_err(|source| SyncError::Serialize {
            what: "the status",
            source,
        })?;
        let api: Api<Hosstedproject> = Api::all(self.client.clone());
        let written = match api
            .patch_status(
                &run.hp.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(w) => w,
            Err(e) => {
                let message = format!(
                    "cannot write the status: {e}; what was delivered since is sent again, with the same app UUIDs, until it can"
                );
                self.event(run, EventType::Warning, Reason::StatusWriteFailed, &message);
                return Err(e.into());
            }
        };
        self.ledger.wrote(run.key, &written, &run.status);
        Ok(())
    }

    fn event(&self, run: &Run<'_>, kind: EventType, reason: Reason, message: &str) {
        self.recorder.event(run.hp, kind, reason.as_str(), message);
    }
}

/// The Event message for a round of reports: the first names, then a count
/// (an Event naming 10,000 releases would be a 300 KB object).
fn reported_message(reported: &[ReleaseRef]) -> String {
    const NAMED: usize = 10;
    let names: Vec<String> = reported.iter().take(NAMED).map(|r| r.to_string()).collect();
    let more = reported.len().saturating_sub(NAMED);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "reported {} app(s): {}{tail}",
        reported.len(),
        names.join(", ")
    )
}

/// Whether a release's newest revision has settled: `pending-*` and
/// `uninstalling` have not (the state that follows is sent).
fn settled(status: &str) -> bool {
    !status.starts_with("pending-") && status != "uninstalling"
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

    #[test]
    fn a_report_event_names_ten_releases_then_counts() {
        let few: Vec<ReleaseRef> = (0..2)
            .map(|i| ReleaseRef::new("a", &format!("r{i}")))
            .collect();
        assert_eq!(reported_message(&few), "reported 2 app(s): a/r0, a/r1");
        let many: Vec<ReleaseRef> = (0..10_000)
            .map(|i| ReleaseRef::new("a", &format!("r{i}")))
            .collect();
        let message = reported_message(&many);
        assert!(
            message.starts_with("reported 10000 app(s): a/r0, a/r1,"),
            "{message}"
        );
        assert!(message.ends_with("a/r9 and 9990 more"), "{message}");
    }

    #[test]
    fn pending_and_uninstalling_revisions_are_not_settled() {
        for s in [
            "pending-install",
            "pending-upgrade",
            "pending-rollback",
            "uninstalling",
        ] {
            assert!(!settled(s), "{s}");
        }
        for s in ["deployed", "failed", "superseded", "uninstalled"] {
            assert!(settled(s), "{s}");
        }
    }
}
