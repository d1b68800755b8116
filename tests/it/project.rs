//! The Go operator's delivery, drop-in: `Hosstedproject.spec.helm[]` and
//! the platform toggles, on the real apiserver with real helm and a chart
//! repository on loopback.

use std::collections::BTreeMap;
use std::process::Stdio;

use crate::support::*;
use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Revision numbers of release `name` in `ns`, from Helm's storage, with
/// each revision's `first_deployed`-independent labels.
async fn revisions(f: &Fixture, ns: &str, name: &str) -> Vec<i64> {
    let mut v: Vec<i64> = Api::<Secret>::namespaced(f.cp.client(), ns)
        .list(&ListParams::default().labels(&format!("owner=helm,name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.labels?.get("version")?.parse().ok())
        .collect();
    v.sort();
    v
}

async fn wait_revisions(f: &Fixture, ns: &str, name: &str, want: &[i64]) {
    eventually(
        &format!("{ns}/{name} at revisions {want:?}"),
        120,
        || async { (revisions(f, ns, name).await == want).then_some(()) },
    )
    .await;
}

/// The HelmApp the project made for release `name` in `ns`: in the
/// operator's namespace (docs/tenancy.md), its spec naming both.
async fn helmapp(f: &Fixture, ns: &str, name: &str) -> Option<HelmApp> {
    let made = Api::<HelmApp>::namespaced(f.cp.client(), "hossted-operator")
        .get_opt(&hossted_operator::delivery::names::made_app_name(ns, name))
        .await
        .unwrap()?;
    assert_eq!(
        (
            made.spec.target_namespace.as_str(),
            made.spec.release_name.as_str()
        ),
        (ns, name)
    );
    Some(made)
}

fn charts_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts")
}

#[tokio::test]
async fn spec_helm_entries_are_delivered_removed_and_a_go_era_release_adopted_as_it_is() {
    let f = Fixture::new().await;
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts_dir().join("tiny")], None)
        .await
        .unwrap();
    // What the Go operator left: a release installed by plain helm (from
    // the repository's own package: a blocking helm fetching over HTTP
    // would starve the repository's server, which runs on this thread).
    let tgz = repo.dir().join("tiny-0.1.0.tgz");
    f.helm(&[
        "install",
        "legacy",
        tgz.to_str().unwrap(),
        "-n",
        "legacyns",
        "--create-namespace",
    ]);
    let operator = f.start_delivery().await;
    let entry = |name: &str, ns: &str| {
        json!({ "releaseName": name, "namespace": ns, "chartName": "tiny",
                "repoName": "local", "repoUrl": repo.url(), "values": ["greeting=hello"] })
    };
    // stop pauses reporting only: delivery goes on.
    f.hosstedproject(
        "cluster",
        json!({ "stop": true, "helm": [entry("one", "apps1"), entry("two", "apps2"), entry("legacy", "legacyns")] }),
    )
    .await;
    wait_revisions(&f, "apps1", "one", &[1]).await;
    wait_revisions(&f, "apps2", "two", &[1]).await;
    // Adopted: the same release, rendered as it is, taken over without a
    // new revision (not installed anew, not upgraded).
    eventually("legacy adopted as it is", 120, || async {
        let app = helmapp(&f, "legacyns", "legacy").await?;
        let st = app.status.as_ref()?;
        let adopted = st.history.first().is_some_and(|h| h.action == "adopt");
        (adopted && st.revision == 1).then_some(())
    })
    .await;
    assert_eq!(revisions(&f, "legacyns", "legacy").await, vec![1]);
    let one = helmapp(&f, "apps1", "one").await.unwrap();
    assert_eq!(
        one.labels().get("hossted.com/project").map(String::as_str),
        Some("cluster")
    );
    assert!(one.spec.adopt);
    assert_eq!(one.spec.chart.version, "0.1.0", "the version is pinned");
    assert_eq!(one.spec.set, vec!["greeting=hello".to_string()]);
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), "apps1")
        .get("one-tiny")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], "hello");

    // An entry removed: its release uninstalled, its HelmApp gone.
    f.patch_spec(
        "cluster",
        json!({ "helm": [entry("one", "apps1"), entry("legacy", "legacyns")] }),
    )
    .await;
    wait_revisions(&f, "apps2", "two", &[]).await;
    eventually("HelmApp two gone", 60, || async {
        helmapp(&f, "apps2", "two").await.is_none().then_some(())
    })
    .await;

    // The project deleted: its HelmApps go, the releases stay.
    Api::<apis::Hosstedproject>::all(f.cp.client())
        .delete("cluster", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the project's HelmApps gone", 60, || async {
        (helmapp(&f, "apps1", "one").await.is_none()
            && helmapp(&f, "legacyns", "legacy").await.is_none())
        .then_some(())
    })
    .await;
    assert_eq!(revisions(&f, "apps1", "one").await, vec![1], "uninstalled");
    assert_eq!(revisions(&f, "legacyns", "legacy").await, vec![1]);
    operator.stop().await;
}

/// The condition `type_` of the project `name`, if set, as (status, reason).
async fn project_condition(f: &Fixture, name: &str, type_: &str) -> Option<(String, String)> {
    let hp = f.get_hp(name).await;
    hp.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason))
}

/// The field manager that applied (server-side apply) the status condition
/// `type_` of the project `name`, read from `metadata.managedFields`.
async fn condition_applied_by(f: &Fixture, name: &str, type_: &str) -> Vec<String> {
    let hp = f.get_hp(name).await;
    let key = format!("k:{{\"type\":\"{type_}\"}}");
    hp.metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer("/f:status/f:conditions")
                    .and_then(|c| c.get(&key))
                    .is_some()
            })
        })
        .filter_map(|m| m.manager)
        .collect()
}

#[tokio::test]
async fn a_helmapp_made_under_the_earlier_rule_moves_to_the_operators_namespace_without_a_helm_run()
{
    let f = Fixture::new().await;
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts_dir().join("tiny")], None)
        .await
        .unwrap();
    f.namespace("apps1").await;
    // What the earlier rule made: the HelmApp in the target namespace,
    // labelled for the project, installed (revision 1).
    let spec = json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "0.1.0" },
                       "set": ["greeting=hello"], "adopt": true });
    let operator = f.start_delivery().await;
    apply_helmapp(&f, "apps1", "one", spec).await;
    let old = helmapp_ready(&f, "apps1", "one", "InstallSucceeded", 1).await;
    operator.stop().await;
    let labels = json!({ "metadata": { "labels": {
        "hossted.com/project": "cluster", "hossted.com/delivered-for": "helm" } } });
    patch_helmapp(&f, "apps1", "one", labels).await;
    f.hosstedproject(
        "cluster",
        json!({ "helm": [{ "releaseName": "one", "namespace": "apps1", "chartName": "tiny",
                           "repoName": "local", "repoUrl": repo.url(), "values": ["greeting=hello"] }] }),
    )
    .await;

    // Started again: moved, with no helm process at all.
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let moved = eventually("the HelmApp moved and up to date", 120, || async {
        let made = helmapp(&f, "apps1", "one").await?;
        let gone = get_helmapp(&f, "apps1", "one").await.is_none();
        let ready = made.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        (gone && ready && !made.spec.suspend).then_some(made)
    })
    .await;
    assert_eq!(
        revisions(&f, "apps1", "one").await,
        vec![1],
        "same release, same revision"
    );
    let storage = storage_revisions(&f, "apps1", "one").await;
    assert_eq!(
        storage[&1].get("hossted.com/helmapp-uid"),
        moved.metadata.uid.as_ref(),
        "the storage now belongs to the moved HelmApp"
    );
    assert_ne!(moved.metadata.uid, old.metadata.uid);
    assert_eq!(
        moved.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Hosstedproject"
    );
    assert!(runs_in(&log).is_empty(), "helm ran: {:?}", runs_in(&log));
    operator.stop().await;
}

/// A HelmApp in the target namespace, named and labelled as the earlier
/// rule made them — but made by a tenant, over storage the tenant planted
/// with its UID. A label and a name prove nothing: the operator recorded
/// no digest of that storage, so nothing is moved to its namespace (where
/// helm would run as the operator on it) — a Warning says so, and helm
/// never runs on the release.
#[tokio::test]
async fn a_tenants_lookalike_of_an_earlier_helmapp_is_not_moved() {
    let f = Fixture::new().await;
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts_dir().join("tiny")], None)
        .await
        .unwrap();
    f.namespace("apps1").await;
    f.namespace("hossted-operator").await;
    f.helmapp_crd().await;
    let lookalike: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "one", "namespace": "apps1",
                      "labels": { "hossted.com/project": "cluster", "hossted.com/delivered-for": "helm" } },
        "spec": { "chart": { "repo": repo.url(), "name": "tiny", "version": "0.1.0" }, "suspend": true }
    }))
    .unwrap();
    let lookalike = Api::<HelmApp>::namespaced(f.cp.client(), "apps1")
        .create(&PostParams::default(), &lookalike)
        .await
        .unwrap();
    let uid = lookalike.uid().unwrap();
    // The tenant's own release, its storage labelled with that UID.
    f.helm_install("one", "tiny", "apps1");
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), "apps1");
    let label = json!({ "metadata": { "labels": { "hossted.com/helmapp-uid": uid } } });
    secrets
        .patch(
            "sh.helm.release.v1.one.v1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .unwrap();
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    // The operator has seen the lookalike before the project asks — and,
    // a release it found, not made, never trusts its storage for the UID
    // label on it (no label is evidence: docs/tenancy.md).
    let mark = operator.mark();
    Api::<HelmApp>::namespaced(f.cp.client(), "apps1")
        .patch(
            "one",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({ "metadata": { "annotations": { "seen": "yes" } } })),
        )
        .await
        .unwrap();
    operator.reconciled_since(mark).await;
    let seen = Api::<HelmApp>::namespaced(f.cp.client(), "apps1")
        .get("one")
        .await
        .unwrap();
    assert!(
        seen.status.unwrap_or_default().storage_digests.is_empty(),
        "a storage labelled with its UID recorded on first sight"
    );
    f.hosstedproject(
        "cluster",
        json!({ "helm": [{ "releaseName": "one", "namespace": "apps1", "chartName": "tiny",
                           "repoName": "local", "repoUrl": repo.url(), "values": ["greeting=hello"] }] }),
    )
    .await;
    eventually("a StorageTampered Warning on the project", 120, || async {
        event_reasons(&f, "default", "cluster")
            .await
            .contains(&"StorageTampered".to_string())
            .then_some(())
    })
    .await;
    operator.settle().await;
    let stored = secrets.get("sh.helm.release.v1.one.v1").await.unwrap();
    assert_eq!(
        stored.labels().get("hossted.com/helmapp-uid"),
        Some(&uid),
        "the storage was not relabelled"
    );
    assert!(
        Api::<HelmApp>::namespaced(f.cp.client(), "apps1")
            .get_opt("one")
            .await
            .unwrap()
            .is_some(),
        "the lookalike was not removed"
    );
    assert_eq!(revisions(&f, "apps1", "one").await, vec![1]);
    assert!(runs_in(&log).is_empty(), "helm ran: {:?}", runs_in(&log));
    operator.stop().await;
}

#[tokio::test]
async fn without_delivery_a_project_asking_for_it_says_so_once() {
    let f = Fixture::new().await;
    let operator = f.start_inventory_alone();
    f.hosstedproject("cluster", json!({ "monitoring": { "enable": true } }))
        .await;
    eventually(
        "Delivering=False, DeliveryDisabled and Ready=True",
        60,
        || async {
            let delivering = project_condition(&f, "cluster", "Delivering").await;
            let ready = project_condition(&f, "cluster", "Ready").await;
            (delivering == Some(("False".into(), "DeliveryDisabled".into()))
                && ready.is_some_and(|(s, _)| s == "True"))
            .then_some(())
        },
    )
    .await;
    // Two writers, each applying only its own condition.
    assert_eq!(
        condition_applied_by(&f, "cluster", "Delivering").await,
        vec!["hossted-delivery".to_string()]
    );
    assert_eq!(
        condition_applied_by(&f, "cluster", "Ready").await,
        vec!["hossted-inventory".to_string()]
    );
    // Another reconcile: still one Event.
    let mark = operator.mark();
    f.patch_spec("cluster", json!({ "logging": { "enable": true } }))
        .await;
    operator.reconciled_since(mark).await;
    let events = f.kubectl(&["get", "events", "-A", "-o", "json"]);
    let events: serde_json::Value = serde_json::from_str(&events).unwrap();
    let disabled: Vec<&serde_json::Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "DeliveryDisabled")
        .collect();
    assert_eq!(disabled.len(), 1, "{disabled:?}");
    assert_eq!(disabled[0]["count"].as_i64().unwrap_or(1), 1);
    // Turned off: the condition goes; the inventory's stays.
    f.patch_spec("cluster", json!({ "monitoring": { "enable": false } }))
        .await;
    eventually("the Delivering condition gone", 60, || async {
        project_condition(&f, "cluster", "Delivering")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(project_condition(&f, "cluster", "Ready").await.is_some());
    operator.stop().await;
}

#[tokio::test]
async fn a_writer_with_a_stale_copy_keeps_the_other_writers_condition() {
    use runtime::StatusWriter;
    let f = Fixture::new().await;
    let operator = f.start_inventory_alone();
    f.hosstedproject("cluster", json!({ "monitoring": { "enable": true } }))
        .await;
    eventually("both conditions", 60, || async {
        let delivering = project_condition(&f, "cluster", "Delivering").await;
        let ready = project_condition(&f, "cluster", "Ready").await;
        (delivering.is_some() && ready.is_some()).then_some(())
    })
    .await;
    operator.stop().await;
    // The inventory's view from before delivery's condition was written.
    let mut stale = f.get_hp("cluster").await;
    let status = stale.status.as_mut().unwrap();
    status.conditions.retain(|c| c.type_ != "Delivering");
    let mut changed = status.clone();
    for c in &mut changed.conditions {
        c.reason = "Stopped".into();
        c.status = "False".into();
    }
    let inventory = StatusWriter::new(f.cp.client(), |hp: &apis::Hosstedproject| hp.status.clone())
        .owning_conditions("hossted-inventory", &["Ready"]);
    inventory.write(&stale, &changed).await.unwrap();
    assert_eq!(
        project_condition(&f, "cluster", "Ready").await,
        Some(("False".into(), "Stopped".into()))
    );
    assert_eq!(
        project_condition(&f, "cluster", "Delivering").await,
        Some(("False".into(), "DeliveryDisabled".into())),
        "applied conditions leave the other manager's alone"
    );
    // The same stale write as one merge patch of the status (how both
    // wrote before) drops it: what the test above guards against.
    let merge = StatusWriter::new(f.cp.client(), |hp: &apis::Hosstedproject| hp.status.clone());
    for c in &mut changed.conditions {
        c.reason = "Duplicate".into();
    }
    merge.write(&stale, &changed).await.unwrap();
    assert_eq!(project_condition(&f, "cluster", "Delivering").await, None);
}

#[tokio::test]
async fn a_platform_toggle_delivers_its_charts_and_the_inventory_reports_them_once() {
    let f = Fixture::new().await;
    f.helmapp_crd().await;
    f.namespace("hossted-operator").await;
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts_dir().join("tiny")], None)
        .await
        .unwrap();
    let listed = format!(
        "- name: agent\n  namespace: hossted-platform\n  spec:\n    chart: {{ repo: \"{}\", name: tiny, version: 0.1.0 }}\n",
        repo.url()
    );
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("hossted-platform-charts".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("monitoring".to_string(), listed)])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(f.cp.client(), "hossted-operator")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    f.hosstedproject("cluster", json!({ "monitoring": { "enable": true } }))
        .await;
    let mut child = f
        .operator_command(f.cp.kubeconfig_path())
        .args(["run", "--controllers", "inventory,delivery"])
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .args(["--coalesce-window", "100ms"])
        .arg("--helm-binary")
        .arg(f.cp.helm_binary())
        .arg("--work-dir")
        .arg(f.cp.dir().join("operator-work"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_revisions(&f, "hossted-platform", "agent", &[1]).await;
    // The registration says monitoring is on; the release is reported once.
    let registration = eventually("the registration", 60, || async {
        f.api
            .requests()
            .into_iter()
            .find(|r| r.path.ends_with("/register"))
    })
    .await;
    assert_eq!(registration.json()["options_state"]["monitoring"], true);
    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(posts[0].json()["app_api_info"]["app_name"], "agent");
    // Toggle off: uninstalled.
    f.patch_spec("cluster", json!({ "monitoring": { "enable": false } }))
        .await;
    wait_revisions(&f, "hossted-platform", "agent", &[]).await;
    eventually("the uninstall reported", 60, || async {
        let posts = f.requests_to("/v1/apps");
        posts
            .iter()
            .any(|p| p.json()["app_info"]["helm_info"]["status"] == "uninstalled")
            .then_some(())
    })
    .await;
    let installs = f
        .requests_to("/v1/apps")
        .iter()
        .filter(|p| p.json()["app_info"]["helm_info"]["status"] == "deployed")
        .count();
    assert_eq!(
        installs, 1,
        "the delivered release was reported more than once"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn the_delivery_examples_pass_server_side_dry_run() {
    let f = Fixture::new().await;
    f.helmapp_crd().await;
    for ns in [
        "monitoring",
        "tenant-a",
        "shop",
        "platform",
        "hossted-operator",
    ] {
        f.namespace(ns).await;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "examples/helmapp.yaml",
        "examples/helmapp-collector.yaml",
        "examples/helmapp-tenant.yaml",
        "examples/helmapp-flux-port.yaml",
        "examples/helmappset-sequenced.yaml",
        "examples/helmappset-manifest.yaml",
        "examples/hosstedproject-helm.yaml",
        "manifests/delivery/platform-charts.yaml",
    ] {
        let path = root.join(file);
        let out = f.kubectl(&["apply", "--dry-run=server", "-f", path.to_str().unwrap()]);
        assert!(out.contains("(server dry run)"), "{file}: {out}");
    }
}
