//! `act` as a table: (what was observed, the step, what helm answers) →
//! (the outcome, how the run ended, the status) — every end of the
//! runner's runs included — with helm scripted ([`HelmRuns`]) and the API
//! a stand-in that answers by path and records what it was asked. No
//! control plane, no helm binary.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::{HelmApp, HistoryResult};
use parking_lot::Mutex;

use super::{Outcome, run};
use crate::delivery::helm::{
    GetManifest, HelmError, Released, Rendered, Rollback, Test, Uninstall, Upgrade,
};
use crate::delivery::helmapp::cluster::{DriftOnly, Members};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{READY, Reason};
use crate::delivery::helmapp::decide::observed::{Observed, RunEnded, RunKind};
use crate::delivery::helmapp::decide::plan::Step;
use crate::delivery::helmapp::decide::state::tests::{app, observed};
use crate::delivery::helmapp::helm_runs::{HelmRuns, Run};

type Answer<T> = Mutex<VecDeque<T>>;

/// helm as the table scripts it: each run takes the next answer of its
/// kind (none left: the test asked for a run it did not script).
#[derive(Default)]
struct ScriptedHelm {
    upgrades: Answer<Option<Result<Released, HelmError>>>,
    uninstalls: Answer<Option<Result<(), HelmError>>>,
    rollbacks: Answer<Option<Result<(), HelmError>>>,
    tests: Answer<Option<Result<(), HelmError>>>,
    crds: Answer<Result<String, HelmError>>,
    /// Each run asked for, by name, in order.
    asked: Mutex<Vec<&'static str>>,
}

impl ScriptedHelm {
    fn next<T>(&self, what: &'static str, answers: &Answer<T>) -> T {
        self.asked.lock().push(what);
        answers
            .lock()
            .pop_front()
            .unwrap_or_else(|| panic!("helm {what} was not scripted"))
    }
}

impl HelmRuns for ScriptedHelm {
    fn upgrade<'a>(&'a self, _: &'a Upgrade<'a>) -> Run<'a, Option<Result<Released, HelmError>>> {
        let answer = self.next("upgrade", &self.upgrades);
        Box::pin(async move { answer })
    }
    fn uninstall<'a>(&'a self, _: &'a Uninstall<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        let answer = self.next("uninstall", &self.uninstalls);
        Box::pin(async move { answer })
    }
    fn rollback<'a>(&'a self, _: &'a Rollback<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        let answer = self.next("rollback", &self.rollbacks);
        Box::pin(async move { answer })
    }
    fn test<'a>(&'a self, _: &'a Test<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        let answer = self.next("test", &self.tests);
        Box::pin(async move { answer })
    }
    fn render<'a>(&'a self, _: &'a Upgrade<'a>) -> Run<'a, Result<Rendered, HelmError>> {
        panic!("helm render was not scripted")
    }
    fn manifest<'a>(&'a self, _: &'a GetManifest<'a>) -> Run<'a, Result<String, HelmError>> {
        panic!("helm get manifest was not scripted")
    }
    fn show_crds<'a>(&'a self, _: &'a std::path::Path) -> Run<'a, Result<String, HelmError>> {
        let answer = self.next("show crds", &self.crds);
        Box::pin(async move { answer })
    }
    fn is_busy(&self, _: &str, _: &str) -> bool {
        false
    }
    fn last_ended(&self, _: &str, _: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        None
    }
}

/// The API as act meets it: Helm's storage empty, the HelmApp echoed on
/// its writes, its target namespace active; anything else 404. Every
/// request is recorded as `METHOD path`.
fn stand_in_api(requests: Arc<Mutex<Vec<String>>>) -> kube::Client {
    let helmapp = serde_json::to_vec(&app(|_| {})).expect("a HelmApp as JSON");
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let path = req.uri().path().to_string();
        requests.lock().push(format!("{} {path}", req.method()));
        let (code, body) = if path.ends_with("/secrets") {
            (
                200,
                br#"{"kind":"SecretList","apiVersion":"v1","metadata":{},"items":[]}"#.to_vec(),
            )
        } else if path.contains("/helmapps/") {
            (200, helmapp.clone())
        } else if path == "/api/v1/namespaces/apps" {
            let ns = r#"{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"apps"},"status":{"phase":"Active"}}"#;
            (200, ns.as_bytes().to_vec())
        } else {
            let gone = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"not in the stand-in"}"#;
            (404, gone.as_bytes().to_vec())
        };
        let response = http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body))
            .expect("a response");
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    kube::Client::new(service, "default")
}

/// A context over the stand-in API and `helm`; `requests` records what
/// the API was asked.
fn context(helm: Arc<ScriptedHelm>, requests: Arc<Mutex<Vec<String>>>) -> Context {
    let client = stand_in_api(requests);
    let manager = runtime::Manager::new(
        client.clone(),
        runtime::ManagerOptions::new("act_test", "hossted-operator"),
    );
    let work = std::env::temp_dir().join(format!("act-tests-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("a work directory");
    let cli = <crate::cli::Cli as clap::Parser>::try_parse_from([
        "hossted-operator",
        "--controllers",
        "delivery",
        "--work-dir",
        work.to_str().expect("a UTF-8 path"),
    ])
    .expect("the flags parse");
    let settings = cli
        .run
        .validate()
        .expect("the flags validate")
        .delivery
        .expect("delivery runs");
    let apps = cache::Store::new();
    let queue = runtime::Controller::<crate::delivery::HelmApps>::new_queue(
        &manager,
        "act_test",
        Duration::from_secs(1),
    );
    let metrics = crate::delivery::metrics::HelmMetrics::register(&manager, apps.clone());
    let secrets = cache::Store::new();
    let configmaps = cache::Store::new();
    let reachability = crate::delivery::helmapp::reachability::Reachability::new(
        client.clone(),
        &manager,
        queue.clone(),
    );
    let own = Arc::new(crate::delivery::helmapp::cluster::Cluster {
        remote: None,
        client: client.clone(),
        releases: cache::Store::new(),
        members: Members {
            deployments: cache::Store::new(),
            statefulsets: cache::Store::new(),
            daemonsets: cache::Store::new(),
            jobs: cache::Store::new(),
            services: cache::Store::new(),
            ingresses: cache::Store::new(),
            secrets: cache::Store::new(),
            drift_only: DriftOnly {
                service_accounts: cache::Store::new(),
                autoscalers: cache::Store::new(),
                disruption_budgets: cache::Store::new(),
                roles: cache::Store::new(),
                role_bindings: cache::Store::new(),
                network_policies: cache::Store::new(),
            },
        },
        secrets: secrets.clone(),
        configmaps: configmaps.clone(),
        drift: crate::delivery::helmapp::drift_cache::DriftCache::new(metrics.clone()),
        reachability,
        helm: helm.clone(),
    });
    let remotes = Arc::new(crate::delivery::helmapp::remote::RemoteClusters::new(
        crate::delivery::helmapp::remote::Shared {
            helm: Arc::new(crate::delivery::helm::Helm::new(
                settings.helm.clone(),
                metrics.clone(),
            )),
            metrics,
            queue: queue.clone(),
            apps: apps.clone(),
            policy: settings.sources.policy.clone(),
            lookup: crate::delivery::remote::connect::system_lookup(),
            egress: crate::delivery::remote::egress::Egress::new(
                settings.sources.policy.clone(),
                crate::delivery::remote::connect::system_lookup(),
            ),
            max: settings.max_remote_clusters,
            max_per_namespace: settings.max_remote_clusters_per_namespace,
            running: Default::default(),
        },
    ));
    Context {
        client: client.clone(),
        apps: apps.clone(),
        sets: cache::Store::new(),
        own,
        remotes,
        secrets,
        configmaps,
        sources: Arc::new(crate::delivery::source::fetch::Sources::new(
            &work,
            settings.sources.clone(),
        )),
        queue: queue.clone(),
        status: runtime::StatusWriter::new(client.clone(), |a: &HelmApp| a.status.clone()),
        stopping: manager.stopping(),
        recorder: manager.recorder(),
        watched: Arc::new(crate::delivery::helmapp::watched_kinds::WatchedKinds::new(
            client.clone(),
            apps,
            queue.clone(),
        )),
        settings,
        leading_since: std::sync::OnceLock::new(),
        made: Default::default(),
        produced: Default::default(),
        applied: Default::default(),
        interrupted: Default::default(),
        refused: Default::default(),
    }
}

fn released(revision: i64) -> Released {
    Released {
        revision,
        status: "deployed".into(),
        chart_version: "1.0.0".into(),
        app_version: "1".into(),
        chart_name: "web".into(),
        content: format!("content-{revision}"),
        untested: format!("untested-{revision}"),
    }
}

fn failed(stderr: &str) -> HelmError {
    failed_in("upgrade", stderr)
}

fn failed_in(action: &'static str, stderr: &str) -> HelmError {
    HelmError::Failed {
        action,
        stderr: stderr.into(),
    }
}

const FORBIDDEN: &str = "Error: clusterrolebindings.rbac.authorization.k8s.io \"x\" is forbidden: User \"system:serviceaccount:apps:deployer\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope";

/// What a row expects of the status after the step.
#[derive(Debug, PartialEq)]
struct After {
    run_ended: Option<RunEnded>,
    failures: i32,
    revision: i64,
    /// The newest history entry's result.
    history: Option<HistoryResult>,
    /// Ready's reason and status, when the step set it.
    ready: Option<(String, String)>,
    /// A run intent is in the status: declared for a helm that started
    /// (withdrawn when it did not).
    intent: bool,
}

fn after(o: &Observed) -> After {
    After {
        run_ended: o.done.run_ended.clone(),
        failures: o.status.failures,
        revision: o.status.revision,
        history: o.status.history.first().map(|h| h.result.clone()),
        ready: o
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map(|c| (c.reason.clone(), c.status.clone())),
        intent: o.status.run_intent.is_some(),
    }
}

/// Which outcome a row ends in.
#[derive(Debug, PartialEq)]
enum Ends {
    Replan,
    Finished,
    Retry(Reason),
}

fn ends(outcome: &Outcome) -> Ends {
    match outcome {
        Outcome::Replan => Ends::Replan,
        Outcome::Finished(_) => Ends::Finished,
        Outcome::Retry { reason, .. } => Ends::Retry(*reason),
    }
}

/// One row: the app, what was observed, the step and helm's script.
struct Row {
    name: &'static str,
    app: HelmApp,
    observed: Observed,
    step: Step,
    helm: ScriptedHelm,
    ends: Ends,
    after: After,
    /// The helm runs the step asked for, in order.
    asked: Vec<&'static str>,
}

async fn check(rows: Vec<Row>) {
    for row in rows {
        let helm = Arc::new(row.helm);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let ctx = context(helm.clone(), requests.clone());
        let mut o = row.observed;
        let outcome = run(&ctx, &row.app, &mut o, row.step)
            .await
            .unwrap_or_else(|e| panic!("{}: act failed: {e}", row.name));
        assert_eq!(ends(&outcome), row.ends, "{}: the outcome", row.name);
        assert_eq!(after(&o), row.after, "{}: the status", row.name);
        assert_eq!(*helm.asked.lock(), row.asked, "{}: helm's runs", row.name);
    }
}

fn script(edit: impl FnOnce(&mut ScriptedHelm)) -> ScriptedHelm {
    let mut helm = ScriptedHelm::default();
    edit(&mut helm);
    helm
}

fn ready(reason: Reason, status: &str) -> Option<(String, String)> {
    Some((reason.as_str().into(), status.into()))
}

/// An app with a release at revision 2 (the upgrade's `before`).
fn upgraded() -> Observed {
    let mut o = observed();
    o.status.revision = 2;
    o
}

#[tokio::test]
async fn an_install_or_upgrade_records_every_end_of_helm_s_run_and_decides_nothing() {
    let plain = app(|_| {});
    let upgrade = |answer| script(|h| h.upgrades.lock().push_back(answer));
    check(vec![
        Row {
            name: "installed",
            app: plain.clone(),
            observed: observed(),
            step: Step::Install,
            helm: upgrade(Some(Ok(released(1)))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Released {
                    run: RunKind::Install,
                    revision: 1,
                    before: 0,
                }),
                failures: 0,
                revision: 1,
                history: Some(HistoryResult::Succeeded),
                ready: ready(Reason::InstallSucceeded, "True"),
                intent: true,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "slot busy: nothing ran, nothing counted",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(None),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::SlotBusy),
                failures: 0,
                revision: 2,
                history: None,
                ready: None,
                intent: false,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "failed: counted, recorded, for the plan",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(Some(Err(failed("Error: UPGRADE FAILED: boom")))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Failed {
                    run: RunKind::Upgrade,
                    message: "helm upgrade failed: Error: UPGRADE FAILED: boom".into(),
                }),
                failures: 1,
                revision: 2,
                history: Some(HistoryResult::Failed),
                ready: None,
                intent: true,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "timed out: a failure like any other",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(Some(Err(HelmError::Timeout {
                action: "upgrade",
                timeout: Duration::from_secs(300),
            }))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Failed {
                    run: RunKind::Upgrade,
                    message: "helm upgrade did not finish within 300s and was killed".into(),
                }),
                failures: 1,
                revision: 2,
                history: Some(HistoryResult::Failed),
                ready: None,
                intent: true,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "refused by RBAC: not counted",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(Some(Err(failed(FORBIDDEN)))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Forbidden {
                    message: "helm upgrade ran as the operator and was refused: it cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope; grant it to the operator's ServiceAccount. helm said: helm upgrade failed: Error: clusterrolebindings.rbac.authorization.k8s.io \"x\" is forbidden: User \"system:serviceaccount:apps:deployer\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope".into(),
                }),
                failures: 0,
                revision: 2,
                history: Some(HistoryResult::Forbidden),
                ready: None,
                intent: true,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "helm printed no release: a failure",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(Some(Err(HelmError::Output {
                action: "upgrade",
                message: "not JSON".into(),
            }))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Failed {
                    run: RunKind::Upgrade,
                    message: "helm upgrade printed something that is not a release: not JSON".into(),
                }),
                failures: 1,
                revision: 2,
                history: Some(HistoryResult::Failed),
                ready: None,
                intent: true,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "helm cannot be started: a failure",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(Some(Err(HelmError::Spawn {
                binary: "helm".into(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Failed {
                    run: RunKind::Upgrade,
                    message: "cannot run helm: entity not found".into(),
                }),
                failures: 1,
                revision: 2,
                history: Some(HistoryResult::Failed),
                ready: None,
                intent: true,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "a name helm would misread, refused by the runner: a failure",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(Some(Err(HelmError::InvalidName {
                action: "upgrade",
                message: "not a name".into(),
            }))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Failed {
                    run: RunKind::Upgrade,
                    message: "helm upgrade refused: not a name".into(),
                }),
                failures: 1,
                revision: 2,
                history: Some(HistoryResult::Failed),
                ready: None,
                intent: false,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "not started, the API server away: an outage, not a failure",
            app: plain.clone(),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: upgrade(Some(Err(HelmError::Unreachable { action: "upgrade" }))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::Outage),
                failures: 0,
                revision: 2,
                history: None,
                ready: None,
                intent: false,
            },
            asked: vec!["upgrade"],
        },
        Row {
            name: "the chart's CRDs cannot be applied: helm not started, tried again",
            app: app(|a| a.spec.crds = apis::helmapp::CrdPolicy::CreateReplace),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: script(|h| h.crds.lock().push_back(Err(failed_in("show", "Error: boom")))),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::NotStarted {
                    reason: Reason::CRDsFailed,
                    message: "reading the chart's crds/: helm show failed: Error: boom".into(),
                    retry: true,
                }),
                failures: 0,
                revision: 2,
                history: None,
                ready: None,
                intent: false,
            },
            asked: vec!["show crds"],
        },
        Row {
            name: "a post-renderer patch that is none: helm not started",
            app: app(|a| {
                a.spec.post_renderers = serde_json::from_value(serde_json::json!([
                    {"kustomize": {"patches": [{"patch": "{", "target": {"kind": "Deployment"}}]}}
                ]))
                .expect("post-renderers")
            }),
            observed: upgraded(),
            step: Step::Upgrade,
            helm: ScriptedHelm::default(),
            ends: Ends::Replan,
            after: After {
                run_ended: Some(RunEnded::NotStarted {
                    reason: Reason::PostRendererInvalid,
                    message: "postRenderers[0].kustomize.patches[0]: refused: not valid YAML at line 2, column 1".into(),
                    retry: false,
                }),
                failures: 0,
                revision: 2,
                history: None,
                ready: None,
                intent: false,
            },
            asked: vec![],
        },
    ])
    .await;
}

#[tokio::test]
async fn a_test_run_records_every_end_and_a_busy_slot_is_no_failure() {
    let plain = app(|a| a.spec.test.enable = true);
    let test = |answer| script(|h| h.tests.lock().push_back(answer));
    let just_released = || {
        let mut o = observed();
        o.status.revision = 3;
        o
    };
    let step = || Step::Test {
        run: RunKind::Upgrade,
        revision: 3,
        before: 2,
    };
    let row = |name, answer, ends, after| Row {
        name,
        app: plain.clone(),
        observed: just_released(),
        step: step(),
        helm: test(answer),
        ends,
        after,
        asked: vec!["test"],
    };
    check(vec![
        row(
            "passed",
            Some(Ok(())),
            Ends::Replan,
            After {
                run_ended: Some(RunEnded::Tested {
                    run: RunKind::Upgrade,
                    revision: 3,
                }),
                failures: 0,
                revision: 3,
                history: Some(HistoryResult::Succeeded),
                ready: None,
                intent: false,
            },
        ),
        row(
            "slot busy: nothing ran, nothing counted, the revision kept",
            None,
            Ends::Replan,
            After {
                run_ended: Some(RunEnded::SlotBusy),
                failures: 0,
                revision: 3,
                history: None,
                ready: None,
                intent: false,
            },
        ),
        row(
            "failed: counted, and the status returns to the revision before",
            Some(Err(failed_in("test", "Error: pod web-test failed"))),
            Ends::Replan,
            After {
                run_ended: Some(RunEnded::Failed {
                    run: RunKind::Upgrade,
                    message:
                        "helm test of apps/web revision 3 failed: helm test failed: Error: pod web-test failed"
                            .into(),
                }),
                failures: 1,
                revision: 2,
                history: Some(HistoryResult::Failed),
                ready: None,
                intent: false,
            },
        ),
    ])
    .await;
}

#[tokio::test]
async fn an_uninstall_records_every_end_of_helm_s_run() {
    let deleting = app(|a| {
        a.metadata.deletion_timestamp =
            Some(crate::delivery::helmapp::decide::state::tests::deleted())
    });
    let uninstall = |answer| script(|h| h.uninstalls.lock().push_back(answer));
    let row = |name, answer, run_ended| Row {
        name,
        app: deleting.clone(),
        observed: upgraded(),
        step: Step::Uninstall,
        helm: uninstall(answer),
        ends: Ends::Replan,
        after: After {
            run_ended,
            failures: 0,
            revision: 2,
            history: None,
            ready: None,
            intent: false,
        },
        asked: vec!["uninstall"],
    };
    check(vec![
        row("slot busy", None, Some(RunEnded::SlotBusy)),
        row(
            "failed: for the plan, which backs off",
            Some(Err(failed_in("uninstall", "Error: uninstall: boom"))),
            Some(RunEnded::UninstallFailed {
                message: "helm uninstall failed: Error: uninstall: boom".into(),
            }),
        ),
        row(
            "not started, the API server away",
            Some(Err(HelmError::Unreachable {
                action: "uninstall",
            })),
            Some(RunEnded::Outage),
        ),
    ])
    .await;
}

#[tokio::test]
async fn the_steps_that_only_report_set_ready_and_end_as_planned() {
    let plain = app(|_| {});
    let row = |name, step, ends, ready| Row {
        name,
        app: plain.clone(),
        observed: upgraded(),
        step,
        helm: ScriptedHelm::default(),
        ends,
        after: After {
            run_ended: None,
            failures: 0,
            revision: 2,
            history: None,
            ready,
            intent: false,
        },
        asked: vec![],
    };
    check(vec![
        row(
            "a failure recorded: Ready says it, the controller backs off",
            Step::RecordFailure {
                reason: Reason::UpgradeFailed,
                message: "boom".into(),
            },
            Ends::Retry(Reason::UpgradeFailed),
            ready(Reason::UpgradeFailed, "False"),
        ),
        row(
            "refused until something changes",
            Step::RefuseUntilChanged {
                reason: Reason::ReleaseOwnedByOther,
                message: "another HelmApp owns it".into(),
            },
            Ends::Finished,
            ready(Reason::ReleaseOwnedByOther, "False"),
        ),
        row(
            "suspended",
            Step::ReportSuspended,
            Ends::Finished,
            ready(Reason::Suspended, "False"),
        ),
        row(
            "looked at again later",
            Step::RecheckLater {
                reason: Reason::ChartUnavailable,
                message: "down".into(),
                after: Duration::from_secs(2),
            },
            Ends::Finished,
            ready(Reason::ChartUnavailable, "False"),
        ),
    ])
    .await;
}
