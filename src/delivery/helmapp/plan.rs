//! Plan: the next step for a release in a given state (pure; unit-tested
//! as a table). `super::act` does it; nothing there decides what comes
//! next.

use std::time::Duration;

use apis::helmapp::{DriftMode, HelmApp, OnFailure};

use super::state::ReleaseState;
use super::status::Reason;

/// One thing to do about a HelmApp's release.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `helm upgrade --install` of a release that does not exist.
    Install,
    /// `helm upgrade --install` of a release that does.
    Upgrade,
    /// The same inputs upgraded again: helm recreates what was deleted.
    Repair { objects: Vec<String> },
    /// Edited fields put back by a direct apply of the objects' manifest
    /// (no new revision).
    PutBack { objects: Vec<String> },
    /// Mark a stuck release `failed` in Helm's storage, then plan again.
    Unlock { message: String },
    /// `helm uninstall`, then let the HelmApp go (it is being deleted).
    Uninstall,
    /// Let the HelmApp go without touching the release.
    LetGo,
    /// Let the HelmApp go, leaving a release whose storage was changed by
    /// someone else as it is, with a Warning saying so.
    Abandon { message: String },
    /// Report readiness of a release in sync.
    Done { revision: Option<i64> },
    /// `Ready=False` with `reason`, and look again after `after` (an Event
    /// when the reason is new).
    Wait {
        reason: Reason,
        message: String,
        after: Duration,
    },
    /// Look again after `after`, saying nothing (a helm run of ours is on
    /// the release).
    Requeue { after: Duration, why: &'static str },
    /// `Ready=False` with `reason`; a Warning Event when new and `warn`;
    /// retried with backoff when `retry`, else until something changes.
    Refuse {
        reason: Reason,
        message: String,
        warn: bool,
        retry: bool,
    },
    /// Show the change that waits for approval (computed once per
    /// configuration) and run nothing; `stale`: an approval of another
    /// configuration, said so.
    AwaitApproval {
        hash: String,
        chart_version: String,
        stale: Option<String>,
    },
    /// Nothing runs, nothing changes.
    Idle { why: &'static str },
}

impl Step {
    /// Whether this step runs (or finds running) the configuration the
    /// spec asks for: after it, nothing waits for approval.
    pub fn settles_approval(&self) -> bool {
        matches!(
            self,
            Step::Install
                | Step::Upgrade
                | Step::Repair { .. }
                | Step::PutBack { .. }
                | Step::Done { .. }
        )
    }
}

/// How long to wait for a helm run of ours to let go of a release.
pub const HELM_HOLDS: Duration = Duration::from_secs(5);

/// The next step for a release in `state`.
pub fn next(state: &ReleaseState, app: &HelmApp) -> Step {
    let refuse = |reason, message: &String| Step::Refuse {
        reason,
        message: message.clone(),
        warn: true,
        retry: false,
    };
    match state {
        ReleaseState::Deleting { uninstall: true } => Step::Uninstall,
        ReleaseState::Deleting { uninstall: false } => Step::LetGo,
        ReleaseState::Tampered {
            message,
            deleting: true,
        } => Step::Abandon {
            message: message.clone(),
        },
        ReleaseState::Tampered {
            message,
            deleting: false,
        } => refuse(Reason::StorageTampered, message),
        ReleaseState::Suspended => Step::Refuse {
            reason: Reason::Suspended,
            message: "spec.suspend is true: no helm operation runs".into(),
            warn: false,
            retry: false,
        },
        ReleaseState::Refused { reason, message } => refuse(*reason, message),
        ReleaseState::ChartUnavailable {
            reason,
            message,
            retry,
        } => Step::Refuse {
            reason: *reason,
            message: message.clone(),
            warn: true,
            retry: *retry,
        },
        ReleaseState::FetchingChart => Step::Idle {
            why: "fetching the chart; its end re-queues",
        },
        ReleaseState::HeldByHelm => Step::Requeue {
            after: HELM_HOLDS,
            why: "a helm run holds the release",
        },
        ReleaseState::Locked { message, remaining } => Step::Wait {
            reason: Reason::ReleaseLocked,
            message: message.clone(),
            after: *remaining,
        },
        ReleaseState::Stuck { message } => Step::Unlock {
            message: message.clone(),
        },
        ReleaseState::OwnedByOther { message } => refuse(Reason::ReleaseOwnedByOther, message),
        ReleaseState::NotOurs { message } => refuse(Reason::ReleaseNotOwned, message),
        ReleaseState::AdoptionRefused { message } => refuse(Reason::AdoptionRefused, message),
        ReleaseState::InSync { revision } => Step::Done {
            revision: *revision,
        },
        ReleaseState::Drifted { objects } if app.spec.drift_mode() != DriftMode::Disabled => {
            Step::Repair {
                objects: objects.clone(),
            }
        }
        ReleaseState::FieldsDrifted { objects } => Step::PutBack {
            objects: objects.clone(),
        },
        ReleaseState::Drifted { .. } => Step::Done { revision: None },
        ReleaseState::BackingOff { remaining } => Step::Requeue {
            after: *remaining,
            why: "backing off after a failed attempt",
        },
        ReleaseState::RetriesExhausted => Step::Idle {
            why: "retries exhausted: waiting for a change",
        },
        ReleaseState::AwaitingApproval { .. } => awaiting(state),
        ReleaseState::Absent => Step::Install,
        ReleaseState::OutOfSync { .. } => Step::Upgrade,
    }
}

/// The step of [`ReleaseState::AwaitingApproval`].
fn awaiting(state: &ReleaseState) -> Step {
    match state {
        ReleaseState::AwaitingApproval {
            hash,
            chart_version,
            stale,
        } => Step::AwaitApproval {
            hash: hash.clone(),
            chart_version: chart_version.clone(),
            stale: stale.clone(),
        },
        _ => Step::Idle {
            why: "nothing awaits approval",
        },
    }
}

/// What follows a failed install or upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// A failed install: nothing to roll back to, so the failed release is
    /// uninstalled before the next try.
    UninstallAndRetry,
    /// Retries left: try again with backoff.
    Retry,
    /// Retries spent: apply `onFailure` once, then run nothing more.
    Remediate(OnFailure),
}

/// After attempt number `failures` of `app` failed (`install`: there was
/// no release before it). `remediation.retries: -1` retries for ever (the
/// controller's backoff spaces the attempts).
pub fn after_failure(install: bool, failures: i32, app: &HelmApp) -> AfterFailure {
    let retries = app.spec.remediation.retries;
    if install {
        AfterFailure::UninstallAndRetry
    } else if retries == -1 || failures <= retries.max(0) {
        AfterFailure::Retry
    } else {
        AfterFailure::Remediate(app.spec.remediation.on_failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(edit: impl FnOnce(&mut HelmApp)) -> HelmApp {
        let mut a: HelmApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": { "chart": { "path": "web" } }
        }))
        .expect("a HelmApp");
        edit(&mut a);
        a
    }

    #[test]
    fn each_state_has_its_step() {
        let plain = app(|_| {});
        let m = || "m".to_string();
        let rows: Vec<(ReleaseState, Step)> = vec![
            (ReleaseState::Deleting { uninstall: true }, Step::Uninstall),
            (ReleaseState::Deleting { uninstall: false }, Step::LetGo),
            (
                ReleaseState::Tampered {
                    message: m(),
                    deleting: true,
                },
                Step::Abandon { message: m() },
            ),
            (
                ReleaseState::Tampered {
                    message: m(),
                    deleting: false,
                },
                Step::Refuse {
                    reason: Reason::StorageTampered,
                    message: m(),
                    warn: true,
                    retry: false,
                },
            ),
            (ReleaseState::Absent, Step::Install),
            (
                ReleaseState::OutOfSync {
                    why: super::super::state::Why::Changed,
                },
                Step::Upgrade,
            ),
            (
                ReleaseState::Stuck { message: m() },
                Step::Unlock { message: m() },
            ),
            (
                ReleaseState::HeldByHelm,
                Step::Requeue {
                    after: HELM_HOLDS,
                    why: "a helm run holds the release",
                },
            ),
            (
                ReleaseState::Locked {
                    message: m(),
                    remaining: Duration::from_secs(7),
                },
                Step::Wait {
                    reason: Reason::ReleaseLocked,
                    message: m(),
                    after: Duration::from_secs(7),
                },
            ),
            (
                ReleaseState::InSync { revision: Some(3) },
                Step::Done { revision: Some(3) },
            ),
            (
                ReleaseState::Drifted {
                    objects: vec!["Service apps/web".into()],
                },
                Step::Repair {
                    objects: vec!["Service apps/web".into()],
                },
            ),
            (
                ReleaseState::RetriesExhausted,
                Step::Idle {
                    why: "retries exhausted: waiting for a change",
                },
            ),
            (
                ReleaseState::OwnedByOther { message: m() },
                Step::Refuse {
                    reason: Reason::ReleaseOwnedByOther,
                    message: m(),
                    warn: true,
                    retry: false,
                },
            ),
            (
                ReleaseState::NotOurs { message: m() },
                Step::Refuse {
                    reason: Reason::ReleaseNotOwned,
                    message: m(),
                    warn: true,
                    retry: false,
                },
            ),
            (
                ReleaseState::ChartUnavailable {
                    reason: Reason::ChartUnavailable,
                    message: m(),
                    retry: true,
                },
                Step::Refuse {
                    reason: Reason::ChartUnavailable,
                    message: m(),
                    warn: true,
                    retry: true,
                },
            ),
            (
                ReleaseState::FetchingChart,
                Step::Idle {
                    why: "fetching the chart; its end re-queues",
                },
            ),
            (
                ReleaseState::ChartUnavailable {
                    reason: Reason::ChartSourceRefused,
                    message: m(),
                    retry: false,
                },
                Step::Refuse {
                    reason: Reason::ChartSourceRefused,
                    message: m(),
                    warn: true,
                    retry: false,
                },
            ),
            (
                ReleaseState::Refused {
                    reason: Reason::DependencyNotReady,
                    message: m(),
                },
                Step::Refuse {
                    reason: Reason::DependencyNotReady,
                    message: m(),
                    warn: true,
                    retry: false,
                },
            ),
        ];
        for (state, step) in rows {
            assert_eq!(next(&state, &plain), step, "{state:?}");
        }
        let Step::Refuse { reason, warn, .. } = next(&ReleaseState::Suspended, &plain) else {
            panic!("suspended refuses");
        };
        assert_eq!((reason, warn), (Reason::Suspended, false), "no Event");
        let no_repair = app(|a| a.spec.drift_repair = false);
        let drifted = ReleaseState::Drifted {
            objects: vec!["Service apps/web".into()],
        };
        assert_eq!(next(&drifted, &no_repair), Step::Done { revision: None });
        let disabled = app(|a| a.spec.drift.mode = DriftMode::Disabled);
        assert_eq!(next(&drifted, &disabled), Step::Done { revision: None });
        let warn = app(|_| {});
        assert!(
            matches!(next(&drifted, &warn), Step::Repair { .. }),
            "a deletion is put back in warn mode"
        );
        let edited = ReleaseState::FieldsDrifted {
            objects: vec!["ConfigMap apps/web (/data/a)".into()],
        };
        assert_eq!(
            next(&edited, &warn),
            Step::PutBack {
                objects: vec!["ConfigMap apps/web (/data/a)".into()]
            }
        );
    }

    #[test]
    fn a_failure_is_retried_until_the_retries_are_spent_then_remediated_once() {
        let three = app(|_| {});
        assert_eq!(
            after_failure(true, 1, &three),
            AfterFailure::UninstallAndRetry
        );
        for failures in 1..=3 {
            assert_eq!(after_failure(false, failures, &three), AfterFailure::Retry);
        }
        assert_eq!(
            after_failure(false, 4, &three),
            AfterFailure::Remediate(OnFailure::Rollback)
        );
        let none = app(|a| {
            a.spec.remediation.retries = -2;
            a.spec.remediation.on_failure = OnFailure::Uninstall;
        });
        assert_eq!(
            after_failure(false, 1, &none),
            AfterFailure::Remediate(OnFailure::Uninstall),
            "a count below -1 (the schema refuses it) is no retry"
        );
        let forever = app(|a| a.spec.remediation.retries = -1);
        for failures in [1, 4, 1000] {
            assert_eq!(
                after_failure(false, failures, &forever),
                AfterFailure::Retry,
                "-1 retries for ever"
            );
        }
    }
}
