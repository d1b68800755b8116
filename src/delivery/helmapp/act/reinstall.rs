//! The chart's name changed and `upgrade.chartNameChangeStrategy` says
//! `Reinstall` (Flux's default): `helm uninstall` of the release, then a
//! look again — the next plan finds no release and installs the new chart
//! as revision 1. The storage was checked by this reconcile's observe and
//! no helm ran since.

use std::time::Duration;

use apis::helmapp::{HelmApp, HistoryAction, HistoryResult};
use record::EventType;
use runtime::Action;

use super::outcome::Outcome;
use crate::delivery::helm::Uninstall;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{Reason, push_history};
use crate::delivery::helmapp::decide::observed::{Observed, RunEnded};

/// How soon the install follows: the storage informer's delete events
/// re-queue the HelmApp too.
const INSTALL_AFTER: Duration = Duration::from_secs(1);

/// Uninstalls `o`'s release of chart `from` for chart `to`.
pub async fn run(ctx: &Context, app: &HelmApp, o: &mut Observed, from: &str, to: &str) -> Outcome {
    let user = o.identity.user();
    // Waits for the objects to be gone whatever `uninstall.wait` says: the
    // install that follows would otherwise meet them terminating.
    let request = Uninstall {
        wait: true,
        ..super::uninstall::request(app, o, user.as_deref())
    };
    let ended = ctx.on(o).helm.uninstall(&request).await;
    let hash = o.hash().unwrap_or_default().to_string();
    let (version, revision) = (o.status.chart_version.clone(), o.status.revision);
    let record = |o: &mut Observed, result| {
        push_history(
            &mut o.status,
            HistoryAction::Uninstall,
            revision,
            &version,
            &hash,
            result,
        )
    };
    match ended {
        None => {
            o.done.run_ended = Some(RunEnded::SlotBusy);
            Outcome::Replan
        }
        Some(Err(e)) if super::outage::outage(ctx, app, o, &e).await => {
            o.done.run_ended = Some(RunEnded::Outage);
            Outcome::Replan
        }
        Some(Err(e)) => {
            o.done.helm_ran = true;
            let message = e.summary(&o.done.redactor);
            if let Some(refused) = e.forbidden() {
                let refused = o.done.redactor.redact(&refused);
                return super::outcome::refused_run(o, "uninstall", &refused, &message);
            }
            record(o, HistoryResult::Failed);
            let message = format!(
                "the chart's name changed from {from} to {to}; uninstalling {} to install it anew failed: {message}",
                o.target.key()
            );
            super::outcome::failed(ctx, app, o, Reason::UninstallFailed, &message)
        }
        Some(Ok(())) => {
            o.done.helm_ran = true;
            record(o, HistoryResult::Succeeded);
            // A new release: nothing of the old one's counts.
            o.status.revision = 0;
            o.status.failures = 0;
            o.status.chart_name.clear();
            o.status.last_action = HistoryAction::Uninstall.to_string();
            let message = format!(
                "the chart's name changed from {from} to {to} (upgrade.chartNameChangeStrategy: Reinstall): {} uninstalled, the new chart is installed next",
                o.target.key()
            );
            let reason = Reason::ChartRenamed.as_str();
            ctx.recorder.event(app, EventType::Normal, reason, &message);
            Outcome::Finished(Action::requeue_after(INSTALL_AFTER, "reinstall"))
        }
    }
}
