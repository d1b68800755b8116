//! What follows a failed install or upgrade (pure): a retry after the
//! controller's backoff, the same action after `retryInterval`
//! (`RetryOnFailure`), or — for a failed install, or once retries are
//! spent — a remedy, chosen here as Flux's planner chooses it, and refused
//! or skipped when Helm's storage changed or was not read again since the
//! failed run.

use std::time::Duration;

use apis::helmapp::{HelmApp, OnFailure};

use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::observed::RunKind;

/// The remedy a failure of `run` (the `failures`-th, the status's
/// `last_succeeded` revision the rollback target) gets now, if any: a
/// failed install's uninstall, or `onFailure`'s once retries are spent.
pub fn remedy_after(
    run: RunKind,
    failures: i32,
    last_succeeded: i64,
    app: &HelmApp,
) -> Option<Remedy> {
    match after_failure(run == RunKind::Install, failures, app) {
        AfterFailure::UninstallAndRetry => Some(Remedy::Uninstall),
        AfterFailure::Remediate(on_failure) => Some(remedy(on_failure, last_succeeded)),
        AfterFailure::Backoff | AfterFailure::SameActionAfter(_) => None,
    }
}

/// What remediation a failure gets once retries are spent — chosen here,
/// as Flux's planner does (its `ErrMissingRollbackTarget`), not by the
/// action that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remedy {
    /// `helm rollback` to `revision`, the last that succeeded.
    RollbackTo(i64),
    /// `onFailure: rollback`, and no revision ever succeeded: nothing to
    /// return to, nothing runs.
    MissingRollbackTarget,
    /// `helm uninstall`.
    Uninstall,
    /// `onFailure: none` (or a spelling the schema does not allow).
    Nothing,
}

impl std::fmt::Display for Remedy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Remedy::RollbackTo(_) | Remedy::MissingRollbackTarget => "rollback",
            Remedy::Uninstall => "uninstall",
            Remedy::Nothing => "no remediation",
        })
    }
}

impl Remedy {
    /// Whether it runs helm on the release (and so reads its storage).
    pub fn runs_helm(self) -> bool {
        matches!(self, Remedy::RollbackTo(_) | Remedy::Uninstall)
    }

    /// What `Ready` says once this remedy was applied and nothing more
    /// runs: `MissingRollbackTarget` when there was nothing to roll back
    /// to (Flux stalls with that reason), else `RetriesExhausted`.
    pub fn exhausted_reason(self) -> Reason {
        match self {
            Remedy::MissingRollbackTarget => Reason::MissingRollbackTarget,
            _ => Reason::RetriesExhausted,
        }
    }
}

/// `onFailure` applied to a release whose last success is `last_succeeded`.
pub fn remedy(on_failure: OnFailure, last_succeeded: i64) -> Remedy {
    match on_failure {
        OnFailure::Rollback if last_succeeded > 0 => Remedy::RollbackTo(last_succeeded),
        OnFailure::Rollback => Remedy::MissingRollbackTarget,
        OnFailure::Uninstall => Remedy::Uninstall,
        OnFailure::None | OnFailure::Unknown => Remedy::Nothing,
    }
}

/// What follows a failed install or upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// A failed install: nothing to roll back to, so the failed release is
    /// uninstalled before the next try.
    UninstallAndRetry,
    /// Retries left: the failure recorded, the next try after the
    /// controller's backoff.
    Backoff,
    /// `RetryOnFailure`: the same action again after this, for ever; no
    /// uninstall, rollback or exhaustion.
    SameActionAfter(Duration),
    /// Retries spent: apply `onFailure` once, then run nothing more.
    Remediate(OnFailure),
}

/// After attempt number `failures` of `app` failed (`install`: there was
/// no release before it). `remediation.retries: -1` retries for ever (the
/// controller's backoff spaces the attempts).
pub fn after_failure(install: bool, failures: i32, app: &HelmApp) -> AfterFailure {
    let retries = app.spec.remediation.retries;
    if let Some(interval) = crate::delivery::helmapp::decide::state::retry_on_failure(app, install)
    {
        AfterFailure::SameActionAfter(interval)
    } else if install {
        AfterFailure::UninstallAndRetry
    } else if retries == -1 || failures <= retries.max(0) {
        AfterFailure::Backoff
    } else {
        AfterFailure::Remediate(app.spec.remediation.on_failure)
    }
}
