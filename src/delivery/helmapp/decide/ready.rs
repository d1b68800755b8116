//! Whether a release is Ready, judged from what observe found of its
//! objects (`Observed::pending`, `readiness_failed`), and when a release
//! in sync is looked at again. Pure.

use std::time::{Duration, Instant};

use apis::helmapp::HelmAppStatus;

use crate::delivery::helmapp::decide::conditions::{self, READY, Reason};
use crate::delivery::helmapp::decide::observed::{Observed, RunEnded, RunKind};

/// Why the release is not Ready yet, and when to look again.
#[derive(Debug, Clone, PartialEq)]
pub struct NotReady {
    pub reason: Reason,
    pub message: String,
    pub again: Duration,
}

/// When a release in sync is looked at again, and why (`None`: when
/// something changes).
pub type NextLook = Option<(Duration, &'static str)>;

/// How soon a release waiting on objects that no cache follows is looked
/// at again.
const POLL: Duration = Duration::from_secs(5);

/// Not ready while an object failed or `pending` is not empty: a failed
/// object at once (`ReadinessFailed`, with its message); else
/// `Progressing` until `timeout` has passed since the last operation, then
/// `ReadinessTimeout` (reported, not remediated); with when to look again
/// (a workload's change re-queues sooner; objects read by request are read
/// again every few seconds while the release waits).
pub fn verdict(o: &Observed, timeout: Duration) -> Option<NotReady> {
    let status = &o.status;
    if let Some(failed) = &o.readiness_failed {
        return Some(NotReady {
            reason: Reason::ReadinessFailed,
            message: failed.clone(),
            again: POLL * 2,
        });
    }
    if o.pending.is_empty() {
        return None;
    }
    let since = status
        .history
        .first()
        .and_then(|h| chrono::DateTime::parse_from_rfc3339(&h.time).ok())
        .map(|t| {
            (o.now - t.with_timezone(&chrono::Utc))
                .to_std()
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let (reason, again) = if since >= timeout {
        (Reason::ReadinessTimeout, Duration::from_secs(300))
    } else if o.readiness_polled {
        (Reason::Progressing, (timeout - since).min(POLL))
    } else {
        (Reason::Progressing, timeout - since)
    };
    let message = format!(
        "waiting for {} to be ready (spec.wait)",
        o.pending.join(", ")
    );
    Some(NotReady {
        reason,
        message,
        again,
    })
}

/// How far past the readiness timeout the record of a first release may
/// stay held ([`hold`]): the verdict's clock starts at the run's history
/// entry (whole seconds), a little before the hold's; at the hold's end
/// the verdict is `ReadinessTimeout`, written once, not `Progressing` and
/// then the timeout.
const PAST_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest a record is held ([`hold`]), whatever the `timeout`.
///
/// A held record exists in this process only: a crash, a lost lease or a
/// move to another shard loses it, and the next operator must prove the
/// run its own by a render (`Step::RenderOwnRun`) — a proof a spec edited
/// meanwhile weakens to the objects' names. The cap bounds that window.
/// Two minutes cover the rollouts of the delivery benchmark's wave of
/// 1,000 installs, which kube-controller-manager finishes up to 92 s after
/// their run; a slower rollout is written `Progressing` at the cap, then
/// with its verdict.
pub const HOLD_CAP: Duration = Duration::from_secs(120);

/// Whether this reconcile's status is held back in this process rather
/// than written, and until when (`None`: written now).
///
/// A first install is recorded in the status; with `wait` it is
/// `Progressing` until its objects are ready, and then `Ready` is
/// written: two writes, minutes apart on a busy cluster. Instead the
/// record is held from its run until its readiness verdict — `Ready`, a
/// failed object, or `timeout` (plus [`PAST_TIMEOUT`]), at most
/// [`HOLD_CAP`] — and written with it in one request, as helm's own `--wait` reports a release once (a
/// workload's event re-queues; so does the verdict's own look again).
/// Also written before the uninstall of a deleted HelmApp, and when the
/// controller drains on a shutdown. Meanwhile the published status shows
/// the run's intent with `Ready=False`, `Progressing`, "installing
/// revision N" (`act::intent`).
///
/// Held only for an install whose published status shows no revision,
/// and no `Ready` or `Ready=False` for `Progressing` — nobody (a `dependsOn`, a HelmAppSet's
/// rollout, a user) reads a stale `Ready=True`, an old failure or an
/// older revision meanwhile — and only when this reconcile handled no
/// annotation (`reconcile-at`, `force-at`, an approval): what it consumed
/// is written at once, never lost with a held status. A stop without the
/// drain (a crash) loses the held record, never the release: the next
/// process proves the run its own by a render (`Step::RenderOwnRun`).
pub fn hold(
    o: &Observed,
    published: &HelmAppStatus,
    held_until: Option<Instant>,
    now: Instant,
) -> Option<Instant> {
    let progressing = |s: &HelmAppStatus| conditions::has(s, READY, false, Reason::Progressing);
    let unjudged = crate::condition::status(&published.conditions, READY).is_none();
    let first = published.revision == 0 && (unjudged || progressing(published));
    let consumed = o.status.last_handled_reconcile_at != published.last_handled_reconcile_at
        || o.status.last_handled_force_at != published.last_handled_force_at
        || o.status.pending_change != published.pending_change;
    if !first || consumed || !progressing(&o.status) {
        return None;
    }
    let installed_now = o.done.recorded
        && matches!(
            o.done.run_ended,
            Some(
                RunEnded::Released {
                    run: RunKind::Install,
                    ..
                } | RunEnded::Tested {
                    run: RunKind::Install,
                    ..
                }
            )
        );
    match held_until {
        Some(until) if until > now => Some(until),
        Some(_) => None,
        None if installed_now => Some(now + (o.timeout + PAST_TIMEOUT).min(HOLD_CAP)),
        None => None,
    }
}

/// A release in sync is looked at again when an object of a kind no
/// informer watches is due for its drift look, or the chart's range and
/// newest version are due to be resolved again — whichever comes first.
pub fn next_look(o: &Observed) -> NextLook {
    match (o.drift.poll_after, o.resolve_after) {
        (Some(d), Some(r)) if r < d => Some((r, "up to date; next resolution")),
        (Some(d), _) => Some((d, "up to date; next drift look")),
        (None, Some(r)) => Some((r, "up to date; next resolution")),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::helmapp::decide::state::tests::observed;

    fn with_ready(value: Option<(bool, Reason)>) -> HelmAppStatus {
        let mut s = HelmAppStatus::default();
        if let Some((value, reason)) = value {
            conditions::set(&mut s, READY, value, reason, "m");
        }
        s
    }

    /// An observation reporting `ready`, after a run of `ran` in this
    /// reconcile (recorded) or none.
    fn reported(ready: Option<(bool, Reason)>, ran: Option<RunKind>) -> Observed {
        let mut o = observed();
        // A timeout below the hold's cap.
        o.timeout = Duration::from_secs(60);
        o.status = with_ready(ready);
        if let Some(run) = ran {
            o.done.recorded = true;
            o.done.run_ended = Some(RunEnded::Released {
                run,
                revision: 1,
                before: 0,
            });
        }
        o
    }

    /// The rows of the rule: held only after an install of this
    /// reconcile, until its readiness times out, only while it is `Progressing` and the published status
    /// has neither a revision nor a judgement, never when the reconcile
    /// consumed an annotation, and never past its instant.
    #[test]
    fn a_record_is_held_only_for_a_first_rollout_and_never_past_its_hold() {
        let now = Instant::now();
        let progressing = Some((false, Reason::Progressing));
        let nothing = HelmAppStatus::default();
        let o = reported(progressing, Some(RunKind::Install));
        // Until its verdict: readiness times out after `timeout` (at most
        // the cap; the cap's own row is below).
        assert!(o.timeout + PAST_TIMEOUT <= HOLD_CAP, "{:?}", o.timeout);
        let end = now + o.timeout + PAST_TIMEOUT;
        assert_eq!(hold(&o, &nothing, None, now), Some(end), "a first install");
        let mut published = with_ready(progressing);
        assert_eq!(
            hold(&o, &published, None, now),
            Some(end),
            "Progressing published, no revision yet (a hold of a run before, written)"
        );
        published.revision = 1;
        assert_eq!(
            hold(&o, &published, None, now),
            None,
            "a revision published"
        );
        for published in [
            with_ready(Some((true, Reason::UpgradeSucceeded))),
            with_ready(Some((false, Reason::InstallFailed))),
        ] {
            assert_eq!(
                hold(&o, &published, None, now),
                None,
                "{published:?}: not stale"
            );
        }
        for ran in [Some(RunKind::Upgrade), Some(RunKind::Repair), None] {
            let o = reported(progressing, ran);
            assert_eq!(
                hold(&o, &nothing, None, now),
                None,
                "{ran:?}: no first install"
            );
        }
        for status in [
            Some((true, Reason::InstallSucceeded)),
            Some((false, Reason::ReadinessFailed)),
            Some((false, Reason::InstallFailed)),
            None,
        ] {
            let o = reported(status, Some(RunKind::Install));
            assert_eq!(
                hold(&o, &nothing, None, now),
                None,
                "{status:?}: written at once"
            );
        }
        // What the reconcile consumed is written at once.
        for consume in [
            (|o: &mut Observed| o.status.last_handled_reconcile_at = "t".into())
                as fn(&mut Observed),
            |o| o.status.last_handled_force_at = "t".into(),
            |o| {
                o.status.pending_change = Some(Default::default());
            },
        ] {
            let mut o = reported(progressing, Some(RunKind::Install));
            consume(&mut o);
            assert_eq!(hold(&o, &nothing, None, now), None, "{:?}", o.status);
        }
        // A hold in place: kept until its instant, by a reconcile without a run.
        let later = now + o.timeout / 2;
        let o = reported(progressing, None);
        assert_eq!(hold(&o, &nothing, Some(end), later), Some(end));
        assert_eq!(hold(&o, &nothing, Some(end), end), None, "ended");
        let o = reported(progressing, Some(RunKind::Install));
        assert_eq!(
            hold(&o, &nothing, Some(now), end),
            None,
            "a hold that ended is not restarted"
        );
        let ready = reported(Some((true, Reason::InstallSucceeded)), None);
        assert_eq!(
            hold(&ready, &nothing, Some(end), later),
            None,
            "Ready: written"
        );
        // A long timeout: held no longer than the cap.
        let mut slow = reported(progressing, Some(RunKind::Install));
        slow.timeout = Duration::from_secs(1800);
        assert_eq!(hold(&slow, &nothing, None, now), Some(now + HOLD_CAP));
    }
}
