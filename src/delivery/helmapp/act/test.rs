//! `helm test` of the revision an install or upgrade of this reconcile
//! made (`spec.test.enable`): the chart's test hooks must succeed. Recorded
//! in the history (action `test`) and as an Event. A failure — unless
//! `test.ignoreFailures` — counts as the run's: the status returns to the
//! revision before it, and the plan chooses what follows as after a failed
//! upgrade.

use apis::helmapp::{HelmApp, HistoryAction, HistoryResult};
use record::EventType;

use super::outcome::Outcome;
use crate::delivery::helm::Test;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{Reason, push_history};
use crate::delivery::helmapp::decide::observed::{Observed, RunEnded, RunKind};

/// Runs the tests of `revision`, made by `run`; `before`: the revision
/// that had succeeded before it.
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    run: RunKind,
    revision: i64,
    before: i64,
) -> Outcome {
    let hash = o.hash().unwrap_or_default().to_string();
    let counted = match tested(ctx, app, o, revision, &hash).await {
        TestRun::Busy => {
            // Not run, and no failure of the release: nothing counted.
            o.done.run_ended = Some(RunEnded::SlotBusy);
            return Outcome::Replan;
        }
        TestRun::Passed => None,
        TestRun::Failed(message) => Some(message),
    };
    o.done.run_ended = Some(match counted {
        None => RunEnded::Tested { run, revision },
        Some(message) => {
            // A revision whose tests fail is not one to roll back to.
            let status = &mut o.status;
            status.revision = before;
            status.last_action = run.action().into();
            status.failures += 1;
            RunEnded::Failed { run, message }
        }
    });
    Outcome::Replan
}

/// How a `helm test` ended.
enum TestRun {
    /// They passed, or their failure is ignored.
    Passed,
    /// They failed and the failure counts (`message`: redacted).
    Failed(String),
    /// Another helm run held the release: nothing ran.
    Busy,
}

/// Runs the tests, recorded and said (a busy release: neither).
async fn tested(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    revision: i64,
    hash: &str,
) -> TestRun {
    let settings = &app.spec.test;
    let user = o.identity.user();
    let failure =
        match crate::delivery::helmapp::decide::run_flags::test_filters(&app.spec.test.filters) {
            Err(refused) => Some(refused),
            Ok(filters) => {
                let test = Test {
                    release: &o.target.release,
                    namespace: &o.target.namespace,
                    as_user: user.as_deref(),
                    // `test.timeout`, or the helm timeout; bounded as that one is.
                    timeout: o.timeouts.test,
                    filters: &filters,
                };
                match ctx.on(o).helm.test(&test).await {
                    Some(Ok(())) => None,
                    Some(Err(e)) => Some(e.summary(&o.done.redactor)),
                    None => return TestRun::Busy,
                }
            }
        };
    // helm test rewrites the revision it ran (its hooks' last runs): the
    // content helm printed after the upgrade is no longer what is stored.
    // The run's revision is recorded by the intent's number alone.
    super::intent::tested(o);
    let version = o.status.chart_version.clone();
    let result = if failure.is_some() {
        HistoryResult::Failed
    } else {
        HistoryResult::Succeeded
    };
    push_history(
        &mut o.status,
        HistoryAction::Test,
        revision,
        &version,
        hash,
        result,
    );
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
    match failure {
        Some(_) if !settings.ignore_failures => TestRun::Failed(message),
        _ => TestRun::Passed,
    }
}
