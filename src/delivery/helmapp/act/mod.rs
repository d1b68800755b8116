//! Act: one file per action, each doing one [`Step`] and saying how it
//! ended. None decides what comes next: that is `super::plan`'s.
//!
//! Every action records what it did in `Observed::status`; the reconcile
//! writes that status once, whatever the outcome.

mod adopt;
mod approval;
mod crds;
mod drift;
mod dry_run;
mod outage;
mod outcome;
mod own_run;
mod release;
mod released;
mod remediate;
mod test;
mod uninstall;
mod unlock;
mod window;

use apis::helmapp::HelmApp;
use runtime::Action;

use super::context::Context;
use super::observed::{Observed, RunKind};
use super::plan::Step;
use super::readiness;
use super::status::{self, READY, RELEASED, Reason};

pub use approval::settle as settle_approval;
pub use crds::FIELD_MANAGER;
use outcome::refuse;
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
        Step::LetGo => uninstall::let_go(ctx, app).await,
        Step::Abandon { message } => {
            let message = format!(
                "{message}. The HelmApp is deleted without uninstalling: the release was left as it is"
            );
            let reason = Reason::StorageTampered.as_str();
            ctx.recorder
                .event(app, record::EventType::Warning, reason, &message);
            uninstall::let_go(ctx, app).await
        }
        Step::PutBack { objects } => {
            log::info!(
                "{}: fields of its objects were edited: {}",
                o.target.key(),
                objects.join("; ")
            );
            drift::put_back(ctx, app, o).await;
            drift::report(ctx, app, o);
            Ok(done(o, None))
        }
        Step::Done { revision } => {
            drift::report(ctx, app, o);
            Ok(done(o, revision))
        }
        Step::Wait {
            reason,
            message,
            after,
        } => {
            refuse(ctx, app, o, reason, &message, true);
            Ok(Outcome::Finished(Action::requeue_after(
                after,
                reason.as_str(),
            )))
        }
        Step::Requeue { after, why } => Ok(Outcome::Finished(Action::requeue_after(after, why))),
        Step::Refuse {
            reason,
            message,
            warn,
            retry,
        } => {
            refuse(ctx, app, o, reason, &message, warn);
            Ok(if retry {
                Outcome::Retry(message)
            } else {
                Outcome::Finished(Action::done(format!("{reason}: {message}")))
            })
        }
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
        Step::ReportReleased { revision } => Ok(released::report(ctx, app, o, revision)),
        Step::RetryFailed { message } => Ok(outcome::failed(
            ctx,
            app,
            o,
            Reason::UpgradeFailed,
            &message,
        )),
        Step::UninstallFailedInstall { message } => {
            Ok(remediate::after_failed_install(ctx, app, o, &message).await)
        }
        Step::Remediate {
            remedy,
            run,
            message,
        } => Ok(remediate::retries_exhausted(ctx, app, o, remedy, run, &message).await),
        Step::Idle { why } => Ok(Outcome::Finished(Action::done(why))),
    }
}

/// The release is deployed with this configuration: `Ready` once its
/// workloads are (with `wait`).
fn done(o: &mut Observed, revision: Option<i64>) -> Outcome {
    let hash = o.hash().map(str::to_string);
    let status = &mut o.status;
    // A revision the status did not hold (a run of ours whose own status
    // write an outage cut off): the last action's reason no longer
    // describes the release.
    let mut moved = false;
    if let (Some(revision), Some(hash)) = (revision, hash) {
        moved = status.revision != revision;
        status.config_hash = hash;
        status.revision = revision;
    }
    if let Some((reason, message, again)) = readiness::verdict(o, o.timeout) {
        status::set(&mut o.status, READY, false, reason, &message);
        return Outcome::Finished(Action::requeue_after(again, message));
    }
    let status = &mut o.status;
    // A change that waited for its window and was withdrawn: nothing
    // waits any more.
    let waited = status::has(status, RELEASED, false, Reason::OutsideChangeWindow);
    if moved || waited || !status::is_true(status, READY) {
        let message = "the release is deployed with this configuration";
        status::set(status, READY, true, Reason::UpToDate, message);
        status::set(status, RELEASED, true, Reason::UpToDate, message);
    }
    // Looked at again when an object of a kind no informer watches is due
    // for its drift look, or the chart's range and newest version are due
    // to be resolved again — whichever comes first.
    Outcome::Finished(match (o.drift.poll_after, o.resolve_after) {
        (Some(d), Some(r)) if r < d => Action::requeue_after(r, "up to date; next resolution"),
        (Some(d), _) => Action::requeue_after(d, "up to date; next drift look"),
        (None, Some(r)) => Action::requeue_after(r, "up to date; next resolution"),
        (None, None) => Action::done("up to date"),
    })
}
