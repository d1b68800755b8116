//! What happens while the operator is stopped is seen when it starts:
//! delivery decides from the caches and Helm's storage, never from events
//! it remembers. And delivery runs alone, without the inventory's settings.

use std::process::Stdio;

use crate::support::*;
use apis::helmapp::HelmApp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

const NS: &str = "apps";

async fn release_revisions(f: &Fixture, ns: &str, name: &str) -> usize {
    storage_revisions(f, ns, name).await.len()
}

async fn wait_ready(f: &Fixture, name: &str, reason: &str, revision: i64) {
    helmapp_ready(f, NS, name, reason, revision).await;
}

async fn apply_app(f: &Fixture, name: &str, spec: serde_json::Value) {
    apply_helmapp(f, NS, name, spec).await
}

#[tokio::test]
async fn an_object_deleted_while_the_operator_is_stopped_comes_back_when_it_starts() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply_app(&f, "offline", json!({ "chart": { "path": "full" } })).await;
    wait_ready(&f, "offline", "InstallSucceeded", 1).await;
    operator.settle().await;
    operator.stop().await;

    // Deleted while no operator runs: no event will ever tell of it.
    let deployments: Api<Deployment> = Api::namespaced(f.cp.client(), NS);
    let services: Api<Service> = Api::namespaced(f.cp.client(), NS);
    deployments
        .delete("offline-app", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("offline-app", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deployments.get_opt("offline-app").await.unwrap().is_none());

    let operator = f.start_delivery().await;
    wait_ready(&f, "offline", "DriftRepaired", 2).await;
    eventually("both back", 60, || async {
        let d = deployments.get_opt("offline-app").await.ok()??;
        let s = services.get_opt("offline-app").await.ok()??;
        Some((d, s))
    })
    .await;
    // Repaired once, then settled: a third start finds nothing missing.
    operator.settle().await;
    operator.stop().await;
    let operator = f.start_delivery().await;
    operator.settle().await;
    assert_eq!(release_revisions(&f, NS, "offline").await, 2);
    operator.stop().await;
}

#[tokio::test]
async fn helmapps_of_a_project_deleted_while_the_operator_is_stopped_are_let_go_on_start() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts/tiny");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts], None)
        .await
        .unwrap();
    let operator = f.start_delivery().await;
    let entry = json!({ "releaseName": "platform", "namespace": NS, "chartName": "tiny",
                        "repoName": "local", "repoUrl": repo.url() });
    f.hosstedproject("cluster", json!({ "helm": [entry] }))
        .await;
    // The project's HelmApp lives in the operator's namespace.
    let apps: Api<HelmApp> = Api::namespaced(f.cp.client(), "hossted-operator");
    let made = hossted_operator::delivery::names::made_app_name(NS, "platform");
    helmapp_ready(&f, "hossted-operator", &made, "InstallSucceeded", 1).await;
    operator.settle().await;
    operator.stop().await;

    // The project goes while no operator runs.
    f.kubectl(&["delete", "hosstedproject", "cluster", "--wait=true"]);

    let operator = f.start_delivery().await;
    eventually("the project's HelmApp let go", 60, || async {
        apps.get_opt(&made).await.ok()?.is_none().then_some(())
    })
    .await;
    // Let go without an uninstall: the release stays.
    assert_eq!(release_revisions(&f, NS, "platform").await, 1);
    operator.stop().await;
}

#[tokio::test]
async fn delivery_alone_asks_for_no_api_settings_and_installs_a_helmapp() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let log_path = f.cp.dir().join("delivery-alone.log");
    let log = std::fs::File::create(&log_path).unwrap();
    // operator_binary: no HOSSTED_API_URL, token or EMAIL_ID at all.
    let mut cmd = operator_binary();
    cmd.env("KUBECONFIG", f.cp.kubeconfig_path())
        .env("RUST_LOG", "info")
        .args([
            "run",
            "--controllers",
            "delivery",
            "--metrics-bind-address",
            "0",
        ]);
    delivery_flags(&mut cmd, &f.cp, &f.cp.dir().join("alone-work"));
    let mut child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
    apply_app(&f, "alone", json!({ "chart": { "path": "tiny" } })).await;
    wait_ready(&f, "alone", "InstallSucceeded", 1).await;
    assert!(child.try_wait().unwrap().is_none(), "the operator exited");
    let _ = child.kill();
    let _ = child.wait();

    // With the API settings given and a Hosstedproject to report, delivery
    // alone still reports nothing: the inventory does not run.
    f.hosstedproject("cluster", json!({})).await;
    let mut cmd = f.operator_command(f.cp.kubeconfig_path());
    cmd.args([
        "run",
        "--controllers",
        "delivery",
        "--metrics-bind-address",
        "0",
    ]);
    delivery_flags(&mut cmd, &f.cp, &f.cp.dir().join("alone-work-2"));
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    apply_app(&f, "alone-2", json!({ "chart": { "path": "tiny" } })).await;
    wait_ready(&f, "alone-2", "InstallSucceeded", 1).await;
    assert!(child.try_wait().unwrap().is_none(), "the operator exited");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(f.api.requests().len(), 0, "the inventory reported");
}

#[tokio::test]
async fn without_their_crds_delivery_waits_and_says_for_which() {
    let cp = envtest::ControlPlane::start().await.expect("control plane");
    let log_path = cp.dir().join("no-crds.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = operator_binary()
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUST_LOG", "info")
        .args(["run", "--controllers", "delivery"])
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .arg("--helm-binary")
        .arg(cp.helm_binary())
        .arg("--work-dir")
        .arg(cp.dir().join("no-crds-work"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    eventually("the log names each missing CRD", 60, || async {
        let text = std::fs::read_to_string(&log_path).ok()?;
        let waits = |kind: &str, crd: &str| {
            text.lines().any(|l| {
                l.contains(&format!(
                    "the {kind} informer waits for CustomResourceDefinition {crd};"
                ))
            })
        };
        (waits("HelmApp", "helmapps.hossted.com")
            && waits("HelmAppSet", "helmappsets.hossted.com")
            && waits("Hosstedproject", "hosstedprojects.hossted.com"))
        .then_some(())
    })
    .await;
    assert!(child.try_wait().unwrap().is_none(), "the operator exited");
    let _ = child.kill();
    let _ = child.wait();
}
