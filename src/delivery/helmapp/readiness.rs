//! With `wait`: which workloads of the release have not finished rolling
//! out (read from the caches, never `helm --wait`), and what that makes of
//! `Ready`.

use std::time::Duration;

use apis::helmapp::HelmAppStatus;
use kube::ResourceExt;

use super::context::Context;
use super::status::Reason;
use super::target::Target;
use crate::cached::members::MEMBER_INDEX;

/// The Deployments, StatefulSets, DaemonSets and Jobs of the release that
/// are not done yet, sorted (`Kind name`).
pub fn pending(ctx: &Context, target: &Target) -> Vec<String> {
    let key = target.key();
    let m = &ctx.members;
    let mut pending: Vec<String> = m
        .deployments
        .by_index(MEMBER_INDEX, &key)
        .iter()
        .filter(|d| !d.rollout.is_done(d.metadata.generation))
        .map(|d| format!("Deployment {}", d.name_any()))
        .collect();
    pending.extend(
        m.daemonsets
            .by_index(MEMBER_INDEX, &key)
            .iter()
            .filter(|d| !d.rollout.is_done(d.metadata.generation))
            .map(|d| format!("DaemonSet {}", d.name_any())),
    );
    pending.extend(
        m.jobs
            .by_index(MEMBER_INDEX, &key)
            .iter()
            .filter(|j| !j.is_done())
            .map(|j| format!("Job {}", j.name_any())),
    );
    pending.extend(
        m.statefulsets
            .by_index(MEMBER_INDEX, &key)
            .iter()
            .filter(|s| !s.rollout.is_done(s.metadata.generation))
            .map(|s| format!("StatefulSet {}", s.name_any())),
    );
    pending.sort();
    pending
}

/// Not ready while `pending` is not empty: `Progressing` until `timeout`
/// has passed since the last operation, then `ReadinessTimeout` (reported,
/// not remediated); with when to look again (a workload's change re-queues
/// sooner).
pub fn verdict(
    pending: &[String],
    status: &HelmAppStatus,
    timeout: Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<(Reason, String, Duration)> {
    if pending.is_empty() {
        return None;
    }
    let since = status
        .history
        .first()
        .and_then(|h| chrono::DateTime::parse_from_rfc3339(&h.time).ok())
        .map(|t| {
            (now - t.with_timezone(&chrono::Utc))
                .to_std()
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let (reason, again) = if since >= timeout {
        (Reason::ReadinessTimeout, Duration::from_secs(300))
    } else {
        (Reason::Progressing, timeout - since)
    };
    let message = format!("waiting for {} to be ready (spec.wait)", pending.join(", "));
    Some((reason, message, again))
}
