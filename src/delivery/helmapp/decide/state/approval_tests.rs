//! `state` as a table, the rows of docs/delivery.md —
//! approval: what waits, what runs once approved, what is never held back.

use crate::delivery::helmapp::decide::state::tests::{
    HASH, UID, app, check, deleted, observed, stored,
};
use crate::delivery::helmapp::decide::state::*;
use apis::helmapp::Approval;

#[test]
fn a_manual_app_runs_only_approved_configurations() {
    use ReleaseState as S;
    let manual = app(|a| a.spec.approval = Approval::Manual);
    let rows: Vec<crate::delivery::helmapp::decide::state::tests::Row> = vec![
        (
            "auto: a new configuration runs",
            app(|_| {}),
            observed(),
            |s| *s == S::Absent,
        ),
        (
            "manual: the first install waits",
            manual.clone(),
            observed(),
            |s| matches!(s, S::AwaitingApproval { stale: None, .. }),
        ),
        (
            "manual: a changed configuration waits",
            manual.clone(),
            Observed {
                newest: stored(1, "deployed", UID, "h0"),
                ..observed()
            },
            |s| matches!(s, S::AwaitingApproval { hash, stale: None, .. } if hash == HASH),
        ),
        (
            "manual: approved by its hash, it runs",
            manual.clone(),
            Observed {
                newest: stored(1, "deployed", UID, "h0"),
                approve: HASH.into(),
                ..observed()
            },
            |s| {
                matches!(
                    s,
                    S::OutOfSync {
                        why: OutOfSyncCause::Changed
                    }
                )
            },
        ),
        (
            "manual: adopting a release nobody owns by an upgrade waits",
            app(|a| {
                a.spec.approval = Approval::Manual;
                a.spec.adopt = true;
            }),
            Observed {
                newest: stored(1, "deployed", "", HASH),
                done: crate::delivery::helmapp::decide::observed::Done {
                    adoption_render: Some(Rendering::Differs),
                    ..Default::default()
                },
                ..observed()
            },
            |s| matches!(s, S::AwaitingApproval { .. }),
        ),
        (
            "manual: adopting one as it is changes nothing: no approval",
            app(|a| {
                a.spec.approval = Approval::Manual;
                a.spec.adopt = true;
            }),
            Observed {
                newest: stored(1, "deployed", "", HASH),
                done: crate::delivery::helmapp::decide::observed::Done {
                    adoption_render: Some(Rendering::Same),
                    ..Default::default()
                },
                ..observed()
            },
            |s| matches!(s, S::AdoptAsIs { revision: 1 }),
        ),
    ];
    check(rows);
}

#[test]
fn what_already_ran_is_retried_repaired_and_uninstalled_without_approval() {
    use ReleaseState as S;
    let manual = app(|a| a.spec.approval = Approval::Manual);
    let rows: Vec<crate::delivery::helmapp::decide::state::tests::Row> = vec![
        (
            "manual: a failed run of the approved configuration is retried",
            manual.clone(),
            Observed {
                newest: stored(2, "failed", UID, HASH),
                ..observed()
            },
            |s| {
                matches!(
                    s,
                    S::OutOfSync {
                        why: OutOfSyncCause::NotDeployed
                    }
                )
            },
        ),
        (
            "manual: deleted objects of what ran are put back",
            manual.clone(),
            Observed {
                newest: stored(1, "deployed", UID, HASH),
                missing: vec!["ConfigMap apps/web".into()],
                ..observed()
            },
            |s| matches!(s, S::Drifted { .. }),
        ),
        (
            "manual: deleting uninstalls without approval",
            app(|a| {
                a.spec.approval = Approval::Manual;
                a.metadata.deletion_timestamp = Some(deleted());
            }),
            Observed {
                newest: stored(1, "deployed", UID, "h0"),
                ..observed()
            },
            |s| *s == S::Deleting { uninstall: true },
        ),
    ];
    check(rows);
}

#[test]
fn an_approval_of_another_configuration_is_stale() {
    use ReleaseState as S;
    let manual = app(|a| a.spec.approval = Approval::Manual);
    let waits = |stale: Option<&str>| {
        let stale = stale.map(str::to_string);
        move |s: &S| {
            *s == S::AwaitingApproval {
                hash: HASH.into(),
                chart_version: "1.0.0".into(),
                stale: stale.clone(),
            }
        }
    };
    let stale = Observed {
        newest: stored(1, "deployed", UID, "h0"),
        approve: "h0".into(),
        ..observed()
    };
    assert!(waits(Some("h0"))(&decide(&stale, &manual)));
    assert!(waits(None)(&decide(&observed(), &manual)));
}
