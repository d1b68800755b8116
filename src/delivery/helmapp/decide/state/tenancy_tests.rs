//! `state` as a table, the rows of docs/tenancy.md: what is decided
//! about storage that was changed by someone else, and about an app whose
//! project is gone, before any helm run.

use crate::delivery::helmapp::decide::state::tests::{
    HASH, UID, app, check, deleted, observed, stored,
};
use crate::delivery::helmapp::decide::state::*;

#[test]
fn changed_storage_and_a_gone_project_are_decided_before_any_helm_run() {
    use ReleaseState as S;
    let plain = app(|_| {});
    check(vec![
        (
            "deleting, ours, made from a project that is gone: let go",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            Observed {
                newest: stored(1, "deployed", UID, HASH),
                project_gone: true,
                ..observed()
            },
            |s| *s == S::Deleting { uninstall: false },
        ),
        (
            "deleting, storage tampered: let go without uninstalling",
            app(|a| a.metadata.deletion_timestamp = Some(deleted())),
            Observed {
                newest: stored(1, "deployed", UID, HASH),
                tampered: Some("edited".into()),
                ..observed()
            },
            |s| {
                *s == S::Tampered {
                    message: "edited".into(),
                    deleting: true,
                }
            },
        ),
        (
            "storage tampered: no helm runs",
            plain.clone(),
            Observed {
                newest: stored(1, "deployed", UID, "old"),
                tampered: Some("edited".into()),
                ..observed()
            },
            |s| {
                *s == S::Tampered {
                    message: "edited".into(),
                    deleting: false,
                }
            },
        ),
        (
            "storage tampered but suspended: suspended says more",
            app(|a| a.spec.suspend = true),
            Observed {
                tampered: Some("edited".into()),
                ..observed()
            },
            |s| *s == S::Suspended,
        ),
    ]);
}
