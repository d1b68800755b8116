//! `state` as a table: one row per rule of docs/delivery.md, no cluster.

use std::time::Duration;

use apis::helmapp::{HelmApp, HelmAppStatus, HistoryEntry};
use chrono::{TimeZone, Utc};

use crate::delivery::helmapp::decide::conditions::{READY, RELEASED, Reason, set};
use crate::delivery::helmapp::decide::desired::ChartProblem;
use crate::delivery::helmapp::decide::observed::Waiting;
use crate::delivery::helmapp::decide::state::*;
use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::source::LocalChart;

pub(super) const UID: &str = "uid-1";
pub(super) const HASH: &str = "h1";

pub(crate) fn app(edit: impl FnOnce(&mut HelmApp)) -> HelmApp {
    let mut a: HelmApp = serde_json::from_value(serde_json::json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "web", "namespace": "apps", "uid": UID },
        "spec": { "chart": { "path": "web" } }
    }))
    .expect("a HelmApp");
    edit(&mut a);
    a
}

pub(crate) fn deleted() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
}

/// An app whose chart and values were had, with no release yet.
pub(crate) fn observed() -> Observed {
    Observed {
        target: Target {
            release: "web".into(),
            namespace: "apps".into(),
            via: String::new(),
        },
        cluster: None,
        cluster_problem: None,
        uid: UID.into(),
        identity: crate::delivery::Identity::Operator,
        status: Default::default(),
        reconcile_at: String::new(),
        force_at: String::new(),
        approve: String::new(),
        invalid_name: None,
        cross_namespace: None,
        invalid_expression: None,
        invalid_drift_rule: None,
        chart_name: None,
        dependency: None,
        inputs: Some(Inputs::Ready {
            chart: LocalChart {
                path: "/c".into(),
                version: "1.0.0".into(),
                digest: "d".into(),
                manifest_digest: String::new(),
                latest: String::new(),
                verified: None,
                ..Default::default()
            },
            hash: HASH.into(),
        }),
        refused: None,
        cluster_id: None,
        newest: None,
        server_side_revisions: Default::default(),
        owner_is_live: false,
        tampered: None,
        own_unrecorded: None,
        adoption_refused: None,
        done: Default::default(),
        project_gone: false,
        namespace_going: false,
        windows: Default::default(),
        storage_recheck: None,
        busy: false,
        missing: Vec::new(),
        pending: Vec::new(),
        readiness_failed: None,
        readiness_polled: false,
        drift: Default::default(),
        now: now(),
        // Led since before every revision `stored` makes (11:58).
        leading_since: now() - chrono::Duration::hours(1),
        our_helm_ended: None,
        produced: None,
        timeout: Duration::from_secs(300),
        timeout_clamped: false,
        timeouts: crate::delivery::helmapp::decide::observed::Timeouts::of(
            &app(|_| {}),
            Duration::from_secs(300),
            Duration::from_secs(1800),
        ),
        resolve_after: None,
    }
}

/// A stored revision `revision` with `status`, owned by `owner`, made with `hash`.
pub(super) fn stored(revision: i64, status: &str, owner: &str, hash: &str) -> Option<Stored> {
    Some(Stored {
        revision,
        secret: format!("sh.helm.release.v1.web.v{revision}"),
        owner: owner.into(),
        hash: hash.into(),
        status: status.into(),
        updated: "2026-11-23T11:58:00Z".into(),
        digest: String::new(),
    })
}

fn exhausted_status() -> HelmAppStatus {
    let mut s = HelmAppStatus {
        failures: 4,
        history: vec![HistoryEntry {
            action: "upgrade".into(),
            config_hash: HASH.into(),
            result: "failed".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    set(&mut s, READY, false, Reason::RetriesExhausted, "spent");
    s
}

/// A ConfigMap whose `/data/a` was found edited.
fn edited() -> crate::delivery::helmapp::decide::observed::DriftFound {
    use crate::delivery::helmapp::decide::observed::{DriftFound, Drifted};
    DriftFound {
        drifted: vec![Drifted {
            object: apis::helmapp::DriftedObject {
                kind: "ConfigMap".into(),
                namespace: "apps".into(),
                name: "web".into(),
                fields: vec!["/data/a".into()],
            },
            api_version: "v1".into(),
            desired: serde_json::json!({}),
            ignored: Vec::new(),
            live: None,
            digest: String::new(),
        }],
        ..Default::default()
    }
}

pub(super) type Row = (&'static str, HelmApp, Observed, fn(&ReleaseState) -> bool);

pub(super) fn check(rows: Vec<Row>) {
    for (rule, app, mut observed, expected) in rows {
        // As observe sets it: the app's own timeout, with no bound.
        observed.timeout =
            crate::delivery::helmapp::decide::observed::timeout_of(&app, Duration::MAX).0;
        observed.windows = crate::delivery::helmapp::decide::windows::look(
            app.spec.change_windows.as_ref(),
            observed.now,
        );
        let got = decide(&observed, &app);
        assert!(expected(&got), "{rule}: got {got:?}");
    }
}

/// Deletion, suspension, references and inputs decide before the release does.
#[test]
fn deletion_suspension_references_and_inputs_come_first() {
    use ReleaseState as S;
    let plain = app(|_| {});
    check(vec![
        ("no release: install", plain.clone(), observed(), |s| {
            *s == S::Absent
        }),
        (
            "deleting, ours: uninstall",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            Observed {
                newest: stored(1, "deployed", UID, HASH),
                ..observed()
            },
            |s| *s == S::Deleting { uninstall: true },
        ),
        (
            "deleting, ours, its namespace going: the release goes with it",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            Observed {
                newest: stored(1, "deployed", UID, HASH),
                namespace_going: true,
                ..observed()
            },
            |s| *s == S::GoesWithNamespace,
        ),
        (
            "deleting, not ours, its namespace going: let go, untouched",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            Observed {
                newest: stored(1, "deployed", "someone-else", HASH),
                namespace_going: true,
                ..observed()
            },
            |s| *s == S::Deleting { uninstall: false },
        ),
        (
            "deleting, ours, uninstallOnDelete false: let go",
            app(|a| {
                a.metadata.deletion_timestamp = Some(deleted());
                a.spec.uninstall_on_delete = false;
            }),
            Observed {
                newest: stored(1, "deployed", UID, HASH),
                ..observed()
            },
            |s| *s == S::Deleting { uninstall: false },
        ),
        (
            "deleting, not ours: let go",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            Observed {
                newest: stored(1, "deployed", "other", HASH),
                ..observed()
            },
            |s| *s == S::Deleting { uninstall: false },
        ),
        (
            "suspended comes before anything",
            app(|a| a.spec.suspend = true),
            Observed {
                dependency: Some(Waiting::until_changed(
                    Reason::DependencyNotFound,
                    "x".into(),
                )),
                ..observed()
            },
            |s| *s == S::Suspended,
        ),
        (
            "a name helm may not be given is refused before anything else",
            plain.clone(),
            Observed {
                invalid_name: Some("no".into()),
                cross_namespace: Some("no".into()),
                ..observed()
            },
            |s| {
                matches!(
                    s,
                    S::Refused {
                        reason: Reason::InvalidName,
                        ..
                    }
                )
            },
        ),
        (
            "a refused target namespace comes before dependencies",
            plain.clone(),
            Observed {
                cross_namespace: Some("no".into()),
                dependency: Some(Waiting::until_changed(Reason::DependencyCycle, "x".into())),
                ..observed()
            },
            |s| {
                matches!(
                    s,
                    S::Refused {
                        reason: Reason::CrossNamespaceRef,
                        ..
                    }
                )
            },
        ),
        (
            "an expression that does not compile holds it back before its dependencies",
            plain.clone(),
            Observed {
                invalid_expression: Some("dependsOn[0].readyExpr: syntax error".into()),
                dependency: Some(Waiting::polled(Reason::Forbidden, "x".into())),
                ..observed()
            },
            |s| {
                matches!(
                    s,
                    S::Refused {
                        reason: Reason::InvalidExpression,
                        ..
                    }
                )
            },
        ),
        (
            "a dependency read by request is looked at again, soon at first",
            plain.clone(),
            Observed {
                dependency: Some(Waiting::polled(Reason::Forbidden, "x".into())),
                ..observed()
            },
            |s| {
                *s == S::DependencyPolled {
                    reason: Reason::Forbidden,
                    message: "x".into(),
                    after: Duration::from_secs(2),
                }
            },
        ),
        (
            "a dependency not ready holds it back",
            plain.clone(),
            Observed {
                dependency: Some(Waiting::until_changed(
                    Reason::DependencyNotReady,
                    "x".into(),
                )),
                ..observed()
            },
            |s| {
                matches!(
                    s,
                    S::Refused {
                        reason: Reason::DependencyNotReady,
                        ..
                    }
                )
            },
        ),
        (
            "a chart being fetched: nothing until the fetch re-queues",
            plain.clone(),
            Observed {
                inputs: Some(Inputs::ChartPending),
                ..observed()
            },
            |s| matches!(s, S::FetchingChart),
        ),
        (
            "a repository that is down is retried",
            plain.clone(),
            Observed {
                inputs: Some(Inputs::ChartUnavailable(ChartProblem {
                    reason: Reason::ChartUnavailable,
                    message: "down".into(),
                    retry: true,
                })),
                ..observed()
            },
            |s| matches!(s, S::ChartUnavailable { retry: Some(_), .. }),
        ),
        (
            "values that cannot be had",
            plain.clone(),
            Observed {
                inputs: Some(Inputs::ValuesInvalid("bad".into())),
                ..observed()
            },
            |s| {
                matches!(
                    s,
                    S::Refused {
                        reason: Reason::ValuesInvalid,
                        ..
                    }
                )
            },
        ),
    ]);
}

/// The release in storage: in sync, drifted, out of sync, or someone else's.
#[test]
fn the_release_in_storage_decides_sync_drift_and_ownership() {
    use ReleaseState as S;
    let plain = app(|_| {});
    check(vec![
        (
            "deployed with our hash: in sync at the stored revision",
            plain.clone(),
            Observed {
                newest: stored(2, "deployed", UID, HASH),
                ..observed()
            },
            |s| *s == S::InSync { revision: Some(2) },
        ),
        (
            "our own write is newer than the cached storage: in sync",
            plain.clone(),
            Observed {
                newest: stored(2, "deployed", UID, "old"),
                status: {
                    let mut s = HelmAppStatus {
                        config_hash: HASH.into(),
                        revision: 3,
                        ..Default::default()
                    };
                    set(&mut s, RELEASED, true, Reason::UpgradeSucceeded, "ok");
                    s
                },
                ..observed()
            },
            |s| *s == S::InSync { revision: None },
        ),
        (
            "another hash: upgrade",
            plain.clone(),
            Observed {
                newest: stored(2, "deployed", UID, "old"),
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::Changed,
                }
            },
        ),
        (
            "a failed newest revision: upgrade",
            plain.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::NotDeployed,
                }
            },
        ),
        (
            "objects gone: drifted",
            plain.clone(),
            Observed {
                newest: stored(2, "deployed", UID, HASH),
                missing: vec!["Service apps/web".into()],
                ..observed()
            },
            |s| matches!(s, S::Drifted { objects } if objects.len() == 1),
        ),
        (
            "fields edited, drift enabled: put back",
            app(|a| a.spec.drift.mode = apis::helmapp::DriftMode::Enabled),
            Observed {
                newest: stored(2, "deployed", UID, HASH),
                drift: edited(),
                ..observed()
            },
            |s| {
                matches!(s, S::FieldsDrifted { objects }
                    if objects == &["ConfigMap apps/web (/data/a)".to_string()])
            },
        ),
        (
            "fields edited, drift warn (the default): in sync, reported",
            plain.clone(),
            Observed {
                newest: stored(2, "deployed", UID, HASH),
                drift: edited(),
                ..observed()
            },
            |s| *s == S::InSync { revision: Some(2) },
        ),
        (
            "a deleted object comes before edited fields",
            app(|a| a.spec.drift.mode = apis::helmapp::DriftMode::Enabled),
            Observed {
                newest: stored(2, "deployed", UID, HASH),
                missing: vec!["Service apps/web".into()],
                drift: edited(),
                ..observed()
            },
            |s| matches!(s, S::Drifted { .. }),
        ),
        (
            "owned by another live HelmApp: never taken, adopt or not",
            app(|a| a.spec.adopt = true),
            Observed {
                newest: stored(1, "deployed", "other", HASH),
                owner_is_live: true,
                ..observed()
            },
            |s| matches!(s, S::OwnedByOther { .. }),
        ),
        (
            "owned by no live HelmApp: not ours",
            plain.clone(),
            Observed {
                newest: stored(1, "deployed", "", HASH),
                ..observed()
            },
            |s| matches!(s, S::NotOurs { .. }),
        ),
        (
            "owned by no live HelmApp, adopt: first a dry run",
            app(|a| a.spec.adopt = true),
            Observed {
                newest: stored(1, "deployed", "gone-uid", HASH),
                ..observed()
            },
            |s| *s == S::AdoptionToRender,
        ),
        (
            "adopt, and the dry run changes no object: taken as it is",
            app(|a| a.spec.adopt = true),
            Observed {
                newest: stored(4, "deployed", "gone-uid", HASH),
                done: crate::delivery::helmapp::decide::observed::Done {
                    adoption_render: Some(Rendering::Same),
                    ..Default::default()
                },
                ..observed()
            },
            |s| *s == S::AdoptAsIs { revision: 4 },
        ),
        (
            "adopt, and the dry run changes an object: upgrade",
            app(|a| a.spec.adopt = true),
            Observed {
                newest: stored(1, "deployed", "gone-uid", HASH),
                done: crate::delivery::helmapp::decide::observed::Done {
                    adoption_render: Some(Rendering::Differs),
                    ..Default::default()
                },
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::Adopt,
                }
            },
        ),
        (
            "adopt a failed release: upgrade, no dry run",
            app(|a| a.spec.adopt = true),
            Observed {
                newest: stored(1, "failed", "gone-uid", HASH),
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::Adopt,
                }
            },
        ),
    ]);
}

/// A pending release is held, locked or stuck; spent retries wait for a change.
#[test]
fn a_pending_release_is_held_locked_or_stuck_and_spent_retries_wait() {
    use ReleaseState as S;
    let plain = app(|_| {});
    check(vec![
        (
            "pending, our helm on it",
            plain.clone(),
            Observed {
                newest: stored(2, "pending-upgrade", UID, HASH),
                busy: true,
                ..observed()
            },
            |s| *s == S::HeldByHelm,
        ),
        (
            "pending for 2 of 5 minutes: locked for 3 more",
            plain.clone(),
            Observed {
                newest: stored(2, "pending-upgrade", UID, HASH),
                ..observed()
            },
            |s| matches!(s, S::Locked { remaining, .. } if *remaining == Duration::from_secs(180)),
        ),
        (
            "pending since before this process led: its helm is gone, stuck at once",
            plain.clone(),
            Observed {
                newest: stored(2, "pending-upgrade", UID, HASH),
                leading_since: now() - chrono::Duration::seconds(30),
                ..observed()
            },
            |s| matches!(s, S::Stuck { .. }),
        ),
        (
            "pending, left by our own helm that has ended: stuck at once",
            plain.clone(),
            Observed {
                newest: stored(2, "pending-upgrade", UID, HASH),
                our_helm_ended: Some(now() - chrono::Duration::seconds(10)),
                ..observed()
            },
            |s| matches!(s, S::Stuck { .. }),
        ),
        (
            "pending past the timeout: stuck",
            app(|a| a.spec.timeout = "1m".into()),
            Observed {
                newest: stored(2, "pending-install", UID, HASH),
                ..observed()
            },
            |s| matches!(s, S::Stuck { .. }),
        ),
        (
            "spent retries with the same hash: nothing runs",
            plain.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: exhausted_status(),
                ..observed()
            },
            |s| *s == S::RetriesExhausted,
        ),
        (
            "spent retries, nothing to roll back to: nothing runs either",
            plain.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: {
                    let mut s = exhausted_status();
                    set(&mut s, READY, false, Reason::MissingRollbackTarget, "none");
                    s
                },
                ..observed()
            },
            |s| *s == S::RetriesExhausted,
        ),
        (
            "spent retries, a new reconcile-at: upgrade again",
            plain.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: exhausted_status(),
                reconcile_at: "now".into(),
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::NotDeployed,
                }
            },
        ),
        (
            "spent retries, a new hash: upgrade again",
            plain.clone(),
            Observed {
                newest: stored(2, "deployed", UID, "old"),
                status: HelmAppStatus {
                    history: vec![HistoryEntry {
                        config_hash: "old".into(),
                        ..Default::default()
                    }],
                    ..exhausted_status()
                },
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::Changed,
                }
            },
        ),
    ]);
}

#[test]
fn only_what_holds_an_app_back_is_decided_before_its_chart_is_fetched() {
    let plain = app(|_| {});
    assert_eq!(held_back(&observed(), &plain), None);
    let waiting = Observed {
        dependency: Some(Waiting::until_changed(
            Reason::DependencyNotFound,
            "x".into(),
        )),
        ..observed()
    };
    assert!(held_back(&waiting, &plain).is_some());
    assert_eq!(
        held_back(&observed(), &app(|a| a.spec.suspend = true)),
        Some(ReleaseState::Suspended)
    );
}

/// What issue 24 adds: `force-at`, a kept `uninstalled` entry, a failed
/// `helm test`, and the backoff between attempts.
#[test]
fn force_kept_history_failed_tests_and_backoff() {
    use ReleaseState as S;
    let plain = app(|_| {});
    let deployed = || Observed {
        newest: stored(2, "deployed", UID, HASH),
        ..observed()
    };
    let failed_at = |action: &str, secs_ago: i64, failures: i32| HelmAppStatus {
        failures,
        history: vec![HistoryEntry {
            action: action.into(),
            config_hash: HASH.into(),
            result: "failed".into(),
            time: (now() - chrono::Duration::seconds(secs_ago))
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ..Default::default()
        }],
        ..Default::default()
    };
    check(vec![
        ("in sync", plain.clone(), deployed(), |s| {
            matches!(s, S::InSync { .. })
        }),
        (
            "a new force-at: one forced upgrade",
            plain.clone(),
            Observed {
                force_at: "1".into(),
                ..deployed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::Forced,
                }
            },
        ),
        (
            "a force-at acted on: nothing",
            plain.clone(),
            Observed {
                force_at: "1".into(),
                status: HelmAppStatus {
                    last_handled_force_at: "1".into(),
                    ..Default::default()
                },
                ..deployed()
            },
            |s| matches!(s, S::InSync { .. }),
        ),
        (
            "an uninstalled entry kept by keepHistory: installed over",
            plain.clone(),
            Observed {
                newest: stored(5, "uninstalled", "uid-of-a-deleted-app", "old"),
                ..observed()
            },
            |s| *s == S::Absent,
        ),
        (
            "an uninstalled entry of a live HelmApp: not taken",
            plain.clone(),
            Observed {
                newest: stored(5, "uninstalled", "uid-2", "old"),
                owner_is_live: true,
                ..observed()
            },
            |s| matches!(s, S::OwnedByOther { .. }),
        ),
        (
            "a failed test, long ago: upgraded again",
            plain.clone(),
            Observed {
                status: failed_at("test", 600, 1),
                ..deployed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::TestFailed,
                }
            },
        ),
        (
            "a failed test that is ignored: in sync",
            app(|a| a.spec.test.ignore_failures = true),
            Observed {
                status: failed_at("test", 600, 1),
                ..deployed()
            },
            |s| matches!(s, S::InSync { .. }),
        ),
        (
            "the third failure, 2 s ago: 2 s more (4 s backoff)",
            plain.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: failed_at("upgrade", 2, 3),
                ..observed()
            },
            |s| {
                *s == S::BackingOff {
                    remaining: Duration::from_secs(2),
                }
            },
        ),
        (
            "the third failure, 5 s ago: tried again",
            plain.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: failed_at("upgrade", 5, 3),
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::NotDeployed,
                }
            },
        ),
        (
            "RetryOnFailure every 10 s, the ninth failure 3 s ago: 7 s more",
            app(|a| {
                a.spec.upgrade.strategy = Some(apis::helmapp::ActionStrategy {
                    name: apis::helmapp::StrategyName::RetryOnFailure,
                    retry_interval: "10s".into(),
                })
            }),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: failed_at("upgrade", 3, 9),
                ..observed()
            },
            |s| {
                *s == S::BackingOff {
                    remaining: Duration::from_secs(7),
                }
            },
        ),
        (
            "RetryOnFailure every 10 s, the ninth failure 11 s ago: tried again",
            app(|a| {
                a.spec.upgrade.strategy = Some(apis::helmapp::ActionStrategy {
                    name: apis::helmapp::StrategyName::RetryOnFailure,
                    retry_interval: "10s".into(),
                })
            }),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: failed_at("upgrade", 11, 9),
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::NotDeployed,
                }
            },
        ),
        (
            "a failed install uninstalled 0 s ago: backing off",
            plain.clone(),
            Observed {
                status: {
                    let mut s = failed_at("install", 0, 1);
                    s.history.insert(
                        0,
                        HistoryEntry {
                            action: "uninstall".into(),
                            result: "succeeded".into(),
                            ..Default::default()
                        },
                    );
                    s
                },
                ..observed()
            },
            |s| matches!(s, S::BackingOff { .. }),
        ),
        (
            "a new reconcile-at does not wait",
            plain.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                status: failed_at("upgrade", 0, 3),
                reconcile_at: "now".into(),
                ..observed()
            },
            |s| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::NotDeployed,
                }
            },
        ),
    ]);
    assert_eq!(retry_backoff(1), Duration::from_secs(1));
    assert_eq!(retry_backoff(4), Duration::from_secs(8));
    assert_eq!(retry_backoff(1000), Duration::from_secs(300), "capped");
}

/// Change windows hold back what would run helm, and only that; force-at
/// and repairAnytime go ahead; a window that cannot be read refuses, but
/// never a deletion.
#[test]
fn outside_the_change_windows_changes_wait_and_the_rest_goes_on() {
    use ReleaseState as S;
    // now() is 2026-11-23 12:00 UTC, a Monday.
    let windowed = |schedule: &str, repair_anytime: bool| {
        let schedule = schedule.to_string();
        app(move |a| {
            a.spec.change_windows = Some(apis::helmapp::ChangeWindows {
                time_zone: "Europe/Berlin".into(),
                allow: vec![apis::helmapp::ChangeWindow {
                    schedule,
                    duration: "2h".into(),
                }],
                deny: vec![],
                repair_anytime,
            })
        })
    };
    // 22:00 Berlin = 21:00 UTC, today.
    let evening = windowed("0 22 * * 1-5", false);
    let opens = Utc.with_ymd_and_hms(2026, 11, 23, 21, 0, 0).unwrap();
    let deployed = |hash: &str| Observed {
        newest: stored(2, "deployed", UID, hash),
        ..observed()
    };
    let waits = move |change: Change| {
        move |s: &S| {
            *s == S::OutsideWindow {
                change,
                opens: Some(opens),
                // Nine hours away: looked at again within the hour, then on time.
                after: Duration::from_secs(3600),
            }
        }
    };
    type Expect = Box<dyn Fn(&S) -> bool>;
    let rows: Vec<(&str, HelmApp, Observed, Expect)> = vec![
        (
            "no release: the install waits",
            evening.clone(),
            observed(),
            Box::new(waits(Change::Install)),
        ),
        (
            "changed: the upgrade waits",
            evening.clone(),
            deployed("old"),
            Box::new(waits(Change::Upgrade)),
        ),
        (
            "in sync: nothing to wait for",
            evening.clone(),
            deployed(HASH),
            Box::new(|s: &S| matches!(s, S::InSync { .. })),
        ),
        (
            "a new force-at: runs now",
            evening.clone(),
            Observed {
                force_at: "1".into(),
                ..deployed(HASH)
            },
            Box::new(|s: &S| {
                *s == S::OutOfSync {
                    why: OutOfSyncCause::Forced,
                }
            }),
        ),
        (
            "objects deleted: the repair waits",
            evening.clone(),
            Observed {
                missing: vec!["ConfigMap apps/web".into()],
                ..deployed(HASH)
            },
            Box::new(waits(Change::Repair)),
        ),
        (
            "deleted: the uninstall waits",
            app(|a| {
                a.spec.change_windows = evening.spec.change_windows.clone();
                a.metadata.deletion_timestamp = Some(deleted());
            }),
            deployed(HASH),
            Box::new(waits(Change::Uninstall)),
        ),
        (
            "deleted, its namespace going: let go at once, nothing left to hold",
            app(|a| {
                a.spec.change_windows = evening.spec.change_windows.clone();
                a.metadata.deletion_timestamp = Some(deleted());
            }),
            Observed {
                namespace_going: true,
                ..deployed(HASH)
            },
            Box::new(|s: &S| *s == S::GoesWithNamespace),
        ),
        (
            "objects deleted, repairAnytime: repaired now",
            windowed("0 22 * * 1-5", true),
            Observed {
                missing: vec!["ConfigMap apps/web".into()],
                ..deployed(HASH)
            },
            Box::new(|s: &S| matches!(s, S::Drifted { .. })),
        ),
        (
            "inside the window (every hour, 2h): runs",
            windowed("0 * * * *", false),
            deployed("old"),
            Box::new(|s: &S| matches!(s, S::OutOfSync { .. })),
        ),
        (
            "a schedule that is not cron: refused, no helm",
            windowed("at ten", false),
            deployed("old"),
            Box::new(|s: &S| {
                matches!(s, S::Refused { reason: Reason::InvalidChangeWindow, message }
                    if message.starts_with("changeWindows.allow[0].schedule"))
            }),
        ),
    ];
    for (rule, app, mut observed, expected) in rows {
        // As observe reads them.
        observed.windows = crate::delivery::helmapp::decide::windows::look(
            app.spec.change_windows.as_ref(),
            observed.now,
        );
        let got = decide(&observed, &app);
        assert!(expected(&got), "{rule}: got {got:?}");
    }
}

#[test]
fn what_a_run_of_this_reconcile_came_to_decides_before_anything_else() {
    use crate::delivery::helmapp::decide::observed::{RunEnded, RunKind};
    use ReleaseState as S;
    let tested = app(|a| a.spec.test.enable = true);
    let ran = |ended: RunEnded| Observed {
        done: crate::delivery::helmapp::decide::observed::Done {
            run_ended: Some(ended),
            ..Default::default()
        },
        status: HelmAppStatus {
            failures: 2,
            ..Default::default()
        },
        ..observed()
    };
    let released = RunEnded::Released {
        run: RunKind::Upgrade,
        revision: 3,
        before: 2,
    };
    let closed = app(|a| {
        a.spec.change_windows = Some(apis::helmapp::ChangeWindows {
            time_zone: "UTC".into(),
            allow: vec![apis::helmapp::ChangeWindow {
                schedule: "0 0 1 1 *".into(),
                duration: "1m".into(),
            }],
            deny: vec![],
            repair_anytime: false,
        })
    });
    check(vec![
        (
            "a revision just made, with tests asked for: untested",
            tested.clone(),
            ran(released.clone()),
            |s| {
                *s == S::Untested {
                    run: RunKind::Upgrade,
                    revision: 3,
                    before: 2,
                }
            },
        ),
        (
            "a revision just made, no tests asked for: reported",
            app(|_| {}),
            ran(released.clone()),
            |s| {
                *s == S::JustReleased {
                    run: RunKind::Upgrade,
                    revision: 3,
                }
            },
        ),
        (
            "tests passed: reported",
            tested.clone(),
            ran(RunEnded::Tested {
                run: RunKind::Install,
                revision: 1,
            }),
            |s| {
                *s == S::JustReleased {
                    run: RunKind::Install,
                    revision: 1,
                }
            },
        ),
        (
            "the run or its tests failed: counted in the status",
            tested.clone(),
            ran(RunEnded::Failed {
                run: RunKind::Upgrade,
                message: "m".into(),
            }),
            |s| {
                *s == S::RunFailed {
                    run: RunKind::Upgrade,
                    message: "m".into(),
                    failures: 2,
                    last_succeeded: 0,
                }
            },
        ),
        (
            "helm not started: its inputs could not be prepared",
            tested.clone(),
            ran(RunEnded::NotStarted {
                reason: Reason::CRDsFailed,
                message: "m".into(),
                retry: true,
            }),
            |s| {
                *s == S::NotStarted {
                    reason: Reason::CRDsFailed,
                    message: "m".into(),
                    retry: true,
                }
            },
        ),
        (
            "the API server away during the run: waits for it",
            tested.clone(),
            ran(RunEnded::Outage),
            |s| *s == S::WaitingForApi,
        ),
        (
            "a failed uninstall",
            tested.clone(),
            ran(RunEnded::UninstallFailed {
                message: "m".into(),
            }),
            |s| {
                *s == S::UninstallFailed {
                    message: "m".into(),
                }
            },
        ),
        (
            "what follows a run is not held to the change windows",
            closed,
            ran(RunEnded::Failed {
                run: RunKind::Upgrade,
                message: "m".into(),
            }),
            |s| matches!(s, S::RunFailed { .. }),
        ),
    ]);
}

/// A revision our stopped operator may have left is rendered to be proven
/// ours once the chart and values are had — their lack is the state, not
/// a verdict of tampering (a restart fetches the chart again).
#[test]
fn an_unrecorded_run_of_ours_waits_for_its_inputs_before_its_render() {
    use ReleaseState as S;
    let plain = app(|_| {});
    let unrecorded = || Observed {
        newest: stored(2, "deployed", UID, HASH),
        tampered: Some("revision 2 was not made by the operator".into()),
        own_unrecorded: Some(2),
        ..observed()
    };
    check(vec![
        ("inputs had: render", plain.clone(), unrecorded(), |s| {
            *s == S::OwnRunToRender { revision: 2 }
        }),
        (
            "chart being fetched: wait for it",
            plain.clone(),
            Observed {
                inputs: Some(Inputs::ChartPending),
                ..unrecorded()
            },
            |s| *s == S::FetchingChart,
        ),
        (
            "rendered otherwise: tampered",
            plain.clone(),
            Observed {
                done: crate::delivery::helmapp::decide::observed::Done {
                    own_render: Some((2, Rendering::Differs)),
                    ..Default::default()
                },
                ..unrecorded()
            },
            |s| matches!(s, S::Tampered { .. }),
        ),
    ]);
}

/// A revision the run intent names that its dead run left `pending-*` is
/// unlocked first (helm renders no upgrade of a pending release), then
/// rendered to be proven ours — never trusted by the intent alone, and
/// never rolled back, uninstalled or upgraded on before that.
#[test]
fn an_unfinished_run_of_ours_is_unlocked_then_proven_by_its_render() {
    use ReleaseState as S;
    let plain = app(|_| {});
    // This operator took over after the dead run's helm last wrote.
    let left = |status: &str| Observed {
        newest: stored(2, status, UID, HASH),
        tampered: Some("revision 2 was not made by the operator".into()),
        own_unrecorded: Some(2),
        leading_since: now(),
        ..observed()
    };
    check(vec![
        (
            "left pending: unlocked",
            plain.clone(),
            left("pending-upgrade"),
            |s| matches!(s, S::Stuck { .. }),
        ),
        (
            "left failed: rendered",
            plain.clone(),
            left("failed"),
            |s| *s == S::OwnRunToRender { revision: 2 },
        ),
        (
            "deleting, left pending: unlocked before anything",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            left("pending-upgrade"),
            |s| matches!(s, S::Stuck { .. }),
        ),
        (
            "rendered otherwise: tampered, even while deleting",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            Observed {
                done: crate::delivery::helmapp::decide::observed::Done {
                    own_render: Some((2, Rendering::Differs)),
                    ..Default::default()
                },
                ..left("failed")
            },
            |s| matches!(s, S::Tampered { deleting: true, .. }),
        ),
    ]);
}

/// A helm slot held by another run (a shutdown takes every slot) ends no
/// run and counts nothing: looked at again, quietly.
#[test]
fn a_busy_helm_slot_is_looked_at_again_and_counts_nothing() {
    use crate::delivery::helmapp::decide::observed::RunEnded;
    use ReleaseState as S;
    check(vec![(
        "a helm slot held by another run",
        app(|a| a.spec.test.enable = true),
        Observed {
            done: crate::delivery::helmapp::decide::observed::Done {
                run_ended: Some(RunEnded::SlotBusy),
                ..Default::default()
            },
            newest: stored(3, "deployed", UID, HASH),
            ..observed()
        },
        |s| *s == S::HeldByHelm,
    )]);
}

/// A run refused by RBAC is a state of its own, and how long the refusals
/// have gone on is the longer of what the status says and what this
/// process saw — a HelmApp being deleted gets no status write, so its
/// refused uninstalls back off by the latter alone.
#[test]
fn a_refused_run_waits_by_the_longer_of_the_status_and_the_process() {
    use crate::delivery::helmapp::decide::observed::RunEnded;
    use ReleaseState as S;
    let refused = |lasted: Option<Duration>| Observed {
        done: crate::delivery::helmapp::decide::observed::Done {
            run_ended: Some(RunEnded::Forbidden {
                message: "no".into(),
            }),
            ..Default::default()
        },
        refused: lasted.map(
            |lasted| crate::delivery::helmapp::decide::observed::Refused {
                lasted,
                message: "no".into(),
                inputs: String::new(),
                again_in: Duration::ZERO,
            },
        ),
        newest: stored(3, "deployed", UID, HASH),
        ..observed()
    };
    check(vec![
        (
            "refused for 40 s, the status saying nothing",
            app(|_| {}),
            refused(Some(Duration::from_secs(40))),
            |s| matches!(s, S::Forbidden { waited, .. } if *waited >= Duration::from_secs(40)),
        ),
        (
            "refused for the first time",
            app(|_| {}),
            refused(None),
            |s| matches!(s, S::Forbidden { message, .. } if message == "no"),
        ),
    ]);
}

/// `retryInterval` is held within its bounds: never back to back, never
/// past a timer's reach.
#[test]
fn a_retry_interval_is_held_within_its_bounds() {
    let with = |interval: &str| {
        app(|a| {
            a.spec.upgrade.strategy = Some(apis::helmapp::ActionStrategy {
                name: apis::helmapp::StrategyName::RetryOnFailure,
                retry_interval: interval.into(),
            })
        })
    };
    assert_eq!(
        retry_on_failure(&with("1ns"), false),
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        retry_on_failure(&with("3000000000000000h"), false),
        Some(Duration::from_secs(24 * 3600))
    );
    assert_eq!(
        retry_on_failure(&with("90s"), false),
        Some(Duration::from_secs(90))
    );
    assert_eq!(
        retry_on_failure(&with("90s"), true),
        None,
        "the install's own"
    );
}

/// Flux's `chartNameChangeStrategy`: a chart of another name under our
/// release is reinstalled by default, upgraded in place when asked; the
/// same name, a release not ours or a name not read is an upgrade.
#[test]
fn a_renamed_chart_is_reinstalled_unless_in_place_is_asked() {
    use apis::helmapp::ChartNameChangeStrategy;
    let renamed = |chart_name: Option<&str>, owner: &str| {
        let mut o = Observed {
            newest: stored(2, "deployed", owner, "old"),
            chart_name: chart_name.map(String::from),
            ..observed()
        };
        o.status.chart_name = "web".into();
        o
    };
    let plain = app(|_| {});
    assert_eq!(
        decide(&renamed(Some("web-next"), UID), &plain),
        ReleaseState::ChartRenamed {
            from: "web".into(),
            to: "web-next".into()
        }
    );
    let upgrade = ReleaseState::OutOfSync {
        why: OutOfSyncCause::Changed,
    };
    let in_place = app(|a| {
        a.spec.upgrade.chart_name_change_strategy = ChartNameChangeStrategy::InPlaceUpdate;
    });
    assert_eq!(decide(&renamed(Some("web-next"), UID), &in_place), upgrade);
    let unknown = app(|a| {
        a.spec.upgrade.chart_name_change_strategy = ChartNameChangeStrategy::Unknown;
    });
    assert_eq!(
        decide(&renamed(Some("web-next"), UID), &unknown),
        upgrade,
        "a spelling the schema refuses never uninstalls"
    );
    assert_eq!(decide(&renamed(Some("web"), UID), &plain), upgrade);
    assert_eq!(decide(&renamed(None, UID), &plain), upgrade);
    // The name our own run made is not known (a rollback, an adoption, an
    // older status): never an uninstall — whatever the storage says.
    let mut unknown_name = renamed(Some("web-next"), UID);
    unknown_name.status.chart_name.clear();
    assert_eq!(decide(&unknown_name, &plain), upgrade);
    // Manual approval holds a reinstall as it holds an upgrade.
    let manual = app(|a| a.spec.approval = apis::helmapp::Approval::Manual);
    assert!(matches!(
        decide(&renamed(Some("web-next"), UID), &manual),
        ReleaseState::AwaitingApproval { .. }
    ));
}

/// A release whose cluster cannot be used (`kubeConfig` refused, its API
/// server silent, no place for one more cluster) was not read: nothing is
/// decided about it, a deletion that would uninstall included — that waits
/// for the cluster; a deletion that uninstalls nothing lets go.
#[test]
fn a_release_whose_cluster_cannot_be_used_is_held_deletion_included() {
    use ReleaseState as S;
    let unreachable = || Observed {
        cluster_problem: Some(Waiting::until_changed(
            Reason::ClusterUnreachable,
            "the remote cluster's API server does not answer".into(),
        )),
        ..observed()
    };
    let held =
        |s: &S| matches!(s, S::Refused { reason, .. } if *reason == Reason::ClusterUnreachable);
    let deleting = |uninstall: bool| {
        app(move |a| {
            a.metadata.deletion_timestamp = Some(deleted());
            a.spec.uninstall_on_delete = uninstall;
        })
    };
    assert!(held(&decide(&unreachable(), &app(|_| {}))), "install");
    assert!(held(&decide(&unreachable(), &deleting(true))), "uninstall");
    assert_eq!(
        decide(&unreachable(), &deleting(false)),
        S::Deleting { uninstall: false },
        "a deletion that uninstalls nothing"
    );
    let polled = Observed {
        cluster_problem: Some(Waiting::polled(
            Reason::ClusterLimitReached,
            "100 remote clusters run already".into(),
        )),
        ..observed()
    };
    assert!(matches!(
        decide(&polled, &app(|_| {})),
        S::DependencyPolled {
            reason: Reason::ClusterLimitReached,
            ..
        }
    ));
    // Suspension still says more than the cluster.
    assert_eq!(
        decide(&unreachable(), &app(|a| a.spec.suspend = true)),
        S::Suspended
    );
}
