//! A release held back: `Ready=False` with the reason the plan chose, and
//! when to look again.

use std::time::Duration;

use apis::helmapp::HelmApp;
use runtime::Action;

use super::outcome::{Outcome, not_ready};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::observed::Observed;

/// `Ready=False` with `reason` (a Warning when new), looked at again
/// after `after`.
pub fn recheck_later(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    reason: Reason,
    message: &str,
    after: Duration,
) -> Outcome {
    not_ready(ctx, app, o, reason, message, true);
    Outcome::Finished(Action::requeue_after(after, reason.as_str()))
}

/// `Ready=False` with `reason` (a Warning when new); looked at again when
/// something changes.
pub fn refuse(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    reason: Reason,
    message: &str,
) -> Outcome {
    not_ready(ctx, app, o, reason, message, true);
    Outcome::Finished(Action::done(format!("{reason}: {message}")))
}

/// `spec.suspend`: `Ready=False, Suspended`, without an Event (a chosen
/// pause); looked at again when the HelmApp changes.
pub fn suspended(ctx: &Context, app: &HelmApp, o: &mut Observed) -> Outcome {
    let message = "spec.suspend is true: no helm operation runs";
    not_ready(ctx, app, o, Reason::Suspended, message, false);
    Outcome::Finished(Action::done(format!("{}: {message}", Reason::Suspended)))
}
