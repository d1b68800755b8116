//! The HelmApp is being deleted: `helm uninstall` (a release already gone
//! counts as done), then the finalizer goes.

use apis::helmapp::{DeletionPropagation, HelmApp};
use record::EventType;
use runtime::Action;

use super::outcome::{DeliveryError, Outcome, refused_run};
use crate::delivery::helm::Uninstall;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::observed::{Observed, RunEnded};
use crate::delivery::names::FINALIZER;

/// The release goes with its namespace (gone or terminating): said in a
/// Normal Event, and the HelmApp let go without helm.
pub async fn with_namespace(
    ctx: &Context,
    app: &HelmApp,
    o: &Observed,
) -> Result<Outcome, DeliveryError> {
    let (ns, release) = (&o.target.namespace, &o.target.release);
    let message = format!("namespace {ns} is gone or terminating: {release} goes with it");
    let reason = Reason::UninstallSucceeded.as_str();
    ctx.recorder.event(app, EventType::Normal, reason, &message);
    let_go(ctx, app).await
}

/// Uninstalls `o`'s release as the HelmApp's identity, then lets the
/// HelmApp go.
pub async fn run(ctx: &Context, app: &HelmApp, o: &mut Observed) -> Result<Outcome, DeliveryError> {
    // Its values, for scrubbing helm's message (none when they cannot be
    // read any more: the message is then as helm gave it).
    if let Ok(values) = crate::delivery::helmapp::observe::inputs::values(ctx, app, &[]).await {
        o.done.redactor = crate::delivery::helm::values::Redactor::of(&values);
    }
    let user = o.identity.user();
    match ctx
        .on(o)
        .helm
        .uninstall(&request(app, o, user.as_deref()))
        .await
    {
        None => {
            o.done.run_ended = Some(RunEnded::SlotBusy);
            return Ok(Outcome::Replan);
        }
        Some(Err(e)) if super::outage::outage(ctx, app, o, &e).await => {
            o.done.run_ended = Some(RunEnded::Outage);
            return Ok(Outcome::Replan);
        }
        Some(Err(e)) => {
            let message = e.summary(&o.done.redactor);
            if let Some(refused) = e.forbidden() {
                let refused = o.done.redactor.redact(&refused);
                return Ok(refused_run(o, "uninstall", &refused, &message));
            }
            o.done.run_ended = Some(RunEnded::UninstallFailed { message });
            return Ok(Outcome::Replan);
        }
        Some(Ok(())) => {
            let message = format!("uninstalled {}", o.target.key());
            let reason = Reason::UninstallSucceeded.as_str();
            ctx.recorder.event(app, EventType::Normal, reason, &message);
        }
    }
    let_go(ctx, app).await
}

/// `helm uninstall` of `o`'s release with `spec.uninstall`'s settings —
/// on deletion and as a remediation alike.
pub fn request<'a>(app: &'a HelmApp, o: &'a Observed, as_user: Option<&'a str>) -> Uninstall<'a> {
    let u = &app.spec.uninstall;
    Uninstall {
        release: &o.target.release,
        namespace: &o.target.namespace,
        as_user,
        timeout: o.timeouts.uninstall,
        no_hooks: u.disable_hooks,
        keep_history: u.keep_history,
        // `Unknown` (a spelling the schema refuses): helm's default.
        cascade: match u.deletion_propagation {
            DeletionPropagation::Unknown => "background",
            p => p.as_str(),
        },
        wait: u.wait,
    }
}

/// Removes our finalizer: the HelmApp may go.
pub async fn let_go(ctx: &Context, app: &HelmApp) -> Result<Outcome, DeliveryError> {
    crate::delivery::finalizer::set(&ctx.api_of(app), app, FINALIZER, false).await?;
    ctx.status.forget(app);
    Ok(Outcome::Finished(Action::done("finalized")))
}

/// The HelmApp goes and its release, whose storage someone else changed,
/// stays as it is: said in a Warning.
pub async fn leave_tampered(
    ctx: &Context,
    app: &HelmApp,
    message: &str,
) -> Result<Outcome, DeliveryError> {
    let message = format!(
        "{message}. The HelmApp is deleted without uninstalling: the release was left as it is"
    );
    let reason = crate::delivery::helmapp::decide::conditions::Reason::StorageTampered.as_str();
    ctx.recorder
        .event(app, record::EventType::Warning, reason, &message);
    let_go(ctx, app).await
}
