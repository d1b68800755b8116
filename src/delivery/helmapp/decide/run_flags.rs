//! The flags of each helm run, chosen from the HelmApp and what its
//! storage holds (pure: `act` only passes them on).
//!
//! Server-side apply follows Flux: conflicts are forced whenever the
//! objects are applied server-side (`forceConflicts`, default true), so a
//! field a hand edit, `kubectl scale` or an HPA took over goes back to the
//! chart's value instead of failing every upgrade. helm 4 refuses
//! `--force-conflicts` beside a client-side apply, so `auto` is resolved
//! here as helm would resolve it: by the apply method of the revision helm
//! reads — the newest for an upgrade, the target for a rollback.

use apis::helmapp::{HelmApp, ServerSideApply, TestFilter};

use crate::delivery::helm::{Flags, ServerSide};
/// The run a dry run previews: an upgrade of the newest stored revision,
/// or an install when there is none.
pub fn previewed_run(o: &Observed) -> RunKind {
    match o.newest {
        Some(_) => RunKind::Upgrade,
        None => RunKind::Install,
    }
}

#[cfg(test)]
use crate::delivery::helmapp::decide::observed::Timeouts;
use crate::delivery::helmapp::decide::observed::{Observed, RunKind};
#[cfg(test)]
use std::time::Duration;

/// `spec.test.filters` as helm's `--filter` values: `name=<n>` to run only
/// the named tests, `!name=<n>` to leave one out. Names are checked here
/// too (the CRD's pattern does not bind objects stored before it): a
/// comma would be read by helm as a second filter.
pub fn test_filters(filters: &[TestFilter]) -> Result<Vec<String>, String> {
    filters
        .iter()
        .map(|f| {
            let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            let bytes = f.name.as_bytes();
            let valid = f.name.len() <= 253
                && bytes.first().is_some_and(|b| alnum(*b))
                && bytes.last().is_some_and(|b| alnum(*b))
                && bytes.iter().all(|b| alnum(*b) || *b == b'-' || *b == b'.');
            if !valid {
                return Err(format!(
                    "spec.test.filters: {:?} is not an object name",
                    f.name
                ));
            }
            Ok(format!(
                "{}name={}",
                if f.exclude { "!" } else { "" },
                f.name
            ))
        })
        .collect()
}

/// Whether `kind` runs over nothing: an install of a release with no
/// revision in Helm's storage (as the cache holds it) nor in the status
/// (recorded, held, or named by an earlier run's intent). Then helm is
/// asked for `helm install` (`helm::Upgrade::absent`), which refuses the
/// name if a revision appeared since: what a Secret's writer plants in the
/// moment before the run is never upgraded from (its objects never
/// deleted by our helm), only found by the next storage check.
pub fn over_nothing(o: &Observed, kind: RunKind) -> bool {
    kind == RunKind::Install
        && o.newest.is_none()
        && o.status.revision == 0
        && o.status.storage_digests.is_empty()
        && o.status.run_intent.is_none()
}

/// An install's or an upgrade's (and a drift repair's, an upgrade) flags —
/// `--force` too when `hossted.com/force-at` asked.
pub fn of_run(app: &HelmApp, o: &Observed, kind: RunKind, forced: bool) -> Flags {
    let (i, u) = (&app.spec.install, &app.spec.upgrade);
    match kind {
        RunKind::Install => Flags {
            no_hooks: i.disable_hooks,
            skip_schema_validation: i.skip_schema_validation,
            disable_openapi_validation: i.disable_openapi_validation,
            server_side: Some(if i.server_side_apply {
                ServerSide::Enabled
            } else {
                ServerSide::Disabled
            }),
            force_conflicts: i.force_conflicts,
            ..Flags::default()
        },
        RunKind::Upgrade | RunKind::Repair => {
            let newest_server_side = o
                .newest
                .as_ref()
                .is_some_and(|n| o.server_side_revisions.contains(&n.revision));
            Flags {
                no_hooks: u.disable_hooks,
                force: u.force || forced,
                cleanup_on_fail: u.cleanup_on_fail,
                skip_schema_validation: u.skip_schema_validation,
                disable_openapi_validation: u.disable_openapi_validation,
                server_side: Some(said(u.server_side_apply).resolved(newest_server_side)),
                force_conflicts: u.force_conflicts,
            }
        }
    }
}

/// A rollback's flags, to `revision`.
pub fn of_rollback(app: &HelmApp, o: &Observed, revision: i64) -> Flags {
    let r = &app.spec.rollback;
    let target_server_side = o.server_side_revisions.contains(&revision);
    Flags {
        no_hooks: r.disable_hooks,
        force: r.force,
        cleanup_on_fail: r.cleanup_on_fail,
        skip_schema_validation: false,
        disable_openapi_validation: false,
        server_side: Some(said(r.server_side_apply).resolved(target_server_side)),
        force_conflicts: r.force_conflicts,
    }
}

fn said(mode: ServerSideApply) -> ServerSide {
    match mode {
        ServerSideApply::Enabled => ServerSide::Enabled,
        ServerSideApply::Disabled => ServerSide::Disabled,
        ServerSideApply::Auto | ServerSideApply::Unknown => ServerSide::Auto,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_action_takes_its_own_timeout_bounded_as_the_spec_one_is() {
        let a = app(|a| {
            a.spec.upgrade.timeout = "5s".into();
            a.spec.install.timeout = "2h".into();
            a.spec.test.timeout = "bogus".into();
        });
        let (default, max) = (Duration::from_secs(300), Duration::from_secs(1800));
        let t = Timeouts::of(&a, default, max);
        assert_eq!(t.of_run(RunKind::Upgrade), Duration::from_secs(5));
        assert_eq!(t.of_run(RunKind::Repair), Duration::from_secs(5));
        assert_eq!(t.of_run(RunKind::Install), max, "bounded");
        assert_eq!(
            (t.rollback, t.uninstall, t.test),
            (default, default, default)
        );
    }

    #[test]
    fn test_filters_are_helms_and_a_name_that_is_none_is_refused() {
        let f = |name: &str, exclude| TestFilter {
            name: name.into(),
            exclude,
        };
        assert_eq!(
            test_filters(&[f("web-test", false), f("web-slow", true)]).unwrap(),
            ["name=web-test", "!name=web-slow"]
        );
        for bad in ["", "a,name=b", "A", "x y", "--x", &"a".repeat(254)] {
            assert!(test_filters(&[f(bad, false)]).is_err(), "{bad:?}");
        }
    }

    use super::*;
    use crate::delivery::helmapp::decide::observed::Stored;
    use crate::delivery::helmapp::decide::state::tests::{app, observed};

    fn stored(newest: i64, server_side: &[i64]) -> Observed {
        let mut o = observed();
        o.newest = Some(Stored {
            revision: newest,
            ..Default::default()
        });
        o.server_side_revisions = server_side.iter().copied().collect();
        o
    }

    #[test]
    fn only_an_install_over_no_revision_anywhere_is_helm_install() {
        let nothing = observed();
        assert!(over_nothing(&nothing, RunKind::Install));
        for kind in [RunKind::Upgrade, RunKind::Repair] {
            assert!(!over_nothing(&nothing, kind), "{kind:?}");
        }
        // Anything in the storage (a failed try, an `uninstalled` entry a
        // kept history left: `upgrade --install` replaces it), anything
        // recorded or held, an earlier run's intent: an upgrade's command.
        let mut somewhere: Vec<(&str, Observed)> = Vec::new();
        somewhere.push(("stored", stored(1, &[])));
        let mut recorded = observed();
        recorded.status.revision = 1;
        somewhere.push(("recorded", recorded));
        let mut digests = observed();
        digests.status.storage_digests = vec![apis::helmapp::StorageDigest {
            revision: 1,
            ..Default::default()
        }];
        somewhere.push(("digests", digests));
        let mut intent = observed();
        intent.status.run_intent = Some(apis::helmapp::RunIntent {
            action: "install".into(),
            revision: 1,
            ..Default::default()
        });
        somewhere.push(("intent", intent));
        for (what, o) in &somewhere {
            assert!(!over_nothing(o, RunKind::Install), "{what}");
        }
    }

    #[test]
    fn auto_follows_the_revision_helm_reads_and_forces_conflicts_only_server_side() {
        let a = app(|_| ());
        // An upgrade reads the newest revision.
        let f = of_run(&a, &stored(3, &[3]), RunKind::Upgrade, false);
        assert_eq!(
            (f.server_side, f.force_conflicts),
            (Some(ServerSide::Enabled), true)
        );
        // helm 3 made it: client-side, so no --force-conflicts.
        let f = of_run(&a, &stored(3, &[1, 2]), RunKind::Repair, false);
        assert_eq!(f.server_side, Some(ServerSide::Disabled));
        // A rollback reads its target.
        let o = stored(3, &[3]);
        assert_eq!(
            of_rollback(&a, &o, 2).server_side,
            Some(ServerSide::Disabled)
        );
        assert_eq!(
            of_rollback(&a, &o, 3).server_side,
            Some(ServerSide::Enabled)
        );
        // An install applies server-side unless told not to.
        let f = of_run(&a, &stored(0, &[]), RunKind::Install, false);
        assert_eq!(
            (f.server_side, f.force_conflicts),
            (Some(ServerSide::Enabled), true)
        );
    }

    #[test]
    fn the_settings_say_otherwise() {
        let a = app(|a| {
            let s = &mut a.spec;
            (s.install.force_conflicts, s.install.server_side_apply) = (false, false);
            (s.upgrade.force_conflicts, s.upgrade.server_side_apply) =
                (false, ServerSideApply::Enabled);
            (s.rollback.force_conflicts, s.rollback.server_side_apply) =
                (false, ServerSideApply::Disabled);
        });
        let o = stored(3, &[]);
        let f = of_run(&a, &o, RunKind::Install, false);
        assert_eq!(
            (f.server_side, f.force_conflicts),
            (Some(ServerSide::Disabled), false)
        );
        let f = of_run(&a, &o, RunKind::Upgrade, false);
        assert_eq!(
            (f.server_side, f.force_conflicts),
            (Some(ServerSide::Enabled), false)
        );
        let o = stored(3, &[2, 3]);
        let f = of_rollback(&a, &o, 2);
        assert_eq!(
            (f.server_side, f.force_conflicts),
            (Some(ServerSide::Disabled), false)
        );
        // Asked to force (replace): helm 4 replaces client-side only, which
        // the command line says (`super::super::helm::args`).
        assert!(of_run(&app(|_| ()), &o, RunKind::Upgrade, true).force);
    }
}
