//! The payload keys the Go operator 0.7.6 added (docs/inventory.md), sent by us
//! without its leaks: real releases of a chart with every kind, real
//! trivy-operator reports, the CRD appearing while the operator runs.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use crate::support::*;
use base64::Engine;
use envtest::ControlPlane;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use serde_json::json;

const PASSWORD: &str = "pa55-w0rd-never-sent";
const CONFIG_VALUE: &str = "cm-value-only-with-the-flag";

/// Every body the receiver got, as one string.
fn everything_sent(f: &Fixture) -> String {
    f.api
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_go_0_7_6_keys_are_sent_and_secret_values_never_are() {
    let f = Fixture::new().await;
    f.helm_install("shop", "full", "shop");
    f.hosstedproject("cluster", json!({ "monitoring": { "enable": true } }))
        .await;
    let operator = f.start_operator();
    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    let body = posts[0].json();
    let api_info = &body["app_api_info"];
    assert_eq!(api_info["org_id"], "org-123");
    assert_eq!(
        api_info["options_state"],
        json!({ "monitoring": { "enabled": true, "grafana_product_name": "" } })
    );
    let info = &body["app_info"];
    assert_eq!(info["helm_info"]["appUUID"], api_info["app_uuid"]);
    assert_eq!(info["helm_info"]["hossted_helm"], false);
    let mut added = serde_json::Map::new();
    for key in [
        "deployment_info",
        "statefulset_info",
        "configmap_info",
        "secret_info",
        "helmvalue_info",
        "access_info",
        "security_info",
    ] {
        added.insert(key.into(), info[key].clone());
    }
    assert_eq!(
        serde_json::Value::Object(added),
        json!({
            "deployment_info": [ { "name": "shop-app", "namespace": "shop",
                                   "secretRef": { "name": "shop-db", "key": "password" } } ],
            "statefulset_info": [ { "name": "shop-db", "namespace": "shop" } ],
            "configmap_info": [ { "name": "shop-env", "data": {} } ],
            "secret_info": [ { "name": "shop-db", "namespace": "shop", "data": {} } ],
            "helmvalue_info": { "chart_name": "full", "chart_values": {} },
            "access_info": { "urls": [ { "url": "http://admin.shop.example.com" },
                                       { "url": "https://shop.example.com" } ] },
            "security_info": []
        })
    );
    let sent = everything_sent(&f);
    let b64 = base64::engine::general_purpose::STANDARD.encode(PASSWORD);
    for secret in [PASSWORD, b64.as_str(), CONFIG_VALUE] {
        assert!(!sent.contains(secret), "{secret} was sent");
    }
    operator.stop().await;
}

#[tokio::test]
async fn configmap_data_is_sent_only_when_asked_and_secrets_still_never() {
    let f = Fixture::new().await;
    f.helm_install("shop", "full", "shop");
    f.hosstedproject("cluster", json!({})).await;
    let operator = f.start_operator_with(|s| s.report_configmap_data = true);
    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(
        posts[0].json()["app_info"]["configmap_info"],
        json!([ { "name": "shop-env", "data": { "LOG_LEVEL": CONFIG_VALUE } } ])
    );
    assert!(!everything_sent(&f).contains(PASSWORD));
    operator.stop().await;
}

const USER: &str = "hossted-payload-test";

fn vulnerability_reports() -> ApiResource {
    ApiResource {
        group: "aquasecurity.github.io".into(),
        version: "v1alpha1".into(),
        api_version: "aquasecurity.github.io/v1alpha1".into(),
        kind: "VulnerabilityReport".into(),
        plural: "vulnerabilityreports".into(),
    }
}

/// A report on one container of one workload: a CRITICAL, a HIGH, and
/// MEDIUM and LOW findings that must not be sent.
fn report(kind: &str, workload: &str, container: &str, cve: &str) -> DynamicObject {
    let name = format!("{}-{workload}-{container}", kind.to_lowercase());
    serde_json::from_value(json!({
        "apiVersion": "aquasecurity.github.io/v1alpha1", "kind": "VulnerabilityReport",
        "metadata": { "name": name, "namespace": "shop", "labels": {
            "trivy-operator.resource.kind": kind, "trivy-operator.resource.name": workload,
            "trivy-operator.resource.namespace": "shop", "trivy-operator.container.name": container } },
        "report": {
            "artifact": { "repository": "full/app", "tag": "2.1.0" },
            "summary": { "criticalCount": 1, "highCount": 1, "mediumCount": 1, "lowCount": 1, "unknownCount": 0 },
            "vulnerabilities": [
                { "vulnerabilityID": format!("{cve}-C"), "severity": "CRITICAL", "resource": "openssl",
                  "installedVersion": "3.0.1", "fixedVersion": "3.0.2", "title": "critical one", "score": 9.8 },
                { "vulnerabilityID": format!("{cve}-M"), "severity": "MEDIUM", "resource": "curl",
                  "installedVersion": "8.0", "fixedVersion": "8.1", "title": "medium one" },
                { "vulnerabilityID": format!("{cve}-H"), "severity": "HIGH", "resource": "glibc",
                  "installedVersion": "2.36", "fixedVersion": "", "title": "high one" },
                { "vulnerabilityID": format!("{cve}-L"), "severity": "LOW", "resource": "zlib",
                  "installedVersion": "1.2", "fixedVersion": "1.3", "title": "low one" }
            ]
        }
    }))
    .unwrap()
}

/// What the payload carries of [`report`]'s findings.
fn sent_findings(cve: &str) -> serde_json::Value {
    json!({
        "summary": { "criticalCount": 1, "highCount": 1, "mediumCount": 1, "lowCount": 1, "unknownCount": 0 },
        "vulnerabilities": [
            { "vulnerabilityID": format!("{cve}-C"), "severity": "CRITICAL", "resource": "openssl",
              "installedVersion": "3.0.1", "fixedVersion": "3.0.2", "title": "critical one" },
            { "vulnerabilityID": format!("{cve}-H"), "severity": "HIGH", "resource": "glibc",
              "installedVersion": "2.36", "fixedVersion": "", "title": "high one" }
        ]
    })
}

/// A pod of `release` owned by the workload `owner` (kind, name), as its
/// controller would make it (the test control plane has no controllers).
async fn workload_pod(
    f: &Fixture,
    name: &str,
    release: &str,
    owner: (&str, &str),
    containers: &[(&str, &str)],
) {
    let containers: Vec<_> = containers
        .iter()
        .map(|(n, i)| json!({ "name": n, "image": i }))
        .collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "shop",
            "labels": { "app.kubernetes.io/instance": release, "app.kubernetes.io/managed-by": "Helm" },
            "ownerReferences": [{ "apiVersion": "apps/v1", "kind": owner.0, "name": owner.1,
                                  "uid": "00000000-0000-0000-0000-000000000001", "controller": true }] },
        "spec": { "containers": containers }
    }))
    .unwrap();
    Api::<Pod>::namespaced(f.cp.client(), "shop")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// Requests of [`USER`] to trivy-operator's API group, from the audit log.
fn trivy_requests(audit_log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(audit_log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("/apis/aquasecurity.github.io/"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn vulnerability_reports_are_matched_per_pod_and_picked_up_when_their_crd_appears() {
    let dir = std::env::temp_dir().join(format!("payload-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (policy, audit_log) = (dir.join("policy.yaml"), dir.join("audit.log"));
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [ResponseStarted, ResponseComplete, Panic]\nrules:\n- level: Metadata\n  users: [\"{USER}\"]\n- level: None\n"
        ),
    )
    .unwrap();
    let cp = ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", audit_log.display()))
        .start()
        .await
        .unwrap();
    let f = Fixture::on(cp).await;
    f.helm_install("shop", "full", "shop");
    f.helm(&[
        "install",
        "other",
        &chart("full"),
        "-n",
        "shop",
        "--set",
        "host=other.example.com,adminHost=admin.other.example.com",
    ]);
    // Two pods of "shop" (a Deployment's and a StatefulSet's), one of "other".
    workload_pod(
        &f,
        "shop-app-5d8f-x2x9q",
        "shop",
        ("ReplicaSet", "shop-app-5d8f"),
        &[
            ("app", "registry.example.com/full/app:2.1.0"),
            ("sidecar", "envoy:1.30"),
        ],
    )
    .await;
    workload_pod(
        &f,
        "shop-db-0",
        "shop",
        ("StatefulSet", "shop-db"),
        &[("db", "registry.example.com/full/db:16")],
    )
    .await;
    workload_pod(
        &f,
        "other-db-0",
        "other",
        ("StatefulSet", "other-db"),
        &[("db", "registry.example.com/full/db:16")],
    )
    .await;
    f.hosstedproject("cluster", json!({ "cve": { "enable": true } }))
        .await;

    let kubeconfig =
        f.cp.kubeconfig_for_user(USER, Some("system:masters"))
            .unwrap();
    let (metrics_port, probe_port) = (free_port(), free_port());
    let mut child = f
        .operator_command(&kubeconfig)
        .args(["run", "--coalesce-window", "100ms"])
        .args([
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .args([
            "--health-probe-bind-address",
            &format!("127.0.0.1:{probe_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let readyz = format!("http://127.0.0.1:{probe_port}/readyz");
    eventually("the operator ready without the trivy CRD", 60, || {
        let url = readyz.clone();
        async move { (http_get(&url).await?.0 == 200).then_some(()) }
    })
    .await;
    // From now on /readyz must never fail.
    let (stop, not_ready) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let poller = tokio::spawn({
        let (stop, not_ready, url) = (stop.clone(), not_ready.clone(), readyz.clone());
        async move {
            let mut polls = 0usize;
            while !stop.load(Relaxed) {
                if http_get(&url).await.map(|r| r.0) != Some(200) {
                    not_ready.fetch_add(1, Relaxed);
                }
                polls += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            polls
        }
    });

    // Without the CRD: reported, security_info empty, nothing asked of trivy's API.
    let posts = f.wait_requests("/v1/apps", 2, 60).await;
    for p in &posts {
        assert_eq!(p.json()["app_info"]["security_info"], json!([]));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        trivy_requests(&audit_log),
        Vec::<String>::new(),
        "requests for an absent CRD"
    );

    // trivy-operator arrives: its CRD, then a report per scanned container.
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vulnerabilityreports.crd.yaml"
    );
    f.kubectl(&["apply", "-f", crd]);
    f.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "crd/vulnerabilityreports.aquasecurity.github.io",
    ]);
    let reports: Api<DynamicObject> =
        Api::namespaced_with(f.cp.client(), "shop", &vulnerability_reports());
    for r in [
        report("ReplicaSet", "shop-app-5d8f", "app", "CVE-APP"),
        report("StatefulSet", "shop-db", "db", "CVE-DB"),
        report("StatefulSet", "other-db", "db", "CVE-OTHER"),
    ] {
        reports.create(&PostParams::default(), &r).await.unwrap();
    }
    let metrics = format!("http://127.0.0.1:{metrics_port}/metrics");
    eventually("the reports in the operator's cache", 60, || {
        let url = metrics.clone();
        async move {
            let (_, text) = http_get(&url).await?;
            (sample(
                &text,
                "hossted_informer_objects{kind=\"VulnerabilityReport\"}",
            ) == Some(3.0))
            .then_some(())
        }
    })
    .await;

    // The next send of "shop" carries each pod's own findings only.
    f.helm_upgrade("shop", "full", "shop", "logLevel=changed");
    let sent = eventually("revision 2 of shop sent", 60, || async {
        f.requests_to("/v1/apps").into_iter().find(|r| {
            let b = r.json();
            b["app_api_info"]["app_name"] == "shop" && b["app_info"]["helm_info"]["revision"] == 2
        })
    })
    .await;
    let with = |image: &str, cve: &str| {
        let mut c = sent_findings(cve);
        c["container_image"] = json!(image);
        c["type"] = json!("k8s");
        c
    };
    assert_eq!(
        sent.json()["app_info"]["security_info"],
        json!([
            { "pod_name": "shop-app-5d8f-x2x9q", "pod_namespace": "shop",
              "containers": [ with("registry.example.com/full/app:2.1.0", "CVE-APP") ] },
            { "pod_name": "shop-db-0", "pod_namespace": "shop",
              "containers": [ with("registry.example.com/full/db:16", "CVE-DB") ] }
        ])
    );

    // CVE scanning off: the next send carries none.
    f.patch_spec("cluster", json!({ "cve": { "enable": false } }))
        .await;
    f.helm_upgrade("shop", "full", "shop", "logLevel=again");
    let sent = eventually("revision 3 of shop sent", 60, || async {
        f.requests_to("/v1/apps").into_iter().find(|r| {
            let b = r.json();
            b["app_api_info"]["app_name"] == "shop" && b["app_info"]["helm_info"]["revision"] == 3
        })
    })
    .await;
    assert_eq!(sent.json()["app_info"]["security_info"], json!([]));

    stop.store(true, Relaxed);
    let polls = poller.await.expect("the /readyz poller panicked");
    assert!(
        polls >= 2,
        "/readyz was polled {polls} time(s) while the CRD came and went"
    );
    assert_eq!(
        not_ready.load(Relaxed),
        0,
        "/readyz failed while the CRD came and went"
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}
