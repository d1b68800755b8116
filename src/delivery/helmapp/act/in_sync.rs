//! The release is deployed with this configuration: `Ready` (with `wait`,
//! once its objects are), and when to look again.

use runtime::Action;

use super::outcome::Outcome;
use crate::delivery::helmapp::decide::conditions::{self, READY, RELEASED, Reason};
use crate::delivery::helmapp::decide::observed::{Inputs, Observed};
use crate::delivery::helmapp::decide::ready::{NextLook, NotReady};

/// The release is deployed with this configuration: `Ready` once its
/// workloads are (with `wait`).
pub fn report(
    o: &mut Observed,
    revision: Option<i64>,
    not_ready: Option<NotReady>,
    next_look: NextLook,
) -> Outcome {
    let hash = o.hash().map(str::to_string);
    // The commit a Git source resolves to now, whether or not it changed
    // the release.
    if let Some(Inputs::Ready { chart, .. }) = &o.inputs
        && !chart.revision.is_empty()
    {
        o.status.source = Some(apis::helmapp::SourceStatus {
            revision: chart.revision.clone(),
        });
    }
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
    if let Some(NotReady {
        reason,
        message,
        again,
    }) = not_ready
    {
        conditions::set(&mut o.status, READY, false, reason, &message);
        return Outcome::Finished(Action::requeue_after(again, message));
    }
    let status = &mut o.status;
    // A change that waited for its window and was withdrawn: nothing
    // waits any more.
    let waited = conditions::has(status, RELEASED, false, Reason::OutsideChangeWindow);
    if moved || waited || !conditions::is_true(status, READY) {
        let message = "the release is deployed with this configuration";
        conditions::set(status, READY, true, Reason::UpToDate, message);
        conditions::set(status, RELEASED, true, Reason::UpToDate, message);
    }
    Outcome::Finished(match next_look {
        Some((after, why)) => Action::requeue_after(after, why),
        None => Action::done("up to date"),
    })
}
