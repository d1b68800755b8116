//! Update notices: `status.latestAvailable` is the newest stable version
//! the chart's source offers (read by the resolution the reconcile does
//! anyway: no download of its own); a version newer than the installed one
//! gets one `UpdateAvailable` Event when it first appears, and
//! `hossted_helmapp_update_available` is 1 while it stays newer.

use apis::helmapp::{HelmApp, HelmAppStatus};
use record::EventType;

use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::observed::{Inputs, Observed};

/// Records what the source offers now; says so once per new version that
/// is newer than the installed one.
pub fn notice(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let Some(Inputs::Ready { chart, .. }) = &o.inputs else {
        return;
    };
    if chart.latest == o.status.latest_available {
        return;
    }
    o.status.latest_available = chart.latest.clone();
    if newer(&o.status) {
        let message = format!(
            "chart {} {} is available; {} is installed{}",
            app.spec.chart.name,
            o.status.latest_available,
            o.status.chart_version,
            match app.spec.chart.version.trim() {
                "" => String::new(),
                pinned => format!(" (spec.chart.version {pinned:?})"),
            }
        );
        let reason = Reason::UpdateAvailable.as_str();
        ctx.recorder.event(app, EventType::Normal, reason, &message);
    }
}

/// Whether `latestAvailable` is a newer version than the installed one.
pub fn newer(status: &HelmAppStatus) -> bool {
    crate::delivery::source::is_newer(&status.latest_available, &status.chart_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_higher_semver_is_newer() {
        let s = |latest: &str, installed: &str| HelmAppStatus {
            latest_available: latest.into(),
            chart_version: installed.into(),
            ..Default::default()
        };
        assert!(newer(&s("2.0.0", "1.9.3")));
        assert!(newer(&s("1.10.0", "1.9.0")), "semver order, not text");
        assert!(!newer(&s("1.2.0", "1.2.0")));
        assert!(!newer(&s("1.0.0", "1.2.0")));
        assert!(!newer(&s("", "1.2.0")), "not known");
        assert!(!newer(&s("2.0.0", "")), "nothing installed yet");
    }
}
