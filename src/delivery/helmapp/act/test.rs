//! `helm test` after an install or upgrade that succeeded, when
//! `spec.test.enable`: the chart's test hooks must succeed. Recorded in
//! the history (action `test`) and as an Event; a failure is handed back
//! to be remediated as a failed upgrade is — unless
//! `test.ignoreFailures`.

use apis::helmapp::HelmApp;
use record::EventType;

use crate::delivery::helm::Test;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::observed::Observed;
use crate::delivery::helmapp::status::{Reason, push_history};

/// Runs the tests of `revision` when asked for. `Some(message)`: they
/// failed and the failure counts.
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    revision: i64,
    hash: &str,
) -> Option<String> {
    let settings = &app.spec.test;
    if !settings.enable {
        return None;
    }
    // `test.timeout`, or the helm timeout; bounded as that one is.
    let timeout = crate::delivery::helmapp::inputs::parse_duration(&settings.timeout)
        .unwrap_or(o.timeout)
        .min(ctx.settings.max_helm_timeout);
    let user = o.identity.user();
    let test = Test {
        release: &o.target.release,
        namespace: &o.target.namespace,
        as_user: user.as_deref(),
        timeout,
    };
    let failure = match ctx.helm.test(&test).await {
        Some(Ok(())) => None,
        Some(Err(e)) => Some(e.summary(&o.redactor)),
        None => Some("another helm run holds the release".to_string()),
    };
    let version = o.status.chart_version.clone();
    let result = if failure.is_some() {
        "failed"
    } else {
        "succeeded"
    };
    push_history(&mut o.status, "test", revision, &version, hash, result);
    let (kind, reason, message) = match &failure {
        None => (
            EventType::Normal,
            Reason::TestSucceeded,
            format!(
                "helm test of {} revision {revision} succeeded",
                o.target.key()
            ),
        ),
        Some(e) => (
            EventType::Warning,
            Reason::TestFailed,
            format!(
                "helm test of {} revision {revision} failed{}: {e}",
                o.target.key(),
                if settings.ignore_failures {
                    " (ignored: test.ignoreFailures)"
                } else {
                    ""
                }
            ),
        ),
    };
    ctx.recorder.event(app, kind, reason.as_str(), &message);
    failure
        .filter(|_| !settings.ignore_failures)
        .map(|_| message)
}
