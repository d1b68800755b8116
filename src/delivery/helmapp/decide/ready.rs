//! Whether a release is Ready, judged from what observe found of its
//! objects (`Observed::pending`, `readiness_failed`), and when a release
//! in sync is looked at again. Pure.

use std::time::Duration;

use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::observed::Observed;

/// Why the release is not Ready yet, and when to look again.
#[derive(Debug, Clone, PartialEq)]
pub struct NotReady {
    pub reason: Reason,
    pub message: String,
    pub again: Duration,
}

/// When a release in sync is looked at again, and why (`None`: when
/// something changes).
pub type NextLook = Option<(Duration, &'static str)>;

/// How soon a release waiting on objects that no cache follows is looked
/// at again.
const POLL: Duration = Duration::from_secs(5);

/// Not ready while an object failed or `pending` is not empty: a failed
/// object at once (`ReadinessFailed`, with its message); else
/// `Progressing` until `timeout` has passed since the last operation, then
/// `ReadinessTimeout` (reported, not remediated); with when to look again
/// (a workload's change re-queues sooner; objects read by request are read
/// again every few seconds while the release waits).
pub fn verdict(o: &Observed, timeout: Duration) -> Option<NotReady> {
    let status = &o.status;
    if let Some(failed) = &o.readiness_failed {
        return Some(NotReady {
            reason: Reason::ReadinessFailed,
            message: failed.clone(),
            again: POLL * 2,
        });
    }
    if o.pending.is_empty() {
        return None;
    }
    let since = status
        .history
        .first()
        .and_then(|h| chrono::DateTime::parse_from_rfc3339(&h.time).ok())
        .map(|t| {
            (o.now - t.with_timezone(&chrono::Utc))
                .to_std()
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let (reason, again) = if since >= timeout {
        (Reason::ReadinessTimeout, Duration::from_secs(300))
    } else if o.readiness_polled {
        (Reason::Progressing, (timeout - since).min(POLL))
    } else {
        (Reason::Progressing, timeout - since)
    };
    let message = format!(
        "waiting for {} to be ready (spec.wait)",
        o.pending.join(", ")
    );
    Some(NotReady {
        reason,
        message,
        again,
    })
}

/// A release in sync is looked at again when an object of a kind no
/// informer watches is due for its drift look, or the chart's range and
/// newest version are due to be resolved again — whichever comes first.
pub fn next_look(o: &Observed) -> NextLook {
    match (o.drift.poll_after, o.resolve_after) {
        (Some(d), Some(r)) if r < d => Some((r, "up to date; next resolution")),
        (Some(d), _) => Some((d, "up to date; next drift look")),
        (None, Some(r)) => Some((r, "up to date; next resolution")),
        (None, None) => None,
    }
}
