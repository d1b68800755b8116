//! The Hosstedproject's status as the inventory writes it: the `Ready`
//! condition with its reasons, and the merge patch that writes it.

use apis::HosstedprojectStatus;

/// Every reason of the `Ready` condition and of the Events the inventory
/// writes (listed in docs/inventory.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Condition (True): every release is reported.
    Reporting,
    /// Condition (False) and Event: `spec.stop` is set.
    Stopped,
    /// Condition (False) and Warning: the API did not answer, or 429/5xx.
    ApiUnavailable,
    /// Condition (False) and Warning: the API refused a payload (4xx).
    ApiRejected,
    /// Event: the cluster was registered.
    ClusterRegistered,
    /// Event: apps were POSTed.
    AppsReported,
    /// Warning: a Helm release's storage could not be decoded.
    InvalidRelease,
    /// Condition (False) and Warning: an older Hosstedproject reports.
    Duplicate,
    /// Warning: the status could not be written (retried).
    StatusWriteFailed,
}

impl Reason {
    /// Every reason, in the order docs/inventory.md lists them.
    pub const ALL: [Reason; 9] = [
        Reason::Reporting,
        Reason::Stopped,
        Reason::ApiUnavailable,
        Reason::ApiRejected,
        Reason::ClusterRegistered,
        Reason::AppsReported,
        Reason::InvalidRelease,
        Reason::Duplicate,
        Reason::StatusWriteFailed,
    ];

    /// The CamelCase string the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Reporting => "Reporting",
            Reason::Stopped => "Stopped",
            Reason::ApiUnavailable => "ApiUnavailable",
            Reason::ApiRejected => "ApiRejected",
            Reason::ClusterRegistered => "ClusterRegistered",
            Reason::AppsReported => "AppsReported",
            Reason::InvalidRelease => "InvalidRelease",
            Reason::Duplicate => "Duplicate",
            Reason::StatusWriteFailed => "StatusWriteFailed",
        }
    }
}

/// Whether the `Ready` condition has this value and reason.
pub fn is_ready(status: &HosstedprojectStatus, value: bool, reason: Reason) -> bool {
    crate::condition::has(
        &status.conditions,
        apis::PROJECT_READY,
        value,
        reason.as_str(),
    )
}

/// Sets the `Ready` condition; `lastTransitionTime` moves only when the
/// value changes (API conventions).
pub fn set_ready(
    status: &mut HosstedprojectStatus,
    value: bool,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
) {
    crate::condition::set(
        &mut status.conditions,
        apis::PROJECT_READY,
        value,
        reason.as_str(),
        message,
        generation,
    );
}

/// The status patch every status write sends (see the runtime's docs).
pub use runtime::status_merge_patch as merge_patch;

/// Now, as `lastReconcileTimestamp` shows it.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde::Serialize;

    /// A value whose serialization fails, as a broken Serialize impl would.
    pub(crate) struct Unserializable;

    impl Serialize for Unserializable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("cannot serialize this"))
        }
    }

    #[test]
    fn every_reason_is_in_the_docs_inventory_table() {
        let readme = include_str!("../../docs/inventory.md");
        for reason in Reason::ALL {
            let row = format!("| `{}` |", reason.as_str());
            assert!(
                readme.contains(&row),
                "docs/inventory.md lacks the row for {row}"
            );
        }
    }

    #[test]
    fn a_status_that_does_not_serialize_is_an_error_not_a_null_status() {
        assert!(merge_patch(&Unserializable, &HosstedprojectStatus::default()).is_err());
    }

    #[test]
    fn what_left_the_status_is_nulled_in_the_patch() {
        let previous = HosstedprojectStatus {
            apps: [
                ("a".into(), "web:1:x".into()),
                ("b".into(), "db:1:y".into()),
            ]
            .into(),
            reconcile_helm_releases: [("a/web".to_string(), "1".to_string())].into(),
            revision: vec![1],
            ..Default::default()
        };
        let status = HosstedprojectStatus {
            apps: [("a".into(), "web:2:x".into())].into(),
            ..Default::default()
        };
        let patch = merge_patch(&status, &previous).unwrap();
        let st = &patch["status"];
        assert_eq!(st["apps"]["a"], "web:2:x");
        assert!(st["apps"].as_object().unwrap()["b"].is_null());
        assert!(st.as_object().unwrap()["reconcileHelmReleases"].is_null());
        assert!(st.as_object().unwrap()["revision"].is_null());
        assert!(
            !st.as_object().unwrap().contains_key("helmStatus"),
            "never there"
        );
    }

    #[test]
    fn the_transition_time_moves_only_when_the_value_does() {
        let mut s = HosstedprojectStatus::default();
        set_ready(&mut s, false, Reason::ApiUnavailable, "down", Some(1));
        let first = s.conditions[0].last_transition_time.clone();
        std::thread::sleep(std::time::Duration::from_millis(5));
        set_ready(&mut s, false, Reason::ApiRejected, "refused", Some(1));
        assert_eq!(s.conditions[0].last_transition_time, first);
        assert!(is_ready(&s, false, Reason::ApiRejected));
        set_ready(&mut s, true, Reason::Reporting, "ok", Some(2));
        assert_ne!(s.conditions[0].last_transition_time, first);
        assert_eq!(s.conditions.len(), 1);
    }
}
