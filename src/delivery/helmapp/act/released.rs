//! The report of a revision a run of this reconcile made (and tested, if
//! asked), once what the run left is recorded (`plan::Step::RecordRun`):
//! done — or, with `wait`, `Ready=False` as the plan judged it
//! (`Progressing` while an object is not ready, or not yet in the cache
//! at the generation helm applied; its event re-queues, and so does
//! this).

use runtime::Action;

use super::outcome::Outcome;
use crate::delivery::helmapp::decide::conditions::{self, READY};
use crate::delivery::helmapp::decide::observed::Observed;
use crate::delivery::helmapp::decide::ready::NotReady;

/// Reports `revision` (see the module docs).
pub fn report(o: &mut Observed, revision: i64, not_ready: Option<NotReady>) -> Outcome {
    if let Some(NotReady {
        reason,
        message,
        again,
    }) = not_ready
    {
        conditions::set(&mut o.status, READY, false, reason, &message);
        return Outcome::Finished(Action::requeue_after(again, message));
    }
    let message = format!("{}: revision {revision} released", o.target.key());
    // (Objects the record after the run cannot prove as applied are
    // looked at again soon: `drift::recheck_unverified`, once recorded.)
    Outcome::Finished(Action::done(message))
}
