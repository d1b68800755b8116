//! The report of a revision a run of this reconcile made (and tested, if
//! asked): done — or, with `wait`, `Progressing` until its objects are
//! known and judged (the next reconcile lists them: the run's storage
//! event re-queues, and so does this).

use apis::helmapp::HelmApp;
use runtime::Action;

use super::outcome::Outcome;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::observation::Observed;
use crate::delivery::helmapp::readiness;
use crate::delivery::helmapp::status::{self, READY};

/// Reports `revision` (see the module docs).
pub fn report(ctx: &Context, app: &HelmApp, o: &mut Observed, revision: i64) -> Outcome {
    if app.spec.wait {
        let jobs = app.spec.waits_for_jobs(&o.status.last_action);
        o.pending = readiness::pending(ctx, &o.target, jobs);
        o.pending
            .push(format!("the objects of revision {revision}"));
        o.readiness_polled = true;
        if let Some((reason, text, again)) = readiness::verdict(o, o.timeout) {
            status::set(&mut o.status, READY, false, reason, &text);
            return Outcome::Finished(Action::requeue_after(again, text));
        }
    }
    let message = format!("{}: revision {revision} released", o.target.key());
    // An object recorded without a digest (it differed from its manifest
    // when read after helm's apply: an edit in between) is checked by the
    // next reconcile — soon, whatever else wakes it.
    let unchecked = app.spec.drift_mode() != apis::helmapp::DriftMode::Disabled
        && o.status.inventory.iter().any(|e| e.checked.is_empty());
    Outcome::Finished(match unchecked {
        true => Action::requeue_after(std::time::Duration::from_secs(1), message),
        false => Action::done(message),
    })
}
