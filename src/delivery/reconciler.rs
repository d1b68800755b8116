//! The business logic of one HelmApp, as named steps:
//! deleting? → finalizer → suspended? → depends on? → chart → values
//! digests → hash → unlock a stuck release → owned? → up to date? (no
//! helm, no write) → helm upgrade --install → status, Event.
//!
//! The steps' parts live beside this file: `inputs` (chart, dependencies,
//! values, hash), `readiness` (up to date, rollout), `lifecycle`
//! (remediation, unlock, uninstall), `status` (conditions, history, the
//! write).

use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::{HelmApp, HelmAppStatus};
use cache::Store;
use kube::{Client, ResourceExt};
use record::{EventRecorder, EventType};
use runtime::{Action, Reconciler};

use super::inputs::{config_hash, parse_duration};
use super::runner::{Helm, Upgrade};
use super::source::{self};
use super::status::{has_condition, helm_message, is_true, push_history, set_condition};
use super::values;
use super::{FINALIZER, HASH_LABEL, RECONCILE_AT, Settings, UID_LABEL};
use crate::cached::digests::{ConfigMapDigests, SecretDigests};
use crate::cached::objects::{HelmRelease, label};
use crate::cached::workloads::{DaemonSet, Deployment, Job, StatefulSet};

/// Why a reconcile must be retried (with backoff). Messages never carry a
/// value: helm's are redacted before they get here.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("writing the HelmApp: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Failed(String),
}

/// The delivery controller's [`Reconciler`].
pub struct Delivery {
    pub(super) client: Client,
    pub(super) apps: Store<HelmApp>,
    /// HelmAppSets, for `dependsOn` of kind HelmAppSet.
    pub(super) sets: Store<apis::helmappset::HelmAppSet>,
    pub(super) releases: Store<HelmRelease>,
    /// The release's workloads, for `wait` (by [`MEMBER_INDEX`]).
    pub(super) deployments: Store<Deployment>,
    pub(super) statefulsets: Store<StatefulSet>,
    pub(super) daemonsets: Store<DaemonSet>,
    pub(super) jobs: Store<Job>,
    /// Digests of the Secrets and ConfigMaps `valuesFrom` may name.
    pub(super) secrets: Store<SecretDigests>,
    pub(super) configmaps: Store<ConfigMapDigests>,
    pub(super) helm: Arc<Helm>,
    /// Chart repositories' resolutions, remembered for their `interval`.
    pub(super) repo_cache: Arc<source::RepoCache>,
    /// The status written last per HelmApp, with the resourceVersion the
    /// write returned (the lister may lag behind it).
    pub(super) written: parking_lot::Mutex<std::collections::HashMap<String, (u64, HelmAppStatus)>>,
    /// HelmApps whose release lost an object (see the drift handler).
    pub(super) drifted: Arc<parking_lot::Mutex<std::collections::HashSet<String>>>,
    pub(super) recorder: EventRecorder,
    pub(super) settings: Settings,
}

/// Where the release goes.
pub(super) struct Target {
    pub(super) release: String,
    pub(super) namespace: String,
}

impl Target {
    pub(super) fn of(app: &HelmApp) -> Self {
        let spec = &app.spec;
        Target {
            release: if spec.release_name.is_empty() {
                app.name_any()
            } else {
                spec.release_name.clone()
            },
            namespace: if spec.target_namespace.is_empty() {
                app.namespace().unwrap_or_default()
            } else {
                spec.target_namespace.clone()
            },
        }
    }
}

/// `targetNamespace/releaseName` of `app` (its defaults applied).
pub(super) fn target_key(app: &HelmApp) -> String {
    let t = Target::of(app);
    format!("{}/{}", t.namespace, t.release)
}

impl Reconciler for Delivery {
    type Error = DeliveryError;

    async fn reconcile(&self, key: &str) -> Result<Action, DeliveryError> {
        let Some(app) = self.apps.get(key) else {
            return Ok(Action::done("gone"));
        };
        let target = Target::of(&app);
        if app.metadata.deletion_timestamp.is_some() {
            return self.finalize(&app, &target).await;
        }
        if !app.finalizers().iter().any(|f| f == FINALIZER) {
            self.set_finalizer(&app, true).await?;
        }
        // The status this process wrote last, if the lister lags behind it.
        let mut status = self.newest_status(key, &app);
        status.observed_generation = app.metadata.generation;
        status.release_name = target.release.clone();
        status.target_namespace = target.namespace.clone();
        if app.spec.suspend {
            set_condition(
                &mut status,
                "Ready",
                false,
                "Suspended",
                "spec.suspend is true: no helm operation runs",
            );
            self.write_status(&app, status).await?;
            return Ok(Action::done("suspended"));
        }
        if self.settings.no_cross_namespace_refs
            && target.namespace != app.namespace().unwrap_or_default()
        {
            let message =
                "targetNamespace is another namespace, which --no-cross-namespace-refs refuses";
            return self
                .refuse(&app, status, "CrossNamespaceRef", message)
                .await;
        }

        if let Some((reason, message)) = self.waiting_for(&app) {
            // Re-queued when the dependency appears or becomes Ready.
            return self.refuse(&app, status, reason, &message).await;
        }
        let chart = match self.chart(&app).await {
            Ok(c) => c,
            Err((e, retry)) => {
                let message = e.to_string();
                let result = self
                    .refuse(&app, status, "ChartUnavailable", &message)
                    .await;
                // A repository that is down is retried; a wrong spec waits
                // for a change.
                return if retry {
                    result.and(Err(DeliveryError::Failed(message)))
                } else {
                    result
                };
            }
        };
        // The hash from the spec and the cached digests of what valuesFrom
        // names: deciding "nothing to do" reads no Secret.
        let references = match self.reference_digests(&app) {
            Ok(d) => d,
            Err(e) => return self.refuse(&app, status, "ValuesInvalid", &e).await,
        };
        let hash = config_hash(&app, &target, &chart, &references);
        let uid = app.uid().unwrap_or_default();

        // An object of the release was deleted: with driftRepair, the same
        // inputs are upgraded again (helm recreates what is missing).
        let repair = self.drifted.lock().remove(key) && app.spec.drift_repair;
        let mut newest = self.newest_release(&target);
        // Our own last run is newer than the cached storage (its watch
        // event has not arrived yet): what we wrote is the truth.
        let cached_revision = newest.as_ref().map(|r| r.version()).unwrap_or(0);
        if status.config_hash == hash
            && status.revision > cached_revision
            && !repair
            && is_true(&status, "Released")
        {
            return self.up_to_date(&app, &target, status).await;
        }
        // A release left pending by a crashed helm: unlocked once no run of
        // ours holds it and it has been pending longer than `timeout`.
        if let Some(r) = newest.clone().filter(|r| {
            label(&r.metadata, UID_LABEL) == uid
                && r.release
                    .as_ref()
                    .is_ok_and(|s| s.status.starts_with("pending-"))
        }) {
            if self.helm.is_busy(&target.namespace, &target.release) {
                return Ok(Action::requeue_after(
                    Duration::from_secs(5),
                    "a helm run holds the release",
                ));
            }
            let timeout = parse_duration(&app.spec.timeout).unwrap_or(Duration::from_secs(300));
            let (state, since) = r
                .release
                .as_ref()
                .map(|s| (s.status.clone(), s.updated.clone()))
                .unwrap_or_default();
            let pending_for = chrono::DateTime::parse_from_rfc3339(&since)
                .map(|t| {
                    (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                        .to_std()
                        .unwrap_or_default()
                })
                .unwrap_or(timeout);
            if pending_for < timeout {
                let message = format!(
                    "release {}/{} is {state} since {since} and no helm of ours runs on it; unlocked after spec.timeout ({})",
                    target.namespace, target.release, app.spec.timeout
                );
                if !has_condition(&status, "Ready", false, "ReleaseLocked") {
                    self.recorder.event(
                        app.as_ref(),
                        EventType::Warning,
                        "ReleaseLocked",
                        &message,
                    );
                }
                set_condition(&mut status, "Ready", false, "ReleaseLocked", &message);
                self.write_status(&app, status).await?;
                return Ok(Action::requeue_after(
                    timeout - pending_for,
                    "release locked",
                ));
            }
            self.unlock(&r).await?;
            let message = format!(
                "release {}/{} was {state} for {}s with no helm running: marked failed, as helm does after a timeout",
                target.namespace,
                target.release,
                pending_for.as_secs()
            );
            self.recorder.event(
                app.as_ref(),
                EventType::Warning,
                "ReleaseUnlocked",
                &message,
            );
            let (revision, version) = (r.version(), status.chart_version.clone());
            push_history(
                &mut status,
                "unlock",
                revision,
                &version,
                &hash,
                "succeeded",
            );
            status.last_action = "unlock".into();
            // Now failed: what follows upgrades it.
            newest = self.newest_release(&target).or(Some(r));
        }
        if let Some(r) = &newest {
            let owner = label(&r.metadata, UID_LABEL);
            if owner != uid {
                let owned_by_live = !owner.is_empty()
                    && self.apps.list().iter().any(|a| {
                        a.uid().as_deref() == Some(owner) && a.metadata.deletion_timestamp.is_none()
                    });
                if owned_by_live {
                    let message = format!(
                        "release {}/{} belongs to another HelmApp (uid {owner}); it is never taken",
                        target.namespace, target.release
                    );
                    return self
                        .refuse(&app, status, "ReleaseOwnedByOther", &message)
                        .await;
                }
                if !app.spec.adopt {
                    let message = format!(
                        "release {}/{} exists and no live HelmApp owns it; set spec.adopt: true to take it over",
                        target.namespace, target.release
                    );
                    return self.refuse(&app, status, "ReleaseNotOwned", &message).await;
                }
            } else if label(&r.metadata, HASH_LABEL) == hash
                && r.release.as_ref().is_ok_and(|s| s.status == "deployed")
                && !repair
            {
                // Up to date: no helm, and a write only if the status lags.
                status.config_hash = hash;
                status.revision = r.version();
                return self.up_to_date(&app, &target, status).await;
            }
        }

        // A new configuration, or a reconcile asked for by annotation,
        // starts the retries afresh; spent retries otherwise run nothing.
        let asked = app
            .annotations()
            .get(RECONCILE_AT)
            .cloned()
            .unwrap_or_default();
        if asked != status.last_handled_reconcile_at {
            status.last_handled_reconcile_at = asked;
            status.failures = 0;
        }
        if status
            .history
            .first()
            .is_some_and(|h| h.config_hash != hash)
        {
            status.failures = 0;
        }
        if status.failures > 0 && has_condition(&status, "Ready", false, "RetriesExhausted") {
            self.write_status(&app, status).await?;
            return Ok(Action::done("retries exhausted: waiting for a change"));
        }
        let values = match self.values(&app).await {
            Ok(v) => v,
            Err(e) => return self.refuse(&app, status, "ValuesInvalid", &e).await,
        };
        let install = newest.is_none();
        let labels = [(HASH_LABEL, hash.as_str()), (UID_LABEL, uid.as_str())];
        let app_ns = app.namespace().unwrap_or_default();
        let upgrade = Upgrade {
            release: &target.release,
            namespace: &target.namespace,
            chart: &chart.path,
            values: &values,
            labels: &labels,
            create_namespace: app.spec.create_namespace,
            // CreateReplace: the operator applies them itself, just below.
            skip_crds: app.spec.crds != "Create",
            service_account: (!app.spec.service_account_name.is_empty())
                .then_some((app_ns.as_str(), app.spec.service_account_name.as_str())),
            timeout: parse_duration(&app.spec.timeout).unwrap_or(Duration::from_secs(300)),
        };
        let action = if install { "install" } else { "upgrade" };
        if app.spec.crds == "CreateReplace"
            && let Err(message) = self
                .replace_crds(&chart.path, upgrade.service_account)
                .await
        {
            return self.failed(&app, status, "CRDsFailed", &message).await;
        }
        let Some(outcome) = self.helm.upgrade(&upgrade).await else {
            return Ok(Action::requeue_after(
                Duration::from_secs(5),
                "another helm run holds the release",
            ));
        };
        match outcome {
            Ok(released) => {
                let reason = if install {
                    "InstallSucceeded"
                } else if repair {
                    "DriftRepaired"
                } else {
                    "UpgradeSucceeded"
                };
                let message = format!(
                    "{action} of {}/{} succeeded: revision {}, chart {} {}",
                    target.namespace,
                    target.release,
                    released.revision,
                    app.spec.chart.name,
                    released.chart_version
                );
                status.revision = released.revision;
                status.chart_version = released.chart_version.clone();
                status.app_version = released.app_version;
                status.config_hash = hash.clone();
                status.last_action = action.into();
                status.failures = 0;
                push_history(
                    &mut status,
                    action,
                    released.revision,
                    &released.chart_version,
                    &hash,
                    "succeeded",
                );
                set_condition(&mut status, "Ready", true, reason, &message);
                set_condition(&mut status, "Released", true, reason, &message);
                if repair {
                    set_condition(&mut status, "Drifted", false, "DriftRepaired", &message);
                }
                self.recorder
                    .event(app.as_ref(), EventType::Normal, reason, &message);
                let waiting = self.still_rolling_out(&app, &target, &mut status);
                self.write_status(&app, status).await?;
                Ok(waiting.unwrap_or_else(|| Action::done(message)))
            }
            Err(e) => {
                let secrets = values::secrets_of(&values);
                let message = values::redact(&helm_message(&e), &secrets);
                status.last_action = action.into();
                status.failures += 1;
                let revision = status.revision;
                push_history(
                    &mut status,
                    action,
                    revision,
                    &chart.version,
                    &hash,
                    "failed",
                );
                let timeout = upgrade.timeout;
                if install {
                    // Nothing to roll back to: the failed release goes
                    // before the next try.
                    self.remediate(&app, &target, "uninstall", timeout, &mut status, &hash)
                        .await;
                    return self.failed(&app, status, "InstallFailed", &message).await;
                }
                let retries = app.spec.remediation.retries.max(0);
                if status.failures <= retries {
                    return self.failed(&app, status, "UpgradeFailed", &message).await;
                }
                let remedy = app.spec.remediation.on_failure.clone();
                let done = self
                    .remediate(&app, &target, &remedy, timeout, &mut status, &hash)
                    .await;
                let message = format!(
                    "upgrade failed {} time(s), the last: {message}; {done}; nothing more runs until the configuration or {RECONCILE_AT} changes",
                    status.failures
                );
                set_condition(&mut status, "Ready", false, "RetriesExhausted", &message);
                set_condition(&mut status, "Released", false, "UpgradeFailed", &message);
                self.recorder.event(
                    app.as_ref(),
                    EventType::Warning,
                    "RetriesExhausted",
                    &message,
                );
                self.write_status(&app, status).await?;
                Ok(Action::done("retries exhausted"))
            }
        }
    }
}
