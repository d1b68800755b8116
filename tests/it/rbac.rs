//! manifests/ installs with server-side apply, and its ServiceAccount holds
//! every permission the operator uses: the binary, running out of cluster as
//! that ServiceAccount (RBAC enforced), reports, writes status and events,
//! and logs no forbidden request.

use std::process::Stdio;

use crate::support::*;
use envtest::Receiver;

/// The identity the manifests' ServiceAccount gives the operator.
const OPERATOR_USER: &str = "system:serviceaccount:hossted-operator:hossted-operator";
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

#[tokio::test]
async fn the_manifests_service_account_can_run_the_reporting_scenario() {
    let (cp, audit_log) = audited_control_plane().await;
    let f = Fixture {
        cp,
        api: Receiver::start().await.unwrap(),
    };
    let out = output_ok(
        f.cp.kubectl()
            .args(["apply", "--server-side", "-k"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests")),
    );
    let applied = String::from_utf8_lossy(&out.stdout);
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/hosstedprojects.hossted.com",
        "clusterrole",
        "deployment.apps/hossted-operator",
    ] {
        assert!(applied.contains(object), "{object} not applied: {applied}");
    }
    f.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "crd/hosstedprojects.hossted.com",
        "--timeout=60s",
    ]);

    f.helm_install("web", "web", "apps");
    f.set_pod_phase("apps", "web-web-0", "Running").await;
    // A corrupt release: the same InvalidRelease Warning on every reconcile,
    // which the recorder turns into a PATCH of the Event's count.
    f.kubectl(&[
        "-n",
        "apps",
        "create",
        "secret",
        "generic",
        "sh.helm.release.v1.broken.v1",
        "--type=helm.sh/release.v1",
        "--from-literal=release=not-a-release",
    ]);
    f.kubectl(&[
        "-n",
        "apps",
        "label",
        "secret",
        "sh.helm.release.v1.broken.v1",
        "owner=helm",
        "name=broken",
        "version=1",
    ]);
    // trivy-operator is installed: the vulnerability reports are read too.
    f.kubectl(&[
        "apply",
        "-f",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/vulnerabilityreports.crd.yaml"
        ),
    ]);
    f.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "crd/vulnerabilityreports.aquasecurity.github.io",
        "--timeout=60s",
    ]);
    f.helm_install("shop", "full", "shop");
    f.hosstedproject("cluster", json!({ "cve": { "enable": true } }))
        .await;

    let kubeconfig =
        f.cp.kubeconfig_for_service_account("hossted-operator", "hossted-operator")
            .await
            .unwrap();
    let log_path = f.cp.dir().join("operator-as-sa.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut operator = f
        .operator_command(&kubeconfig)
        .env("RUST_LOG", "info")
        // With leader election: the Lease verbs are exercised too.
        .args(["run", "--leader-elect", "--coalesce-window", "100ms"])
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();

    f.wait_requests("/v1/apps", 2, 60).await;
    // Status patched and Events created with the ServiceAccount's rights.
    eventually("status written by the ServiceAccount", 30, || async {
        (f.get_hp("cluster").await.status?.app_count == 2).then_some(())
    })
    .await;
    let events: Api<Event> = Api::namespaced(f.cp.client(), "default");
    eventually(
        "an AppsReported event written by the ServiceAccount",
        30,
        || async {
            let list = events
                .list(
                    &ListParams::default()
                        .fields("involvedObject.name=cluster,reason=AppsReported"),
                )
                .await
                .ok()?;
            (!list.items.is_empty()).then_some(())
        },
    )
    .await;
    // A change is still seen (the watches are allowed too).
    f.helm_upgrade("web", "web", "apps", "port=81");
    f.wait_requests("/v1/apps", 3, 30).await;
    eventually(
        "the InvalidRelease event's count bumped by PATCH",
        30,
        || async {
            let list = events
                .list(
                    &ListParams::default()
                        .fields("involvedObject.name=cluster,reason=InvalidRelease"),
                )
                .await
                .ok()?;
            list.items
                .iter()
                .any(|e| e.count.unwrap_or(0) >= 2)
                .then_some(())
        },
    )
    .await;

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(operator.id() as i32, libc::SIGTERM) };
    let status = tokio::task::spawn_blocking(move || operator.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "operator exit: {status:?}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        audited_requests(&audit_log, OPERATOR_USER) > 0,
        "the audit log holds the operator's requests"
    );
    let forbidden = forbidden_requests(&audit_log, OPERATOR_USER);
    assert!(
        forbidden.is_empty(),
        "forbidden requests:\n{}\noperator log:\n{log}",
        forbidden.join("\n")
    );
    assert!(!log.contains(TOKEN));
}

#[tokio::test]
async fn the_delivery_overlay_applies_and_its_service_account_installs_and_uninstalls() {
    let (cp, audit_log) = audited_control_plane().await;
    let f = Fixture::on(cp).await;
    let overlay = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/delivery");
    // The namespace first: a server dry run checks objects against it.
    f.namespace("hossted-operator").await;
    let dry = f.kubectl(&["apply", "--dry-run=server", "-k", overlay]);
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/helmapps.hossted.com",
        "customresourcedefinition.apiextensions.k8s.io/helmappsets.hossted.com",
        "clusterrole.rbac.authorization.k8s.io/hossted-operator-delivery",
        "configmap/hossted-platform-charts",
        "deployment.apps/hossted-operator",
    ] {
        assert!(dry.contains(object), "{object} not in the dry run: {dry}");
    }
    f.kubectl(&["apply", "--server-side", "-k", overlay]);
    for crd in ["helmapps.hossted.com", "helmappsets.hossted.com"] {
        f.kubectl(&[
            "wait",
            "--for",
            "condition=established",
            &format!("crd/{crd}"),
            "--timeout=60s",
        ]);
    }
    let deployment = f.kubectl(&[
        "get",
        "deployment",
        "-n",
        "hossted-operator",
        "hossted-operator",
        "-o",
        "json",
    ]);
    assert!(
        deployment.contains("--controllers=inventory,delivery"),
        "{deployment}"
    );
    f.hosstedproject("cluster", json!({})).await;
    f.namespace("apps").await;

    let kubeconfig =
        f.cp.kubeconfig_for_service_account("hossted-operator", "hossted-operator")
            .await
            .unwrap();
    let log_path = f.cp.dir().join("delivery-as-sa.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut cmd = f.operator_command(&kubeconfig);
    cmd.env("RUST_LOG", "info")
        .args([
            "run",
            "--leader-elect",
            "--controllers",
            "inventory,delivery",
        ])
        .args(["--metrics-bind-address", "0"]);
    delivery_flags(&mut cmd, &f.cp, &f.cp.dir().join("work"));
    let mut operator = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
    // Every kind the `full` chart makes, through a set (both controllers).
    let set = json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmAppSet",
        "metadata": { "name": "shop", "namespace": "apps" },
        "spec": { "apps": [{ "name": "full", "spec": { "chart": { "path": "full" } } }] }
    });
    let file = f.cp.dir().join("set.json");
    std::fs::write(&file, set.to_string()).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    eventually("the set installed by the ServiceAccount", 120, || async {
        let out = f.kubectl(&[
            "get",
            "happset",
            "-n",
            "apps",
            "shop",
            "-o",
            "jsonpath={.status.ready}",
        ]);
        (out.trim() == "1/1").then_some(())
    })
    .await;
    f.wait_requests("/v1/apps", 1, 60).await;
    f.kubectl(&["delete", "happset", "-n", "apps", "shop", "--wait=false"]);
    eventually("the set and its release gone", 120, || async {
        let sets = f.kubectl(&["get", "happset", "-n", "apps", "-o", "name"]);
        let releases = f.kubectl(&[
            "get",
            "secrets",
            "-n",
            "apps",
            "-l",
            "owner=helm",
            "-o",
            "name",
        ]);
        (sets.trim().is_empty() && releases.trim().is_empty()).then_some(())
    })
    .await;

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(operator.id() as i32, libc::SIGTERM) };
    let status = tokio::task::spawn_blocking(move || operator.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "operator exit: {status:?}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        audited_requests(&audit_log, OPERATOR_USER) > 0,
        "the audit log holds the operator's requests"
    );
    let forbidden = forbidden_requests(&audit_log, OPERATOR_USER);
    assert!(
        forbidden.is_empty(),
        "forbidden requests:\n{}\noperator log:\n{log}",
        forbidden.join("\n")
    );
}
