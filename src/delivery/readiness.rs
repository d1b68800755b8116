//! When a HelmApp is Ready: its release is deployed with this
//! configuration and, with `wait`, its workloads have rolled out.

use std::time::Duration;

use apis::helmapp::{HelmApp, HelmAppStatus};
use kube::ResourceExt;
use runtime::Action;

use super::MEMBER_INDEX;
use super::inputs::*;
use super::reconciler::{Delivery, DeliveryError, Target};
use super::status::*;

impl Delivery {
    /// The release is deployed with this configuration: `Ready` (once its
    /// workloads are, with `wait`), written only if the status lags.
    pub(super) async fn up_to_date(
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

    /// With `wait`: when a Deployment, StatefulSet, DaemonSet or Job of the release has not
    /// finished its rollout, `Ready=False` (`Progressing`, or
    /// `ReadinessTimeout` once `timeout` has passed since the last
    /// operation — reported, not remediated) and when to look again (a
    /// workload's change re-queues sooner).
    pub(super) fn still_rolling_out(
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
            self.daemonsets
                .by_index(MEMBER_INDEX, &key)
                .iter()
                .filter(|d| !d.rollout.is_done(d.metadata.generation))
                .map(|d| format!("DaemonSet {}", d.name_any())),
        );
        pending.extend(
            self.jobs
                .by_index(MEMBER_INDEX, &key)
                .iter()
                .filter(|j| !j.is_done())
                .map(|j| format!("Job {}", j.name_any())),
        );
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
}
