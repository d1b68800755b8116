//! State: what the release is, decided from an [`Observed`] alone (pure,
//! no I/O; unit-tested as a table in `tests`). The rules are docs/delivery.md's
//! "Rules", in the order they apply.

use crate::lean::helm::HelmStatus;
use std::time::Duration;

use apis::helmapp::{
    Approval, DriftMode, DriftedObject, HelmApp, HistoryAction, HistoryResult, StrategyName,
};

use crate::delivery::helmapp::decide::conditions::{self, READY, RELEASED, Reason};
use crate::delivery::helmapp::decide::observed::{Inputs, Observed, Rendering, RunEnded, Stored};

pub use crate::delivery::helmapp::decide::release_state::{Change, OutOfSyncCause, ReleaseState};
pub use held::{cluster_unavailable, held_back, poll_after};

mod held;

/// The state of `app`'s release (see the module docs): after a helm run of
/// this reconcile, what that run came to; else held to its change windows.
pub fn decide(o: &Observed, app: &HelmApp) -> ReleaseState {
    if let Some(ended) = &o.done.run_ended {
        return after_run(ended, o, app);
    }
    within_windows(release_state(o, app), o)
}

/// What follows a helm run of this reconcile: its tests, its report, or
/// what its failure calls for (Flux's remediation is chosen the same way,
/// from the failed release).
fn after_run(ended: &RunEnded, o: &Observed, app: &HelmApp) -> ReleaseState {
    match ended {
        RunEnded::Released {
            run,
            revision,
            before,
        } if app.spec.test.enable => ReleaseState::Untested {
            run: *run,
            revision: *revision,
            before: *before,
        },
        RunEnded::Released { run, revision, .. } | RunEnded::Tested { run, revision } => {
            ReleaseState::JustReleased {
                run: *run,
                revision: *revision,
            }
        }
        RunEnded::Failed { run, message } => ReleaseState::RunFailed {
            run: *run,
            message: message.clone(),
            failures: o.status.failures,
            last_succeeded: o.status.revision,
        },
        RunEnded::SlotBusy => ReleaseState::HeldByHelm,
        RunEnded::NotStarted {
            reason,
            message,
            retry,
        } => ReleaseState::NotStarted {
            reason: *reason,
            message: message.clone(),
            retry: *retry,
        },
        RunEnded::Outage => ReleaseState::WaitingForApi,
        RunEnded::UninstallFailed { message } => ReleaseState::UninstallFailed {
            message: message.clone(),
        },
        // The longer of what the status and this process have seen: a
        // HelmApp being deleted gets no status write.
        RunEnded::Forbidden { message } => ReleaseState::Forbidden {
            message: message.clone(),
            waited: held::waited(o, Reason::Forbidden)
                .max(o.refused.as_ref().map(|r| r.lasted).unwrap_or_default()),
        },
    }
}

/// When a window closes a change that no other window will open: looked at
/// again after this, in case the time zone's rules or the clock moved.
const NO_WINDOW_RECHECK: Duration = Duration::from_secs(3600);

/// Outside `spec.changeWindows`, a state that would run helm waits
/// instead (docs/change-windows.md). `hossted.com/force-at` overrides;
/// drift repair goes ahead with `repairAnytime`; a deletion whose windows
/// cannot be read goes ahead.
fn within_windows(state: ReleaseState, o: &Observed) -> ReleaseState {
    use crate::delivery::helmapp::decide::windows::{Seen, Verdict};
    if o.windows == Seen::Unset {
        return state;
    }
    let change = match &state {
        ReleaseState::Absent => Change::Install,
        ReleaseState::OutOfSync { .. } | ReleaseState::ChartRenamed { .. } => Change::Upgrade,
        // A release going with its namespace is not held: the namespace's
        // deletion takes its objects whatever the windows say, and a
        // finalizer kept would keep that namespace terminating.
        ReleaseState::Deleting { uninstall: true } => Change::Uninstall,
        ReleaseState::Drifted { .. } | ReleaseState::FieldsDrifted { .. } => Change::Repair,
        _ => return state,
    };
    if o.forced() && change != Change::Uninstall {
        return state;
    }
    let (repair_anytime, verdict) = match &o.windows {
        Seen::Unset => return state,
        Seen::Invalid(_) if change == Change::Uninstall => return state,
        Seen::Invalid(message) => {
            return ReleaseState::Refused {
                reason: Reason::InvalidChangeWindow,
                message: message.clone(),
            };
        }
        Seen::Read {
            repair_anytime,
            verdict,
        } => (*repair_anytime, *verdict),
    };
    if change == Change::Repair && repair_anytime {
        return state;
    }
    match verdict {
        Verdict::Open => state,
        Verdict::Closed { opens } => ReleaseState::OutsideWindow {
            change,
            opens,
            after: opens
                .and_then(|t| (t - o.now).to_std().ok())
                .map_or(NO_WINDOW_RECHECK, |d| d.min(NO_WINDOW_RECHECK)),
        },
    }
}

/// The state of `app`'s release, its change windows aside.
fn release_state(o: &Observed, app: &HelmApp) -> ReleaseState {
    // A deletion that uninstalls nothing needs no cluster; a suspended app
    // says so first (`held_back`).
    let deleting_now = app.metadata.deletion_timestamp.is_some();
    let lets_go = deleting_now && !app.spec.uninstall_on_delete;
    let suspended = !deleting_now && app.spec.suspend;
    if let Some(state) = cluster_unavailable(o)
        .filter(|_| !lets_go && !suspended)
        .or_else(|| tampered(o, app))
        .or_else(|| deleting(o, app))
        .or_else(|| held_back(o, app))
    {
        return state;
    }
    let hash = match hash_of(o) {
        Ok(hash) => hash,
        Err(state) => return state,
    };
    // Our own last run is newer than the cached storage (its watch event
    // has not arrived yet): what we wrote is the truth.
    let cached_revision = o.newest.as_ref().map_or(0, |r| r.revision);
    if o.status.config_hash == hash
        && o.status.revision > cached_revision
        && conditions::is_true(&o.status, RELEASED)
        && !o.forced()
    {
        return ReleaseState::InSync { revision: None };
    }
    // An `uninstalled` entry (kept by `uninstall.keepHistory`) is no
    // release: helm installs over it — unless a live HelmApp still owns it.
    let newest = o
        .newest
        .as_ref()
        .filter(|n| n.status != HelmStatus::Uninstalled || (n.owner != o.uid && o.owner_is_live));
    let Some(newest) = newest else {
        return awaiting_approval(o, app, hash, None)
            .or_else(|| exhausted(o, hash))
            .or_else(|| backing_off(o, app, hash))
            .unwrap_or(ReleaseState::Absent);
    };
    if newest.owner == o.uid && newest.status.is_pending() {
        return pending(o, app, newest);
    }
    let why = if newest.owner != o.uid {
        if o.owner_is_live {
            let message = format!(
                "release {} belongs to another HelmApp (uid {}); it is never taken",
                o.target.key(),
                newest.owner
            );
            return ReleaseState::OwnedByOther { message };
        }
        if !app.spec.adopt {
            let message = format!(
                "release {} exists and no live HelmApp owns it; set spec.adopt: true to take it over",
                o.target.key()
            );
            return ReleaseState::NotOurs { message };
        }
        if let Some(message) = &o.adoption_refused {
            return ReleaseState::AdoptionRefused {
                message: message.clone(),
            };
        }
        if newest.status == HelmStatus::Deployed && !o.forced() {
            match o.done.adoption_render {
                None => return ReleaseState::AdoptionToRender,
                Some(Rendering::Same) => {
                    return ReleaseState::AdoptAsIs {
                        revision: newest.revision,
                    };
                }
                Some(Rendering::Differs) => {}
            }
        }
        OutOfSyncCause::Adopt
    } else if newest.status != HelmStatus::Deployed {
        OutOfSyncCause::NotDeployed
    } else if newest.hash != hash {
        OutOfSyncCause::Changed
    } else if o.forced() {
        OutOfSyncCause::Forced
    } else if test_failed(o, app, hash) {
        OutOfSyncCause::TestFailed
    } else {
        return deployed(o, app, newest);
    };
    let ran = (newest.owner == o.uid).then_some(newest.hash.as_str());
    let change = chart_renamed(o, app, newest).unwrap_or(ReleaseState::OutOfSync { why });
    awaiting_approval(o, app, hash, ran)
        .or_else(|| exhausted(o, hash))
        .or_else(|| backing_off(o, app, hash))
        .unwrap_or(change)
}

/// Our release is of a chart whose name is not the configuration's, and
/// `upgrade.chartNameChangeStrategy` says `Reinstall` (Flux's default; a
/// spelling the schema refuses keeps the release: in place). The release's
/// name is the one our own last install or upgrade made
/// (`status.chartName`, from helm's output) — never the storage's, which
/// whoever may write Secrets there could plant; unknown (a rollback, an
/// adoption, a status from before the field): in place.
fn chart_renamed(o: &Observed, app: &HelmApp, newest: &Stored) -> Option<ReleaseState> {
    use apis::helmapp::ChartNameChangeStrategy;
    let to = o.chart_name.as_deref()?;
    let from = o.status.chart_name.as_str();
    let reinstall =
        app.spec.upgrade.chart_name_change_strategy == ChartNameChangeStrategy::Reinstall;
    (reinstall && newest.owner == o.uid && !from.is_empty() && from != to).then(|| {
        ReleaseState::ChartRenamed {
            from: from.to_string(),
            to: to.to_string(),
        }
    })
}

/// With `spec.approval: manual` (or a spelling the schema does not allow:
/// the safe side), a configuration that is not the one our newest
/// revision was made with (`ran`) waits until `hossted.com/approve` names
/// it. A retry, a repair or a forced upgrade of what already ran is not
/// held back: that was approved when it first ran.
fn awaiting_approval(
    o: &Observed,
    app: &HelmApp,
    hash: &str,
    ran: Option<&str>,
) -> Option<ReleaseState> {
    if app.spec.approval == Approval::Auto || ran == Some(hash) || o.approve == hash {
        return None;
    }
    let chart_version = match &o.inputs {
        Some(Inputs::Ready { chart, .. }) => chart.version.clone(),
        _ => String::new(),
    };
    Some(ReleaseState::AwaitingApproval {
        hash: hash.to_string(),
        chart_version,
        stale: (!o.approve.is_empty()).then(|| o.approve.clone()),
    })
}

/// The hash of the inputs, or the state their lack puts the release in.
fn hash_of(o: &Observed) -> Result<&str, ReleaseState> {
    match &o.inputs {
        Some(Inputs::Ready { hash, .. }) => Ok(hash),
        Some(Inputs::ChartPending) => Err(ReleaseState::FetchingChart),
        Some(Inputs::ChartUnavailable(p)) => Err(ReleaseState::ChartUnavailable {
            reason: p.reason,
            message: p.message.clone(),
            retry: p.retry.then(|| held::waited(o, p.reason)),
        }),
        Some(Inputs::ValuesInvalid(message)) => Err(ReleaseState::Refused {
            reason: Reason::ValuesInvalid,
            message: message.clone(),
        }),
        Some(Inputs::OutOfBounds(message)) => Err(ReleaseState::Refused {
            reason: Reason::InvalidValues,
            message: message.clone(),
        }),
        None => Err(ReleaseState::ChartUnavailable {
            reason: Reason::ChartUnavailable,
            message: "the chart was not looked up".into(),
            retry: Some(held::waited(o, Reason::ChartUnavailable)),
        }),
    }
}

/// The wait before attempt `failures + 1` of one configuration: 1 s
/// doubling per failure, at most 5 minutes (`remediation.retries: -1`
/// retries for ever at that pace).
pub fn retry_backoff(failures: i32) -> Duration {
    let doublings = failures.saturating_sub(1).clamp(0, 16) as u32;
    Duration::from_secs(1u64 << doublings).min(Duration::from_secs(300))
}

/// `retryInterval` when not given (Flux's).
const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(300);

/// The interval of `RetryOnFailure`, when it is the strategy of the
/// action that failed (`install`, else an upgrade — a repair is one):
/// that action is tried again at it, for ever, with no remediation.
pub fn retry_on_failure(app: &HelmApp, install: bool) -> Option<Duration> {
    let strategy = match install {
        true => app.spec.install.strategy.as_ref(),
        false => app.spec.upgrade.strategy.as_ref(),
    }?;
    (strategy.name == StrategyName::RetryOnFailure).then(|| {
        crate::duration::parse(&strategy.retry_interval)
            .ok()
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_RETRY_INTERVAL)
            .clamp(RETRY_INTERVAL_BOUNDS.0, RETRY_INTERVAL_BOUNDS.1)
    })
}

/// `retryInterval` is held within these: a failing release is not run
/// back to back (each failed run writes a revision, whose event wakes the
/// HelmApp at once), nor put off past any timer's reach.
pub const RETRY_INTERVAL_BOUNDS: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(24 * 3600));

/// Backing off when the newest attempt of this configuration (install,
/// upgrade or test) failed less than [`retry_backoff`] ago — or, under
/// `RetryOnFailure`, its `retryInterval` — unless a new `reconcile-at` or
/// `force-at` asks for a try now.
fn backing_off(o: &Observed, app: &HelmApp, hash: &str) -> Option<ReleaseState> {
    let s = &o.status;
    if s.failures <= 0 || o.reconcile_at != s.last_handled_reconcile_at || o.forced() {
        return None;
    }
    let last = s
        .history
        .iter()
        .find(|h| h.action.attempts_configuration())?;
    if last.result != HistoryResult::Failed || last.config_hash != hash {
        return None;
    }
    let at = chrono::DateTime::parse_from_rfc3339(&last.time).ok()?;
    let since = (o.now - at.with_timezone(&chrono::Utc))
        .to_std()
        .unwrap_or_default();
    let wait = match last.action {
        HistoryAction::Install => retry_on_failure(app, true),
        HistoryAction::Upgrade => retry_on_failure(app, false),
        _ => None,
    }
    .unwrap_or_else(|| retry_backoff(s.failures));
    let remaining = wait.checked_sub(since)?;
    (!remaining.is_zero()).then_some(ReleaseState::BackingOff { remaining })
}

/// Deployed with this configuration: in sync, or drifted (deleted
/// objects; edited fields when they are put back).
fn deployed(o: &Observed, app: &HelmApp, newest: &Stored) -> ReleaseState {
    if !o.missing.is_empty() {
        return ReleaseState::Drifted {
            objects: o.missing.clone(),
        };
    }
    if app.spec.drift_mode() == DriftMode::Enabled && !o.drift.drifted.is_empty() {
        let objects = o
            .drift
            .drifted
            .iter()
            .map(|d| describe(&d.object))
            .collect();
        return ReleaseState::FieldsDrifted { objects };
    }
    ReleaseState::InSync {
        revision: Some(newest.revision),
    }
}

/// The last action on this configuration was a `helm test` that failed,
/// and failures are not ignored.
fn test_failed(o: &Observed, app: &HelmApp, hash: &str) -> bool {
    !app.spec.test.ignore_failures
        && o.status.failures > 0
        && o.status.history.first().is_some_and(|h| {
            h.action == HistoryAction::Test
                && h.result == HistoryResult::Failed
                && h.config_hash == hash
        })
}

/// `Kind namespace/name (fields)`.
pub fn describe(d: &DriftedObject) -> String {
    let at = match d.namespace.as_str() {
        "" => d.name.clone(),
        ns => format!("{ns}/{}", d.name),
    };
    format!("{} {at} ({})", d.kind, d.fields.join(", "))
}

/// Being deleted: the release is uninstalled when it is ours, asked for,
/// and not that of an operator-made app whose project is gone.
fn deleting(o: &Observed, app: &HelmApp) -> Option<ReleaseState> {
    app.metadata.deletion_timestamp.as_ref()?;
    // An `uninstalled` entry (kept history) has nothing left to uninstall.
    let ours = o
        .newest
        .as_ref()
        .is_some_and(|r| r.owner == o.uid && r.status != HelmStatus::Uninstalled);
    let uninstall = ours && app.spec.uninstall_on_delete && !o.project_gone;
    Some(match uninstall && o.namespace_going {
        true => ReleaseState::GoesWithNamespace,
        false => ReleaseState::Deleting { uninstall },
    })
}

/// Storage changed by someone else, decided before anything else: even a
/// deletion runs no helm on it (but suspension and refusals say more).
fn tampered(o: &Observed, app: &HelmApp) -> Option<ReleaseState> {
    let message = o.tampered.as_ref()?;
    let deleting = app.metadata.deletion_timestamp.is_some();
    if !deleting && held_back(o, app).is_some() {
        return None;
    }
    // A revision our own stopped operator may have left: proven by a
    // render of this configuration, or taken as tampered. Left pending,
    // it is unlocked first — a rewrite of its status alone, as the
    // HelmApp's identity, that acts on nothing it lists — since helm
    // renders no upgrade of a pending release.
    if let Some(revision) = o.own_unrecorded {
        if let Some(newest) = o.newest.as_ref().filter(|n| {
            n.revision == revision
                && n.status.is_pending()
                && o.done.own_render_of(revision).is_none()
        }) {
            return Some(pending(o, app, newest));
        }
        match o.done.own_render_of(revision) {
            // The render needs the chart and the values: their lack is
            // the state until they are had (a restart fetches the chart
            // again), not a verdict on the revision.
            None if !deleting && o.inputs.is_some() => {
                if let Err(lacking) = hash_of(o) {
                    return Some(lacking);
                }
                return Some(ReleaseState::OwnRunToRender { revision });
            }
            None => return Some(ReleaseState::OwnRunToRender { revision }),
            Some(Rendering::Same) => return Some(ReleaseState::OwnRunRendered { revision }),
            Some(Rendering::Differs) => {}
        }
    }
    Some(ReleaseState::Tampered {
        message: message.clone(),
        deleting,
    })
}

/// A release of ours left `pending-*`: held by our helm; stuck when the
/// helm that left it ran before this process led (a pod killed
/// mid-upgrade: that helm is gone); else locked until `timeout` has passed
/// since helm last touched it (a helm not ours may run on it), then stuck.
fn pending(o: &Observed, app: &HelmApp, newest: &Stored) -> ReleaseState {
    if o.busy {
        return ReleaseState::HeldByHelm;
    }
    let timeout = o.timeout;
    let touched = chrono::DateTime::parse_from_rfc3339(&newest.updated)
        .map(|t| t.with_timezone(&chrono::Utc))
        .ok();
    let (key, state, since) = (o.target.key(), &newest.status, &newest.updated);
    if touched.is_some_and(|t| t < o.leading_since) {
        let message = format!(
            "release {key} is {state} since {since}, before this operator took over: the helm that ran it went with its operator; marked failed, as helm does when it gives up"
        );
        return ReleaseState::Stuck { message };
    }
    if let (Some(t), Some(ended)) = (touched, o.our_helm_ended)
        && t <= ended
    {
        let message = format!(
            "release {key} is {state} since {since}, left so by our own helm, which ended at {} without writing its end (the API server did not answer): marked failed, as helm does when it gives up",
            ended.to_rfc3339()
        );
        return ReleaseState::Stuck { message };
    }
    let pending_for = touched
        .map(|t| (o.now - t).to_std().unwrap_or_default())
        .unwrap_or(timeout);
    if pending_for < timeout {
        let message = format!(
            "release {key} is {state} since {since} and no helm of ours runs on it; unlocked after spec.timeout ({})",
            app.spec.timeout
        );
        return ReleaseState::Locked {
            message,
            remaining: timeout - pending_for,
        };
    }
    let message = format!(
        "release {key} was {state} for {}s with no helm running: marked failed, as helm does after a timeout",
        pending_for.as_secs()
    );
    ReleaseState::Stuck { message }
}

/// Whether the attempts at `hash` start afresh, their failures forgotten:
/// the configuration changed since the last attempt, or
/// `hossted.com/reconcile-at` or `-force-at` has a new value. The one rule,
/// read by [`exhausted`] and by the run that resets the count.
pub fn starts_afresh(o: &Observed, hash: &str) -> bool {
    let s = &o.status;
    o.reconcile_at != s.last_handled_reconcile_at
        || o.forced()
        || s.history.first().is_some_and(|h| h.config_hash != hash)
}

/// Spent retries run nothing — unless the configuration changed since the
/// last attempt or `hossted.com/reconcile-at` or `-force-at` has a new
/// value, which start them afresh.
fn exhausted(o: &Observed, hash: &str) -> Option<ReleaseState> {
    let s = &o.status;
    (!starts_afresh(o, hash)
        && s.failures > 0
        && (conditions::has(s, READY, false, Reason::RetriesExhausted)
            || conditions::has(s, READY, false, Reason::MissingRollbackTarget)))
    .then_some(ReleaseState::RetriesExhausted)
}

#[cfg(test)]
mod approval_tests;
#[cfg(test)]
mod tenancy_tests;
#[cfg(test)]
pub(crate) mod tests;
