//! How an action ends, and the two ways an action reports a problem on
//! the HelmApp (shared by every action; decides nothing).

use apis::helmapp::HelmApp;
use record::EventType;
use runtime::Action;

use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::observed::Observed;
use crate::delivery::helmapp::status::{self, READY, RELEASED, Reason};

/// Why a reconcile must be retried (with backoff). Messages never carry a
/// value: helm's are redacted before they get here.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("writing to the API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Failed(String),
}

/// How an action ended.
#[derive(Debug)]
pub enum Outcome {
    /// Finished: the controller does this next.
    Finished(Action),
    /// Failed in a way trying again may fix: retried with backoff.
    Retry(String),
    /// The release changed: plan again from the updated observation.
    Replan,
}

/// `Ready=False` with `reason`, and a Warning Event when `warn` and the
/// reason is new.
pub fn refuse(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    reason: Reason,
    message: &str,
    warn: bool,
) {
    if warn && !status::has(&o.status, READY, false, reason) {
        ctx.recorder
            .event(app, EventType::Warning, reason.as_str(), message);
    }
    status::set(&mut o.status, READY, false, reason, message);
}

/// A failed attempt: `Ready=False` and `Released=False` with `reason` and
/// the (redacted) message, a Warning Event, and a retry with backoff.
pub fn failed(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    reason: Reason,
    message: &str,
) -> Outcome {
    status::set(&mut o.status, READY, false, reason, message);
    status::set(&mut o.status, RELEASED, false, reason, message);
    ctx.recorder
        .event(app, EventType::Warning, reason.as_str(), message);
    Outcome::Retry(message.to_string())
}
