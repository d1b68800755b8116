//! What holds a release back before any input is gathered: suspension, a
//! refused target namespace, an expression that does not compile,
//! `dependsOn` — and how soon a dependency read by request is read again.

use std::time::Duration;

use apis::helmapp::HelmApp;

use crate::delivery::helmapp::decide::conditions::{READY, Reason};
use crate::delivery::helmapp::decide::observed::{Observed, Waiting};
use crate::delivery::helmapp::decide::release_state::ReleaseState;

/// What holds the release back before any input is gathered: suspension,
/// its cluster, a refused target namespace, `dependsOn`.
pub fn held_back(o: &Observed, app: &HelmApp) -> Option<ReleaseState> {
    if app.spec.suspend {
        return Some(ReleaseState::Suspended);
    }
    if let Some(state) = cluster_unavailable(o) {
        return Some(state);
    }
    if let Some(message) = &o.invalid_name {
        return Some(ReleaseState::Refused {
            reason: Reason::InvalidName,
            message: message.clone(),
        });
    }
    if let Some(message) = &o.cross_namespace {
        return Some(ReleaseState::Refused {
            reason: Reason::CrossNamespaceRef,
            message: message.clone(),
        });
    }
    if let Some(message) = &o.invalid_expression {
        return Some(ReleaseState::Refused {
            reason: Reason::InvalidExpression,
            message: message.clone(),
        });
    }
    if let Some(message) = &o.invalid_drift_rule {
        return Some(ReleaseState::Refused {
            reason: Reason::InvalidDriftIgnore,
            message: message.clone(),
        });
    }
    let waiting = o.dependency.as_ref()?;
    Some(waiting_state(o, waiting))
}

/// The release's cluster cannot be used (`kubeConfig`): nothing of the
/// release was read, so nothing may be decided about it — not even by a
/// deletion, which waits for the cluster (docs/remote-clusters.md).
pub fn cluster_unavailable(o: &Observed) -> Option<ReleaseState> {
    let waiting = o.cluster_problem.as_ref()?;
    Some(waiting_state(o, waiting))
}

/// The state of a release that waits for `waiting`: looked at again after
/// a while when `polled`, else when something it watches changes.
fn waiting_state(o: &Observed, waiting: &Waiting) -> ReleaseState {
    if waiting.polled {
        ReleaseState::DependencyPolled {
            reason: waiting.reason,
            message: waiting.message.clone(),
            after: poll_after(waited(o, waiting.reason)),
        }
    } else {
        ReleaseState::Refused {
            reason: waiting.reason,
            message: waiting.message.clone(),
        }
    }
}

/// How long `Ready` has said `reason`.
pub(super) fn waited(o: &Observed, reason: Reason) -> Duration {
    o.status
        .conditions
        .iter()
        .find(|c| c.type_ == READY && c.reason == reason.as_str())
        .and_then(|c| {
            let since = c.last_transition_time.0.as_millisecond();
            u64::try_from(o.now.timestamp_millis() - since).ok()
        })
        .map(Duration::from_millis)
        .unwrap_or_default()
}

/// How soon a dependency read by request is read again: 2 s, growing with
/// the time already waited (a quarter of it), at most a minute.
pub fn poll_after(waited: Duration) -> Duration {
    (waited / 4).clamp(Duration::from_secs(2), Duration::from_secs(60))
}
