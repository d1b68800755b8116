//! HelmApp delivery end to end: a real apiserver, the real helm binary run
//! by the operator, charts by path from `examples/charts`.

use std::collections::BTreeMap;

use crate::support::*;
use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "apps";

async fn apply(f: &Fixture, name: &str, spec: serde_json::Value) {
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": NS }, "spec": spec
    }))
    .unwrap();
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
}

async fn patch(f: &Fixture, name: &str, body: serde_json::Value) {
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap();
}

async fn get(f: &Fixture, name: &str) -> Option<HelmApp> {
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
}

/// The release's storage Secrets: revision → labels.
async fn revisions(f: &Fixture, release: &str) -> BTreeMap<i64, BTreeMap<String, String>> {
    Api::<Secret>::namespaced(f.cp.client(), NS)
        .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            let labels = s.metadata.labels.unwrap_or_default();
            let v = labels
                .get("version")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            (v, labels)
        })
        .collect()
}

/// The HelmApp once its Ready condition has `reason`, whatever its revision.
async fn with_reason(f: &Fixture, name: &str, reason: &str) -> HelmApp {
    eventually(&format!("{name}: {reason}"), 120, || async {
        let app = get(f, name).await?;
        let c = app
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        (c.reason == reason).then_some(app)
    })
    .await
}

/// The HelmApp once its Ready condition has `reason` and its revision is `revision`.
async fn ready(f: &Fixture, name: &str, reason: &str, revision: i64) -> HelmApp {
    eventually(
        &format!("{name}: {reason} at revision {revision}"),
        120,
        || async {
            let app = get(f, name).await?;
            let st = app.status.as_ref()?;
            let c = st.conditions.iter().find(|c| c.type_ == "Ready")?;
            (c.reason == reason && st.revision == revision).then_some(app.clone())
        },
    )
    .await
}

async fn reasons_of_events(f: &Fixture, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(f.cp.client(), NS)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

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
    eventually("the InstallSucceeded Event", 30, || async {
        reasons_of_events(&f, "tiny")
            .await
            .contains(&"InstallSucceeded".to_string())
            .then_some(())
    })
    .await;
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
    let before = ready(&f, "random", "InstallSucceeded", 1).await;
    for _ in 0..5 {
        // Each mark is passed by a resync (nothing else changes).
        let mark = operator.mark();
        operator.reconciled_since(mark).await;
    }
    assert_eq!(runs_in(&log), vec!["upgrade random"], "helm ran again");
    assert_eq!(revisions(&f, "random").await.len(), 1);
    let after = get(&f, "random").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the status was written"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_chart_outside_the_path_root_is_refused_with_a_condition() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(&f, "escape", json!({ "chart": { "path": "../../src" } })).await;
    let app = ready(&f, "escape", "ChartUnavailable", 0).await;
    let message = &app.status.unwrap().conditions[0].message;
    assert!(message.contains("outside --chart-path-root"), "{message}");
    // Exactly one source: the CRD's CEL rule refuses two.
    let two: Result<HelmApp, _> = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "two", "namespace": NS },
        "spec": { "chart": { "path": "tiny", "repo": "https://charts.example.com", "name": "tiny" } }
    }));
    let err = Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .create(&PostParams::default(), &two.unwrap())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("exactly one of chart.repo"),
        "{err}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn values_from_a_secret_and_base64_are_one_revision_each_and_only_the_named_key_counts() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.secret(
        NS,
        "vals",
        &[("values.yaml", "greeting: from-secret\n"), ("other", "x")],
    )
    .await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "fromsecret",
        json!({
            "chart": { "path": "tiny" },
            "valuesFrom": [{ "kind": "Secret", "name": "vals" }]
        }),
    )
    .await;
    ready(&f, "fromsecret", "InstallSucceeded", 1).await;
    let greeting = || async {
        Api::<ConfigMap>::namespaced(f.cp.client(), NS)
            .get("fromsecret-tiny")
            .await
            .unwrap()
            .data
            .unwrap_or_default()["greeting"]
            .clone()
    };
    assert_eq!(greeting().await, "from-secret");

    // Another key of that Secret: the HelmApp is looked at, nothing runs.
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), NS);
    let mark = operator.mark();
    secrets
        .patch(
            "vals",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "stringData": { "other": "y" } })),
        )
        .await
        .unwrap();
    operator.reconciled_since(mark).await;
    assert_eq!(revisions(&f, "fromsecret").await.len(), 1);

    // The named key: re-queued by the watch alone, one new revision.
    secrets
        .patch(
            "vals",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "stringData": { "values.yaml": "greeting: edited\n" } })),
        )
        .await
        .unwrap();
    ready(&f, "fromsecret", "UpgradeSucceeded", 2).await;
    assert_eq!(greeting().await, "edited");

    // valuesBase64 (a tenant collector's configuration), applied after valuesFrom.
    use base64::Engine;
    let doc = base64::engine::general_purpose::STANDARD.encode("greeting: from-base64\n");
    patch(&f, "fromsecret", json!({ "spec": { "valuesBase64": doc } })).await;
    ready(&f, "fromsecret", "UpgradeSucceeded", 3).await;
    assert_eq!(greeting().await, "from-base64");
    operator.settle().await;
    assert_eq!(revisions(&f, "fromsecret").await.len(), 3);
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

#[tokio::test]
async fn a_chart_from_an_http_repository_with_basic_auth_and_a_repository_that_is_down() {
    const PASSWORD: &str = "repo-pa55word-never-shown";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(
        &f.cp,
        &[&charts.join("tiny"), &charts.join("web")],
        Some(("reader", PASSWORD)),
    )
    .await
    .unwrap();
    f.secret(
        NS,
        "repo-creds",
        &[("username", "reader"), ("password", PASSWORD)],
    )
    .await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "fromrepo",
        json!({ "chart": {
        "repo": repo.url(), "name": "tiny", "version": ">=0.1.0",
        "credentialsSecretRef": { "name": "repo-creds" } } }),
    )
    .await;
    let app = ready(&f, "fromrepo", "InstallSucceeded", 1).await;
    assert_eq!(app.status.unwrap().chart_version, "0.1.0");

    // Within the interval a reconcile touches no network.
    let served = repo.served();
    let mark = operator.mark();
    patch(
        &f,
        "fromrepo",
        json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": "1" } } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    assert_eq!(
        repo.served(),
        served,
        "a settled HelmApp fetched from the repository"
    );

    // Without the credentials: refused by the repository, said plainly.
    apply(
        &f,
        "nocreds",
        json!({ "chart": { "repo": repo.url(), "name": "tiny" } }),
    )
    .await;
    let app = ready(&f, "nocreds", "ChartUnavailable", 0).await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(message.contains("credentialsSecretRef"), "{message}");

    // The repository down: Ready=False, then delivered once it is back.
    repo.set_down(true);
    apply(
        &f,
        "later",
        json!({ "chart": {
        "repo": repo.url(), "name": "web", "credentialsSecretRef": { "name": "repo-creds" } } }),
    )
    .await;
    let app = ready(&f, "later", "ChartUnavailable", 0).await;
    assert!(
        app.status.unwrap().conditions[0]
            .message
            .contains("answered 503")
    );
    repo.set_down(false);
    ready(&f, "later", "InstallSucceeded", 1).await;

    // The password is nowhere the user can read.
    for name in ["fromrepo", "nocreds", "later"] {
        let st = serde_json::to_string(&get(&f, name).await.unwrap().status).unwrap();
        assert!(!st.contains(PASSWORD), "{name}'s status shows the password");
    }
    let events = f.kubectl(&["get", "events", "-n", NS, "-o", "json"]);
    assert!(!events.contains(PASSWORD), "an Event shows the password");
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
            .filter(|r| r.starts_with("upgrade badinstall"))
            .count();
        (attempts >= 2).then_some(())
    })
    .await;
    let of_it: Vec<String> = runs_in(&log)
        .into_iter()
        .filter(|r| r.ends_with("badinstall"))
        .collect();
    for pair in of_it.chunks(2).filter(|p| p.len() == 2) {
        assert_eq!(
            pair,
            ["upgrade badinstall", "uninstall badinstall"],
            "each failed install is uninstalled before the next: {of_it:?}"
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
        runs_in(log)
            .into_iter()
            .filter(|r| r.ends_with("flaky"))
            .collect()
    };
    assert_eq!(
        of_flaky(&log),
        [
            "upgrade flaky",
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
    use hossted_operator::cached::helm::{encode_release, release_json};
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

    // A crashed helm's leftover: revision 2, pending-upgrade, in Helm's format.
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), NS);
    let mut v1 = secrets.get("sh.helm.release.v1.stuck.v1").await.unwrap();
    let raw = v1.data.as_ref().unwrap()["release"].0.clone();
    let mut release: serde_json::Value =
        serde_json::from_slice(&release_json(&raw).unwrap()).unwrap();
    release["version"] = json!(2);
    release["info"]["status"] = json!("pending-upgrade");
    release["info"]["last_deployed"] = json!(chrono::Utc::now().to_rfc3339());
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
    eventually("the ReleaseUnlocked Event", 30, || async {
        reasons_of_events(&f, "stuck")
            .await
            .contains(&"ReleaseUnlocked".to_string())
            .then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn the_binary_runs_delivery_with_controllers_flag_and_counts_helm_runs_in_metrics() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    f.hosstedproject("cluster", json!({})).await;
    let metrics_port = free_port();
    let work = f.cp.dir().join("operator-work");
    let mut child = f
        .operator_command(f.cp.kubeconfig_path())
        .args(["run", "--controllers", "inventory,delivery"])
        .args([
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .args(["--health-probe-bind-address", "0"])
        .arg("--helm-binary")
        .arg(f.cp.helm_binary())
        .arg("--work-dir")
        .arg(&work)
        .arg("--chart-path-root")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    apply(&f, "viabinary", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "viabinary", "InstallSucceeded", 1).await;
    // The inventory sees what delivery did: one report of the new release.
    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(posts[0].json()["app_api_info"]["app_name"], "viabinary");
    let url = format!("http://127.0.0.1:{metrics_port}/metrics");
    eventually("helm runs in the metrics", 30, || {
        let url = url.clone();
        async move {
            let (_, text) = http_get(&url).await?;
            let runs = sample(
                &text,
                "hossted_helm_runs_total{action=\"upgrade\",result=\"success\"}",
            );
            let ready = sample(&text, "hossted_helmapps{ready=\"True\"}");
            (runs == Some(1.0) && ready == Some(1.0)).then_some(())
        }
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn values_never_reach_a_command_line_a_status_or_an_event() {
    const FROM_SECRET: &str = "leak-canary-from-secret";
    const FROM_SET: &str = "leak-canary-from-set";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.secret(
        NS,
        "private",
        &[("values.yaml", &format!("greeting: {FROM_SECRET}\n"))],
    )
    .await;
    // The wrapper logs every helm command line in full.
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "private",
        json!({
            "chart": { "path": "tiny" },
            "valuesFrom": [{ "kind": "Secret", "name": "private" }],
            "set": [format!("extra={FROM_SET}")]
        }),
    )
    .await;
    ready(&f, "private", "InstallSucceeded", 1).await;
    // And a failure, whose message helm prints with the values around.
    patch(
        &f,
        "private",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    ready(&f, "private", "UpgradeFailed", 1).await;
    let command_lines = std::fs::read_to_string(&log).unwrap();
    assert!(command_lines.contains("upgrade"), "{command_lines}");
    let status = serde_json::to_string(&get(&f, "private").await.unwrap().status).unwrap();
    let events = f.kubectl(&["get", "events", "-n", NS, "-o", "json"]);
    for canary in [FROM_SECRET, FROM_SET] {
        assert!(
            !command_lines.contains(canary),
            "{canary} on a helm command line"
        );
        assert!(!status.contains(canary), "{canary} in the status");
        assert!(!events.contains(canary), "{canary} in an Event");
    }
    // It did reach helm (on its standard input): the release has it.
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get("private-tiny")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], FROM_SECRET);
    operator.stop().await;
}

#[tokio::test]
async fn deleted_objects_of_a_release_come_back_with_drift_repaired() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(&f, "drifty", json!({ "chart": { "path": "full" } })).await;
    ready(&f, "drifty", "InstallSucceeded", 1).await;
    let deployments: Api<Deployment> = Api::namespaced(f.cp.client(), NS);
    let services: Api<Service> = Api::namespaced(f.cp.client(), NS);
    deployments
        .delete("drifty-app", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("drifty-app", &DeleteParams::default())
        .await
        .unwrap();
    ready(&f, "drifty", "DriftRepaired", 2).await;
    eventually("both back", 30, || async {
        let d = deployments.get_opt("drifty-app").await.ok()??;
        let s = services.get_opt("drifty-app").await.ok()??;
        Some((d, s))
    })
    .await;
    eventually("the DriftRepaired Event", 30, || async {
        reasons_of_events(&f, "drifty")
            .await
            .contains(&"DriftRepaired".to_string())
            .then_some(())
    })
    .await;
    // Repaired once: settled again, no further revision.
    operator.settle().await;
    let storage = revisions(&f, "drifty").await;
    assert!(storage.len() <= 3, "repair looped: {:?}", storage.keys());

    // driftRepair: false leaves a deleted object deleted.
    patch(&f, "drifty", json!({ "spec": { "driftRepair": false } })).await;
    operator.settle().await;
    let before = revisions(&f, "drifty").await.len();
    services
        .delete("drifty-app", &DeleteParams::default())
        .await
        .unwrap();
    operator.settle().await;
    assert_eq!(revisions(&f, "drifty").await.len(), before);
    assert!(services.get_opt("drifty-app").await.unwrap().is_none());
    operator.stop().await;
}

#[tokio::test]
async fn a_helmapp_waits_for_what_it_depends_on_to_exist_and_be_ready() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "second",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [{ "name": "first" }] }),
    )
    .await;
    let app = ready(&f, "second", "DependencyNotFound", 0).await;
    assert!(app.status.unwrap().conditions[0].message.contains("first"));
    assert!(
        revisions(&f, "second").await.is_empty(),
        "installed before its dependency"
    );
    // The dependency appears; it fails first, so "second" still waits.
    apply(
        &f,
        "first",
        json!({ "chart": { "path": "tiny" }, "values": { "broken": true } }),
    )
    .await;
    ready(&f, "first", "InstallFailed", 0).await;
    ready(&f, "second", "DependencyNotReady", 0).await;
    assert!(revisions(&f, "second").await.is_empty());
    // Once it is Ready, the dependent follows without being touched.
    patch(
        &f,
        "first",
        json!({ "spec": { "values": { "broken": false } } }),
    )
    .await;
    ready(&f, "first", "InstallSucceeded", 1).await;
    ready(&f, "second", "InstallSucceeded", 1).await;
    operator.stop().await;
}

#[tokio::test]
async fn with_wait_ready_follows_the_workloads_rollout() {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "waits",
        json!({ "chart": { "path": "full" }, "wait": true }),
    )
    .await;
    // Installed, but the test control plane has no controllers: not ready.
    let app = with_reason(&f, "waits", "Progressing").await;
    let st = app.status.unwrap();
    assert_eq!(st.revision, 1);
    let message = &st
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(
        message.contains("Deployment waits-app") && message.contains("StatefulSet waits-db"),
        "{message}"
    );
    assert_eq!(
        st.conditions
            .iter()
            .find(|c| c.type_ == "Released")
            .map(|c| c.status.as_str()),
        Some("True"),
        "released, not yet ready"
    );
    // The Deployment rolls out; the StatefulSet not yet.
    let ready_status = json!({ "status": { "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                                           "readyReplicas": 1, "availableReplicas": 1, "currentReplicas": 1 } });
    Api::<Deployment>::namespaced(f.cp.client(), NS)
        .patch_status(
            "waits-app",
            &PatchParams::default(),
            &Patch::Merge(&ready_status),
        )
        .await
        .unwrap();
    eventually("only the StatefulSet left", 30, || async {
        let app = get(&f, "waits").await?;
        let c = app
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (!c.message.contains("Deployment") && c.message.contains("StatefulSet")).then_some(())
    })
    .await;
    Api::<StatefulSet>::namespaced(f.cp.client(), NS)
        .patch_status(
            "waits-db",
            &PatchParams::default(),
            &Patch::Merge(&ready_status),
        )
        .await
        .unwrap();
    let app = with_reason(&f, "waits", "UpToDate").await;
    assert_eq!(app.status.unwrap().revision, 1, "readiness ran no helm");
    operator.stop().await;
}

/// The ServiceAccount `tenant` in [`NS`], bound to a Role with `rules` (YAML
/// list items).
fn tenant_account(f: &Fixture, rules: &str) {
    let rbac = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: tenant, namespace: {NS} }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{ name: tenant, namespace: {NS} }}
rules:{rules}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{ name: tenant, namespace: {NS} }}
roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant }}
subjects: [{{ kind: ServiceAccount, name: tenant, namespace: {NS} }}]
"#
    );
    let file = f.cp.dir().join("tenant-rbac.yaml");
    std::fs::write(&file, rbac).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
}

#[tokio::test]
async fn a_service_account_bounds_what_a_chart_may_do_and_cross_namespace_refs_can_be_refused() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // A tenant ServiceAccount that may do anything in its namespace but
    // create Services.
    tenant_account(
        &f,
        r#"
  - apiGroups: ["", apps, networking.k8s.io]
    resources: [secrets, configmaps, deployments, statefulsets, ingresses]
    verbs: ["*"]
  - apiGroups: [""]
    resources: [services]
    verbs: [get, list, watch]"#,
    );
    let operator = f
        .start_delivery_with(|s| s.no_cross_namespace_refs = true)
        .await;
    apply(
        &f,
        "tenant",
        json!({ "chart": { "path": "full" }, "serviceAccountName": "tenant" }),
    )
    .await;
    let app = with_reason(&f, "tenant", "InstallFailed").await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(
        message.contains("forbidden") && message.contains("services"),
        "helm ran as the tenant: {message}"
    );
    apply(
        &f,
        "elsewhere",
        json!({ "chart": { "path": "tiny" }, "targetNamespace": "kube-system" }),
    )
    .await;
    let app = with_reason(&f, "elsewhere", "CrossNamespaceRef").await;
    assert!(
        app.status.unwrap().conditions[0]
            .message
            .contains("--no-cross-namespace-refs")
    );
    assert!(revisions(&f, "elsewhere").await.is_empty());
    operator.stop().await;
}

#[tokio::test]
async fn never_more_helm_processes_than_the_cap_and_never_two_on_one_release() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // A slow helm that logs when each run starts and ends.
    let log = f.cp.dir().join("helm-spans.log");
    let wrapper = f.cp.dir().join("slow-helm.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"start $$ $(date +%s%N) $*\" >> '{log}'\nsleep 1\n'{helm}' \"$@\"\nrc=$?\necho \"end $$ $(date +%s%N)\" >> '{log}'\nexit $rc\n",
            log = log.display(),
            helm = f.cp.helm_binary().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let operator = f
        .start_delivery_with(|s| {
            s.helm.binary = wrapper.clone();
            s.helm.max_concurrent = 2;
            s.workers = 6;
        })
        .await;
    let names: Vec<String> = (0..6).map(|i| format!("capped-{i}")).collect();
    for name in &names {
        apply(&f, name, json!({ "chart": { "path": "tiny" } })).await;
    }
    // While they install, keep asking one of them to reconcile again.
    for round in 0..5 {
        patch(&f, "capped-0", json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": round.to_string() } } })).await;
        patch(
            &f,
            "capped-0",
            json!({ "spec": { "values": { "greeting": format!("v{round}") } } }),
        )
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    for name in &names {
        eventually(&format!("{name} ready"), 120, || async {
            let app = get(&f, name).await?;
            is_ready(&app).then_some(())
        })
        .await;
    }
    operator.settle().await;

    // Replay the spans: how many ran at once, and per release.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut events: Vec<(u128, i32, String)> = Vec::new(); // (time, +1/-1, pid)
    let mut release_of = std::collections::HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, t) = (
            parts[0],
            parts[1].to_string(),
            parts[2].parse::<u128>().unwrap(),
        );
        if kind == "start" {
            // `upgrade --install <release> ...` or `uninstall <release> ...`
            let release = parts[3..]
                .iter()
                .find(|a| a.starts_with("capped-"))
                .unwrap()
                .to_string();
            release_of.insert(pid.clone(), release);
            events.push((t, 1, pid));
        } else {
            events.push((t, -1, pid));
        }
    }
    events.sort_by_key(|e| (e.0, e.1));
    let (mut running, mut most) = (0, 0);
    let mut per_release: std::collections::HashMap<String, i32> = Default::default();
    for (_, delta, pid) in &events {
        running += delta;
        most = most.max(running);
        let r = per_release.entry(release_of[pid].clone()).or_default();
        *r += delta;
        assert!(*r <= 1, "two helm runs at once on {}", release_of[pid]);
    }
    assert!(
        most <= 2,
        "{most} helm processes at once with --max-concurrent-helm 2"
    );
    assert_eq!(
        most, 2,
        "the cap was reached (the test would not show it otherwise)"
    );
    assert!(release_of.values().filter(|r| *r == "capped-0").count() >= 2);
    operator.stop().await;
}

fn is_ready(app: &HelmApp) -> bool {
    app.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

#[tokio::test]
async fn with_wait_a_daemonset_and_a_job_count_too() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::batch::v1::Job;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "agents",
        json!({ "chart": { "path": "agent" }, "wait": true }),
    )
    .await;
    let app = with_reason(&f, "agents", "Progressing").await;
    let message = app
        .status
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("DaemonSet agents-agent") && message.contains("Job agents-setup"),
        "{message}"
    );
    Api::<DaemonSet>::namespaced(f.cp.client(), NS)
        .patch_status(
            "agents-agent",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": {
            "observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2,
            "numberReady": 2, "currentNumberScheduled": 2, "numberMisscheduled": 0 } })),
        )
        .await
        .unwrap();
    eventually("only the Job left", 30, || async {
        let app = get(&f, "agents").await?;
        let c = app
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (!c.message.contains("DaemonSet") && c.message.contains("Job")).then_some(())
    })
    .await;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Api::<Job>::namespaced(f.cp.client(), NS)
        .patch_status("agents-setup", &PatchParams::default(), &Patch::Merge(&json!({ "status": {
            "succeeded": 1, "startTime": now, "completionTime": now,
            "conditions": [
                { "type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": now, "lastTransitionTime": now },
                { "type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now }
            ] } })))
        .await
        .unwrap();
    with_reason(&f, "agents", "UpToDate").await;
    operator.stop().await;
}

/// A copy of the chart directory `name` with its Chart.yaml at `version`.
fn chart_at_version(f: &Fixture, name: &str, version: &str) -> std::path::PathBuf {
    let from =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/charts/{name}"));
    let to =
        f.cp.dir()
            .join(format!("chart-{name}-{version}"))
            .join(name);
    output_ok(
        std::process::Command::new("mkdir")
            .arg("-p")
            .arg(to.parent().unwrap()),
    );
    output_ok(
        std::process::Command::new("cp")
            .arg("-r")
            .arg(&from)
            .arg(&to),
    );
    let chart_yaml = to.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart_yaml).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("version:") {
                format!("version: {version}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&chart_yaml, text + "\n").unwrap();
    to
}

#[tokio::test]
async fn charts_from_an_oci_registry_over_tls_with_its_ca_and_over_plain_http() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let secure = envtest::OciRegistry::start(&f.cp, true).await.unwrap();
    let plain = envtest::OciRegistry::start(&f.cp, false).await.unwrap();
    let over_tls = secure.push(&f.cp, &charts.join("tiny")).unwrap();
    let over_http = plain.push(&f.cp, &charts.join("tiny")).unwrap();
    assert_eq!(over_http, format!("oci://{}/charts/tiny", plain.host()));
    f.secret(NS, "registry-ca", &[("ca.crt", secure.ca_pem().unwrap())])
        .await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;

    // TLS, trusted through ca.crt of credentialsSecretRef, exact version.
    apply(
        &f,
        "secure",
        json!({ "chart": { "oci": over_tls, "version": "0.1.0",
                           "credentialsSecretRef": { "name": "registry-ca" } } }),
    )
    .await;
    let app = ready(&f, "secure", "InstallSucceeded", 1).await;
    assert_eq!(app.status.unwrap().chart_version, "0.1.0");

    // TLS without the CA: refused, and the condition says what to do.
    apply(
        &f,
        "untrusted",
        json!({ "chart": { "oci": over_tls, "version": "0.1.0" } }),
    )
    .await;
    let app = with_reason(&f, "untrusted", "ChartUnavailable").await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(message.contains("ca.crt"), "{message}");

    // Plain HTTP with insecure: a range resolved from the tag list.
    apply(
        &f,
        "plain",
        json!({ "chart": { "oci": over_http, "version": "~0.1", "insecure": true } }),
    )
    .await;
    let app = ready(&f, "plain", "InstallSucceeded", 1).await;
    assert_eq!(app.status.unwrap().chart_version, "0.1.0");

    // A new version pushed and asked for: exactly one new revision.
    plain
        .push(&f.cp, &chart_at_version(&f, "tiny", "0.2.0"))
        .unwrap();
    patch(
        &f,
        "plain",
        json!({ "spec": { "chart": { "version": "0.2.0" } } }),
    )
    .await;
    let app = ready(&f, "plain", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.as_ref().unwrap().chart_version, "0.2.0");
    let newest = revisions(&f, "plain").await;
    assert_eq!(newest.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(
        newest[&2]
            .get("hossted.com/config-hash")
            .map(String::as_str),
        Some(app.status.unwrap().config_hash.as_str()),
    );

    // helm never saw a registry: every chart it was given is a local file.
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(!lines.is_empty());
    for line in lines.lines().filter(|l| l.starts_with("upgrade")) {
        assert!(
            !line.contains("oci://"),
            "helm was given a registry: {line}"
        );
        let chart = line.split_whitespace().nth(3).unwrap();
        assert!(
            chart.starts_with(f.cp.dir().to_str().unwrap()) && chart.ends_with(".tgz"),
            "not a local chart: {line}"
        );
    }
    operator.stop().await;
}

/// The `spec.properties` names of the Widget CRD's schema (`None`: no CRD).
async fn widget_fields(f: &Fixture) -> Option<Vec<String>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = Api::<CustomResourceDefinition>::all(f.cp.client())
        .get_opt("widgets.example.hossted.com")
        .await
        .unwrap()?;
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let props = schema
        .pointer("/openAPIV3Schema/properties/spec/properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    Some(props)
}

#[tokio::test]
async fn crds_follow_the_policy_and_a_tenant_without_crd_rights_gets_crds_failed() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // Both chart versions under one --chart-path-root; 0.2.0's CRD has a
    // second field.
    let v1 = chart_at_version(&f, "withcrd", "0.1.0");
    let v2 = chart_at_version(&f, "withcrd", "0.2.0");
    let crd = v2.join("crds/widgets.yaml");
    let text = std::fs::read_to_string(&crd).unwrap();
    std::fs::write(
        &crd,
        text.replace(
            "size: {type: string}",
            "size: {type: string}\n                color: {type: string}",
        ),
    )
    .unwrap();
    let root = f.cp.dir().to_path_buf();
    let operator = f
        .start_delivery_with(|s| s.chart_path_root = Some(root.clone()))
        .await;
    let rel = |p: &std::path::Path| p.strip_prefix(&root).unwrap().display().to_string();

    // Skip: the release is there, the CRD is not.
    apply(
        &f,
        "skipped",
        json!({ "chart": { "path": rel(&v1) }, "crds": "Skip" }),
    )
    .await;
    ready(&f, "skipped", "InstallSucceeded", 1).await;
    assert_eq!(widget_fields(&f).await, None, "crds: Skip created the CRD");

    // CreateReplace: created on install, replaced by the next chart's.
    apply(
        &f,
        "replaced",
        json!({ "chart": { "path": rel(&v1) }, "crds": "CreateReplace" }),
    )
    .await;
    ready(&f, "replaced", "InstallSucceeded", 1).await;
    assert_eq!(widget_fields(&f).await, Some(vec!["size".to_string()]));
    patch(
        &f,
        "replaced",
        json!({ "spec": { "chart": { "path": rel(&v2) } } }),
    )
    .await;
    ready(&f, "replaced", "UpgradeSucceeded", 2).await;
    assert_eq!(
        widget_fields(&f).await,
        Some(vec!["color".to_string(), "size".to_string()]),
        "the upgrade did not replace the CRD"
    );

    // A tenant that may not touch CRDs: CRDsFailed, the CRD as it was, no
    // release (helm is not run when its CRDs could not be applied).
    tenant_account(
        &f,
        r#"
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["*"]"#,
    );
    apply(
        &f,
        "tenant",
        json!({ "chart": { "path": rel(&v1) }, "crds": "CreateReplace",
                "serviceAccountName": "tenant" }),
    )
    .await;
    let app = with_reason(&f, "tenant", "CRDsFailed").await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(
        message.contains("forbidden") && message.contains("customresourcedefinitions"),
        "{message}"
    );
    assert!(
        reasons_of_events(&f, "tenant")
            .await
            .contains(&"CRDsFailed".to_string())
    );
    assert_eq!(
        widget_fields(&f).await,
        Some(vec!["color".to_string(), "size".to_string()]),
        "the tenant replaced the CRD"
    );
    assert!(revisions(&f, "tenant").await.is_empty(), "helm ran");
    operator.stop().await;
}
