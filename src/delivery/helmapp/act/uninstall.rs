//! The HelmApp is being deleted: `helm uninstall` (a release already gone
//! counts as done), then the finalizer goes.

use apis::helmapp::HelmApp;
use record::EventType;
use runtime::Action;

use super::outcome::{DeliveryError, Outcome};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::observed::{Observed, timeout_of};
use crate::delivery::helmapp::plan::HELM_HOLDS;
use crate::delivery::helmapp::status::Reason;
use crate::delivery::names::FINALIZER;

/// Uninstalls `o`'s release, then lets the HelmApp go.
pub async fn run(ctx: &Context, app: &HelmApp, o: &Observed) -> Result<Outcome, DeliveryError> {
    let (ns, release) = (&o.target.namespace, &o.target.release);
    match ctx.helm.uninstall(ns, release, timeout_of(app)).await {
        None => {
            let action = Action::requeue_after(HELM_HOLDS, "another helm run holds the release");
            return Ok(Outcome::Finished(action));
        }
        Some(Err(e)) => {
            let message = e.summary();
            let reason = Reason::UninstallFailed.as_str();
            ctx.recorder
                .event(app, EventType::Warning, reason, &message);
            return Ok(Outcome::Retry(message));
        }
        Some(Ok(())) => {
            let message = format!("uninstalled {}", o.target.key());
            let reason = Reason::UninstallSucceeded.as_str();
            ctx.recorder.event(app, EventType::Normal, reason, &message);
        }
    }
    let_go(ctx, app).await
}

/// Removes our finalizer: the HelmApp may go.
pub async fn let_go(ctx: &Context, app: &HelmApp) -> Result<Outcome, DeliveryError> {
    crate::delivery::finalizer::set(&ctx.api_of(app), app, FINALIZER, false).await?;
    ctx.status.forget(app);
    Ok(Outcome::Finished(Action::done("finalized")))
}
