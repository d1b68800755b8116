//! The business logic of one Hosstedproject, as named steps:
//! stopped? → cluster UUID → registration → collect → deliver → record
//! status → ready.

use std::time::Instant;

use apis::{HelmInfo, Hosstedproject, HosstedprojectStatus};
use cache::Store;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use record::{EventRecorder, EventType};
use runtime::{Action, Reconciler};

use super::Settings;
use super::api::HosstedApi;
use super::collector::{self, Caches, Collection, Context};
use super::ledger::{Ledger, ReleaseRef, Target};
use super::payload::{ClusterRegistration, OptionsState};
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
}

/// One reconcile's view of its Hosstedproject.
struct Run<'a> {
    key: &'a str,
    hp: &'a Hosstedproject,
    status: HosstedprojectStatus,
}

/// What the deliver step did.
#[derive(Default)]
struct Delivered {
    /// `helmStatus` after this round: delivered apps, and what was known of
    /// those that were not.
    helm_status: Vec<HelmInfo>,
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
        let mut run = Run {
            key,
            status: self.ledger.newest_status(key, &hp),
            hp: &hp,
        };
        if hp.spec.stop {
            return self.stopped(&mut run).await;
        }
        self.ensure_cluster_uuid(&mut run).await?;
        if let Err(e) = self.ensure_registered(&mut run).await? {
            return self.api_failed(run, e).await;
        }
        let started = Instant::now();
        let collection = self.collect(&run);
        let collect_ms = started.elapsed().as_secs_f64() * 1000.0;
        self.warn_invalid(&run, &collection);
        let delivered = self.deliver(&run, &collection).await?;
        self.record(&mut run, &collection, &delivered);
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
    ) -> Result<Result<(), PostError>, SyncError> {
        if run.status.cluster_registered {
            return Ok(Ok(()));
        }
        let spec = &run.hp.spec;
        let registration = ClusterRegistration {
            kind: "k8s".into(),
            org_id: self.settings.org_id.clone(),
            context_name: self.settings.context_name.clone(),
            email_id: self.settings.email_id.clone(),
            options_state: OptionsState {
                monitoring: spec.monitoring.enable,
                logging: spec.logging.enable,
                cve_scan: spec.cve.enable,
                ingress: spec.ingress.enable,
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
        collector::collect(
            &self.caches,
            &Context {
                cluster_uuid: &run.status.cluster_uuid,
                email_id: &self.settings.email_id,
                deny_namespaces: &run.hp.spec.deny_namespaces,
                known: &run.status.helm_status,
            },
            &mut |namespace, name| {
                self.ledger
                    .pending_uuid(run.key, ReleaseRef::new(namespace, name))
            },
        )
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
    /// enters `helmStatus`; once the API is unavailable, nothing more is sent.
    async fn deliver(
        &self,
        run: &Run<'_>,
        collection: &Collection,
    ) -> Result<Delivered, SyncError> {
        let mut out = Delivered::default();
        for app in &collection.apps {
            let release = ReleaseRef::new(&app.status.namespace, &app.status.name);
            let known = run
                .status
                .helm_status
                .iter()
                .find(|k| k.name == release.name && k.namespace == release.namespace);
            if !collector::needs_report(app, &run.status.helm_status) {
                out.helm_status.push(app.status.clone());
                continue;
            }
            if matches!(out.failure, Some(PostError::Unavailable { .. })) {
                out.helm_status.extend(known.cloned()); // the API is down: don't hammer it
                continue;
            }
            match self
                .api
                .post(
                    &self.ledger,
                    run.key,
                    Target::App(release.clone()),
                    "/apps",
                    &app.payload,
                )
                .await?
            {
                Ok(()) => {
                    out.helm_status.push(app.status.clone());
                    out.reported.push(release);
                }
                Err(e) => {
                    out.helm_status.extend(known.cloned());
                    if !matches!(out.failure, Some(PostError::Unavailable { .. })) {
                        out.failure = Some(e);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Puts what was delivered into the status and the ledger.
    fn record(&self, run: &mut Run<'_>, collection: &Collection, delivered: &Delivered) {
        let status = &mut run.status;
        status.helm_status = delivered.helm_status.clone();
        // Delivered (or vanished) releases no longer need a pending UUID.
        let undelivered: Vec<ReleaseRef> = collection
            .apps
            .iter()
            .map(|a| ReleaseRef::new(&a.status.namespace, &a.status.name))
            .filter(|r| {
                !status
                    .helm_status
                    .iter()
                    .any(|h| h.namespace == r.namespace && h.name == r.name)
            })
            .collect();
        self.ledger
            .prune_pending(run.key, |r| undelivered.contains(r));
        status.revision = {
            let mut r: Vec<i64> = status.helm_status.iter().map(|h| h.revision).collect();
            r.sort_unstable();
            r
        };
        status.reconcile_helm_releases = status
            .helm_status
            .iter()
            .map(|h| {
                (
                    format!("{}/{}", h.namespace, h.name),
                    h.revision.to_string(),
                )
            })
            .collect();
        status.app_count = status.helm_status.len() as i64;
        status.observed_generation = run.hp.metadata.generation;
        if !delivered.reported.is_empty() {
            let names: Vec<String> = delivered.reported.iter().map(|r| r.to_string()).collect();
            let message = format!("reported {} app(s): {}", names.len(), names.join(", "));
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

    /// Replaces the status subresource with `run.status`.
    async fn write_status(&self, run: &Run<'_>) -> Result<(), SyncError> {
        let previous = self.ledger.newest_status(run.key, run.hp);
        let patch = merge_patch(&run.status, previous.reconcile_helm_releases.keys()).map_err(
            |source| SyncError::Serialize {
                what: "the status",
                source,
            },
        )?;
        let api: Api<Hosstedproject> = Api::all(self.client.clone());
        let written = api
            .patch_status(
                &run.hp.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        self.ledger.wrote(run.key, &written, &run.status);
        Ok(())
    }

    fn event(&self, run: &Run<'_>, kind: EventType, reason: Reason, message: &str) {
        self.recorder.event(run.hp, kind, reason.as_str(), message);
    }
}
