//! A HelmApp's release from install to deletion: one revision per change, no-ops that run nothing, ownership, failures and remediation, stuck releases.

use super::*;

#[tokio::test]
async fn a_helmapp_installs_then_each_values_change_is_one_revision_and_a_label_change_none() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "tiny",
        json!({ "chart": { "path": "tiny" }, "values": { "greeting": "hello" } }),
    )
    .await;

    let app = ready(&f, "tiny", "InstallSucceeded", 1).await;
    let st = app.status.clone().unwrap();
    assert_eq!(
        (st.release_name.as_str(), st.target_namespace.as_str()),
        ("tiny", NS)
    );
    assert_eq!(st.last_action, "install");
    let storage = revisions(&f, "tiny").await;
    assert_eq!(storage.len(), 1);
    assert_eq!(storage[&1]["hossted.com/config-hash"], st.config_hash);
    assert_eq!(
        storage[&1]["hossted.com/helmapp-uid"],
        app.metadata.uid.clone().unwrap()
    );
    assert!(
        app.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"hossted.com/helm-uninstall".to_string())
    );
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get("tiny-tiny")
        .await;
    assert!(cm.is_ok(), "the chart's ConfigMap was installed: {cm:?}");
    // The install is in the status: its history entry, with the digest of
    // what it stored (and no Event: see the end).
    assert_eq!(st.history.len(), 1);
    let installed = &st.history[0];
    assert_eq!(
        (installed.revision, installed.result.clone()),
        (1, apis::helmapp::HistoryResult::Succeeded)
    );
    assert!(
        installed.release_digest.starts_with("sha256:"),
        "{installed:?}"
    );
    let table = f.kubectl(&["get", "happ", "-n", NS]);
    for column in [
        "RELEASE",
        "NAMESPACE",
        "CHART",
        "VERSION",
        "REVISION",
        "READY",
        "STATUS",
        "AGE",
    ] {
        assert!(table.contains(column), "{column} missing from:\n{table}");
    }
    assert!(table.contains("InstallSucceeded"), "{table}");

    // A label change, then a forced reconcile: nothing runs.
    patch(
        &f,
        "tiny",
        json!({ "metadata": { "labels": { "team": "web" } } }),
    )
    .await;
    let mark = operator.mark();
    patch(
        &f,
        "tiny",
        json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": "1" } } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    assert_eq!(
        revisions(&f, "tiny").await.len(),
        1,
        "a label change made a revision"
    );

    // Inline values, then a --set string: one revision each.
    patch(
        &f,
        "tiny",
        json!({ "spec": { "values": { "greeting": "bonjour" } } }),
    )
    .await;
    ready(&f, "tiny", "UpgradeSucceeded", 2).await;
    patch(&f, "tiny", json!({ "spec": { "set": ["greeting=hallo"] } })).await;
    let app = ready(&f, "tiny", "UpgradeSucceeded", 3).await;
    operator.settle().await;
    assert_eq!(revisions(&f, "tiny").await.len(), 3);
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get("tiny-tiny")
        .await
        .unwrap();
    assert!(format!("{:?}", cm.data).contains("hallo"), "{:?}", cm.data);
    assert_eq!(app.status.unwrap().history.len(), 3);

    // Deleted: uninstalled, then the HelmApp goes.
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("tiny", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the HelmApp gone", 60, || async {
        get(&f, "tiny").await.is_none().then_some(())
    })
    .await;
    assert!(
        revisions(&f, "tiny").await.is_empty(),
        "the release was not uninstalled"
    );
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get_opt("tiny-tiny")
        .await
        .unwrap();
    assert!(cm.is_none(), "the release's objects remain");
    // An install or upgrade that succeeded makes no Event (docs/delivery.md:
    // the status holds it); its uninstall does.
    let reasons = event_reasons(&f, NS, "tiny").await;
    assert!(
        !reasons
            .iter()
            .any(|r| r == "InstallSucceeded" || r == "UpgradeSucceeded"),
        "{reasons:?}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_release_nobody_owns_is_left_alone_unless_adopted_and_then_upgraded_in_place() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // Installed "the old way", without our labels.
    f.helm(&["install", "legacy", &chart("tiny"), "-n", NS]);
    let operator = f.start_delivery().await;
    apply(
        &f,
        "legacy",
        json!({ "chart": { "path": "tiny" }, "values": { "greeting": "adopted" } }),
    )
    .await;
    let app = ready(&f, "legacy", "ReleaseNotOwned", 0).await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(message.contains("adopt"), "{message}");
    assert_eq!(
        revisions(&f, "legacy").await.len(),
        1,
        "a release we do not own was touched"
    );

    patch(&f, "legacy", json!({ "spec": { "adopt": true } })).await;
    ready(&f, "legacy", "UpgradeSucceeded", 2).await;
    let storage = revisions(&f, "legacy").await;
    assert_eq!(
        storage.keys().copied().collect::<Vec<_>>(),
        [1, 2],
        "upgraded in place, not reinstalled"
    );

    // uninstallOnDelete: false keeps the release when the HelmApp goes.
    patch(
        &f,
        "legacy",
        json!({ "spec": { "uninstallOnDelete": false } }),
    )
    .await;
    operator.settle().await;
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("legacy", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the HelmApp gone", 60, || async {
        get(&f, "legacy").await.is_none().then_some(())
    })
    .await;
    assert_eq!(
        revisions(&f, "legacy").await.len(),
        2,
        "the release was removed"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_release_uninstalled_by_hand_does_not_block_deletion() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(&f, "gone", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "gone", "InstallSucceeded", 1).await;
    f.helm(&["uninstall", "gone", "-n", NS]);
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the HelmApp gone", 60, || async {
        get(&f, "gone").await.is_none().then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn a_deleted_target_namespace_does_not_block_deletion() {
    use k8s_openapi::api::core::v1::Namespace;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "orphaned",
        json!({ "chart": { "path": "tiny" }, "targetNamespace": "doomed", "createNamespace": true }),
    )
    .await;
    ready(&f, "orphaned", "InstallSucceeded", 1).await;
    // No namespace controller here: delete the namespace, empty it (Helm's
    // storage included) and finalize it as that controller would.
    let namespaces: Api<Namespace> = Api::all(f.cp.client());
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    for kind in ["configmaps", "secrets"] {
        f.kubectl(&["delete", kind, "--all", "-n", "doomed", "--wait=false"]);
    }
    let mut ns = namespaces.get("doomed").await.unwrap();
    ns.spec = Some(Default::default());
    namespaces
        .replace_subresource("finalize", "doomed", &PostParams::default(), &ns)
        .await
        .unwrap();
    eventually("the namespace gone", 30, || async {
        namespaces
            .get_opt("doomed")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("orphaned", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the HelmApp gone", 60, || async {
        get(&f, "orphaned").await.is_none().then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn a_chart_rendering_random_output_stays_at_its_revision_across_resyncs() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            s.helm.binary = wrapper.clone();
            s.resync = std::time::Duration::from_secs(1);
        })
        .await;
    apply(&f, "random", json!({ "chart": { "path": "random" } })).await;
    ready(&f, "random", "InstallSucceeded", 1).await;
    // The reconcile the install's own storage event brings writes
    // `status.inventory` once; what follows it must write nothing.
    let before = eventually("status.inventory of revision 1", 60, || async {
        let app = get(&f, "random").await?;
        (app.status.as_ref()?.inventory_revision == 1).then_some(app)
    })
    .await;
    for _ in 0..5 {
        // Each mark is passed by a resync (nothing else changes).
        let mark = operator.mark();
        operator.reconciled_since(mark).await;
    }
    assert_eq!(runs_in(&log), vec!["install random"], "helm ran again");
    assert_eq!(revisions(&f, "random").await.len(), 1);
    let after = get(&f, "random").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the status was written"
    );
    operator.stop().await;
}

#[tokio::test]
async fn settled_helmapps_run_no_helm_across_a_restart_and_forced_reconciles() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // A helm that logs each run, so runs can be counted.
    let (wrapper, log) = counting_helm(&f);
    let runs = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let with_wrapper =
        |s: &mut hossted_operator::delivery::Settings| s.helm.binary = wrapper.clone();

    let operator = f.start_delivery_with(with_wrapper).await;
    let names: Vec<String> = (0..20).map(|i| format!("app-{i:02}")).collect();
    for name in &names {
        apply(
            &f,
            name,
            json!({ "chart": { "path": "tiny" }, "values": { "greeting": name } }),
        )
        .await;
    }
    for name in &names {
        ready(&f, name, "InstallSucceeded", 1).await;
    }
    operator.settle().await;
    assert_eq!(runs(), 20, "one helm run per install");
    operator.stop().await;

    // Restarted, then three forced reconciles of every HelmApp.
    let operator = f.start_delivery_with(with_wrapper).await;
    operator.settle().await;
    let mut before = Vec::new();
    for name in &names {
        before.push(get(&f, name).await.unwrap().status);
    }
    for round in 0..3 {
        let mark = operator.mark();
        for name in &names {
            patch(&f, name, json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": round.to_string() } } })).await;
        }
        operator.reconciled_since(mark).await;
        operator.settle().await;
    }
    assert_eq!(runs(), 20, "a settled HelmApp ran helm");
    for (name, status) in names.iter().zip(&before) {
        assert_eq!(
            revisions(&f, name).await.len(),
            1,
            "{name} got a new revision"
        );
        // No status write: the status is exactly what it was.
        assert_eq!(
            get(&f, name).await.unwrap().status,
            *status,
            "{name}'s status was written"
        );
    }
    operator.stop().await;
}

/// A configuration that does not render fails before helm writes anything;
/// the rollback that remedies it writes a revision helm prints nothing of.
/// That revision is proven ours by holding exactly what the revision it
/// returned to holds — no render of the configuration, which cannot be
/// made — and recorded: `RetriesExhausted`, never `StorageTampered`, and
/// a later change runs helm on it.
#[tokio::test]
async fn a_rollback_after_a_configuration_that_does_not_render_is_proven_by_its_target() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "unrendered",
        json!({ "chart": { "path": "tiny" },
                "remediation": { "retries": 0, "onFailure": "rollback" } }),
    )
    .await;
    ready(&f, "unrendered", "InstallSucceeded", 1).await;
    patch(
        &f,
        "unrendered",
        json!({ "spec": { "values": { "renderFails": true } } }),
    )
    .await;
    let app = with_reason(&f, "unrendered", "RetriesExhausted").await;
    let rolled_back = app.status.as_ref().unwrap().history[0].clone();
    assert_eq!(
        (rolled_back.action.as_str(), rolled_back.result.as_str()),
        ("rollback", "succeeded")
    );
    assert_eq!(
        revisions(&f, "unrendered")
            .await
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [1, 2],
        "the failed upgrade wrote nothing; the rollback wrote revision 2"
    );
    let recorded = eventually("revision 2 recorded", 60, || async {
        let status = get(&f, "unrendered").await?.status?;
        let recorded: Vec<i64> = status.storage_digests.iter().map(|d| d.revision).collect();
        recorded.contains(&2).then_some(status)
    })
    .await;
    assert_eq!(recorded.run_intent, None, "its intent let go once recorded");
    let calls = helm_calls(&log);
    let rollback = calls
        .iter()
        .position(|c| c.subcommand == "rollback" && c.on("unrendered"))
        .expect("a rollback ran");
    let rendered: Vec<&HelmCall> = calls[rollback..]
        .iter()
        .filter(|c| c.on("unrendered") && c.dry_run())
        .collect();
    assert!(
        rendered.is_empty(),
        "proven by its target, without a render: {rendered:?}"
    );
    let reasons = event_reasons(&f, NS, "unrendered").await;
    assert!(
        !reasons.iter().any(|r| r == "StorageTampered"),
        "{reasons:?}"
    );
    // Fixed: upgraded from the rollback's revision.
    patch(
        &f,
        "unrendered",
        json!({ "spec": { "values": { "renderFails": false, "greeting": "fixed" } } }),
    )
    .await;
    ready(&f, "unrendered", "UpgradeSucceeded", 3).await;
    assert!(
        writing_runs_in(&log)
            .iter()
            .any(|r| r == "rollback unrendered"),
        "{:?}",
        writing_runs_in(&log)
    );
    operator.stop().await;
}

#[tokio::test]
async fn failures_are_remediated_then_retries_stop_until_the_spec_changes() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;

    // A failed install is uninstalled before each next try.
    apply(
        &f,
        "badinstall",
        json!({ "chart": { "path": "tiny" }, "values": { "broken": true } }),
    )
    .await;
    let app = ready(&f, "badinstall", "InstallFailed", 0).await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(
        message.contains("NOT_A_VALID_NAME"),
        "helm's message: {message}"
    );
    eventually("a second install attempt", 60, || async {
        let attempts = runs_in(&log)
            .iter()
            .filter(|r| r.starts_with("install badinstall"))
            .count();
        (attempts >= 2).then_some(())
    })
    .await;
    let of_it: Vec<String> = writing_runs_in(&log)
        .into_iter()
        .filter(|r| r.ends_with("badinstall"))
        .collect();
    for pair in of_it.chunks(2).filter(|p| p.len() == 2) {
        assert_eq!(
            pair,
            ["install badinstall", "uninstall badinstall"],
            "each failed install is uninstalled before the next (which installs over nothing again): {of_it:?}"
        );
    }
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("badinstall", &DeleteParams::default())
        .await
        .unwrap();

    // An upgrade that keeps failing: retried, rolled back, then nothing more.
    apply(
        &f,
        "flaky",
        json!({ "chart": { "path": "tiny" }, "remediation": { "retries": 1 } }),
    )
    .await;
    ready(&f, "flaky", "InstallSucceeded", 1).await;
    patch(
        &f,
        "flaky",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    let app = with_reason(&f, "flaky", "RetriesExhausted").await;
    let st = app.status.unwrap();
    assert_eq!(st.failures, 2, "one try and one retry");
    assert_eq!(st.history[0].action, "rollback");
    let of_flaky = |log: &std::path::Path| -> Vec<String> {
        writing_runs_in(log)
            .into_iter()
            .filter(|r| r.ends_with("flaky"))
            .collect()
    };
    assert_eq!(
        of_flaky(&log),
        [
            "install flaky",
            "upgrade flaky",
            "upgrade flaky",
            "rollback flaky"
        ],
        "install, two failed upgrades, one rollback"
    );
    // The rollback left the first configuration running.
    let storage = revisions(&f, "flaky").await;
    let newest = storage.keys().max().copied().unwrap();
    assert_eq!(storage[&newest]["status"], "deployed");
    // A reconcile that changes nothing the hash covers runs nothing.
    let mark = operator.mark();
    patch(
        &f,
        "flaky",
        json!({ "spec": { "wait": false, "timeout": "4m" } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        of_flaky(&log).len(),
        4,
        "retries exhausted, yet helm ran again"
    );

    // Fixing the spec retries at once.
    patch(
        &f,
        "flaky",
        json!({ "spec": { "values": { "broken": false, "greeting": "fixed" } } }),
    )
    .await;
    let app = with_reason(&f, "flaky", "UpgradeSucceeded").await;
    assert_eq!(app.status.unwrap().failures, 0);
    operator.stop().await;
}

#[tokio::test]
async fn a_release_left_pending_is_locked_then_unlocked_after_the_timeout_and_upgraded() {
    use hossted_operator::lean::helm::{encode_release, release_json};
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "stuck",
        json!({ "chart": { "path": "tiny" }, "timeout": "8s" }),
    )
    .await;
    ready(&f, "stuck", "InstallSucceeded", 1).await;
    operator.stop().await;

    // A crash in the middle of an upgrade: the operator had written its
    // run intent (revision 2) into the status, its helm wrote revision 2
    // pending-upgrade, in Helm's format; both died.
    let apps: Api<HelmApp> = Api::namespaced(f.cp.client(), NS);
    apps.patch_status(
        "stuck",
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "runIntent": {
            "action": "upgrade", "revision": 2, "startedAt": chrono::Utc::now().to_rfc3339()
        } } })),
    )
    .await
    .unwrap();
    let operator = f.start_delivery().await;
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), NS);
    let mut v1 = secrets.get("sh.helm.release.v1.stuck.v1").await.unwrap();
    let raw = v1.data.as_ref().unwrap()["release"].0.clone();
    let mut release: serde_json::Value =
        serde_json::from_slice(&release_json(&raw).unwrap()).unwrap();
    release["version"] = json!(2);
    release["info"]["status"] = json!("pending-upgrade");
    // Stamped a little ahead: after the new operator's first look (a
    // revision older than that is one a previous operator's helm left, and
    // is unlocked at once), so its 8 s timeout is seen running.
    let ahead = chrono::Utc::now() + chrono::Duration::seconds(5);
    release["info"]["last_deployed"] = json!(ahead.to_rfc3339());
    let mut v2 = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("sh.helm.release.v1.stuck.v2".into()),
            namespace: Some(NS.into()),
            labels: v1.metadata.labels.take().map(|mut l| {
                l.insert("version".into(), "2".into());
                l.insert("status".into(), "pending-upgrade".into());
                l
            }),
            ..Default::default()
        },
        type_: v1.type_.clone(),
        data: Some(
            [(
                "release".to_string(),
                k8s_openapi::ByteString(encode_release(&serde_json::to_vec(&release).unwrap())),
            )]
            .into(),
        ),
        ..Default::default()
    };
    v2.metadata.labels.get_or_insert_with(Default::default);
    secrets.create(&PostParams::default(), &v2).await.unwrap();
    patch(
        &f,
        "stuck",
        json!({ "spec": { "values": { "greeting": "after the crash" } } }),
    )
    .await;

    let app = ready(&f, "stuck", "ReleaseLocked", 1).await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(message.contains("pending-upgrade"), "{message}");
    // After the timeout: marked failed, then upgraded.
    ready(&f, "stuck", "UpgradeSucceeded", 3).await;
    let storage = revisions(&f, "stuck").await;
    assert_eq!(
        storage[&2]["status"], "failed",
        "the stuck revision was not unlocked"
    );
    assert_eq!(storage[&3]["status"], "deployed");
    an_event(&f, NS, "stuck", "ReleaseUnlocked").await;
    operator.stop().await;
}

/// `upgrade.strategy: RetryOnFailure` (Flux's): a failing upgrade is
/// tried again every `retryInterval`, past `remediation.retries`, with no
/// rollback and no `RetriesExhausted`; the values fix then lands.
#[tokio::test]
async fn retry_on_failure_tries_the_upgrade_again_at_its_interval_and_never_rolls_back() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "stubborn",
        json!({ "chart": { "path": "tiny" }, "remediation": { "retries": 1 },
                "upgrade": { "strategy": { "name": "RetryOnFailure", "retryInterval": "2s" } } }),
    )
    .await;
    ready(&f, "stubborn", "InstallSucceeded", 1).await;
    patch(
        &f,
        "stubborn",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    // More failed upgrades than remediation.retries allows — each about
    // 2 s after the last.
    let st = eventually("five failed upgrades", 90, || async {
        get(&f, "stubborn")
            .await
            .and_then(|a| a.status)
            .filter(|s| s.failures >= 5)
    })
    .await;
    let upgrades = writing_runs_in(&log)
        .into_iter()
        .filter(|r| r == "install stubborn" || r == "upgrade stubborn")
        .count();
    assert!(upgrades >= 6, "the install and five upgrades: {upgrades}");
    let ready_reason = &st
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .reason;
    assert_eq!(ready_reason, "UpgradeFailed", "never RetriesExhausted");
    assert!(
        st.history.iter().all(|h| h.action != "rollback"),
        "no rollback: {:?}",
        st.history
            .iter()
            .map(|h| h.action.to_string())
            .collect::<Vec<_>>()
    );
    assert!(
        runs_in(&log).iter().all(|r| !r.starts_with("rollback")),
        "helm rollback ran"
    );
    patch(
        &f,
        "stubborn",
        json!({ "spec": { "values": { "broken": false, "greeting": "fixed" } } }),
    )
    .await;
    let app = with_reason(&f, "stubborn", "UpgradeSucceeded").await;
    assert_eq!(app.status.unwrap().failures, 0);
    operator.stop().await;
}

/// Issue 52: Flux's `upgrade.chartNameChangeStrategy` — a chart of another
/// name under the same release is, by default (`Reinstall`), uninstalled
/// and installed anew (one revision in storage, the history says
/// uninstall then install, the old chart's objects gone); with
/// `InPlaceUpdate` the release is upgraded to it (revision 2).
#[tokio::test]
async fn a_renamed_chart_is_reinstalled_by_default_and_upgraded_in_place_when_asked() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(&f, "renamed", json!({ "chart": { "path": "tiny" } })).await;
    apply(
        &f,
        "inplace",
        json!({ "chart": { "path": "tiny" }, "upgrade": { "chartNameChangeStrategy": "InPlaceUpdate" } }),
    )
    .await;
    ready(&f, "renamed", "InstallSucceeded", 1).await;
    ready(&f, "inplace", "InstallSucceeded", 1).await;
    for name in ["renamed", "inplace"] {
        patch(
            &f,
            name,
            json!({ "spec": { "chart": { "path": "random" } } }),
        )
        .await;
    }

    let actions = |app: &HelmApp| -> Vec<(String, String)> {
        app.status
            .as_ref()
            .map(|s| {
                s.history
                    .iter()
                    .map(|h| (h.action.to_string(), h.result.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let app = eventually("reinstalled", 120, || async {
        let app = get(&f, "renamed").await?;
        (is_ready(&app) && actions(&app).len() >= 3 && actions(&app)[0].0 == "install")
            .then_some(app)
    })
    .await;
    let pair = |a: &str, r: &str| (a.to_string(), r.to_string());
    assert_eq!(
        actions(&app)[..3],
        [
            pair("install", "succeeded"),
            pair("uninstall", "succeeded"),
            pair("install", "succeeded")
        ]
    );
    assert_eq!(app.status.as_ref().unwrap().revision, 1);
    assert_eq!(
        revisions(&f, "renamed")
            .await
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [1],
        "a new release"
    );
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), NS);
    let configmaps: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    assert!(secrets.get_opt("renamed-random").await.unwrap().is_some());
    assert!(configmaps.get_opt("renamed-tiny").await.unwrap().is_none());
    an_event(&f, NS, "renamed", "ChartRenamed").await;

    let app = ready(&f, "inplace", "UpgradeSucceeded", 2).await;
    assert_eq!(actions(&app)[0], pair("upgrade", "succeeded"));
    assert_eq!(
        revisions(&f, "inplace")
            .await
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [1, 2],
        "upgraded in place"
    );
    assert!(secrets.get_opt("inplace-random").await.unwrap().is_some());
    assert!(configmaps.get_opt("inplace-tiny").await.unwrap().is_none());
    assert!(
        !reasons_of_events(&f, "inplace")
            .await
            .iter()
            .any(|r| r == "ChartRenamed")
    );
    operator.stop().await;
}
