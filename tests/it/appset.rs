//! HelmAppSet on the real apiserver with real helm: sequenced groups,
//! reverse-order deletion, sets chained by `dependsOn`, edits that touch
//! one release only, and dependency cycles.

use std::collections::BTreeMap;

use crate::support::*;
use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "stacks";

async fn apply_set(f: &Fixture, name: &str, spec: serde_json::Value) {
    let set: HelmAppSet = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmAppSet",
        "metadata": { "name": name, "namespace": NS }, "spec": spec
    }))
    .unwrap();
    Api::<HelmAppSet>::namespaced(f.cp.client(), NS)
        .create(&PostParams::default(), &set)
        .await
        .unwrap();
}

async fn apply_app(f: &Fixture, name: &str, spec: serde_json::Value) {
    apply_helmapp(f, NS, name, spec).await
}

/// Release name → its newest revision, from Helm's storage in [`NS`].
async fn releases(f: &Fixture) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for s in Api::<Secret>::namespaced(f.cp.client(), NS)
        .list(&ListParams::default().labels("owner=helm"))
        .await
        .unwrap()
        .items
    {
        let labels = s.metadata.labels.unwrap_or_default();
        let (Some(name), Some(v)) = (labels.get("name"), labels.get("version")) else {
            continue;
        };
        let v: i64 = v.parse().unwrap_or(0);
        let e = out.entry(name.clone()).or_insert(0);
        *e = (*e).max(v);
    }
    out
}

/// `status.ready` of the set once it equals `want`.
async fn set_ready(f: &Fixture, name: &str, want: &str) {
    eventually(&format!("{name} to be {want}"), 90, || async {
        let set = Api::<HelmAppSet>::namespaced(f.cp.client(), NS)
            .get_opt(name)
            .await
            .unwrap()?;
        (set.status?.ready == want).then_some(())
    })
    .await;
}

/// Once helm has stored a revision of release `name` (its HelmApp shows
/// `Progressing` from the run's intent on, before that).
async fn released(f: &Fixture, name: &str) {
    eventually(&format!("{name} released"), 90, || async {
        releases(f).await.contains_key(name).then_some(())
    })
    .await;
}

/// The child HelmApp once its Ready reason is `reason`.
async fn app_reason(f: &Fixture, name: &str, reason: &str) -> HelmApp {
    helmapp_with_reason(f, NS, name, reason).await
}

/// Marks Deployment `name` rolled out (no controller does it here), once
/// helm has created it: a sibling's readiness says nothing of whether
/// this app's helm has got that far.
async fn roll_out(f: &Fixture, name: &str) {
    let deployments = Api::<Deployment>::namespaced(f.cp.client(), NS);
    eventually(
        &format!("Deployment {name} created by helm"),
        90,
        || async { deployments.get_opt(name).await.unwrap() },
    )
    .await;
    let ready = json!({ "status": { "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                                    "readyReplicas": 1, "availableReplicas": 1 } });
    deployments
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
}

fn deploy_app(name: &str) -> serde_json::Value {
    json!({ "name": name, "spec": { "chart": { "path": "deploy" }, "wait": true } })
}

/// Uninstalls logged by [`counting_helm`], in order.
fn uninstalls(log: &std::path::Path) -> Vec<String> {
    runs_in(log)
        .into_iter()
        .filter_map(|r| r.strip_prefix("uninstall ").map(String::from))
        .collect()
}

#[tokio::test]
async fn a_sequenced_set_installs_each_app_after_the_one_before_is_ready_and_uninstalls_in_reverse()
{
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply_set(
        &f,
        "stack",
        json!({ "sequenced": true, "apps": [deploy_app("a"), deploy_app("b"), deploy_app("c")] }),
    )
    .await;

    // a is installed; b waits for a to be Ready, c for b.
    released(&f, "stack-a").await;
    set_ready(&f, "stack", "0/3").await;
    app_reason(&f, "stack-b", "DependencyNotReady").await;
    assert_eq!(
        releases(&f).await.keys().cloned().collect::<Vec<_>>(),
        vec!["stack-a"],
        "b or c installed before a was Ready"
    );
    roll_out(&f, "stack-a").await;
    set_ready(&f, "stack", "1/3").await;
    released(&f, "stack-b").await;
    assert!(
        !releases(&f).await.contains_key("stack-c"),
        "c installed before b was Ready"
    );
    roll_out(&f, "stack-b").await;
    set_ready(&f, "stack", "2/3").await;
    released(&f, "stack-c").await;
    roll_out(&f, "stack-c").await;
    set_ready(&f, "stack", "3/3").await;
    let table = f.kubectl(&["get", "happset", "-n", NS]);
    assert!(
        table.contains("READY") && table.contains("3/3") && table.contains("AppsReady"),
        "{table}"
    );

    // Deleting the set: c, then b, then a — each gone before the next —
    // and the set last.
    Api::<HelmAppSet>::namespaced(f.cp.client(), NS)
        .delete("stack", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the set gone", 120, || async {
        Api::<HelmAppSet>::namespaced(f.cp.client(), NS)
            .get_opt("stack")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(uninstalls(&log), vec!["stack-c", "stack-b", "stack-a"]);
    assert!(releases(&f).await.is_empty(), "a release was left behind");
    operator.stop().await;
}

#[tokio::test]
async fn a_set_depending_on_another_starts_when_that_one_is_all_ready() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply_set(
        &f,
        "base",
        json!({ "apps": [
            { "name": "config", "spec": { "chart": { "path": "tiny" } } },
            deploy_app("server"),
        ] }),
    )
    .await;
    apply_set(
        &f,
        "top",
        json!({ "dependsOn": [{ "kind": "HelmAppSet", "name": "base" }],
                "apps": [{ "name": "ui", "spec": { "chart": { "path": "tiny" } } }] }),
    )
    .await;
    set_ready(&f, "base", "1/2").await;
    app_reason(&f, "top-ui", "DependencyNotReady").await;
    assert!(!releases(&f).await.contains_key("top-ui"));
    roll_out(&f, "base-server").await;
    set_ready(&f, "base", "2/2").await;
    set_ready(&f, "top", "1/1").await;
    assert_eq!(releases(&f).await.get("top-ui"), Some(&1));
    operator.stop().await;
}

#[tokio::test]
async fn editing_one_app_of_a_set_upgrades_only_that_release() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    let tiny = |name: &str, greeting: &str| {
        json!({ "name": name, "spec": { "chart": { "path": "tiny" },
                                        "values": { "greeting": greeting } } })
    };
    apply_set(
        &f,
        "pair",
        json!({ "apps": [tiny("one", "hi"), tiny("two", "hi")] }),
    )
    .await;
    set_ready(&f, "pair", "2/2").await;
    assert_eq!(
        releases(&f).await,
        BTreeMap::from([("pair-one".into(), 1), ("pair-two".into(), 1)])
    );
    Api::<HelmAppSet>::namespaced(f.cp.client(), NS)
        .patch(
            "pair",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "apps": [tiny("one", "hi"), tiny("two", "hello")] } })),
        )
        .await
        .unwrap();
    eventually("pair-two at revision 2", 90, || async {
        (releases(&f).await.get("pair-two") == Some(&2)).then_some(())
    })
    .await;
    // A forced reconcile of the untouched one: it saw the edit, ran nothing.
    let mark = operator.mark();
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .patch(
            "pair-one",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": "now" } } }),
            ),
        )
        .await
        .unwrap();
    operator.reconciled_since(mark).await;
    assert_eq!(
        releases(&f).await.get("pair-one"),
        Some(&1),
        "pair-one was upgraded"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_dependency_cycle_is_reported_on_the_apps_in_it_and_others_install() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    let on = |dep: &str| json!({ "chart": { "path": "tiny" }, "dependsOn": [{ "kind": "HelmApp", "name": dep }] });
    apply_app(&f, "x", on("y")).await;
    apply_app(&f, "y", on("x")).await;
    apply_app(&f, "z", json!({ "chart": { "path": "tiny" } })).await;
    for name in ["x", "y"] {
        let app = app_reason(&f, name, "DependencyCycle").await;
        let message = app.status.unwrap().conditions[0].message.clone();
        assert!(
            message.contains("HelmApp stacks/x") && message.contains("HelmApp stacks/y"),
            "{message}"
        );
    }
    app_reason(&f, "z", "InstallSucceeded").await;
    let installed = releases(&f).await;
    assert_eq!(installed.keys().cloned().collect::<Vec<_>>(), vec!["z"]);
    operator.stop().await;
}
