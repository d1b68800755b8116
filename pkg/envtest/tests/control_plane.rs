//! Proves the control plane from `envtest` is a real kube-apiserver + etcd:
//! CRDs, watches, RBAC, helm releases, isolation between harnesses, and
//! clean teardown.

use std::time::Duration;

use envtest::eventually;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Api, Client};

mod common;
use common::*;

#[tokio::test]
async fn crd_is_established_and_custom_objects_can_be_created_listed_and_watched() {
    let cp = start().await;
    let client = cp.client();
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.test.hossted.dev" },
        "spec": {
            "group": "test.hossted.dev",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"] },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "properties": { "size": { "type": "integer" } } }
                } } }
            }]
        }
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    eventually("CRD Established", 30, || async {
        let crd = crds.get("widgets.test.hossted.dev").await.ok()?;
        let established = crd
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await;

    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("test.hossted.dev", "v1", "Widget"));
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let widget = |name: &str, size: i64| {
        let mut w = DynamicObject::new(name, &ar);
        w.data = serde_json::json!({ "spec": { "size": size } });
        w
    };
    // The discovery document may lag the Established condition briefly.
    eventually("first widget created", 30, || async {
        widgets
            .create(&PostParams::default(), &widget("first", 1))
            .await
            .ok()
    })
    .await;

    let list = widgets.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].data["spec"]["size"], 1);
    let rv = list.metadata.resource_version.clone().unwrap();

    let mut stream = widgets
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    widgets
        .create(&PostParams::default(), &widget("second", 2))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(30), stream.try_next())
        .await
        .expect("a watch event within 30 s")
        .unwrap()
        .expect("the watch stream stays open");
    match event {
        WatchEvent::Added(obj) => {
            assert_eq!(obj.metadata.name.as_deref(), Some("second"));
            assert_eq!(obj.data["spec"]["size"], 2);
        }
        other => panic!("expected Added(second), got {other:?}"),
    }

    // The real kubectl sees them too, through the CRD's short name.
    let names = run_ok({
        let mut c = cp.kubectl();
        c.args(["get", "wd", "-n", "default", "-o", "name"]);
        c
    });
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "widget.test.hossted.dev/first",
            "widget.test.hossted.dev/second"
        ]
    );
}

fn is_forbidden<T: std::fmt::Debug>(r: &Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 403)
}

async fn grant_pod_list(admin: &Client, subject: Subject, role: &str) {
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role_obj = ClusterRole {
        metadata: ObjectMeta {
            name: Some(role.into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["".into()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["list".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    roles
        .create(&PostParams::default(), &role_obj)
        .await
        .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(role.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![subject]),
    };
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test]
async fn rbac_is_enforced_for_service_accounts_and_users() {
    let cp = start().await;
    let admin = cp.client();

    // A ServiceAccount with a real bound token.
    let sa_client = cp
        .client_for_service_account("rbac-test", "reader")
        .await
        .unwrap();
    let sa_pods: Api<Pod> = Api::namespaced(sa_client, "rbac-test");
    let denied = sa_pods.list(&ListParams::default()).await;
    assert!(
        is_forbidden(&denied),
        "expected 403 before any grant, got {denied:?}"
    );

    // A user with a client certificate.
    let user_client = cp.client_for_user("alice", Some("auditors")).await.unwrap();
    let user_pods: Api<Pod> = Api::all(user_client);
    let denied = user_pods.list(&ListParams::default()).await;
    assert!(
        is_forbidden(&denied),
        "expected 403 before any grant, got {denied:?}"
    );

    grant_pod_list(
        &admin,
        Subject {
            kind: "ServiceAccount".into(),
            name: "reader".into(),
            namespace: Some("rbac-test".into()),
            ..Default::default()
        },
        "sa-pod-reader",
    )
    .await;
    // Grant the user through its group, proving the certificate's O is read.
    grant_pod_list(
        &admin,
        Subject {
            kind: "Group".into(),
            name: "auditors".into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        },
        "group-pod-reader",
    )
    .await;

    // The RBAC authorizer picks grants up from its own informer: poll.
    eventually("ServiceAccount may list pods", 30, || async {
        sa_pods.list(&ListParams::default()).await.ok()
    })
    .await;
    eventually("user may list pods", 30, || async {
        user_pods.list(&ListParams::default()).await.ok()
    })
    .await;
    // Only what was granted: listing secrets stays forbidden.
    let secrets: Api<Secret> = Api::namespaced(
        cp.client_for_service_account("rbac-test", "reader")
            .await
            .unwrap(),
        "rbac-test",
    );
    assert!(is_forbidden(&secrets.list(&ListParams::default()).await));
}

fn release_secret_names(secrets: &[Secret]) -> Vec<String> {
    let mut names: Vec<String> = secrets
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn helm_install_and_upgrade_write_release_secrets() {
    let cp = start().await;
    run_ok({
        let mut c = cp.helm();
        c.args(["install", "demo"]).arg(chart("tiny")).args([
            "-n",
            "helm-test",
            "--create-namespace",
        ]);
        c
    });
    let secrets: Api<Secret> = Api::namespaced(cp.client(), "helm-test");
    let owned_by_helm = ListParams::default().labels("owner=helm");
    let list = secrets.list(&owned_by_helm).await.unwrap().items;
    assert_eq!(release_secret_names(&list), ["sh.helm.release.v1.demo.v1"]);
    assert_eq!(list[0].type_.as_deref(), Some("helm.sh/release.v1"));
    let labels = list[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("name").map(String::as_str), Some("demo"));
    assert_eq!(labels.get("status").map(String::as_str), Some("deployed"));

    // The chart's own object exists too.
    let cm = run_ok({
        let mut c = cp.kubectl();
        c.args([
            "get",
            "configmap",
            "demo-tiny",
            "-n",
            "helm-test",
            "-o",
            "jsonpath={.data.greeting}",
        ]);
        c
    });
    assert_eq!(cm, "hello");

    run_ok({
        let mut c = cp.helm();
        c.args(["upgrade", "demo"]).arg(chart("tiny")).args([
            "-n",
            "helm-test",
            "--set",
            "greeting=hi",
        ]);
        c
    });
    let list = secrets.list(&owned_by_helm).await.unwrap().items;
    assert_eq!(
        release_secret_names(&list),
        ["sh.helm.release.v1.demo.v1", "sh.helm.release.v1.demo.v2"]
    );
    let status_of = |name: &str| {
        list.iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .and_then(|s| s.metadata.labels.as_ref()?.get("status").cloned())
    };
    assert_eq!(
        status_of("sh.helm.release.v1.demo.v1").as_deref(),
        Some("superseded")
    );
    assert_eq!(
        status_of("sh.helm.release.v1.demo.v2").as_deref(),
        Some("deployed")
    );
}
