use crate::delivery::helmapp::observe::storage::*;
use crate::lean::helm::encode_release;
use crate::lean::storage::release_digest;
use base64::Engine;
use serde_json::json;

/// A storage Secret of release `web` in `apps`: labels say `label_version`,
/// the payload says `payload_version`.
fn entry(label_version: i64, payload_version: i64, uid: &str) -> (HelmRelease, String) {
    entry_in(label_version, payload_version, uid, "deployed")
}

fn entry_in(
    label_version: i64,
    payload_version: i64,
    uid: &str,
    status: &str,
) -> (HelmRelease, String) {
    let release = json!({
        "name": "web", "namespace": "apps", "version": payload_version,
        "info": { "status": status },
        "chart": { "metadata": { "name": "web", "version": "1.0.0" } },
        "manifest": ""
    });
    let payload = encode_release(&serde_json::to_vec(&release).unwrap());
    let digest = release_digest(&payload);
    let data = base64::engine::general_purpose::STANDARD.encode(&payload);
    let secret = json!({
        "metadata": {
            "name": format!("sh.helm.release.v1.web.v{label_version}"),
            "namespace": "apps",
            "labels": { "owner": "helm", "name": "web", "version": label_version.to_string(),
                        HELMAPP_UID_LABEL: uid }
        },
        "data": { "release": data }
    });
    let fresh: FreshRelease = serde_json::from_value(secret).unwrap();
    (fresh.0, digest)
}

fn recorded(rows: &[(i64, &str)]) -> Vec<StorageDigest> {
    rows.iter()
        .map(|(revision, digest)| StorageDigest {
            revision: *revision,
            digest: digest.to_string(),
            content: String::new(),
        })
        .collect()
}

#[test]
fn every_revision_recorded_and_matching_is_trusted() {
    let (one, d1) = entry(1, 1, "u");
    let (two, d2) = entry(2, 2, "u");
    let entries = vec![one, two];
    assert_eq!(
        first_untrusted(&entries, &recorded(&[(2, &d2), (1, &d1)])),
        None
    );
}

#[test]
fn an_older_revision_changed_is_not_trusted_though_the_newest_matches() {
    let (one, _) = entry(1, 1, "u");
    let (two, d2) = entry(2, 2, "u");
    let entries = vec![one, two];
    let found = first_untrusted(&entries, &recorded(&[(2, &d2), (1, "sha256:before")]));
    assert!(
        matches!(found, Some(Untrusted::Changed { revision: 1, .. })),
        "{found:?}"
    );
}

#[test]
fn a_revision_never_recorded_is_not_trusted() {
    let (one, d1) = entry(1, 1, "u");
    let (planted, _) = entry(3, 3, "");
    let entries = vec![one, planted];
    let found = first_untrusted(&entries, &recorded(&[(1, &d1)]));
    assert!(
        matches!(found, Some(Untrusted::Unrecorded { revision: 3, .. })),
        "{found:?}"
    );
}

#[test]
fn label_and_payload_that_disagree_are_no_release_and_never_the_newest() {
    let (real, d1) = entry(1, 1, "u");
    // The forgery of the issue: labels say revision 1, the payload 999.
    let (forged, _) = entry(1, 999, "u");
    assert!(forged.release.is_err(), "{:?}", forged.release);
    let entries = vec![real, forged];
    assert_eq!(newest(&entries).map(|n| n.revision), Some(1));
    assert_eq!(newest(&entries).map(|n| n.digest), Some(d1.clone()));
    let found = first_untrusted(&entries, &recorded(&[(1, &d1)]));
    assert!(
        matches!(found, Some(Untrusted::Invalid { .. })),
        "{found:?}"
    );
}

#[test]
fn trust_records_every_release_newest_first_and_skips_what_is_no_release() {
    let (one, d1) = entry(1, 1, "u");
    let (two, d2) = entry(2, 2, "u");
    let (forged, _) = entry(5, 999, "u");
    let mut status = HelmAppStatus::default();
    trust(&mut status, &[one, forged, two]);
    let kept: Vec<(i64, String)> = status
        .storage_digests
        .iter()
        .map(|d| (d.revision, d.digest.clone()))
        .collect();
    assert_eq!(kept, [(2, d2), (1, d1)]);
    assert!(
        status
            .storage_digests
            .iter()
            .all(|d| d.content.starts_with("sha256:"))
    );
}

/// An entry of `release` JSON as a fresh read gives it.
fn fresh_of(release: serde_json::Value, uid: &str) -> HelmRelease {
    let version = release["version"].as_i64().unwrap();
    let payload = encode_release(&serde_json::to_vec(&release).unwrap());
    let secret = json!({
        "metadata": {
            "name": format!("sh.helm.release.v1.web.v{version}"), "namespace": "apps",
            "labels": { "owner": "helm", "name": "web", "version": version.to_string(),
                        HELMAPP_UID_LABEL: uid }
        },
        "data": { "release": base64::engine::general_purpose::STANDARD.encode(&payload) }
    });
    serde_json::from_value::<FreshRelease>(secret).unwrap().0
}

fn release(version: i64, status: &str, manifest: &str) -> serde_json::Value {
    json!({ "name": "web", "namespace": "apps", "version": version,
            "info": { "status": status, "description": status },
            "chart": { "metadata": { "name": "web", "version": "1.0.0" } },
            "manifest": manifest })
}

/// The intent of a run that writes `revision`.
fn intent(revision: i64) -> RunIntent {
    RunIntent {
        action: "upgrade".into(),
        revision,
        config_hash: "h".into(),
        started_at: "2026-11-28T00:00:00Z".into(),
        content: String::new(),
    }
}

#[test]
fn after_an_action_helms_own_rewrite_is_recorded_and_an_edit_is_not() {
    let before_one = fresh_of(release(1, "deployed", "a"), "u");
    let mut status = HelmAppStatus::default();
    trust(&mut status, std::slice::from_ref(&before_one));
    let before = status.storage_digests.clone();
    let ran = intent(2);
    // Helm superseded revision 1 (its info alone) and made revision 2.
    let after = [
        fresh_of(release(1, "superseded", "a"), "u"),
        fresh_of(release(2, "deployed", "b"), "u"),
    ];
    let recorded = recorded_after(&after, &before, Some(&ran), true);
    assert_eq!(recorded.len(), 2);
    assert_eq!(first_untrusted(&after, &recorded), None);
    // Revision 1's manifest edited while helm ran: its old record stays.
    let edited = [
        fresh_of(release(1, "superseded", "a\n---\nplanted"), "u"),
        fresh_of(release(2, "deployed", "b"), "u"),
    ];
    let recorded = recorded_after(&edited, &before, Some(&ran), true);
    assert!(
        matches!(
            first_untrusted(&edited, &recorded),
            Some(Untrusted::Changed { revision: 1, .. })
        ),
        "{recorded:?}"
    );
    // Revision 1 made `deployed` again while helm ran (its manifest
    // untouched): no helm run rewrites an existing revision so; its old
    // record stays. Likewise the newest made to look `superseded`.
    for (one, two) in [("deployed", "deployed"), ("superseded", "superseded")] {
        let steered = [
            fresh_of(release(1, one, "a"), "u"),
            fresh_of(release(2, two, "b"), "u"),
        ];
        let mut recorded_two = recorded_after(&after, &before, Some(&ran), true);
        recorded_two = recorded_after(&steered, &recorded_two, None, false);
        assert!(
            first_untrusted(&steered, &recorded_two).is_some(),
            "{one}/{two}: {recorded_two:?}"
        );
    }
    // Our newest made `superseded` beside a planted higher revision: the
    // planted one's number is no evidence of a newer revision of ours.
    let planted_above = [
        fresh_of(release(1, "superseded", "a"), "u"),
        fresh_of(release(999, "deployed", "x"), "u"),
    ];
    let recorded = recorded_after(&planted_above, &before, None, false);
    assert!(
        recorded.iter().any(|d| before.contains(d)),
        "revision 1's earlier record stays: {recorded:?}"
    );
    // A revision planted while helm ran is not recorded, whoever its
    // labels name as owner — ours included.
    for owner in ["tenant", "u"] {
        let planted = [
            fresh_of(release(1, "deployed", "a"), "u"),
            fresh_of(release(3, "deployed", "x"), owner),
        ];
        let recorded = recorded_after(&planted, &before, Some(&ran), true);
        assert_eq!(
            recorded.iter().map(|d| d.revision).collect::<Vec<_>>(),
            [1],
            "{owner}"
        );
    }
    // No run declared: nothing new is recorded.
    let recorded = recorded_after(&after, &before, None, false);
    assert_eq!(recorded.iter().map(|d| d.revision).collect::<Vec<_>>(), [1]);
}

#[test]
fn a_revision_helm_superseded_before_its_run_was_killed_is_still_ours_and_an_edit_is_not() {
    // Recorded after the run that made revision 1; the next run (intent 2)
    // superseded it and was killed before writing revision 2 deployed or
    // the status: revision 1 differs from its record in `info` alone.
    let mut status = HelmAppStatus::default();
    trust(&mut status, &[fresh_of(release(1, "deployed", "a"), "u")]);
    let killed = [
        fresh_of(release(1, "superseded", "a"), "u"),
        fresh_of(release(2, "pending-upgrade", "b"), "u"),
    ];
    // The killed run's own revision is unrecorded (a render proves it);
    // once it is, revision 1's rewrite is helm's.
    assert!(matches!(
        first_untrusted(&killed, &status.storage_digests),
        Some(Untrusted::Unrecorded { revision: 2, .. })
    ));
    let mut proven = status.storage_digests.clone();
    proven.push(StorageDigest {
        revision: 2,
        digest: killed[1].digest_string().unwrap(),
        content: killed[1].content.clone().unwrap(),
    });
    let recorded = &proven;
    assert_eq!(first_untrusted(&killed, recorded), None);
    // Its manifest or values changed too: not helm's rewrite.
    for changed in [
        release(
            1,
            "superseded",
            "a
---
planted",
        ),
        json!({ "name": "web", "namespace": "apps", "version": 1,
                "info": { "status": "superseded" }, "config": { "planted": true },
                "chart": { "metadata": { "name": "web", "version": "1.0.0" } },
                "manifest": "a" }),
    ] {
        let found = first_untrusted(&[fresh_of(changed, "u"), killed[1].clone()], recorded);
        assert!(
            matches!(found, Some(Untrusted::Changed { revision: 1, .. })),
            "{found:?}"
        );
    }
    // Another status written into it is not helm's: an older revision
    // made `deployed` again, the newest made `failed` or `superseded`.
    let mut two = HelmAppStatus::default();
    trust(
        &mut two,
        &[
            fresh_of(release(1, "superseded", "a"), "u"),
            fresh_of(release(2, "deployed", "b"), "u"),
        ],
    );
    for (flipped, revision) in [
        (
            [
                fresh_of(release(1, "deployed", "a"), "u"),
                fresh_of(release(2, "deployed", "b"), "u"),
            ],
            1,
        ),
        (
            [
                fresh_of(release(1, "superseded", "a"), "u"),
                fresh_of(release(2, "failed", "b"), "u"),
            ],
            2,
        ),
        (
            [
                fresh_of(release(1, "superseded", "a"), "u"),
                fresh_of(release(2, "superseded", "b"), "u"),
            ],
            2,
        ),
    ] {
        let found = first_untrusted(&flipped, &two.storage_digests);
        assert!(
            matches!(found, Some(Untrusted::Changed { revision: r, .. }) if r == revision),
            "{found:?}"
        );
    }
    // The cache has no content digest: a difference there is confirmed
    // by a fresh read (`check`), never passed on the cache's word.
    let (cached, _) = entry_in(1, 1, "u", "superseded");
    let found = first_untrusted(&[cached], recorded);
    assert!(
        matches!(found, Some(Untrusted::Changed { .. })),
        "{found:?}"
    );
}

#[test]
fn a_run_of_ours_left_unfinished_is_unrecorded_like_a_planted_one() {
    let (one, d1) = entry(1, 1, "u");
    // A helm of ours died after writing revision 2 pending or failed, its
    // intent in the status; or a tenant planted one with the label copied.
    // Neither the intent nor the label is evidence of the content.
    for status in ["pending-upgrade", "failed", "deployed"] {
        let (two, _) = entry_in(2, 2, "u", status);
        let found = first_untrusted(&[one.clone(), two], &recorded(&[(1, &d1)]));
        assert!(
            matches!(found, Some(Untrusted::Unrecorded { revision: 2, .. })),
            "{status}: {found:?}"
        );
    }
}

/// The Observed of `web` with `status`.
fn observed_with(status: HelmAppStatus) -> Observed {
    Observed {
        status,
        ..crate::delivery::helmapp::decide::state::tests::observed()
    }
}

#[test]
fn a_leftover_intent_records_nothing_of_its_revision_and_stays_until_a_render_proves_it() {
    let one = fresh_of(release(1, "deployed", "a"), "u");
    let mut status = HelmAppStatus::default();
    trust(&mut status, std::slice::from_ref(&one));
    status.run_intent = Some(intent(2));
    // What the dead run's revision holds now — perhaps a tenant's
    // manifest: the intent names its number only.
    let left = [
        fresh_of(release(1, "superseded", "a"), "u"),
        fresh_of(release(2, "failed", "a\n---\nplanted"), "u"),
    ];
    let mut o = observed_with(status.clone());
    record(&mut o, &left);
    assert_eq!(
        o.status
            .storage_digests
            .iter()
            .map(|d| d.revision)
            .collect::<Vec<_>>(),
        [1],
        "helm's rewrite of revision 1 recorded, revision 2 not"
    );
    assert_eq!(o.status.run_intent.as_ref().map(|i| i.revision), Some(2));
    assert!(matches!(
        first_untrusted(&left, &o.status.storage_digests),
        Some(Untrusted::Unrecorded { revision: 2, .. })
    ));
    // Nor does the run this reconcile started when its helm printed
    // nothing (it failed, or rolled back): the number may be a Secret
    // writer's, put there before helm wrote (helm then refusing the name,
    // or failing on it).
    let mut failed = observed_with(status.clone());
    failed.done.run_live = true;
    record(&mut failed, &left);
    assert_eq!(
        failed
            .status
            .storage_digests
            .iter()
            .map(|d| d.revision)
            .collect::<Vec<_>>(),
        [1],
        "a failed run's revision is proven by a render, not its number"
    );
    assert_eq!(
        failed.status.run_intent.as_ref().map(|i| i.revision),
        Some(2)
    );
    // A run whose helm printed the release it stored, rewritten since by
    // our own `helm test` (the content it printed let go): by number.
    let mut live = observed_with(status.clone());
    live.done.run_live = true;
    live.done.run_printed = true;
    record(&mut live, &left);
    assert_eq!(
        live.status
            .storage_digests
            .iter()
            .map(|d| d.revision)
            .collect::<Vec<_>>(),
        [2, 1]
    );
    assert_eq!(live.status.run_intent, None);
    assert!(
        !live.done.run_live && !live.done.run_printed,
        "live for one record only"
    );
    // Proven by a render (the content it rendered): recorded.
    let mut proven = observed_with(status);
    record_proven(&mut proven, &left, 2, left[1].content.as_deref().unwrap());
    assert_eq!(proven.status.storage_digests.len(), 2);
    assert_eq!(proven.status.run_intent, None);
}

#[test]
fn a_status_label_that_differs_from_the_payload_is_no_release() {
    // The planted revision of the issue: labelled deployed (what helm
    // upgrades from), its payload failed (what an exemption read).
    let release = json!({
        "name": "web", "namespace": "apps", "version": 2,
        "info": { "status": "failed" },
        "chart": { "metadata": { "name": "web", "version": "1.0.0" } },
        "manifest": "kind: ConfigMap\nmetadata: {name: x, namespace: kube-system}\n"
    });
    let payload = encode_release(&serde_json::to_vec(&release).unwrap());
    let secret = json!({
        "metadata": {
            "name": "sh.helm.release.v1.web.v2", "namespace": "apps",
            "labels": { "owner": "helm", "name": "web", "version": "2", "status": "deployed",
                        HELMAPP_UID_LABEL: "u" }
        },
        "data": { "release": base64::engine::general_purpose::STANDARD.encode(&payload) }
    });
    let forged = serde_json::from_value::<FreshRelease>(secret).unwrap().0;
    assert!(forged.release.is_err(), "{:?}", forged.release);
    let (one, d1) = entry(1, 1, "u");
    let found = first_untrusted(&[one, forged], &recorded(&[(1, &d1)]));
    assert!(
        matches!(found, Some(Untrusted::Invalid { .. })),
        "{found:?}"
    );
}

/// Revision 1 recorded (`deployed`, manifest `a`), then a run of ours
/// that made revision 2 (manifest `b`): what was recorded before it, the
/// revision as stored, and its intent with the content helm printed.
fn revision_2_printed() -> (Vec<StorageDigest>, HelmRelease, RunIntent) {
    let before_one = fresh_of(release(1, "deployed", "a"), "u");
    let mut status = HelmAppStatus::default();
    trust(&mut status, std::slice::from_ref(&before_one));
    let ours = fresh_of(release(2, "deployed", "b"), "u");
    let printed = RunIntent {
        content: ours.content.clone().unwrap(),
        ..intent(2)
    };
    (status.storage_digests, ours, printed)
}

#[test]
fn the_runs_revision_is_recorded_only_with_the_content_helm_printed() {
    let (before, ours, printed) = revision_2_printed();
    let after = [fresh_of(release(1, "superseded", "a"), "u"), ours];
    let recorded = recorded_after(&after, &before, Some(&printed), true);
    assert_eq!(
        recorded.iter().map(|d| d.revision).collect::<Vec<_>>(),
        [2, 1]
    );
    // Revision 2 replaced after helm printed it (same number, same labels,
    // another manifest): not the run's.
    let swapped = [
        fresh_of(release(1, "superseded", "a"), "u"),
        fresh_of(release(2, "deployed", "b\n---\nplanted"), "u"),
    ];
    let recorded = recorded_after(&swapped, &before, Some(&printed), true);
    assert_eq!(recorded.iter().map(|d| d.revision).collect::<Vec<_>>(), [1]);
    assert!(matches!(
        first_untrusted(&swapped, &recorded),
        Some(Untrusted::Unrecorded { revision: 2, .. })
    ));
}

/// The run's own revision, its content what helm printed, is recorded
/// only with the `info` helm leaves there: made `pending-*` by another
/// writer (the content unchanged: `info` is not content), it is not the
/// run's — after the run, and when the record is made again later
/// (`record_own_revision`). Red with the content alone as proof.
#[test]
fn the_runs_revision_made_to_look_unfinished_is_not_recorded() {
    let (before, ours, printed) = revision_2_printed();
    for (stored, ours_still) in [
        ("deployed", true),
        ("failed", true),
        ("uninstalled", true),
        ("pending-upgrade", false),
        ("pending-install", false),
        ("pending-rollback", false),
        ("unknown", false),
    ] {
        let after = [
            fresh_of(release(1, "superseded", "a"), "u"),
            fresh_of(release(2, stored, "b"), "u"),
        ];
        assert_eq!(after[1].content, ours.content, "info is not content");
        let recorded = recorded_after(&after, &before, Some(&printed), true);
        assert_eq!(
            recorded.iter().any(|d| d.revision == 2),
            ours_still,
            "{stored}: {recorded:?}"
        );
        assert_eq!(
            own_stored(&after, 2, &printed.content).is_some(),
            ours_still,
            "{stored}"
        );
        // Proved by a render instead (a killed run's revision, left
        // `pending-*` by helm itself): recorded, for the unlock.
        let rendered = recorded_after(&after, &before, Some(&printed), false);
        assert!(rendered.iter().any(|d| d.revision == 2), "{stored}");
    }
}

/// The storage Secret of `release` JSON (release `web` in `apps`).
fn secret_of(release: &serde_json::Value, uid: &str) -> serde_json::Value {
    let version = release["version"].as_i64().unwrap();
    let payload = encode_release(&serde_json::to_vec(release).unwrap());
    json!({
        "metadata": {
            "name": format!("sh.helm.release.v1.web.v{version}"), "namespace": "apps",
            "labels": { "owner": "helm", "name": "web", "version": version.to_string(),
                        HELMAPP_UID_LABEL: uid }
        },
        "data": { "release": base64::engine::general_purpose::STANDARD.encode(&payload) }
    })
}

/// An entry of `release` as the cache decodes it (kept by a guard of
/// `apps/web` alive then).
fn cached_of(release: &serde_json::Value, uid: &str) -> std::sync::Arc<HelmRelease> {
    std::sync::Arc::new(serde_json::from_value::<HelmRelease>(secret_of(release, uid)).unwrap())
}

fn released(o: &mut Observed, revision: i64) {
    use crate::delivery::helmapp::decide::observed::{RunEnded, RunKind};
    o.done.run_ended = Some(RunEnded::Released {
        run: RunKind::Upgrade,
        revision,
        before: revision - 1,
    });
    o.done.run_live = true;
    // helm printed the release it stored (`act::intent::printed`).
    o.done.run_printed = true;
    o.status.run_intent = Some(intent(revision));
}

#[test]
fn the_record_from_the_cache_is_the_record_of_a_fresh_read_of_the_same_storage() {
    let mut status = HelmAppStatus::default();
    trust(&mut status, &[fresh_of(release(1, "deployed", "a"), "u")]);
    let run = crate::lean::recent::Capturing::start("apps", "web");
    let now = [release(1, "superseded", "a"), release(2, "deployed", "b")];
    let cached: Vec<_> = now.iter().map(|r| cached_of(r, "u")).collect();
    let mut from_cache = observed_with(status.clone());
    released(&mut from_cache, 2);
    let (entries, newest) =
        after_run_from_cache(&cached, &from_cache, &run).expect("from the cache");
    assert_eq!(
        newest,
        Some(("sh.helm.release.v1.web.v2".to_string(), "b".to_string()))
    );
    record(&mut from_cache, &entries);
    let mut fresh = observed_with(status);
    released(&mut fresh, 2);
    let read: Vec<_> = now.iter().map(|r| fresh_of(r.clone(), "u")).collect();
    record(&mut fresh, &read);
    assert_eq!(
        from_cache.status.storage_digests,
        fresh.status.storage_digests
    );
    assert_eq!(
        from_cache
            .status
            .storage_digests
            .iter()
            .map(|d| d.revision)
            .collect::<Vec<_>>(),
        [2, 1]
    );
}

#[test]
fn the_cache_is_not_read_unless_it_provably_holds_the_runs_last_write() {
    let mut status = HelmAppStatus::default();
    trust(&mut status, &[fresh_of(release(1, "deployed", "a"), "u")]);
    let earlier = crate::lean::recent::Capturing::start("apps", "web");
    // Decoded before this run's guard: perhaps an earlier release's
    // revision 2, its deletion not seen yet.
    let stale = cached_of(&release(2, "deployed", "b"), "u");
    let run = crate::lean::recent::Capturing::start("apps", "web");
    drop(earlier);
    let one = cached_of(&release(1, "superseded", "a"), "u");
    let mut o = observed_with(status.clone());
    released(&mut o, 2);
    let none = |entries: Vec<std::sync::Arc<HelmRelease>>, o: &Observed| {
        after_run_from_cache(&entries, o, &run).is_none()
    };
    assert!(none(vec![one.clone(), stale], &o), "decoded before the run");
    let pending = cached_of(&release(2, "pending-upgrade", "b"), "u");
    assert!(
        none(vec![one.clone(), pending], &o),
        "not helm's last write"
    );
    assert!(none(vec![one.clone()], &o), "the run's revision not seen");
    let two = cached_of(&release(2, "deployed", "b"), "u");
    assert!(!none(vec![one.clone(), two.clone()], &o));
    // A revision neither recorded nor kept: its content is unknown.
    let unkept = std::sync::Arc::new(
        serde_json::from_value::<HelmRelease>(secret_of(&release(1, "superseded", "z"), "u"))
            .map(|mut e| {
                e.kept = 0;
                e
            })
            .unwrap(),
    );
    assert!(none(vec![unkept, two.clone()], &o), "content unknown");
    // A second revision 2 planted beside helm's, under another name.
    let mut planted = secret_of(&release(2, "pending-upgrade", "planted"), "u");
    planted["metadata"]["name"] = json!("sh.helm.release.v1.web.v2-planted");
    let planted = std::sync::Arc::new(serde_json::from_value::<HelmRelease>(planted).unwrap());
    assert!(
        none(vec![one.clone(), two.clone(), planted], &o),
        "two revisions 2"
    );
    // Tested after the run: helm wrote the revision again.
    use crate::delivery::helmapp::decide::observed::{RunEnded, RunKind};
    o.done.run_ended = Some(RunEnded::Tested {
        run: RunKind::Upgrade,
        revision: 2,
    });
    assert!(none(vec![one, two], &o), "a test step wrote after the run");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Hunts storages a run may leave — revisions of any status, content
    /// changed or not, planted ones with or without the owner's label,
    /// kept or not — for one where the record from the cache differs
    /// from the record of a fresh read of the same storage.
    #[test]
    fn whenever_the_cache_is_read_it_records_what_a_fresh_read_would(
        revisions in proptest::collection::vec(
            (
                0usize..5,
                0usize..3,
                proptest::bool::ANY,
                proptest::bool::weighted(0.8),
                proptest::bool::weighted(0.9),
            ),
            1..6,
        ),
        newest_deployed in proptest::bool::weighted(0.8),
        run_is_newest in proptest::bool::weighted(0.8),
        planted in proptest::option::weighted(0.3, (1i64..6, 0usize..5)),
    ) {
        const STATUSES: [&str; 5] =
            ["deployed", "superseded", "failed", "pending-upgrade", "uninstalled"];
        let mut status = HelmAppStatus::default();
        let mut now = Vec::new();
        let mut before = Vec::new();
        for (i, (s, manifest, recorded, owned, kept)) in revisions.iter().enumerate() {
            let version = i as i64 + 1;
            let newest = i + 1 == revisions.len();
            let s = if newest && newest_deployed { "deployed" } else { STATUSES[*s] };
            let r = release(version, s, ["a", "b", "planted"][*manifest]);
            let uid = if *owned { "u" } else { "" };
            if *recorded {
                before.push(fresh_of(release(version, "deployed", "a"), "u"));
            }
            now.push((r, uid, *kept));
        }
        trust(&mut status, &before);
        // A revision planted beside helm's, under a name helm never
        // writes, with the owner's label.
        let planted = planted.map(|(version, s)| {
            let version = version.min(revisions.len() as i64);
            let mut secret = secret_of(&release(version, STATUSES[s], "planted"), "u");
            secret["metadata"]["name"] = json!(format!("sh.helm.release.v1.web.v{version}-x"));
            secret
        });
        let run_revision = revisions.len() as i64 + i64::from(!run_is_newest);
        let run = crate::lean::recent::Capturing::start("apps", "web");
        let cached: Vec<_> = now
            .iter()
            .map(|(r, uid, kept)| {
                let mut e = (*cached_of(r, uid)).clone();
                if !kept {
                    e.kept = 0;
                }
                std::sync::Arc::new(e)
            })
            .chain(planted.iter().map(|p| {
                std::sync::Arc::new(serde_json::from_value::<HelmRelease>(p.clone()).unwrap())
            }))
            .collect();
        let mut from_cache = observed_with(status.clone());
        released(&mut from_cache, run_revision);
        if let Some((entries, _)) = after_run_from_cache(&cached, &from_cache, &run) {
            record(&mut from_cache, &entries);
            let mut fresh = observed_with(status);
            released(&mut fresh, run_revision);
            let read: Vec<_> = now
                .iter()
                .map(|(r, uid, _)| fresh_of(r.clone(), uid))
                .chain(planted.iter().map(|p| {
                    serde_json::from_value::<FreshRelease>(p.clone()).unwrap().0
                }))
                .collect();
            record(&mut fresh, &read);
            proptest::prop_assert_eq!(
                &from_cache.status.storage_digests,
                &fresh.status.storage_digests
            );
            proptest::prop_assert_eq!(&from_cache.status.run_intent, &fresh.status.run_intent);
        }
    }
}

/// A run's revision the read after it does not find — relabelled or
/// deleted for the read, to be put back planted — leaves the intent in a
/// status that says it was released: the status is never taken for one
/// from before digests (`check` trusts those on first sight), and the
/// history carries no digest of it. Red with the intent dropped.
#[test]
fn a_released_revision_missing_from_the_read_keeps_its_intent() {
    let mut status = HelmAppStatus {
        revision: 1,
        run_intent: Some(RunIntent {
            content: "sha256:printed".into(),
            ..intent(1)
        }),
        history: vec![Default::default()],
        ..Default::default()
    };
    let mut o = observed_with(std::mem::take(&mut status));
    record(&mut o, &[]);
    assert_eq!(o.status.run_intent.as_ref().map(|i| i.revision), Some(1));
    assert!(o.status.storage_digests.is_empty());
    // Found, but not what helm printed: kept too, and no digest on the
    // history.
    let planted = fresh_of(release(1, "deployed", "planted"), "u");
    record(&mut o, &[planted]);
    assert_eq!(o.status.run_intent.as_ref().map(|i| i.revision), Some(1));
    assert!(o.status.history[0].release_digest.is_empty());
}
