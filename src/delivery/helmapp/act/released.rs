//! The report of a revision a run of this reconcile made (and tested, if
//! asked): done — or, with `wait`, `Progressing` until its objects are
//! known and judged (the next reconcile lists them: the run's storage
//! event re-queues, and so does this).

use apis::helmapp::HelmApp;
use runtime::Action;

use super::outcome::Outcome;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{self, READY};
use crate::delivery::helmapp::decide::observed::Observed;
use crate::delivery::helmapp::observe::readiness;

/// Reports `revision` (see the module docs).
pub fn report(ctx: &Context, app: &HelmApp, o: &mut Observed, revision: i64) -> Outcome {
    if app.spec.wait {
        let jobs = app.spec.waits_for_jobs(&o.status.last_action);
        o.pending = readiness::pending(ctx, &o.target, jobs);
        o.pending
            .push(format!("the objects of revision {revision}"));
        o.readiness_polled = true;
        if let Some((reason, text, again)) = readiness::verdict(o, o.timeout) {
            conditions::set(&mut o.status, READY, false, reason, &text);
            return Outcome::Finished(Action::requeue_after(again, text));
        }
    }
    let message = format!("{}: revision {revision} released", o.target.key());
    // (Objects the record after the run cannot prove as applied are
    // looked at again soon: `drift::recheck_unverified`, once recorded.)
    Outcome::Finished(Action::done(message))
}
