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

/// helm test rewrote `revision` (its hooks' last runs): the content helm
/// printed after the run is no longer what is stored. Read again, the
/// revision is the run's when all but its hooks' last runs is what helm
/// printed ([`tested_content`]) — the record then matches its content as
/// read now. Otherwise (rewritten by another writer while the tests ran,
/// or unreadable) the printed content stays: the record refuses the
/// revision, and only a render of this configuration proves it
/// (`own_run`) — never its number alone, which a Secret's writer could
/// fill with anything while the test hooks ran.
async fn reread(ctx: &Context, app: &HelmApp, o: &mut Observed, revision: i64) {
    let Some((printed, untested)) = o.done.printed_untested.clone() else {
        return;
    };
    if printed != revision {
        return;
    }
    let payload = match super::own_run::stored_payload(ctx, o, revision).await {
        Ok(payload) => payload,
        Err(e) => {
            log::info!(
                "{}: revision {revision} not read after its test ({e}): proven by a render",
                o.target.key()
            );
            return;
        }
    };
    if let Some(content) = payload.and_then(|p| tested_content(&p, &untested)) {
        let key = crate::delivery::helmapp::context::run_key(app);
        ctx.made.lock().insert(key, (revision, content.clone()));
        super::intent::tested(o, content);
    }
}

/// The content digest of `payload` — a revision read after our own
/// `helm test` of it — when it is, but for its hooks' last runs, the
/// release helm printed (`untested`). `None`: something else changed.
fn tested_content(payload: &[u8], untested: &str) -> Option<String> {
    let json = crate::lean::helm::release_json(payload).ok()?;
    let now = crate::lean::storage::content_digest_untested(&json)?;
    (!untested.is_empty() && now == untested)
        .then(|| crate::lean::storage::content_digest_of_json(&json))
        .flatten()
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
    reread(ctx, app, o, revision).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload(release: &serde_json::Value) -> Vec<u8> {
        crate::lean::helm::encode_release(&serde_json::to_vec(release).unwrap())
    }

    fn release(
        manifest: &str,
        last_run: serde_json::Value,
        extra: Option<(&str, &str)>,
    ) -> serde_json::Value {
        let mut hook = json!({
            "name": "web-test", "kind": "Pod", "path": "web/templates/test.yaml",
            "manifest": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-test\n",
            "events": ["test"], "last_run": last_run
        });
        if let Some((key, value)) = extra {
            hook[key] = json!(value);
        }
        json!({
            "name": "web", "namespace": "apps", "version": 2,
            "info": { "status": "deployed" },
            "chart": { "metadata": { "name": "web", "version": "1.0.0" } },
            "manifest": manifest, "hooks": [hook]
        })
    }

    /// A revision read after our own `helm test` of it is the run's only
    /// when all but its hooks' last runs is the release helm printed: the
    /// test's own rewrite passes, a manifest changed meanwhile (a
    /// kube-system object added), a hook changed, or a key Go would fold
    /// onto `last_run` does not. Red with the number alone as proof (the
    /// content was cleared after a test).
    #[test]
    fn a_tested_revision_is_the_runs_only_if_its_test_alone_rewrote_it() {
        let ours = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n";
        let printed = release(ours, json!({}), None);
        let untested =
            crate::lean::storage::content_digest_untested(&serde_json::to_vec(&printed).unwrap())
                .unwrap();
        let ran = json!({ "started_at": "2026-11-30T10:00:00Z", "phase": "Succeeded" });
        let after_test = payload(&release(ours, ran.clone(), None));
        assert_eq!(
            tested_content(&after_test, &untested),
            crate::lean::storage::content_digest(&after_test),
            "the test's own rewrite"
        );
        assert_ne!(
            crate::lean::storage::content_digest(&after_test),
            crate::lean::storage::content_digest(&payload(&printed)),
            "the test changed the content as digested"
        );
        // What real helm test also does: the default delete policy set on
        // a hook that had none, and (with --filter) the hooks reordered.
        let mut second = printed["hooks"][0].clone();
        second["name"] = json!("web-smoke");
        let mut printed_two = printed.clone();
        printed_two["hooks"] = json!([printed["hooks"][0].clone(), second.clone()]);
        let untested_two = crate::lean::storage::content_digest_untested(
            &serde_json::to_vec(&printed_two).unwrap(),
        )
        .unwrap();
        let mut rewritten = printed_two.clone();
        let mut first = printed["hooks"][0].clone();
        first["last_run"] = ran.clone();
        first["delete_policies"] = json!(["before-hook-creation"]);
        rewritten["hooks"] = json!([second.clone(), first.clone()]);
        assert!(
            tested_content(&payload(&rewritten), &untested_two).is_some(),
            "helm's own rewrite"
        );
        first["delete_policies"] = json!(["hook-succeeded"]);
        rewritten["hooks"] = json!([second, first]);
        assert_eq!(
            tested_content(&payload(&rewritten), &untested_two),
            None,
            "another policy"
        );
        // Two hooks of one name (run in their stored order when their
        // weights tie) swapped: a change.
        let mut twin = printed["hooks"][0].clone();
        twin["kind"] = json!("ServiceAccount");
        let mut pair = printed.clone();
        pair["hooks"] = json!([twin.clone(), printed["hooks"][0].clone()]);
        let untested_pair =
            crate::lean::storage::content_digest_untested(&serde_json::to_vec(&pair).unwrap())
                .unwrap();
        let mut swapped = printed.clone();
        swapped["hooks"] = json!([printed["hooks"][0].clone(), twin]);
        assert_eq!(
            tested_content(&payload(&swapped), &untested_pair),
            None,
            "hooks of one name swapped"
        );
        let planted = format!(
            "{ours}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: precious\n  namespace: kube-system\n"
        );
        for (what, hostile) in [
            ("a manifest", release(&planted, ran.clone(), None)),
            (
                "a hook",
                release(ours, ran.clone(), Some(("manifest", "kind: Secret\n"))),
            ),
            (
                "a folded key",
                release(ours, ran.clone(), Some(("Last_Run", "x"))),
            ),
        ] {
            assert_eq!(
                tested_content(&payload(&hostile), &untested),
                None,
                "{what}"
            );
        }
        assert_eq!(tested_content(&after_test, ""), None, "nothing printed");
    }
}
