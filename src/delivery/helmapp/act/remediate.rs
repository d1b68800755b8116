//! Remediation after a failure: `helm rollback` to the last revision that
//! succeeded, or `helm uninstall` — recorded in the history, with an Event
//! — and what the HelmApp then says: a failed install retried, or retries
//! exhausted.

use apis::helmapp::{HelmApp, HistoryAction, HistoryResult};
use record::EventType;
use runtime::Action;

use super::outcome::{Outcome, failed, not_ready};
use crate::delivery::helm::Rollback;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{self, READY, RELEASED, Reason, push_history};
use crate::delivery::helmapp::decide::failure::Remedy;
use crate::delivery::helmapp::decide::observed::{Observed, RunKind};

/// A failed install: uninstalled (nothing to roll back to), then
/// `InstallFailed`, retried with backoff.
pub async fn after_failed_install(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    message: &str,
) -> Outcome {
    let hash = o.hash().unwrap_or_default().to_string();
    apply(ctx, app, o, Remedy::Uninstall, &hash).await;
    failed(ctx, app, o, Reason::InstallFailed, message)
}

/// Retries spent: `remedy` once, then `RetriesExhausted` until the
/// configuration or `hossted.com/reconcile-at` changes.
pub async fn retries_exhausted(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    remedy: Remedy,
    message: &str,
) -> Outcome {
    let hash = o.hash().unwrap_or_default().to_string();
    let done = apply(ctx, app, o, remedy, &hash).await;
    exhausted(ctx, app, o, remedy, message, &done)
}

/// `remedy` was not run: Helm's storage changed while the failed run of
/// `run` ran (`refused` says how). Recorded as refused; `Ready` says
/// `StorageTampered` — what the next check finds too, until someone
/// accepts the stored state.
pub fn refused(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    (remedy, run): (Remedy, RunKind),
    failure: &str,
    refused: &str,
) -> Outcome {
    let hash = o.hash().unwrap_or_default().to_string();
    record(ctx, app, o, remedy, &hash, HistoryResult::Refused, "");
    // What stops helm first: condition messages are cut at 1 KiB, and
    // helm's own message may be longer.
    let message = format!(
        "{refused} (the {} before it failed: {failure})",
        run.action()
    );
    let released = if run == RunKind::Install {
        Reason::InstallFailed
    } else {
        Reason::UpgradeFailed
    };
    conditions::set(&mut o.status, RELEASED, false, released, &message);
    not_ready(ctx, app, o, Reason::StorageTampered, &message, true);
    Outcome::Finished(Action::done(format!("StorageTampered: {refused}")))
}

/// `remedy` was not run: Helm's storage could not be checked after the
/// failed run of `run` (`why`). Recorded as failed; the failure is then
/// reported as after the remedy: a failed install retried, or retries
/// exhausted.
pub fn skipped(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    (remedy, run): (Remedy, RunKind),
    failure: &str,
    why: &str,
) -> Outcome {
    let hash = o.hash().unwrap_or_default().to_string();
    record(ctx, app, o, remedy, &hash, HistoryResult::Failed, why);
    match run {
        RunKind::Install => failed(ctx, app, o, Reason::InstallFailed, failure),
        _ => exhausted(ctx, app, o, remedy, failure, why),
    }
}

/// Retries spent and `remedy` done (`done` says how): `Ready` says so
/// until the configuration or `hossted.com/reconcile-at` changes.
fn exhausted(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    remedy: Remedy,
    failure: &str,
    done: &str,
) -> Outcome {
    let message = format!(
        "upgrade failed {} time(s), the last: {failure}; {done}; nothing more runs until the configuration or {} changes",
        o.status.failures,
        crate::delivery::names::RECONCILE_AT
    );
    let reason = remedy.exhausted_reason();
    conditions::set(&mut o.status, READY, false, reason, &message);
    conditions::set(
        &mut o.status,
        RELEASED,
        false,
        Reason::UpgradeFailed,
        &message,
    );
    ctx.recorder
        .event(app, EventType::Warning, reason.as_str(), &message);
    Outcome::Finished(Action::done("retries exhausted"))
}

/// Runs `remedy`; says what was done.
async fn apply(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    remedy: Remedy,
    hash: &str,
) -> String {
    let user = o.identity.user();
    let as_user = user.as_deref();
    let outcome = match remedy {
        Remedy::RollbackTo(revision) => {
            if let Err(e) = super::intent::declare(ctx, app, o, "rollback").await {
                let said =
                    format!("{remedy} not run: the run's intent could not be recorded ({e})");
                record(ctx, app, o, remedy, hash, HistoryResult::Failed, &said);
                return said;
            }
            let rollback = Rollback {
                release: &o.target.release,
                namespace: &o.target.namespace,
                revision,
                as_user,
                timeout: o.timeouts.rollback,
                flags: crate::delivery::helmapp::decide::run_flags::of_rollback(app, o, revision),
                history_max: app.spec.max_history(),
                wait: app.spec.rollback.wait,
                wait_for_jobs: !app.spec.rollback.disable_wait_for_jobs,
            };
            let ran = ctx.on(o).helm.rollback(&rollback).await;
            if ran.is_none() {
                super::intent::withdraw(o);
            }
            ran
        }
        Remedy::MissingRollbackTarget => return "no rollback: no revision ever succeeded".into(),
        Remedy::Uninstall => {
            ctx.on(o)
                .helm
                .uninstall(&super::uninstall::request(app, o, as_user))
                .await
        }
        Remedy::Nothing => return "no remediation (onFailure: none)".into(),
    };
    if matches!(outcome, Some(Ok(()))) {
        // The revision rolled back to, or none, holds the release now: the
        // name our last run made is no longer known to be its chart's.
        o.status.chart_name.clear();
    }
    let (result, said) = match outcome {
        Some(Ok(())) => (HistoryResult::Succeeded, format!("{remedy} done")),
        Some(Err(e)) => (
            HistoryResult::Failed,
            format!("{remedy} failed: {}", e.summary(&o.done.redactor)),
        ),
        None => (
            HistoryResult::Failed,
            format!("{remedy} skipped: another helm run holds the release"),
        ),
    };
    record(ctx, app, o, remedy, hash, result, &said);
    said
}

/// The remedy in the history (`result`: succeeded, failed, refused) and,
/// when there is something to `say`, its Event.
fn record(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    remedy: Remedy,
    hash: &str,
    result: HistoryResult,
    say: &str,
) {
    let status = &mut o.status;
    let (revision, version) = (status.revision, status.chart_version.clone());
    let (action, reason) = match remedy {
        Remedy::Uninstall => (HistoryAction::Uninstall, Reason::UninstallPerformed),
        _ => (HistoryAction::Rollback, Reason::RollbackPerformed),
    };
    let succeeded = result == HistoryResult::Succeeded;
    status.last_action = action.to_string();
    push_history(status, action, revision, &version, hash, result);
    if say.is_empty() {
        return;
    }
    let kind = if succeeded {
        EventType::Normal
    } else {
        EventType::Warning
    };
    ctx.recorder.event(app, kind, reason.as_str(), say);
}
