//! How an action ends, and the two ways an action reports a problem on
//! the HelmApp (shared by every action; decides nothing).

use std::time::Duration;

use apis::helmapp::HelmApp;
use record::EventType;
use runtime::Action;

use crate::delivery::helmapp::context::{Context, Refusal};
use crate::delivery::helmapp::decide::conditions::{self, READY, RELEASED, Reason};
use crate::delivery::helmapp::decide::observed::{Observed, RunEnded};

/// Why a reconcile must be retried (with backoff). Messages never carry a
/// value: helm's are redacted before they get here.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// A read or write the API server refused or did not answer (the
    /// reconcile tells an outage from the rest by it).
    #[error("writing to the API: {0}")]
    Kube(#[from] kube::Error),
    #[error("building a request: {0}")]
    Request(#[from] kube::core::request::Error),
    /// A user that cannot be an `Impersonate-User` header.
    #[error("cannot impersonate {0}")]
    Impersonation(String),
    /// A storage Secret of helm's that does not decode.
    #[error("{secret}: not a release helm can read: {why}")]
    UnreadableRelease { secret: String, why: String },
    /// An action failed (`Ready=False` says `reason`): what an
    /// [`Outcome::Retry`] becomes for the controller, which backs off.
    #[error("{reason}: {message}")]
    Failed { reason: Reason, message: String },
}

/// How an action ended.
#[derive(Debug)]
pub enum Outcome {
    /// Finished: the controller does this next.
    Finished(Action),
    /// Failed in a way trying again may fix: retried with backoff;
    /// `Ready=False` says `reason`.
    Retry { reason: Reason, message: String },
    /// The release changed: plan again from the updated observation.
    Replan,
}

impl Outcome {
    /// A retry for `reason`, saying `message`.
    pub fn retry(reason: Reason, message: impl Into<String>) -> Self {
        Outcome::Retry {
            reason,
            message: message.into(),
        }
    }
}

/// `Ready=False` with `reason`, and a Warning Event when `warn` and the
/// reason is new.
pub fn not_ready(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    reason: Reason,
    message: &str,
    warn: bool,
) {
    if warn && !conditions::has(&o.status, READY, false, reason) {
        ctx.recorder
            .event(app, EventType::Warning, reason.as_str(), message);
    }
    conditions::set(&mut o.status, READY, false, reason, message);
}

/// helm's run of `action` was refused (`refused`: what the API said the
/// identity cannot do): recorded as the run's end, for the plan.
pub fn refused_run(o: &mut Observed, action: &str, refused: &str, helm_message: &str) -> Outcome {
    let message = forbidden_message(o, action, refused, helm_message);
    o.done.run_ended = Some(RunEnded::Forbidden { message });
    Outcome::Replan
}

/// Who was refused what, and how to grant it.
fn forbidden_message(o: &Observed, action: &str, refused: &str, helm_message: &str) -> String {
    let hint = match o.identity {
        crate::delivery::Identity::Operator => "grant it to the operator's ServiceAccount",
        crate::delivery::Identity::Kubeconfig => {
            "grant it in the remote cluster to the identity of the kubeConfig's credentials, or name a serviceAccountName there"
        }
        crate::delivery::Identity::ServiceAccount { .. } => {
            "grant it with a Role bound to that ServiceAccount, or name another in serviceAccountName"
        }
    };
    format!(
        "helm {action} ran as {} and was refused: it {refused}; {hint}. helm said: {helm_message}",
        o.identity
    )
}

/// The identity helm ran as may not do what the chart needs. A state, not
/// a failure: `Ready=False` and `Released=False` with reason `Forbidden`,
/// one Warning Event per new message, looked at again after `after` (RBAC
/// may be granted later) — it does not count against
/// `remediation.retries` and triggers no remediation.
pub fn forbidden(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    message: &str,
    after: Duration,
    inputs: String,
) -> Outcome {
    // New to the status (kept over restarts) and to this process (which
    // keeps it for a HelmApp being deleted, whose status is not written).
    let said = o.status.conditions.iter().any(|c| {
        c.type_ == READY && c.reason == Reason::Forbidden.as_str() && c.message == message
    });
    let key = super::super::context::run_key(app);
    let now = std::time::Instant::now();
    let seen = {
        let mut refused = ctx.refused.lock();
        let entry = refused.entry(key).or_insert_with(|| Refusal {
            since: now,
            message: String::new(),
            inputs: String::new(),
            again_at: now,
        });
        entry.inputs = inputs;
        entry.again_at = now + after;
        std::mem::replace(&mut entry.message, message.to_string()) == message
    };
    let new = !said && !seen;
    conditions::set(&mut o.status, READY, false, Reason::Forbidden, message);
    conditions::set(&mut o.status, RELEASED, false, Reason::Forbidden, message);
    if new {
        ctx.recorder
            .event(app, EventType::Warning, Reason::Forbidden.as_str(), message);
    }
    Outcome::Finished(Action::requeue_after(after, "Forbidden: looked at again"))
}

/// A refusal waited out: `Ready=False` and `Released=False`, `Forbidden`,
/// as the refusal said (no Event: it was warned), and looked at again when
/// its wait ends — what this process remembers of it left as it was.
pub fn still_refused(o: &mut Observed, message: &str, after: Duration) -> Outcome {
    conditions::set(&mut o.status, READY, false, Reason::Forbidden, message);
    conditions::set(&mut o.status, RELEASED, false, Reason::Forbidden, message);
    Outcome::Finished(Action::requeue_after(
        after,
        "Forbidden: waits for its inputs to change or its wait to end",
    ))
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
    conditions::set(&mut o.status, READY, false, reason, message);
    conditions::set(&mut o.status, RELEASED, false, reason, message);
    ctx.recorder
        .event(app, EventType::Warning, reason.as_str(), message);
    Outcome::retry(reason, message)
}
