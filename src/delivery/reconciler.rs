//! The business logic of one HelmApp, as named steps:
//! deleting? → finalizer → suspended? → chart → values → hash → owned? →
//! up to date? (no helm, no write) → helm upgrade --install → status, Event.

use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::{HelmApp, HelmAppStatus, HistoryEntry};
use base64::Engine;
use cache::Store;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use record::{EventRecorder, EventType};
use runtime::{Action, Reconciler};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::runner::{Helm, HelmError, Upgrade};
use super::source::{self, hex};
use super::values;
use super::{
    FINALIZER, HASH_LABEL, MEMBER_INDEX, RECONCILE_AT, RELEASE_INDEX, Settings, UID_LABEL,
};
use crate::cached::digests::{ConfigMapDigests, SecretDigests};
use crate::cached::objects::{HelmRelease, label};
use crate::cached::workloads::{Deployment, StatefulSet};
use crate::condition;

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
    pub(super) releases: Store<HelmRelease>,
    /// The release's workloads, for `wait` (by [`MEMBER_INDEX`]).
    pub(super) deployments: Store<Deployment>,
    pub(super) statefulsets: Store<StatefulSet>,
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
struct Target {
    release: String,
    namespace: String,
}

impl Target {
    fn of(app: &HelmApp) -> Self {
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
            skip_crds: app.spec.crds == "Skip",
            service_account: (!app.spec.service_account_name.is_empty())
                .then_some((app_ns.as_str(), app.spec.service_account_name.as_str())),
            timeout: parse_duration(&app.spec.timeout).unwrap_or(Duration::from_secs(300)),
        };
        let action = if install { "install" } else { "upgrade" };
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

impl Delivery {
    /// A failed attempt: `Ready=False` with `reason` and helm's (redacted)
    /// message, a Warning Event, and a retry with backoff.
    async fn failed(
        &self,
        app: &HelmApp,
        mut status: HelmAppStatus,
        reason: &str,
        message: &str,
    ) -> Result<Action, DeliveryError> {
        set_condition(&mut status, "Ready", false, reason, message);
        set_condition(&mut status, "Released", false, reason, message);
        self.recorder
            .event(app, EventType::Warning, reason, message);
        self.write_status(app, status).await?;
        Err(DeliveryError::Failed(message.to_string()))
    }

    /// Applies `remedy` (`rollback`, `uninstall`, `none`) after a failure,
    /// records it in the history, and says what was done.
    async fn remediate(
        &self,
        app: &HelmApp,
        target: &Target,
        remedy: &str,
        timeout: Duration,
        status: &mut HelmAppStatus,
        hash: &str,
    ) -> String {
        let (ns, release) = (target.namespace.as_str(), target.release.as_str());
        let outcome = match remedy {
            // To the last revision that succeeded.
            "rollback" if status.revision > 0 => {
                self.helm
                    .rollback(ns, release, status.revision, timeout)
                    .await
            }
            "rollback" => return "no rollback: no revision ever succeeded".into(),
            "uninstall" => self.helm.uninstall(ns, release, timeout).await,
            _ => return "no remediation (onFailure: none)".into(),
        };
        let (result, said) = match outcome {
            Some(Ok(())) => ("succeeded", format!("{remedy} done")),
            Some(Err(e)) => ("failed", format!("{remedy} failed: {}", helm_message(&e))),
            None => (
                "failed",
                format!("{remedy} skipped: another helm run holds the release"),
            ),
        };
        let revision = status.revision;
        let version = status.chart_version.clone();
        push_history(status, remedy, revision, &version, hash, result);
        status.last_action = remedy.into();
        let kind = if result == "succeeded" {
            EventType::Normal
        } else {
            EventType::Warning
        };
        let reason = if remedy == "rollback" {
            "RollbackPerformed"
        } else {
            "UninstallPerformed"
        };
        self.recorder.event(app, kind, reason, &said);
        said
    }

    /// The release is deployed with this configuration: `Ready` (once its
    /// workloads are, with `wait`), written only if the status lags.
    async fn up_to_date(
        &self,
        app: &HelmApp,
        target: &Target,
        mut status: HelmAppStatus,
    ) -> Result<Action, DeliveryError> {
        if let Some(action) = self.still_rolling_out(app, target, &mut status) {
            self.write_status(app, status).await?;
            return Ok(action);
        }
        if !is_true(&status, "Ready") {
            let message = "the release is deployed with this configuration";
            set_condition(&mut status, "Ready", true, "UpToDate", message);
            set_condition(&mut status, "Released", true, "UpToDate", message);
        }
        self.write_status(app, status).await?;
        Ok(Action::done("up to date"))
    }

    /// With `wait`: when a Deployment or StatefulSet of the release has not
    /// finished its rollout, `Ready=False` (`Progressing`, or
    /// `ReadinessTimeout` once `timeout` has passed since the last
    /// operation — reported, not remediated) and when to look again (a
    /// workload's change re-queues sooner).
    fn still_rolling_out(
        &self,
        app: &HelmApp,
        target: &Target,
        status: &mut HelmAppStatus,
    ) -> Option<Action> {
        if !app.spec.wait {
            return None;
        }
        let key = format!("{}/{}", target.namespace, target.release);
        let mut pending: Vec<String> = self
            .deployments
            .by_index(MEMBER_INDEX, &key)
            .iter()
            .filter(|d| !d.rollout.is_done(d.metadata.generation))
            .map(|d| format!("Deployment {}", d.name_any()))
            .collect();
        pending.extend(
            self.statefulsets
                .by_index(MEMBER_INDEX, &key)
                .iter()
                .filter(|s| !s.rollout.is_done(s.metadata.generation))
                .map(|s| format!("StatefulSet {}", s.name_any())),
        );
        if pending.is_empty() {
            return None;
        }
        pending.sort();
        let timeout = parse_duration(&app.spec.timeout).unwrap_or(Duration::from_secs(300));
        let since = status
            .history
            .first()
            .and_then(|h| chrono::DateTime::parse_from_rfc3339(&h.time).ok())
            .map(|t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                    .to_std()
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let (reason, again) = if since >= timeout {
            ("ReadinessTimeout", Duration::from_secs(300))
        } else {
            ("Progressing", timeout - since)
        };
        let message = format!("waiting for {} to be ready (spec.wait)", pending.join(", "));
        set_condition(status, "Ready", false, reason, &message);
        Some(Action::requeue_after(again, message))
    }

    /// The HelmApp API of `app`'s namespace.
    fn api_of(&self, app: &HelmApp) -> Api<HelmApp> {
        Api::namespaced(self.client.clone(), &app.namespace().unwrap_or_default())
    }

    /// Marks a pending release revision `failed` in Helm's storage (what
    /// helm itself does when its wait times out).
    async fn unlock(&self, r: &HelmRelease) -> Result<(), DeliveryError> {
        let ns = r.metadata.namespace.clone().unwrap_or_default();
        let name = r.metadata.name.clone().unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
        let mut secret = api.get(&name).await?;
        let data = secret.data.get_or_insert_with(Default::default);
        let raw = data
            .get("release")
            .map(|b| b.0.clone())
            .ok_or_else(|| DeliveryError::Failed(format!("{ns}/{name} has no data.release")))?;
        let json = crate::cached::helm::release_json(&raw)
            .map_err(|e| DeliveryError::Failed(format!("{ns}/{name}: {e}")))?;
        let mut release: Value = serde_json::from_slice(&json)
            .map_err(|e| DeliveryError::Failed(format!("{ns}/{name}: {e}")))?;
        release["info"]["status"] = json!("failed");
        release["info"]["description"] =
            json!("unlocked by hossted-operator: pending longer than spec.timeout");
        let json = serde_json::to_vec(&release)
            .map_err(|e| DeliveryError::Failed(format!("{ns}/{name}: {e}")))?;
        data.insert(
            "release".into(),
            k8s_openapi::ByteString(crate::cached::helm::encode_release(&json)),
        );
        secret
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("status".into(), "failed".into());
        // Replace with its resourceVersion: a helm that woke up wins.
        api.replace(&name, &Default::default(), &secret).await?;
        Ok(())
    }

    /// The HelmApp is being deleted: uninstall the release if it is ours and
    /// `uninstallOnDelete`, then let it go.
    async fn finalize(&self, app: &Arc<HelmApp>, target: &Target) -> Result<Action, DeliveryError> {
        if !app.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Action::done("deleted"));
        }
        let uid = app.uid().unwrap_or_default();
        let ours = self
            .newest_release(target)
            .is_some_and(|r| label(&r.metadata, UID_LABEL) == uid);
        if app.spec.uninstall_on_delete && ours {
            let timeout = parse_duration(&app.spec.timeout).unwrap_or(Duration::from_secs(300));
            match self
                .helm
                .uninstall(&target.namespace, &target.release, timeout)
                .await
            {
                None => {
                    return Ok(Action::requeue_after(
                        Duration::from_secs(5),
                        "another helm run holds the release",
                    ));
                }
                Some(Err(e)) => {
                    let message = helm_message(&e);
                    self.recorder.event(
                        app.as_ref(),
                        EventType::Warning,
                        "UninstallFailed",
                        &message,
                    );
                    return Err(DeliveryError::Failed(message));
                }
                Some(Ok(())) => {
                    let message = format!("uninstalled {}/{}", target.namespace, target.release);
                    self.recorder.event(
                        app.as_ref(),
                        EventType::Normal,
                        "UninstallSucceeded",
                        &message,
                    );
                }
            }
        }
        self.set_finalizer(app, false).await?;
        Ok(Action::done("finalized"))
    }

    /// Adds or removes our finalizer (a conflict retries the reconcile).
    async fn set_finalizer(&self, app: &HelmApp, present: bool) -> Result<(), DeliveryError> {
        let mut finalizers: Vec<String> = app
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        if present {
            finalizers.push(FINALIZER.into());
        }
        let patch = json!({ "metadata": {
            "finalizers": finalizers,
            "resourceVersion": app.resource_version(),
        }});
        let api = self.api_of(app);
        match api
            .patch(
                &app.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            // Already gone: nothing to hold.
            Err(kube::Error::Api(s)) if s.code == 404 && !present => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A problem only a change can fix: `Ready=False` with `reason`, a
    /// Warning Event when it is new, no retry (a change of the HelmApp or
    /// of what it references re-queues it).
    async fn refuse(
        &self,
        app: &HelmApp,
        mut status: HelmAppStatus,
        reason: &str,
        message: &str,
    ) -> Result<Action, DeliveryError> {
        let new = !has_condition(&status, "Ready", false, reason);
        set_condition(&mut status, "Ready", false, reason, message);
        if new {
            self.recorder
                .event(app, EventType::Warning, reason, message);
        }
        self.write_status(app, status).await?;
        Ok(Action::done(format!("{reason}: {message}")))
    }

    /// The chart, local: by path, or from a repository (remembered for
    /// `interval`: a reconcile in between touches no network). `Err` says
    /// whether retrying may help.
    async fn chart(
        &self,
        app: &HelmApp,
    ) -> Result<source::LocalChart, (source::SourceError, bool)> {
        let spec = &app.spec;
        if spec.chart.repo.is_empty() {
            return source::resolve(&spec.chart, self.settings.chart_path_root.as_deref())
                .map_err(|e| (e, false));
        }
        let interval = parse_duration(&spec.interval).unwrap_or(Duration::from_secs(600));
        if let Some(c) = self.repo_cache.fresh(&spec.chart, interval) {
            return Ok(c);
        }
        let repo_error = |message: String| source::SourceError::Repo {
            repo: spec.chart.repo.clone(),
            message,
        };
        let credentials = match &spec.chart.credentials_secret_ref {
            None => source::Credentials::default(),
            Some(r) => {
                let ns = app.namespace().unwrap_or_default();
                let api: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
                let secret = api
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| {
                        (
                            repo_error(format!("credentialsSecretRef {ns}/{}: {e}", r.name)),
                            true,
                        )
                    })?
                    .ok_or_else(|| {
                        (
                            repo_error(format!(
                                "credentialsSecretRef {ns}/{} does not exist",
                                r.name
                            )),
                            false,
                        )
                    })?;
                let mut data = secret.data.unwrap_or_default();
                let mut text = |k: &str| {
                    data.remove(k)
                        .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
                };
                source::Credentials {
                    username: text("username"),
                    password: text("password"),
                    ca: data.remove("ca.crt").map(|b| b.0),
                }
            }
        };
        let (chart, work_dir, cache) = (
            spec.chart.clone(),
            self.settings.helm.work_dir.clone(),
            self.repo_cache.clone(),
        );
        tokio::task::spawn_blocking(move || {
            source::fetch_from_repo(&chart, &credentials, &work_dir, &cache)
        })
        .await
        .map_err(|e| (repo_error(format!("the fetch stopped: {e}")), true))?
        .map_err(|e| (e, true))
    }

    /// Why `app` must wait for its `dependsOn`, if it must: a dependency
    /// that does not exist, or is not Ready.
    fn waiting_for(&self, app: &HelmApp) -> Option<(&'static str, String)> {
        let own_ns = app.namespace().unwrap_or_default();
        for d in &app.spec.depends_on {
            let ns = if d.namespace.is_empty() {
                own_ns.as_str()
            } else {
                d.namespace.as_str()
            };
            if self.settings.no_cross_namespace_refs && ns != own_ns {
                return Some((
                    "CrossNamespaceRef",
                    format!(
                        "dependsOn {ns}/{}: another namespace, which --no-cross-namespace-refs refuses",
                        d.name
                    ),
                ));
            }
            if d.kind != "HelmApp" {
                return Some((
                    "DependencyNotFound",
                    format!(
                        "dependsOn {} {ns}/{}: only HelmApp dependencies are supported by this build",
                        d.kind, d.name
                    ),
                ));
            }
            match self.apps.get(&format!("{ns}/{}", d.name)) {
                None => {
                    return Some((
                        "DependencyNotFound",
                        format!(
                            "dependsOn HelmApp {ns}/{} does not exist; installed once it does and is Ready",
                            d.name
                        ),
                    ));
                }
                Some(dep) => {
                    let ready = dep.status.as_ref().is_some_and(|s| is_true(s, "Ready"));
                    if !ready {
                        return Some((
                            "DependencyNotReady",
                            format!("waiting for HelmApp {ns}/{} to be Ready", d.name),
                        ));
                    }
                }
            }
        }
        None
    }

    /// The cached digest of each `valuesFrom` key, in order (`None`: an
    /// optional reference that is absent).
    fn reference_digests(&self, app: &HelmApp) -> Result<Vec<Option<String>>, String> {
        let ns = app.namespace().unwrap_or_default();
        app.spec
            .values_from
            .iter()
            .map(|r| {
                let key = format!("{ns}/{}", r.name);
                let keys = match r.kind.as_str() {
                    "Secret" => self.secrets.get(&key).map(|s| s.keys.clone()),
                    "ConfigMap" => self.configmaps.get(&key).map(|c| c.keys.clone()),
                    other => return Err(format!("valuesFrom kind {other:?}: use Secret or ConfigMap")),
                };
                match keys.and_then(|mut k| k.remove(&r.key)) {
                    Some(d) => Ok(Some(d)),
                    None if r.optional => Ok(None),
                    None => Err(format!(
                        "valuesFrom {} {key} key {}: not found (set optional: true if it may be absent)",
                        r.kind, r.key
                    )),
                }
            })
            .collect()
    }

    /// The merged values: `values`, `valuesFrom`, `valuesBase64`, `set`.
    async fn values(&self, app: &HelmApp) -> Result<Value, String> {
        let spec = &app.spec;
        let ns = app.namespace().unwrap_or_default();
        let mut merged = json!({});
        if let Some(v) = &spec.values {
            if !v.is_object() {
                return Err("spec.values must be a mapping".into());
            }
            values::merge(&mut merged, v.clone());
        }
        for r in &spec.values_from {
            let what = format!("valuesFrom {} {}/{} key {}", r.kind, ns, r.name, r.key);
            let text = match r.kind.as_str() {
                "Secret" => {
                    let api: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
                    match api
                        .get_opt(&r.name)
                        .await
                        .map_err(|e| format!("{what}: {e}"))?
                    {
                        Some(s) => s
                            .data
                            .and_then(|mut d| d.remove(&r.key))
                            .map(|b| String::from_utf8_lossy(&b.0).into_owned()),
                        None => None,
                    }
                }
                "ConfigMap" => {
                    let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &ns);
                    match api
                        .get_opt(&r.name)
                        .await
                        .map_err(|e| format!("{what}: {e}"))?
                    {
                        Some(c) => c.data.and_then(|mut d| d.remove(&r.key)),
                        None => None,
                    }
                }
                other => {
                    return Err(format!(
                        "valuesFrom kind {other:?}: use Secret or ConfigMap"
                    ));
                }
            };
            match text {
                Some(t) => values::merge(
                    &mut merged,
                    values::parse_document(&t).map_err(|e| format!("{what}: {e}"))?,
                ),
                None if r.optional => {}
                None => {
                    return Err(format!(
                        "{what}: not found (set optional: true if it may be absent)"
                    ));
                }
            }
        }
        if !spec.values_base64.is_empty() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(spec.values_base64.trim())
                .map_err(|e| format!("valuesBase64 is not base64: {e}"))?;
            let doc = values::parse_document(&String::from_utf8_lossy(&bytes))
                .map_err(|e| format!("valuesBase64: {e}"))?;
            values::merge(&mut merged, doc);
        }
        for s in &spec.set {
            values::apply_set(s, &mut merged).map_err(|e| format!("set: {e}"))?;
        }
        Ok(merged)
    }

    /// The newest revision of the target release in Helm's storage.
    fn newest_release(&self, target: &Target) -> Option<Arc<HelmRelease>> {
        self.releases
            .by_index(
                RELEASE_INDEX,
                &format!("{}/{}", target.namespace, target.release),
            )
            .into_iter()
            .max_by_key(|r| r.version())
    }

    /// Writes `status` if it differs from what the HelmApp shows.
    async fn write_status(
        &self,
        app: &HelmApp,
        status: HelmAppStatus,
    ) -> Result<(), DeliveryError> {
        let current = self.newest_status(&cache::object_key(app), app);
        if current == status {
            return Ok(());
        }
        let api = self.api_of(app);
        let patch = json!({ "status": status });
        match api
            .patch_status(
                &app.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(written) => {
                let rv = resource_version(&written);
                self.written
                    .lock()
                    .insert(cache::object_key(app), (rv, status));
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// `app`'s status: the lister's, or the one this process wrote last
    /// when the lister has not caught up with that write yet.
    fn newest_status(&self, key: &str, app: &HelmApp) -> HelmAppStatus {
        let mut written = self.written.lock();
        match written.get(key) {
            Some((rv, status)) if *rv > resource_version(app) => status.clone(),
            _ => {
                written.remove(key);
                app.status.clone().unwrap_or_default()
            }
        }
    }
}

/// What decides the release's content (DELIVERY.md): the chart (source,
/// resolved version, digest), every source of values (inline, each
/// `valuesFrom` with the digest of its content, `valuesBase64`, `set`),
/// release name, target namespace and `crds` — hashed to 32 hex
/// characters (a label value).
fn resource_version(app: &HelmApp) -> u64 {
    app.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

fn config_hash(
    app: &HelmApp,
    target: &Target,
    chart: &source::LocalChart,
    references: &[Option<String>],
) -> String {
    let c = &app.spec.chart;
    let s = &app.spec;
    let from: Vec<Value> = s
        .values_from
        .iter()
        .zip(references)
        .map(|(r, d)| json!({ "kind": r.kind, "name": r.name, "key": r.key, "digest": d }))
        .collect();
    let doc = json!({
        "chart": { "repo": c.repo, "oci": c.oci, "path": c.path, "name": c.name,
                   "version": chart.version, "digest": chart.digest },
        "values": { "inline": s.values, "from": from, "base64": s.values_base64, "set": s.set },
        "release": target.release,
        "namespace": target.namespace,
        "crds": app.spec.crds,
    });
    let mut hasher = Sha256::new();
    hasher.update(canonical(&doc).as_bytes());
    hex(&hasher.finalize())[..32].to_string()
}

/// JSON with every map's keys sorted, whatever serde_json's map order.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

fn helm_message(e: &HelmError) -> String {
    // helm prefixes its messages with "Error: "; keep the first lines.
    let text = e.to_string();
    let mut lines: Vec<&str> = text.lines().take(5).collect();
    if lines.is_empty() {
        lines.push("helm failed");
    }
    lines.join(" ").chars().take(1024).collect()
}

/// A duration of the spec (Go syntax, as the CRD's pattern allows).
fn parse_duration(s: &str) -> Option<Duration> {
    crate::duration::parse(s).ok()
}

fn push_history(
    status: &mut HelmAppStatus,
    action: &str,
    revision: i64,
    version: &str,
    hash: &str,
    result: &str,
) {
    status.history.insert(
        0,
        HistoryEntry {
            action: action.into(),
            revision,
            chart_version: version.into(),
            config_hash: hash.into(),
            result: result.into(),
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        },
    );
    status.history.truncate(5);
}

fn is_true(status: &HelmAppStatus, type_: &str) -> bool {
    condition::is_true(&status.conditions, type_)
}

fn has_condition(status: &HelmAppStatus, type_: &str, value: bool, reason: &str) -> bool {
    condition::has(&status.conditions, type_, value, reason)
}

fn set_condition(
    status: &mut HelmAppStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
) {
    let generation = status.observed_generation;
    condition::set(
        &mut status.conditions,
        type_,
        value,
        reason,
        message,
        generation,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_ignores_map_order_and_follows_every_input() {
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": { "chart": { "path": "web" } }
        }))
        .unwrap();
        let target = Target::of(&app);
        assert_eq!(
            (target.release.as_str(), target.namespace.as_str()),
            ("web", "apps")
        );
        let chart = source::LocalChart {
            path: "/charts/web".into(),
            version: "1.0.0".into(),
            digest: "d1".into(),
        };
        let with_values = |v: serde_json::Value| {
            let mut a = app.clone();
            a.spec.values = Some(v);
            a
        };
        let a = config_hash(
            &with_values(json!({ "a": 1, "b": { "c": 2, "d": 3 } })),
            &target,
            &chart,
            &[],
        );
        let b = config_hash(
            &with_values(json!({ "b": { "d": 3, "c": 2 }, "a": 1 })),
            &target,
            &chart,
            &[],
        );
        assert_eq!(a, b, "map order does not count");
        assert_eq!(a.len(), 32);
        assert_ne!(
            a,
            config_hash(&with_values(json!({ "a": 2 })), &target, &chart, &[])
        );
        let newer = source::LocalChart {
            digest: "d2".into(),
            ..chart.clone()
        };
        let same = with_values(json!({ "a": 1, "b": { "c": 2, "d": 3 } }));
        assert_ne!(
            a,
            config_hash(&same, &target, &newer, &[]),
            "a changed chart counts"
        );
        let mut from = same.clone();
        from.spec.values_from = vec![apis::helmapp::ValuesReference {
            kind: "Secret".into(),
            name: "vals".into(),
            key: "values.yaml".into(),
            optional: false,
        }];
        let d1 = config_hash(&from, &target, &chart, &[Some("d1".into())]);
        let d2 = config_hash(&from, &target, &chart, &[Some("d2".into())]);
        assert_ne!(d1, d2, "a referenced Secret's content counts");
    }
}
