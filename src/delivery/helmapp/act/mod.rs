//! Act: one file per action, each doing one [`Step`] and saying how it
//! ended. None decides what comes next: that is `decide::plan`'s.
//!
//! Every action records what it did in `Observed::status`; the reconcile
//! writes that status once, whatever the outcome.

mod adopt;
mod approval;
mod crds;
mod dry_run;
mod in_sync;
mod intent;
mod not_ready;
mod outage;
mod outcome;
mod own_run;
mod put_back;
mod reinstall;
mod release;
mod released;
mod remediate;
mod test;
mod uninstall;
mod unlock;
mod window;

#[cfg(test)]
mod tests;

use apis::helmapp::HelmApp;
use runtime::Action;

use super::context::Context;
use crate::delivery::helmapp::decide::observed::{Observed, RunKind};
use crate::delivery::helmapp::decide::plan::Step;

pub use approval::settle as settle_approval;
pub use crds::FIELD_MANAGER;
pub use outcome::{DeliveryError, Outcome};
pub use release::record_storage;

/// Does `step` for `app`.
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    step: Step,
) -> Result<Outcome, DeliveryError> {
    if !matches!(step, Step::WaitForWindow { .. }) {
        o.status.next_window.clear();
    }
    match step {
        Step::Install => release::run(ctx, app, o, RunKind::Install).await,
        Step::Upgrade => release::run(ctx, app, o, RunKind::Upgrade).await,
        Step::Repair { objects } => {
            log::info!(
                "{}: objects of its release were deleted: {}",
                o.target.key(),
                objects.join(", ")
            );
            release::run(ctx, app, o, RunKind::Repair).await
        }
        Step::Unlock { message } => unlock::run(ctx, app, o, &message).await,
        Step::Uninstall => uninstall::run(ctx, app, o).await,
        Step::RemoveFinalizer => uninstall::let_go(ctx, app).await,
        Step::LetGoWithNamespace => uninstall::with_namespace(ctx, app, o).await,
        Step::LeaveTampered { message } => uninstall::leave_tampered(ctx, app, &message).await,
        Step::PutBack { objects } => Ok(put_back::run(ctx, app, o, &objects).await),
        Step::ReportInSync {
            revision,
            not_ready,
            next_look,
        } => {
            put_back::report(ctx, app, o);
            Ok(in_sync::report(o, revision, not_ready, next_look))
        }
        Step::RecheckLater {
            reason,
            message,
            after,
        } => Ok(not_ready::recheck_later(
            ctx, app, o, reason, &message, after,
        )),
        Step::QuietRecheck { after, why } => {
            Ok(Outcome::Finished(Action::requeue_after(after, why)))
        }
        Step::RefuseUntilChanged { reason, message } => {
            Ok(not_ready::refuse(ctx, app, o, reason, &message))
        }
        Step::ReportSuspended => Ok(not_ready::suspended(ctx, app, o)),
        Step::Forbidden {
            message,
            after,
            inputs,
        } => Ok(outcome::forbidden(ctx, app, o, &message, after, inputs)),
        Step::StillRefused { message, after } => Ok(outcome::still_refused(o, &message, after)),
        Step::AwaitApproval { hash, stale, .. } => {
            approval::run(ctx, app, o, &hash, stale.as_deref()).await
        }
        Step::RenderOwnRun { revision } => own_run::render(ctx, app, o, revision).await,
        Step::RecordOwnRun { revision } => own_run::record(ctx, o, revision).await,
        Step::RenderAdoption => Ok(adopt::render(ctx, app, o).await),
        Step::TakeOver { revision } => adopt::take_over(ctx, app, o, revision).await,
        Step::WaitForWindow {
            change,
            opens,
            after,
        } => Ok(window::wait(ctx, app, o, change, opens, after)),
        Step::Test {
            run,
            revision,
            before,
        } => Ok(test::run(ctx, app, o, run, revision, before).await),
        Step::RecordRun => {
            release::record_storage(ctx, app, o).await;
            o.done.capturing = None;
            let key = crate::delivery::helmapp::context::run_key(app);
            match &o.done.applied_workloads {
                Some(applied) => {
                    let kept = (o.status.revision, applied.clone());
                    ctx.applied.lock().insert(key, kept);
                }
                None => {
                    ctx.applied.lock().remove(&key);
                }
            }
            Ok(Outcome::Replan)
        }
        Step::ReportReleased {
            revision,
            not_ready,
        } => Ok(released::report(o, revision, not_ready)),
        Step::RecordFailure { reason, message } => {
            Ok(outcome::failed(ctx, app, o, reason, &message))
        }
        Step::Reinstall { from, to } => Ok(reinstall::run(ctx, app, o, &from, &to).await),
        Step::UninstallFailedInstall { message } => {
            Ok(remediate::after_failed_install(ctx, app, o, &message).await)
        }
        Step::Remediate {
            remedy, message, ..
        } => Ok(remediate::retries_exhausted(ctx, app, o, remedy, &message).await),
        Step::RemedyRefused {
            remedy,
            run,
            failure,
            refused,
        } => Ok(remediate::refused(
            ctx,
            app,
            o,
            (remedy, run),
            &failure,
            &refused,
        )),
        Step::RemedySkipped {
            remedy,
            run,
            failure,
            why,
        } => Ok(remediate::skipped(
            ctx,
            app,
            o,
            (remedy, run),
            &failure,
            &why,
        )),
        Step::Nothing { why } => Ok(Outcome::Finished(Action::done(why))),
    }
}
