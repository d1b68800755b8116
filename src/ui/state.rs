//! The state an app is shown in, decided from its `Ready` condition: the
//! overview's groups, failing first.

use apis::helmapp::HelmApp;

/// The overview's groups, in the order shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    /// `Ready=False` for a reason waiting will not mend.
    Failing,
    /// A change computed and waiting for `hossted.com/approve`.
    AwaitingApproval,
    /// Waiting for something else: a dependency, a change window, a lock.
    Waiting,
    /// `Ready=Unknown` (or no condition yet): helm or readiness under way.
    Progressing,
    Suspended,
    Ready,
}

impl State {
    pub const ALL: [State; 6] = [
        State::Failing,
        State::AwaitingApproval,
        State::Waiting,
        State::Progressing,
        State::Suspended,
        State::Ready,
    ];

    /// The `data-state` value and CSS class.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Failing => "failing",
            State::AwaitingApproval => "awaiting-approval",
            State::Waiting => "waiting",
            State::Progressing => "progressing",
            State::Suspended => "suspended",
            State::Ready => "ready",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            State::Failing => "Failing",
            State::AwaitingApproval => "Awaiting approval",
            State::Waiting => "Waiting",
            State::Progressing => "Progressing",
            State::Suspended => "Suspended",
            State::Ready => "Ready",
        }
    }
}

/// Reasons of a `Ready=False` that are waiting, not failing.
const WAITING: &[&str] = &[
    "DependencyNotReady",
    "DependencyNotFound",
    "OutsideChangeWindow",
    "ReleaseLocked",
    "Progressing",
];

/// The most urgent failing reasons, shown first within `Failing`: the
/// ones an operator of the cluster must look at (a tenant cannot mend a
/// refusal or a tampered storage), then exhausted retries.
const FIRST: &[&str] = &[
    "Forbidden",
    "StorageTampered",
    "RetriesExhausted",
    "MissingRollbackTarget",
    "VerificationFailed",
];

/// `Ready`'s (status, reason, message), `("Unknown", "", "")` when absent.
pub fn ready(app: &HelmApp) -> (&str, &str, &str) {
    app.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
        .unwrap_or(("Unknown", "", ""))
}

pub fn state_of(app: &HelmApp) -> State {
    let (status, reason, _) = ready(app);
    if app.spec.suspend || reason == "Suspended" {
        return State::Suspended;
    }
    if app
        .status
        .as_ref()
        .is_some_and(|s| s.pending_change.is_some())
        || reason == "AwaitingApproval"
    {
        return State::AwaitingApproval;
    }
    match status {
        "True" => State::Ready,
        "False" if WAITING.contains(&reason) => State::Waiting,
        "False" => State::Failing,
        _ => State::Progressing,
    }
}

/// Order within a group: the reasons of [`FIRST`] first, in that order.
pub fn urgency(app: &HelmApp) -> usize {
    let (_, reason, _) = ready(app);
    FIRST
        .iter()
        .position(|r| *r == reason)
        .unwrap_or(FIRST.len())
}

/// A newer version than the one installed, when the source offers one
/// (as `kubectl hossted get`'s UPDATE column decides it).
pub fn update_of(app: &HelmApp) -> Option<&str> {
    let s = app.status.as_ref()?;
    crate::delivery::helmapp::observe::updates::newer(s).then_some(s.latest_available.as_str())
}

/// What the chart is called on a page ([`HelmApp::chart_label`]).
pub fn chart_label(app: &HelmApp) -> &str {
    app.chart_label()
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::{HelmAppSpec, HelmAppStatus, PendingChange};

    fn app(status: &str, reason: &str) -> HelmApp {
        let mut a = HelmApp::new("a", HelmAppSpec::default());
        a.status = Some(HelmAppStatus {
            conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: reason.into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ),
                observed_generation: None,
            }],
            ..Default::default()
        });
        a
    }

    #[test]
    fn states_come_from_ready_and_the_pending_change() {
        assert_eq!(state_of(&app("False", "StorageTampered")), State::Failing);
        assert_eq!(
            state_of(&app("False", "OutsideChangeWindow")),
            State::Waiting
        );
        assert_eq!(state_of(&app("True", "UpToDate")), State::Ready);
        assert_eq!(state_of(&app("Unknown", "Progressing")), State::Progressing);
        assert_eq!(state_of(&app("False", "Suspended")), State::Suspended);
        let mut pending = app("False", "AwaitingApproval");
        assert_eq!(state_of(&pending), State::AwaitingApproval);
        pending.status.as_mut().unwrap().conditions.clear();
        pending.status.as_mut().unwrap().pending_change = Some(PendingChange::default());
        assert_eq!(state_of(&pending), State::AwaitingApproval);
        assert!(urgency(&app("False", "Forbidden")) < urgency(&app("False", "InstallFailed")));
    }
}
