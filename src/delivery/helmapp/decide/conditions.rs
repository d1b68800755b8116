//! What delivery says about its objects: the one [`Reason`] enum of every
//! delivery controller (conditions and Events), and the HelmApp status
//! helpers (conditions, history).

use apis::helmapp::{HelmAppStatus, HistoryAction, HistoryEntry, HistoryResult};

pub use crate::delivery::reason::Reason;

/// The condition types of a HelmApp.
pub const READY: &str = "Ready";
pub const RELEASED: &str = "Released";
pub const DRIFTED: &str = "Drifted";
/// With `spec.approval: manual`: `False` while a change waits.
pub const APPROVED: &str = "Approved";

/// How many operations `status.history` keeps.
const HISTORY: usize = 5;

/// Whether condition `type_` is `True`.
pub fn is_true(status: &HelmAppStatus, type_: &str) -> bool {
    crate::condition::is_true(&status.conditions, type_)
}

/// Whether condition `type_` has this value and reason.
pub fn has(status: &HelmAppStatus, type_: &str, value: bool, reason: Reason) -> bool {
    crate::condition::has(&status.conditions, type_, value, reason.as_str())
}

/// Sets condition `type_` (for the status's `observedGeneration`).
pub fn set(status: &mut HelmAppStatus, type_: &str, value: bool, reason: Reason, message: &str) {
    let generation = status.observed_generation;
    crate::condition::set(
        &mut status.conditions,
        type_,
        value,
        reason.as_str(),
        message,
        generation,
    );
}

/// Records one operation, newest first, keeping the last [`HISTORY`].
pub fn push_history(
    status: &mut HelmAppStatus,
    action: HistoryAction,
    revision: i64,
    version: &str,
    hash: &str,
    result: HistoryResult,
) {
    status.history.insert(
        0,
        HistoryEntry {
            action,
            revision,
            chart_version: version.into(),
            config_hash: hash.into(),
            result,
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            release_digest: String::new(),
            duration: String::new(),
        },
    );
    status.history.truncate(HISTORY);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_reads_as_its_name_and_a_condition_keeps_its_transition_time() {
        assert_eq!(Reason::CRDsFailed.to_string(), "CRDsFailed");
        assert_eq!(Reason::UpToDate.as_str(), "UpToDate");
        let mut status = HelmAppStatus::default();
        set(&mut status, READY, false, Reason::Progressing, "a");
        let first = status.conditions[0].last_transition_time.clone();
        set(&mut status, READY, false, Reason::ReadinessTimeout, "b");
        assert_eq!(status.conditions[0].last_transition_time, first);
        assert!(has(&status, READY, false, Reason::ReadinessTimeout));
        assert!(!is_true(&status, READY));
        for i in 0..7 {
            push_history(
                &mut status,
                HistoryAction::Upgrade,
                i,
                "1.0.0",
                "h",
                HistoryResult::Succeeded,
            );
        }
        assert_eq!(status.history.len(), HISTORY);
        assert_eq!(status.history[0].revision, 6);
    }
}
