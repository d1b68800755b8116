//! The HelmApp's status: conditions, history, the write (only when it
//! changed; the status written last is remembered, as the lister may lag
//! behind it), and the outcomes that end a reconcile with a condition.

use apis::helmapp::{HelmApp, HelmAppStatus, HistoryEntry};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use record::EventType;
use runtime::Action;
use serde_json::json;

use super::reconciler::{Delivery, DeliveryError};
use super::runner::HelmError;
use crate::condition;

impl Delivery {
    /// A failed attempt: `Ready=False` with `reason` and helm's (redacted)
    /// message, a Warning Event, and a retry with backoff.
    pub(super) async fn failed(
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

    /// A problem only a change can fix: `Ready=False` with `reason`, a
    /// Warning Event when it is new, no retry (a change of the HelmApp or
    /// of what it references re-queues it).
    pub(super) async fn refuse(
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

    /// Writes `status` if it differs from what the HelmApp shows.
    pub(super) async fn write_status(
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
    pub(super) fn newest_status(&self, key: &str, app: &HelmApp) -> HelmAppStatus {
        let mut written = self.written.lock();
        match written.get(key) {
            Some((rv, status)) if *rv > resource_version(app) => status.clone(),
            _ => {
                written.remove(key);
                app.status.clone().unwrap_or_default()
            }
        }
    }

    /// The HelmApp API of `app`'s namespace.
    pub(super) fn api_of(&self, app: &HelmApp) -> Api<HelmApp> {
        Api::namespaced(self.client.clone(), &app.namespace().unwrap_or_default())
    }
}

/// What decides the release's content (DELIVERY.md): the chart (source,
/// resolved version, digest), every source of values (inline, each
/// `valuesFrom` with the digest of its content, `valuesBase64`, `set`),
/// release name, target namespace and `crds` — hashed to 32 hex
/// characters (a label value).
pub(super) fn resource_version(app: &HelmApp) -> u64 {
    app.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

pub(super) fn helm_message(e: &HelmError) -> String {
    // helm prefixes its messages with "Error: "; keep the first lines.
    let text = e.to_string();
    let mut lines: Vec<&str> = text.lines().take(5).collect();
    if lines.is_empty() {
        lines.push("helm failed");
    }
    lines.join(" ").chars().take(1024).collect()
}

pub(super) fn push_history(
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

pub(super) fn is_true(status: &HelmAppStatus, type_: &str) -> bool {
    condition::is_true(&status.conditions, type_)
}

pub(super) fn has_condition(
    status: &HelmAppStatus,
    type_: &str,
    value: bool,
    reason: &str,
) -> bool {
    condition::has(&status.conditions, type_, value, reason)
}

pub(super) fn set_condition(
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
