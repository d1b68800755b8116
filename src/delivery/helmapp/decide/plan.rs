//! Plan: the next step for a release in a given state (pure; unit-tested
//! as a table). `super::act` does it; nothing there decides what comes
//! next.

use std::time::Duration;

use apis::helmapp::{DriftMode, HelmApp};

use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::failure::{
    AfterFailure, Remedy, after_failure, remedy, remedy_after,
};
use crate::delivery::helmapp::decide::observed::{Observed, Rendering, RunKind, StorageRecheck};
use crate::delivery::helmapp::decide::ready::{self, NextLook, NotReady};
use crate::delivery::helmapp::decide::refusal;
use crate::delivery::helmapp::decide::state::{Change, ReleaseState};

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
    /// Dry-run this configuration against the newest stored revision,
    /// which our own helm may have made unrecorded, then plan again.
    RenderOwnRun { revision: i64 },
    /// Record the storage as after a run of ours (the newest revision
    /// proven ours), then plan again.
    RecordOwnRun { revision: i64 },
    /// Dry-run the adopting upgrade against the live manifest, then plan
    /// again.
    RenderAdoption,
    /// Take over a release as it is: its storage labelled ours and
    /// recorded, no helm run.
    TakeOver { revision: i64 },
    /// Mark a stuck release `failed` in Helm's storage, then plan again.
    Unlock { message: String },
    /// `helm uninstall`, then let the HelmApp go (it is being deleted).
    Uninstall,
    /// Let the HelmApp go without touching the release.
    RemoveFinalizer,
    /// Let the HelmApp go, its release going with its namespace (a Normal
    /// Event says so).
    LetGoWithNamespace,
    /// Let the HelmApp go, leaving a release whose storage was changed by
    /// someone else as it is, with a Warning saying so.
    LeaveTampered { message: String },
    /// Report a release in sync: `Ready` unless `not_ready`; looked at
    /// again after `not_ready`'s wait, else at `next_look`.
    ReportInSync {
        revision: Option<i64>,
        not_ready: Option<NotReady>,
        next_look: NextLook,
    },
    /// `Ready=False` with `reason`, and look again after `after` (an Event
    /// when the reason is new).
    RecheckLater {
        reason: Reason,
        message: String,
        after: Duration,
    },
    /// Look again after `after`, saying nothing (a helm run of ours is on
    /// the release).
    QuietRecheck { after: Duration, why: &'static str },
    /// `spec.suspend`: `Ready=False, Suspended` — a chosen pause, said
    /// without an Event; looked at again when the HelmApp changes.
    ReportSuspended,
    /// `Ready=False` with `reason`, a Warning Event when the reason is new;
    /// looked at again when something changes — no retry fixes it.
    RefuseUntilChanged { reason: Reason, message: String },
    /// `Ready=False` and `Released=False`, `Forbidden`: helm's identity
    /// may not do what the chart needs; a run of the same `inputs`
    /// (`refusal::inputs`) tried again after `after` (RBAC is not
    /// watched), and at once when they change (`refusal::waiting`).
    Forbidden {
        message: String,
        after: Duration,
        inputs: String,
    },
    /// A refusal waited out (`refusal::waiting`): said again as it was,
    /// helm not started, and looked at again after `after` — the end of
    /// the wait as the refusal set it, never moved by this reconcile.
    StillRefused { message: String, after: Duration },
    /// Show the change that waits for approval (computed once per
    /// configuration) and run nothing; `stale`: an approval of another
    /// configuration, said so.
    AwaitApproval {
        hash: String,
        chart_version: String,
        stale: Option<String>,
    },
    /// `Released=False, OutsideChangeWindow` saying when the windows open
    /// (`Ready` as it is), and look again then.
    WaitForWindow {
        change: Change,
        opens: Option<chrono::DateTime<chrono::Utc>>,
        after: Duration,
    },
    /// `helm test` of the revision a run of this reconcile made; a
    /// failure returns the status to `before`.
    Test {
        run: RunKind,
        revision: i64,
        before: i64,
    },
    /// Record what the runs of this reconcile left — Helm's storage and
    /// the objects of the revision deployed — before the report, so that
    /// `wait` judges those objects now and the report is the run's one
    /// status write, `Ready` included when they are (then plan again).
    RecordRun,
    /// Report the revision a run of this reconcile made: done, or with
    /// `wait`, `not_ready` (`Progressing` until its objects are judged).
    ReportReleased {
        revision: i64,
        not_ready: Option<NotReady>,
    },
    /// A failed install or upgrade to be tried again: `reason` on Ready
    /// and Released, a Warning Event, and act's `Outcome::Retry` (the
    /// one carrier of a retry: the controller backs off).
    RecordFailure { reason: Reason, message: String },
    /// A failed install: uninstalled (nothing to roll back to), then
    /// retried with backoff.
    UninstallFailedInstall { message: String },
    /// The chart's name changed (`from` → `to`): uninstall the release,
    /// then look again — the next plan installs the new chart.
    Reinstall { from: String, to: String },
    /// A remedy not run: Helm's storage changed while the failed run ran
    /// (`refused` says how) — recorded as refused, `StorageTampered`.
    RemedyRefused {
        remedy: Remedy,
        run: RunKind,
        failure: String,
        refused: String,
    },
    /// A remedy not run: Helm's storage could not be checked again after
    /// the failed run (`why`) — recorded as failed; the failure is then
    /// reported as if the remedy had run.
    RemedySkipped {
        remedy: Remedy,
        run: RunKind,
        failure: String,
        why: String,
    },
    /// Retries spent: apply `remedy` once, then nothing runs until the
    /// configuration or `hossted.com/reconcile-at` changes.
    Remediate {
        remedy: Remedy,
        run: RunKind,
        message: String,
    },
    /// Nothing runs, nothing changes.
    Nothing { why: &'static str },
}

impl Step {
    /// Whether this starts helm as the HelmApp's identity — what RBAC
    /// can refuse (`RunEnded::Forbidden`).
    pub fn may_be_refused(&self) -> bool {
        matches!(
            self,
            Step::Install
                | Step::Upgrade
                | Step::Repair { .. }
                | Step::Reinstall { .. }
                | Step::Uninstall
        )
    }

    /// Whether this step runs (or finds running) the configuration the
    /// spec asks for: after it, nothing waits for approval.
    pub fn settles_approval(&self) -> bool {
        matches!(
            self,
            Step::Install
                | Step::Upgrade
                | Step::Repair { .. }
                | Step::PutBack { .. }
                | Step::ReportInSync { .. }
        )
    }
}

/// What a run the API's outage interrupted says.
pub const OUTAGE: &str = "helm failed and the API server does not answer: waits for it";

/// How long to wait for a helm run of ours to let go of a release.
pub const HELM_HOLDS: Duration = Duration::from_secs(5);

/// The first look again at a refusal that trying again may fix (a chart
/// source down, RBAC granted later) …
const REFUSED_FIRST: Duration = Duration::from_secs(2);
/// … and the longest wait between two.
const REFUSED_MOST: Duration = Duration::from_secs(300);

/// When to try again after a refusal `Ready` has said for `waited`: as
/// long again (the waits double from 2 s, capped at 5 min) — never the
/// work queue's milliseconds, which would start helm ten times in three
/// seconds for a refusal no retry fixes soon.
pub fn refused_again_after(waited: Duration) -> Duration {
    waited.clamp(REFUSED_FIRST, REFUSED_MOST)
}

/// A chart that cannot be had: warned, looked at again (with backoff) when
/// trying again may help.
fn chart_refused(reason: Reason, message: &str, retry: Option<Duration>) -> Step {
    let message = message.to_string();
    match retry {
        Some(waited) => Step::RecheckLater {
            reason,
            message,
            after: refused_again_after(waited),
        },
        None => Step::RefuseUntilChanged { reason, message },
    }
}

/// A release in sync, reported: its readiness judged from `o`.
fn in_sync(revision: Option<i64>, o: &Observed) -> Step {
    Step::ReportInSync {
        revision,
        not_ready: ready::verdict(o, o.timeout),
        next_look: ready::next_look(o),
    }
}

/// The next step for a release in `state`; `o` is what it was decided
/// from (what a report says of readiness is read from it). A helm run
/// refused before waits out its refusal unless its inputs changed
/// ([`refusal::waiting`]): said again, helm not started.
pub fn next(state: &ReleaseState, o: &Observed, app: &HelmApp) -> Step {
    let step = chosen(state, o, app);
    match refusal::waiting(o, app) {
        Some(refused) if step.may_be_refused() => Step::StillRefused {
            message: refused.message.clone(),
            after: refused.again_in,
        },
        _ => step,
    }
}

/// Whether what this process remembers of a HelmApp's refusals
/// (`Observed::refused`) is let go after a reconcile whose last step was
/// `last`: once a helm run ended otherwise than refused, or the release
/// is reported in sync. A reconcile that started no helm — a dependency
/// waited for, a change window, a chart fetch, a busy slot — keeps it:
/// the wait holds through them.
pub fn refusals_let_go(last: &Step, o: &Observed) -> bool {
    use crate::delivery::helmapp::decide::observed::RunEnded;
    let ran_unrefused =
        o.done.helm_ran && !matches!(o.done.run_ended, Some(RunEnded::Forbidden { .. }));
    ran_unrefused || matches!(last, Step::ReportInSync { .. })
}

/// The step `state` calls for, refusals aside.
fn chosen(state: &ReleaseState, o: &Observed, app: &HelmApp) -> Step {
    let refuse = |reason, message: &String| Step::RefuseUntilChanged {
        reason,
        message: message.clone(),
    };
    match state {
        ReleaseState::Deleting { uninstall: true } => Step::Uninstall,
        ReleaseState::Deleting { uninstall: false } => Step::RemoveFinalizer,
        ReleaseState::GoesWithNamespace => Step::LetGoWithNamespace,
        ReleaseState::Tampered {
            message,
            deleting: true,
        } => Step::LeaveTampered {
            message: message.clone(),
        },
        ReleaseState::Tampered {
            message,
            deleting: false,
        } => refuse(Reason::StorageTampered, message),
        ReleaseState::Suspended => Step::ReportSuspended,
        ReleaseState::Refused { reason, message } => refuse(*reason, message),
        ReleaseState::DependencyPolled {
            reason,
            message,
            after,
        } => Step::RecheckLater {
            reason: *reason,
            message: message.clone(),
            after: *after,
        },
        ReleaseState::ChartUnavailable {
            reason,
            message,
            retry,
        } => chart_refused(*reason, message, *retry),
        ReleaseState::Forbidden { message, waited } => Step::Forbidden {
            message: message.clone(),
            after: refused_again_after(*waited),
            inputs: refusal::inputs(o, app),
        },
        ReleaseState::FetchingChart => Step::Nothing {
            why: "fetching the chart; its end re-queues",
        },
        ReleaseState::HeldByHelm => Step::QuietRecheck {
            after: HELM_HOLDS,
            why: "a helm run holds the release",
        },
        // Counted nowhere: no helm ran. An API write that failed is tried
        // again with backoff; inputs that cannot be prepared wait for a
        // change.
        ReleaseState::NotStarted {
            reason,
            message,
            retry: true,
        } => Step::RecordFailure {
            reason: *reason,
            message: message.clone(),
        },
        ReleaseState::NotStarted {
            reason,
            message,
            retry: false,
        } => refuse(*reason, message),
        // Parked by the reachability gate: its return re-queues.
        ReleaseState::WaitingForApi => Step::Nothing { why: OUTAGE },
        ReleaseState::UninstallFailed { message } => Step::RecordFailure {
            reason: Reason::UninstallFailed,
            message: message.clone(),
        },
        ReleaseState::Locked { message, remaining } => Step::RecheckLater {
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
        ReleaseState::OwnRunToRender { revision } => Step::RenderOwnRun {
            revision: *revision,
        },
        ReleaseState::OwnRunRendered { revision } => Step::RecordOwnRun {
            revision: *revision,
        },
        ReleaseState::AdoptionToRender => Step::RenderAdoption,
        ReleaseState::AdoptAsIs { revision } => Step::TakeOver {
            revision: *revision,
        },
        ReleaseState::InSync { revision } => in_sync(*revision, o),
        ReleaseState::Drifted { objects } if app.spec.drift_mode() != DriftMode::Disabled => {
            Step::Repair {
                objects: objects.clone(),
            }
        }
        ReleaseState::FieldsDrifted { objects } => Step::PutBack {
            objects: objects.clone(),
        },
        ReleaseState::Drifted { .. } => in_sync(None, o),
        ReleaseState::BackingOff { remaining } => Step::QuietRecheck {
            after: *remaining,
            why: "backing off after a failed attempt",
        },
        ReleaseState::RetriesExhausted => Step::Nothing {
            why: "retries exhausted: waiting for a change",
        },
        ReleaseState::AwaitingApproval { .. } => awaiting(state),
        ReleaseState::OutsideWindow {
            change,
            opens,
            after,
        } => Step::WaitForWindow {
            change: *change,
            opens: *opens,
            after: *after,
        },
        ReleaseState::Absent => Step::Install,
        ReleaseState::OutOfSync { .. } => Step::Upgrade,
        ReleaseState::ChartRenamed { from, to } => Step::Reinstall {
            from: from.clone(),
            to: to.clone(),
        },
        ReleaseState::Untested {
            run,
            revision,
            before,
        } => Step::Test {
            run: *run,
            revision: *revision,
            before: *before,
        },
        ReleaseState::JustReleased { .. } if !o.done.recorded => Step::RecordRun,
        ReleaseState::JustReleased { revision, .. } => Step::ReportReleased {
            revision: *revision,
            not_ready: app
                .spec
                .wait
                .then(|| ready::verdict(o, o.timeout))
                .flatten(),
        },
        ReleaseState::RunFailed {
            run,
            message,
            failures,
            last_succeeded,
        } => after_run_failed(*run, message, (*failures, *last_succeeded), app, o),
    }
}

/// The step after a run of `run` failed for the `failures`-th time, the
/// status's `last_succeeded` revision the rollback target.
fn after_run_failed(
    run: RunKind,
    message: &str,
    (failures, last_succeeded): (i32, i64),
    app: &HelmApp,
    o: &Observed,
) -> Step {
    let message = message.to_string();
    if let Some(remedy) = remedy_after(run, failures, last_succeeded, app)
        && remedy.runs_helm()
    {
        // The failed run's helm ran for a while: no remedy runs on storage
        // changed meanwhile, or not read again since.
        match &o.storage_recheck {
            Some(StorageRecheck::Trusted) => {}
            Some(StorageRecheck::OwnRunUnproven { revision }) => {
                let revision = *revision;
                return match o.done.own_render_of(revision) {
                    None => Step::RenderOwnRun { revision },
                    Some(Rendering::Same) => Step::RecordOwnRun { revision },
                    Some(Rendering::Differs) => Step::RemedyRefused {
                        remedy,
                        run,
                        failure: message,
                        refused: format!(
                            "{remedy} not run: revision {revision} of release {}, where the failed run would have written, is not what this configuration renders: someone else wrote it",
                            o.target.key()
                        ),
                    },
                };
            }
            Some(StorageRecheck::Untrusted(why)) => {
                return Step::RemedyRefused {
                    remedy,
                    run,
                    failure: message,
                    refused: format!("{remedy} not run: {why}"),
                };
            }
            Some(StorageRecheck::Unreadable(why)) => {
                return Step::RemedySkipped {
                    remedy,
                    run,
                    failure: message,
                    why: format!(
                        "{remedy} skipped: Helm's storage could not be read to check it ({why})"
                    ),
                };
            }
            None => {
                return Step::RemedySkipped {
                    remedy,
                    run,
                    failure: message,
                    why: format!(
                        "{remedy} skipped: Helm's storage was not read again after the run"
                    ),
                };
            }
        }
    }
    match after_failure(run == RunKind::Install, failures, app) {
        AfterFailure::UninstallAndRetry => Step::UninstallFailedInstall { message },
        AfterFailure::Backoff => Step::RecordFailure {
            reason: match run {
                RunKind::Install => Reason::InstallFailed,
                _ => Reason::UpgradeFailed,
            },
            message,
        },
        AfterFailure::SameActionAfter(interval) => Step::RecordFailure {
            reason: match run {
                RunKind::Install => Reason::InstallFailed,
                _ => Reason::UpgradeFailed,
            },
            message: format!("{message}; RetryOnFailure: tried again after {interval:?}"),
        },
        AfterFailure::Remediate(on_failure) => Step::Remediate {
            remedy: remedy(on_failure, last_succeeded),
            run,
            message,
        },
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
        _ => Step::Nothing {
            why: "nothing awaits approval",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::delivery::helmapp::decide::state::tests::observed;
    use apis::helmapp::OnFailure;

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

    /// One of every state. The match makes a new variant a compile error
    /// here until it is listed, so the properties below cover it.
    fn every_state() -> Vec<ReleaseState> {
        use ReleaseState as S;
        let m = || "m".to_string();
        let all = vec![
            S::Deleting { uninstall: true },
            S::Deleting { uninstall: false },
            S::GoesWithNamespace,
            S::Tampered {
                message: m(),
                deleting: true,
            },
            S::Tampered {
                message: m(),
                deleting: false,
            },
            S::Suspended,
            S::Refused {
                reason: Reason::DependencyNotReady,
                message: m(),
            },
            S::DependencyPolled {
                reason: Reason::Forbidden,
                message: m(),
                after: Duration::from_secs(2),
            },
            S::FetchingChart,
            S::ChartUnavailable {
                reason: Reason::ChartUnavailable,
                message: m(),
                retry: Some(Duration::ZERO),
            },
            S::Forbidden {
                message: m(),
                waited: Duration::from_secs(3),
            },
            S::HeldByHelm,
            S::NotStarted {
                reason: Reason::CRDsFailed,
                message: m(),
                retry: true,
            },
            S::NotStarted {
                reason: Reason::PostRendererInvalid,
                message: m(),
                retry: false,
            },
            S::WaitingForApi,
            S::UninstallFailed { message: m() },
            S::Locked {
                message: m(),
                remaining: Duration::from_secs(7),
            },
            S::Stuck { message: m() },
            S::OwnedByOther { message: m() },
            S::NotOurs { message: m() },
            S::AdoptionRefused { message: m() },
            S::AdoptionToRender,
            S::AdoptAsIs { revision: 2 },
            S::OwnRunToRender { revision: 2 },
            S::OwnRunRendered { revision: 2 },
            S::InSync { revision: Some(3) },
            S::Drifted { objects: vec![m()] },
            S::FieldsDrifted { objects: vec![m()] },
            S::BackingOff {
                remaining: Duration::from_secs(4),
            },
            S::RetriesExhausted,
            S::AwaitingApproval {
                hash: m(),
                chart_version: m(),
                stale: None,
            },
            S::OutsideWindow {
                change: Change::Upgrade,
                opens: None,
                after: Duration::from_secs(5),
            },
            S::Absent,
            S::OutOfSync {
                why: crate::delivery::helmapp::decide::state::OutOfSyncCause::Changed,
            },
            S::ChartRenamed { from: m(), to: m() },
            S::Untested {
                run: RunKind::Upgrade,
                revision: 3,
                before: 2,
            },
            S::JustReleased {
                run: RunKind::Install,
                revision: 1,
            },
            S::RunFailed {
                run: RunKind::Upgrade,
                message: m(),
                failures: 1,
                last_succeeded: 2,
            },
        ];
        for s in &all {
            match s {
                S::Deleting { .. }
                | S::GoesWithNamespace
                | S::Tampered { .. }
                | S::Suspended
                | S::Refused { .. }
                | S::DependencyPolled { .. }
                | S::FetchingChart
                | S::ChartUnavailable { .. }
                | S::Forbidden { .. }
                | S::HeldByHelm
                | S::NotStarted { .. }
                | S::WaitingForApi
                | S::UninstallFailed { .. }
                | S::Locked { .. }
                | S::Stuck { .. }
                | S::OwnedByOther { .. }
                | S::NotOurs { .. }
                | S::AdoptionRefused { .. }
                | S::AdoptionToRender
                | S::AdoptAsIs { .. }
                | S::OwnRunToRender { .. }
                | S::OwnRunRendered { .. }
                | S::InSync { .. }
                | S::Drifted { .. }
                | S::FieldsDrifted { .. }
                | S::BackingOff { .. }
                | S::RetriesExhausted
                | S::AwaitingApproval { .. }
                | S::OutsideWindow { .. }
                | S::Absent
                | S::OutOfSync { .. }
                | S::ChartRenamed { .. }
                | S::Untested { .. }
                | S::JustReleased { .. }
                | S::RunFailed { .. } => {}
            }
        }
        all
    }

    /// Whether `step` runs helm (a dry run aside) or writes Helm's storage.
    fn touches_the_release(step: &Step) -> bool {
        matches!(
            step,
            Step::Install
                | Step::Upgrade
                | Step::Repair { .. }
                | Step::Uninstall
                | Step::Unlock { .. }
                | Step::TakeOver { .. }
                | Step::Test { .. }
                | Step::UninstallFailedInstall { .. }
                | Step::Reinstall { .. }
                | Step::Remediate { .. }
        )
    }

    #[test]
    fn only_a_release_to_make_mend_unlock_adopt_or_remove_is_touched() {
        use ReleaseState as S;
        let plain = app(|_| {});
        for state in every_state() {
            let wanted = matches!(
                state,
                S::Absent
                    | S::OutOfSync { .. }
                    | S::ChartRenamed { .. }
                    | S::Drifted { .. }
                    | S::Stuck { .. }
                    | S::AdoptAsIs { .. }
                    | S::Deleting { uninstall: true }
                    | S::Untested { .. }
            );
            let step = next(&state, &observed(), &plain);
            assert_eq!(touches_the_release(&step), wanted, "{state:?} → {step:?}");
        }
    }

    /// Every step that starts helm waits out a refusal of the same inputs
    /// (`refusal::waiting`), saying it again and back when the wait ends;
    /// a step that starts no helm goes ahead. Red without the gate: a
    /// watched event ran a refused upgrade again each time.
    #[test]
    fn a_step_that_starts_helm_waits_out_a_refusal_of_the_same_inputs() {
        use crate::delivery::helmapp::decide::refusal::tests::{app, refused, with_hash};
        let app = app();
        let o = refused(with_hash("h1"), &app, Duration::from_secs(7));
        let from = |state: ReleaseState| next(&state, &o, &app);
        for state in [
            ReleaseState::Absent,
            ReleaseState::Deleting { uninstall: true },
        ] {
            assert_eq!(
                from(state.clone()),
                Step::StillRefused {
                    message: "no".into(),
                    after: Duration::from_secs(7)
                },
                "{state:?}"
            );
        }
        assert_eq!(
            from(ReleaseState::Deleting { uninstall: false }),
            Step::RemoveFinalizer
        );
        let due = refused(with_hash("h1"), &app, Duration::ZERO);
        assert_eq!(next(&ReleaseState::Absent, &due, &app), Step::Install);
    }

    /// A refusal is remembered through reconciles that start no helm (a
    /// dependency, a window, a chart fetch, the refusal said again) and
    /// let go once helm ran unrefused or the release is in sync. Red with
    /// any other last step letting it go: a dependency's flapping ran the
    /// refused run again at once.
    #[test]
    fn a_refusal_is_let_go_only_by_a_run_that_was_not_refused_or_a_release_in_sync() {
        use crate::delivery::helmapp::decide::observed::RunEnded;
        let quiet = observed();
        let waits = [
            Step::StillRefused {
                message: "no".into(),
                after: Duration::from_secs(3),
            },
            Step::RecheckLater {
                reason: Reason::DependencyNotReady,
                message: "waits".into(),
                after: Duration::from_secs(3),
            },
            Step::QuietRecheck {
                after: HELM_HOLDS,
                why: "busy",
            },
            Step::Nothing { why: "fetching" },
        ];
        for step in &waits {
            assert!(!refusals_let_go(step, &quiet), "{step:?}");
        }
        let in_sync = Step::ReportInSync {
            revision: Some(1),
            not_ready: None,
            next_look: None,
        };
        assert!(refusals_let_go(&in_sync, &quiet));
        let mut refused = observed();
        refused.done.helm_ran = true;
        refused.done.run_ended = Some(RunEnded::Forbidden {
            message: "no".into(),
        });
        let forbidden = Step::Forbidden {
            message: "no".into(),
            after: Duration::from_secs(2),
            inputs: "i".into(),
        };
        assert!(!refusals_let_go(&forbidden, &refused));
        let mut released = observed();
        released.done.helm_ran = true;
        released.done.run_ended = Some(RunEnded::Released {
            run: RunKind::Upgrade,
            revision: 2,
            before: 1,
        });
        assert!(refusals_let_go(&waits[1], &released));
    }

    /// A refusal is looked at again seconds apart, as long again as it has
    /// lasted, at most every 5 min: never at the work queue's pace.
    #[test]
    fn a_refusal_is_looked_at_again_after_seconds_doubling_to_a_cap() {
        let plain = app(|_| {});
        let after = |waited: u64| {
            let state = ReleaseState::Forbidden {
                message: "no".into(),
                waited: Duration::from_secs(waited),
            };
            match next(&state, &observed(), &plain) {
                Step::Forbidden { after, .. } => after,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(after(0), Duration::from_secs(2));
        assert_eq!(after(2), Duration::from_secs(2));
        assert_eq!(after(8), Duration::from_secs(8));
        assert_eq!(after(100_000), Duration::from_secs(300));
        let chart = |retry| match next(
            &ReleaseState::ChartUnavailable {
                reason: Reason::ChartUnavailable,
                message: "down".into(),
                retry,
            },
            &observed(),
            &plain,
        ) {
            Step::RecheckLater { after, .. } => Some(after),
            Step::RefuseUntilChanged { .. } => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(chart(Some(Duration::ZERO)), Some(Duration::from_secs(2)));
        assert_eq!(
            chart(None),
            None,
            "a refusal only a change fixes waits for it"
        );
    }

    #[test]
    fn tampered_storage_is_never_handed_to_helm_not_even_to_uninstall() {
        let plain = app(|_| {});
        for deleting in [true, false] {
            let state = ReleaseState::Tampered {
                message: "edited".into(),
                deleting,
            };
            let step = next(&state, &observed(), &plain);
            assert!(!touches_the_release(&step), "{step:?}");
            match (deleting, step) {
                // The HelmApp goes, the release stays as it is, said so.
                (true, Step::LeaveTampered { .. }) => {}
                (
                    false,
                    Step::RefuseUntilChanged {
                        reason: Reason::StorageTampered,
                        ..
                    },
                ) => {}
                (_, other) => panic!("tampered (deleting {deleting}): {other:?}"),
            }
        }
    }

    #[test]
    fn with_drift_disabled_a_deleted_object_stays_deleted() {
        let state = ReleaseState::Drifted {
            objects: vec!["Service apps/web".into()],
        };
        let enabled = next(&state, &observed(), &app(|_| {}));
        assert!(matches!(enabled, Step::Repair { .. }), "{enabled:?}");
        let disabled = app(|a| {
            a.spec.drift =
                serde_json::from_value(serde_json::json!({ "mode": "disabled" })).unwrap()
        });
        assert!(!touches_the_release(&next(&state, &observed(), &disabled)));
    }

    #[test]
    fn a_refusal_someone_must_act_on_warns_and_a_chosen_pause_does_not() {
        let plain = app(|_| {});
        for state in every_state() {
            match next(&state, &observed(), &plain) {
                Step::RefuseUntilChanged { reason, .. } | Step::RecheckLater { reason, .. } => {
                    assert_ne!(reason, Reason::Suspended, "{state:?}")
                }
                Step::ReportSuspended => assert_eq!(state, ReleaseState::Suspended),
                _ => {}
            }
        }
    }

    #[test]
    fn a_release_our_helm_holds_is_looked_at_again_saying_nothing() {
        let step = next(&ReleaseState::HeldByHelm, &observed(), &app(|_| {}));
        assert!(
            matches!(step, Step::QuietRecheck { after, .. } if after == HELM_HOLDS),
            "{step:?}"
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
            assert_eq!(
                after_failure(false, failures, &three),
                AfterFailure::Backoff
            );
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
                AfterFailure::Backoff,
                "-1 retries for ever"
            );
        }
    }

    #[test]
    fn what_follows_a_run_is_chosen_from_how_it_ended() {
        let plain = app(|_| {});
        let observed = || Observed {
            storage_recheck: Some(StorageRecheck::Trusted),
            ..observed()
        };
        let failed = |run, failures| ReleaseState::RunFailed {
            run,
            message: "helm said no".into(),
            failures,
            last_succeeded: 3,
        };
        assert_eq!(
            next(&failed(RunKind::Install, 1), &observed(), &plain),
            Step::UninstallFailedInstall {
                message: "helm said no".into()
            }
        );
        assert_eq!(
            next(&failed(RunKind::Upgrade, 1), &observed(), &plain),
            Step::RecordFailure {
                reason: Reason::UpgradeFailed,
                message: "helm said no".into()
            }
        );
        // RetryOnFailure (Flux's strategy): the same action again at its
        // interval, however many failures — no uninstall of a failed
        // install, no rollback, never exhausted.
        let retrying = app(|a| {
            for strategy in [&mut a.spec.install.strategy, &mut a.spec.upgrade.strategy] {
                *strategy = Some(apis::helmapp::ActionStrategy {
                    name: apis::helmapp::StrategyName::RetryOnFailure,
                    retry_interval: "5s".into(),
                });
            }
        });
        for (run, failures, reason) in [
            (RunKind::Install, 1, Reason::InstallFailed),
            (RunKind::Upgrade, 40, Reason::UpgradeFailed),
            (RunKind::Repair, 40, Reason::UpgradeFailed),
        ] {
            assert_eq!(
                next(&failed(run, failures), &observed(), &retrying),
                Step::RecordFailure {
                    reason,
                    message: "helm said no; RetryOnFailure: tried again after 5s".into()
                },
                "{run:?}"
            );
        }
        // Only the strategy of the action that failed counts.
        let upgrades_only = app(|a| {
            a.spec.upgrade.strategy = Some(apis::helmapp::ActionStrategy {
                name: apis::helmapp::StrategyName::RetryOnFailure,
                retry_interval: String::new(),
            })
        });
        assert!(matches!(
            next(&failed(RunKind::Install, 1), &observed(), &upgrades_only),
            Step::UninstallFailedInstall { .. }
        ));
        assert_eq!(
            after_failure(false, 9, &upgrades_only),
            AfterFailure::SameActionAfter(Duration::from_secs(300)),
            "Flux's default interval"
        );
        assert_eq!(
            next(&failed(RunKind::Repair, 4), &observed(), &plain),
            Step::Remediate {
                remedy: Remedy::RollbackTo(3),
                run: RunKind::Repair,
                message: "helm said no".into()
            }
        );
        // No revision ever succeeded: nothing to roll back to, said so.
        let never = ReleaseState::RunFailed {
            run: RunKind::Upgrade,
            message: "m".into(),
            failures: 4,
            last_succeeded: 0,
        };
        assert!(matches!(
            next(&never, &observed(), &plain),
            Step::Remediate {
                remedy: Remedy::MissingRollbackTarget,
                ..
            }
        ));
        // And Ready says so, as Flux's stalled condition does.
        assert_eq!(
            Remedy::MissingRollbackTarget.exhausted_reason(),
            Reason::MissingRollbackTarget
        );
        for other in [Remedy::RollbackTo(3), Remedy::Uninstall, Remedy::Nothing] {
            assert_eq!(other.exhausted_reason(), Reason::RetriesExhausted);
        }
        let uninstall = app(|a| a.spec.remediation.on_failure = OnFailure::Uninstall);
        assert!(matches!(
            next(&failed(RunKind::Upgrade, 4), &observed(), &uninstall),
            Step::Remediate {
                remedy: Remedy::Uninstall,
                ..
            }
        ));
        let none = app(|a| a.spec.remediation.on_failure = OnFailure::None);
        assert!(matches!(
            next(&failed(RunKind::Upgrade, 4), &observed(), &none),
            Step::Remediate {
                remedy: Remedy::Nothing,
                ..
            }
        ));
        let untested = ReleaseState::Untested {
            run: RunKind::Upgrade,
            revision: 3,
            before: 2,
        };
        assert_eq!(
            next(&untested, &observed(), &plain),
            Step::Test {
                run: RunKind::Upgrade,
                revision: 3,
                before: 2
            }
        );
        let released = ReleaseState::JustReleased {
            run: RunKind::Install,
            revision: 1,
        };
        // What the run left is recorded first, then reported.
        assert_eq!(next(&released, &observed(), &plain), Step::RecordRun);
        let mut recorded = observed();
        recorded.done.recorded = true;
        assert_eq!(
            next(&released, &recorded, &plain),
            Step::ReportReleased {
                revision: 1,
                not_ready: None
            }
        );
    }

    #[test]
    fn no_remedy_runs_helm_on_storage_changed_or_unread_since_the_failed_run() {
        let plain = app(|_| {});
        let failed = |run, failures, last_succeeded| ReleaseState::RunFailed {
            run,
            message: "helm said no".into(),
            failures,
            last_succeeded,
        };
        let with = |recheck| Observed {
            storage_recheck: recheck,
            ..observed()
        };
        let changed = Some(StorageRecheck::Untrusted("revision 4 was edited".into()));
        let unread = Some(StorageRecheck::Unreadable("timed out".into()));
        // A failed install's uninstall, and a rollback once retries are
        // spent: both run helm on the storage.
        for (state, remedy) in [
            (failed(RunKind::Install, 1, 0), Remedy::Uninstall),
            (failed(RunKind::Upgrade, 4, 3), Remedy::RollbackTo(3)),
        ] {
            assert_eq!(
                next(&state, &with(changed.clone()), &plain),
                Step::RemedyRefused {
                    remedy,
                    run: match remedy {
                        Remedy::Uninstall => RunKind::Install,
                        _ => RunKind::Upgrade,
                    },
                    failure: "helm said no".into(),
                    refused: format!("{remedy} not run: revision 4 was edited"),
                }
            );
            for recheck in [unread.clone(), None] {
                assert!(
                    matches!(
                        next(&state, &with(recheck.clone()), &plain),
                        Step::RemedySkipped { remedy: r, .. } if r == remedy
                    ),
                    "{recheck:?}"
                );
            }
        }
        // The revision the failed run left, helm printing none: proven
        // ours by a render, recorded, then the remedy — or refused.
        let unproven = || with(Some(StorageRecheck::OwnRunUnproven { revision: 1 }));
        let install = failed(RunKind::Install, 1, 0);
        assert_eq!(
            next(&install, &unproven(), &plain),
            Step::RenderOwnRun { revision: 1 }
        );
        let mut rendered = unproven();
        rendered.done.own_render = Some((1, Rendering::Same));
        assert_eq!(
            next(&install, &rendered, &plain),
            Step::RecordOwnRun { revision: 1 }
        );
        // The verdict of another revision (one proven earlier in the same
        // reconcile) is not this one's.
        let mut earlier = with(Some(StorageRecheck::OwnRunUnproven { revision: 4 }));
        earlier.done.own_render = Some((3, Rendering::Same));
        assert_eq!(
            next(&failed(RunKind::Upgrade, 4, 2), &earlier, &plain),
            Step::RenderOwnRun { revision: 4 }
        );
        rendered.done.own_render = Some((1, Rendering::Differs));
        assert!(matches!(
            next(&install, &rendered, &plain),
            Step::RemedyRefused {
                remedy: Remedy::Uninstall,
                run: RunKind::Install,
                ..
            }
        ));
        // A remedy that runs no helm does not wait for the storage.
        assert!(matches!(
            next(&failed(RunKind::Upgrade, 4, 0), &with(None), &plain),
            Step::Remediate {
                remedy: Remedy::MissingRollbackTarget,
                ..
            }
        ));
        // Nor does a failure with retries left.
        assert!(matches!(
            next(&failed(RunKind::Upgrade, 1, 3), &with(changed), &plain),
            Step::RecordFailure { .. }
        ));
    }

    #[test]
    fn a_run_that_never_reached_helm_or_met_an_outage_is_answered_as_planned() {
        let plain = app(|_| {});
        let m = || "m".to_string();
        let at = |state: ReleaseState| next(&state, &observed(), &plain);
        // An API write that may succeed again: backoff, said.
        assert_eq!(
            at(ReleaseState::NotStarted {
                reason: Reason::CRDsFailed,
                message: m(),
                retry: true
            }),
            Step::RecordFailure {
                reason: Reason::CRDsFailed,
                message: m()
            }
        );
        // Inputs only a change mends: said, nothing retried.
        assert_eq!(
            at(ReleaseState::NotStarted {
                reason: Reason::PostRendererInvalid,
                message: m(),
                retry: false
            }),
            Step::RefuseUntilChanged {
                reason: Reason::PostRendererInvalid,
                message: m()
            }
        );
        // The API away: parked, nothing said or counted.
        assert_eq!(
            at(ReleaseState::WaitingForApi),
            Step::Nothing { why: OUTAGE }
        );
        // A failed uninstall: said, backoff.
        assert_eq!(
            at(ReleaseState::UninstallFailed { message: m() }),
            Step::RecordFailure {
                reason: Reason::UninstallFailed,
                message: m()
            }
        );
    }

    #[test]
    fn a_report_carries_the_readiness_the_plan_judged() {
        let released = ReleaseState::JustReleased {
            run: RunKind::Install,
            revision: 1,
        };
        let mut waiting = observed();
        waiting.done.recorded = true;
        waiting.timeout = Duration::from_secs(300);
        waiting.pending = vec!["Deployment web".into()];
        // Without wait, a revision helm made is reported as released.
        assert!(matches!(
            next(&released, &waiting, &app(|_| {})),
            Step::ReportReleased {
                not_ready: None,
                ..
            }
        ));
        // With it, Progressing while a workload rolls out.
        let wait = app(|a| a.spec.wait = true);
        let Step::ReportReleased {
            not_ready: Some(not_ready),
            ..
        } = next(&released, &waiting, &wait)
        else {
            panic!("not judged")
        };
        assert_eq!(not_ready.reason, Reason::Progressing);
        // In sync: an object that failed is said at once, whatever wait.
        let mut failed = observed();
        failed.readiness_failed = Some("Pod web-0 CrashLoopBackOff".into());
        let Step::ReportInSync {
            not_ready: Some(not_ready),
            ..
        } = next(&ReleaseState::InSync { revision: Some(1) }, &failed, &wait)
        else {
            panic!("not judged")
        };
        assert_eq!(not_ready.reason, Reason::ReadinessFailed);
    }

    #[test]
    fn a_release_in_sync_is_looked_at_again_at_the_first_thing_due() {
        let at = |poll: Option<u64>, resolve: Option<u64>| {
            let mut o = observed();
            o.drift.poll_after = poll.map(Duration::from_secs);
            o.resolve_after = resolve.map(Duration::from_secs);
            match next(&ReleaseState::InSync { revision: None }, &o, &app(|_| {})) {
                Step::ReportInSync { next_look, .. } => next_look.map(|(d, _)| d.as_secs()),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(at(None, None), None);
        assert_eq!(at(Some(30), None), Some(30));
        assert_eq!(at(None, Some(60)), Some(60));
        assert_eq!(at(Some(30), Some(60)), Some(30));
        assert_eq!(at(Some(90), Some(60)), Some(60));
    }
}
