//! Remediation after a failure: `helm rollback` to the last revision that
//! succeeded, or `helm uninstall` — recorded in the history, with an Event.

use apis::helmapp::{HelmApp, OnFailure};
use record::EventType;

use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::observed::Observed;
use crate::delivery::helmapp::status::{Reason, push_history};

/// Uninstalls a release whose install failed (nothing to roll back to).
pub async fn uninstall(ctx: &Context, app: &HelmApp, o: &mut Observed, hash: &str) -> String {
    run(ctx, app, o, OnFailure::Uninstall, hash).await
}

/// Applies `remedy`; says what was done.
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    remedy: OnFailure,
    hash: &str,
) -> String {
    let (ns, release) = (o.target.namespace.as_str(), o.target.release.as_str());
    let timeout = o.timeout;
    let user = o.identity.user();
    let as_user = user.as_deref();
    let outcome = match remedy {
        // To the last revision that succeeded.
        OnFailure::Rollback if o.status.revision > 0 => {
            ctx.helm
                .rollback(ns, release, o.status.revision, timeout, as_user)
                .await
        }
        OnFailure::Rollback => return "no rollback: no revision ever succeeded".into(),
        OnFailure::Uninstall => ctx.helm.uninstall(ns, release, timeout, as_user).await,
        OnFailure::None | OnFailure::Unknown => return "no remediation (onFailure: none)".into(),
    };
    let (result, said) = match outcome {
        Some(Ok(())) => ("succeeded", format!("{remedy} done")),
        Some(Err(e)) => (
            "failed",
            format!("{remedy} failed: {}", e.summary(&o.redactor)),
        ),
        None => (
            "failed",
            format!("{remedy} skipped: another helm run holds the release"),
        ),
    };
    let status = &mut o.status;
    let (revision, version) = (status.revision, status.chart_version.clone());
    push_history(status, remedy.as_str(), revision, &version, hash, result);
    status.last_action = remedy.as_str().into();
    let kind = if result == "succeeded" {
        EventType::Normal
    } else {
        EventType::Warning
    };
    let reason = if remedy == OnFailure::Rollback {
        Reason::RollbackPerformed
    } else {
        Reason::UninstallPerformed
    };
    ctx.recorder.event(app, kind, reason.as_str(), &said);
    said
}
