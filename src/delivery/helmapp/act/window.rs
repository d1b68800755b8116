//! A change that waits for its change windows (docs/change-windows.md):
//! `Released=False, OutsideChangeWindow` saying when they open and
//! `status.nextWindow`, one Event per new message; `Ready` keeps its value.
//! Looked at again when the window opens — a timer of the work queue, not a
//! poll.

use apis::helmapp::HelmApp;
use chrono::{DateTime, SecondsFormat, Utc};
use record::EventType;
use runtime::Action;
use std::time::Duration;

use super::super::context::Context;
use super::Outcome;
use crate::delivery::helmapp::decide::conditions::{self, RELEASED, Reason};
use crate::delivery::helmapp::decide::observed::Observed;
use crate::delivery::helmapp::decide::state::Change;

/// Past the opening, so the reconcile that runs the change is inside it.
const PAST_OPENING: Duration = Duration::from_millis(20);

pub fn wait(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    change: Change,
    opens: Option<DateTime<Utc>>,
    after: Duration,
) -> Outcome {
    let when = opens.map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true));
    let message = match &when {
        Some(t) => {
            format!("the {change} waits for spec.changeWindows: the next window opens at {t}")
        }
        None => format!(
            "the {change} waits for spec.changeWindows: no window opens within a year (a deny window covers every allowed one?)"
        ),
    };
    let new = !conditions::has(&o.status, RELEASED, false, Reason::OutsideChangeWindow)
        || o.status.next_window != when.clone().unwrap_or_default();
    if new {
        ctx.recorder.event(
            app,
            EventType::Normal,
            Reason::OutsideChangeWindow.as_str(),
            &message,
        );
    }
    conditions::set(
        &mut o.status,
        RELEASED,
        false,
        Reason::OutsideChangeWindow,
        &message,
    );
    o.status.next_window = when.unwrap_or_default();
    Outcome::Finished(Action::requeue_after(
        after + PAST_OPENING,
        "outside the change windows",
    ))
}

/// A forced run (`hossted.com/force-at`) outside the change windows: said
/// in an Event, as the windows' override.
pub fn note_forced(ctx: &Context, app: &HelmApp, o: &Observed) {
    if o.windows.closed() {
        ctx.recorder.event(
            app,
            EventType::Normal,
            Reason::ForcedOutsideChangeWindow.as_str(),
            &format!(
                "hossted.com/force-at {} runs now, outside spec.changeWindows",
                o.force_at
            ),
        );
    }
}
