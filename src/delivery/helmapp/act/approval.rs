//! A change that waits for approval (`spec.approval: manual`): computed
//! once per configuration by the render `kubectl hossted diff` shows — a
//! dry run of the very `helm upgrade --install` that approval would run,
//! against the live release's manifest — put in `status.pendingChange`
//! and one `AwaitingApproval` Event. Nothing else runs. Secret values are
//! masked in the diff, and only object names and counts leave it.

use apis::helmapp::{HelmApp, PendingChange, PendingObjects};
use record::EventType;
use runtime::Action;

use super::dry_run;
use super::outcome::{DeliveryError, Outcome, not_ready};
use crate::delivery::helm::manifest_diff::{self, ManifestDiff};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{self, APPROVED, READY, Reason};
use crate::delivery::helmapp::decide::observed::{Inputs, Observed};
use crate::delivery::names::APPROVE;

/// How many names of each list `status.pendingChange.objects` keeps.
const NAMES: usize = 50;

/// Shows the change waiting for `hash` (see the module docs).
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    hash: &str,
    stale: Option<&str>,
) -> Result<Outcome, DeliveryError> {
    let known = o
        .status
        .pending_change
        .as_ref()
        .is_some_and(|p| p.config_hash == hash);
    if !known {
        match preview(ctx, app, o).await {
            Ok(diff) => record(ctx, app, o, hash, &diff),
            Err(message) => {
                let message = format!("the change waiting for approval cannot be shown: {message}");
                not_ready(ctx, app, o, Reason::PreviewFailed, &message, true);
                return Ok(Outcome::retry(Reason::PreviewFailed, message));
            }
        }
    }
    let message = match stale {
        None => format!(
            "configuration {hash} waits for approval: annotate the HelmApp {APPROVE}={hash} (kubectl hossted approve)"
        ),
        Some(old) => format!(
            "{APPROVE} is {old}, not the pending configuration {hash}: nothing runs until it names {hash}"
        ),
    };
    let said = o
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == APPROVED && c.message == message);
    if stale.is_some() && !said {
        let reason = Reason::ApprovalStale.as_str();
        ctx.recorder
            .event(app, EventType::Warning, reason, &message);
    }
    let reason = Reason::AwaitingApproval;
    conditions::set(&mut o.status, APPROVED, false, reason, &message);
    conditions::set(&mut o.status, READY, false, reason, &message);
    Ok(Outcome::Finished(Action::done(reason.as_str())))
}

/// The pending change as status has it, and its one Event.
fn record(ctx: &Context, app: &HelmApp, o: &mut Observed, hash: &str, d: &ManifestDiff) {
    let version = match &o.inputs {
        Some(Inputs::Ready { chart, .. }) => chart.version.clone(),
        _ => String::new(),
    };
    let names = |v: &[String]| v.iter().take(NAMES).cloned().collect();
    let change = PendingChange {
        chart_version: version.clone(),
        config_hash: hash.to_string(),
        objects: PendingObjects {
            added: names(&d.added),
            changed: names(&d.changed),
            removed: names(&d.removed),
        },
        diff_lines: d.lines() as i64,
        since: o.now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let message = format!(
        "chart {} {version}, configuration {hash}: {} added, {} changed, {} removed, {} lines of diff; approve with {APPROVE}={hash}",
        app.spec.chart.name,
        d.added.len(),
        d.changed.len(),
        d.removed.len(),
        change.diff_lines,
    );
    let reason = Reason::AwaitingApproval.as_str();
    ctx.recorder.event(app, EventType::Normal, reason, &message);
    o.status.pending_change = Some(change);
}

/// The live manifest against the dry run of the run approval would start.
async fn preview(ctx: &Context, app: &HelmApp, o: &mut Observed) -> Result<ManifestDiff, String> {
    let (live, next) = dry_run::live_and_next(ctx, app, o).await?;
    Ok(manifest_diff::diff(&live, &next, &o.target.key()))
}

/// Once nothing waits for approval any more (it ran, the spec went back,
/// or `approval` is `auto` again): the pending change goes, and
/// `Approved` says so — written only when it changes.
pub fn settle(app: &HelmApp, o: &mut Observed) {
    o.status.pending_change = None;
    if app.spec.approval == apis::helmapp::Approval::Auto {
        o.status.conditions.retain(|c| c.type_ != APPROVED);
    } else if !conditions::is_true(&o.status, APPROVED) {
        let message = format!(
            "nothing waits for approval; the release runs configuration {}",
            o.status.config_hash
        );
        conditions::set(&mut o.status, APPROVED, true, Reason::Approved, &message);
    }
}
