//! Helm operations besides install/upgrade: remediation after a failure,
//! unlocking a release left pending, and uninstall on deletion.

use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::{HelmApp, HelmAppStatus};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use record::EventType;
use runtime::Action;
use serde_json::{Value, json};

use super::inputs::*;
use super::reconciler::{Delivery, DeliveryError, Target};
use super::status::*;
use super::{FINALIZER, UID_LABEL};
use crate::cached::objects::{HelmRelease, label};

impl Delivery {
    /// Applies `remedy` (`rollback`, `uninstall`, `none`) after a failure,
    /// records it in the history, and says what was done.
    pub(super) async fn remediate(
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

    /// Marks a pending release revision `failed` in Helm's storage (what
    /// helm itself does when its wait times out).
    pub(super) async fn unlock(&self, r: &HelmRelease) -> Result<(), DeliveryError> {
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
    pub(super) async fn finalize(
        &self,
        app: &Arc<HelmApp>,
        target: &Target,
    ) -> Result<Action, DeliveryError> {
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
    pub(super) async fn set_finalizer(
        &self,
        app: &HelmApp,
        present: bool,
    ) -> Result<(), DeliveryError> {
        super::finalizer::set(&self.api_of(app), app, FINALIZER, present).await?;
        Ok(())
    }
}
