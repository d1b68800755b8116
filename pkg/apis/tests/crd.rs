//! The generated CRD on a real apiserver: it installs, Go-era objects load
//! unchanged, `kubectl get hp` shows the columns, and the checked-in CRDs are current.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use apis::{Hosstedproject, crd_yaml};
use envtest::ControlPlane;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// A Hosstedproject as the Go operator's users wrote it, with the status the
/// Go operator wrote.
const GO_ERA: &str = r#"{
  "apiVersion": "hossted.com/v1",
  "kind": "Hosstedproject",
  "metadata": { "name": "hossted-operator-cr" },
  "spec": {
    "stop": false,
    "denyNamespaces": ["kube-system", "hossted-platform"],
    "monitoring": { "enable": true },
    "logging": { "enable": false },
    "cve": { "enable": true },
    "ingress": { "enable": false },
    "helm": [{ "releaseName": "grafana-agent", "namespace": "hossted-platform", "values": ["a=b"],
               "repoName": "grafana", "chartName": "grafana/grafana-agent", "repoUrl": "https://grafana.github.io/helm-charts" }]
  }
}"#;

const GO_ERA_STATUS: &str = r#"{
  "status": {
    "clusterUUID": "K-6f1c2a4e-8a51-4d0b-9a54-2b7f0e3c9d11",
    "lastReconcileTimestamp": "2024-02-28T01:32:37+05:30",
    "reconcileHelmReleases": { "default/test": "1" },
    "helmStatus": [{ "name": "test", "namespace": "default", "appUUID": "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30",
                     "revision": 1, "updated": "2024-02-28T01:32:37.338988+05:30", "status": "deployed",
                     "chart": "keycloak", "appVersion": "23.0.5", "hossted_helm": true }],
    "revision": [1],
    "dnsUpdated": true
  }
}"#;

fn kubectl(cp: &ControlPlane, args: &[&str], stdin: &str) -> String {
    let mut child = cp
        .kubectl()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_crd_installs_and_go_era_objects_load_unchanged() {
    let cp = ControlPlane::start().await.unwrap();
    kubectl(&cp, &["apply", "-f", "-"], &crd_yaml());
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let crd = crds.get("hosstedprojects.hossted.com").await.unwrap();
        let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        if established {
            break;
        }
        assert!(Instant::now() < deadline, "CRD not established");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    kubectl(&cp, &["create", "-f", "-"], GO_ERA);
    let api: Api<Hosstedproject> = Api::all(cp.client());
    let status: serde_json::Value = serde_json::from_str(GO_ERA_STATUS).unwrap();
    api.patch_status(
        "hossted-operator-cr",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();

    // Read through our types, then compare with what the server holds as
    // plain JSON: nothing the Go operator wrote was pruned or lost.
    let hp = api.get("hossted-operator-cr").await.unwrap();
    assert!(hp.spec.monitoring.enable && hp.spec.cve.enable && !hp.spec.stop);
    assert_eq!(hp.spec.deny_namespaces, ["kube-system", "hossted-platform"]);
    assert_eq!(hp.spec.helm[0].chart_name, "grafana/grafana-agent");
    let st = hp.status.clone().expect("status");
    assert_eq!(st.cluster_uuid, "K-6f1c2a4e-8a51-4d0b-9a54-2b7f0e3c9d11");
    assert_eq!(st.reconcile_helm_releases["default/test"], "1");
    assert_eq!(
        st.helm_status[0].app_uuid,
        "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30"
    );
    assert!(st.helm_status[0].hossted_helm && st.dns_updated);

    let raw: serde_json::Value = serde_json::from_str(&kubectl(
        &cp,
        &["get", "hp", "hossted-operator-cr", "-o", "json"],
        "",
    ))
    .unwrap();
    let ours = serde_json::to_value(&hp).unwrap();
    let want_spec: serde_json::Value =
        serde_json::from_str::<serde_json::Value>(GO_ERA).unwrap()["spec"].clone();
    assert_eq!(
        raw["spec"], want_spec,
        "the server pruned part of a Go-era spec"
    );
    assert_eq!(
        ours["spec"], want_spec,
        "our types lose part of a Go-era spec"
    );
    for field in [
        "clusterUUID",
        "reconcileHelmReleases",
        "helmStatus",
        "revision",
        "dnsUpdated",
        "lastReconcileTimestamp",
    ] {
        assert_eq!(
            raw["status"][field], ours["status"][field],
            "status.{field}"
        );
        assert_eq!(
            raw["status"][field],
            serde_json::from_str::<serde_json::Value>(GO_ERA_STATUS).unwrap()["status"][field]
        );
    }

    // The examples are valid objects for this CRD.
    for example in [
        "hosstedproject.yaml",
        "hosstedproject-deny.yaml",
        "hosstedproject-stopped.yaml",
    ] {
        let path = format!("{}/../../examples/{example}", env!("CARGO_MANIFEST_DIR"));
        let yaml = std::fs::read_to_string(&path).unwrap();
        kubectl(&cp, &["apply", "--dry-run=server", "-f", "-"], &yaml);
    }

    // The short name and the printer columns.
    let table = kubectl(&cp, &["get", "hp"], "");
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "CLUSTER UUID",
            "APPS",
            "STOPPED",
            "READY",
            "LAST CHANGE",
            "AGE"
        ]
    );
    assert!(
        table.contains("K-6f1c2a4e-8a51-4d0b-9a54-2b7f0e3c9d11"),
        "{table}"
    );
}

#[test]
fn manifests_crd_is_what_the_types_generate() {
    for crd in apis::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let path = format!(
            "{}/../../{}",
            env!("CARGO_MANIFEST_DIR"),
            apis::crd_manifest_path(&name)
        );
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == apis::crd_yaml_of(&crd),
            "{path} is stale or missing: run hack/update-crds.sh and commit the result"
        );
        let path = format!(
            "{}/../../{}",
            env!("CARGO_MANIFEST_DIR"),
            apis::crd_chart_path(&name)
        );
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == apis::crd_chart_template_of(&crd),
            "{path} is stale or missing: run hack/update-crds.sh and commit the result"
        );
    }
}

#[test]
fn docs_reference_is_what_the_crds_generate() {
    for crd in apis::crds() {
        let path = format!(
            "{}/../../docs/reference/{}",
            env!("CARGO_MANIFEST_DIR"),
            apis::reference::file_name(&crd)
        );
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == apis::reference::markdown(&crd),
            "{path} is stale or missing: run hack/update-crds.sh and commit the result"
        );
    }
}

#[test]
fn the_reference_lists_every_field_with_its_type_default_and_validation() {
    let page = apis::reference::markdown(&apis::helmapp_crd());
    let row = |field: &str| {
        page.lines()
            .find(|l| l.starts_with(&format!("| `{field}` |")))
            .unwrap_or_else(|| panic!("no row for {field}"))
            .to_string()
    };
    // Nested fields, list items and maps have rows of their own.
    assert!(row("spec.chart.repo").contains("| string |"));
    assert!(row("spec.valuesFrom").contains("[]object"));
    assert!(
        row("spec.valuesFrom[].kind").contains("one of")
            || row("spec.valuesFrom[].kind").contains("matches")
    );
    // Defaults and CEL rules are shown.
    assert!(row("spec.approval").contains("`\"auto\"`"));
    assert!(
        row("spec.chart")
            .contains("set exactly one of chart.repo, chart.oci, chart.path, chart.git")
    );
}

/// Every default the HelmApp schema gives a top-level spec field is what
/// decoding a spec without it gives too: a spec the operator builds (a
/// project's or a set's child) then equals the one the apiserver stored,
/// and children are not replaced on every reconcile.
#[test]
fn the_schemas_defaults_are_the_decoders() {
    let crd = apis::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("helmapps.hossted.com"))
        .unwrap();
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let props = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let decoded: apis::helmapp::HelmAppSpec =
        serde_json::from_value(serde_json::json!({ "chart": { "path": "x" } })).unwrap();
    let decoded = serde_json::to_value(&decoded).unwrap();
    let mut checked = 0;
    for (field, p) in props.as_object().unwrap() {
        if let Some(default) = p.get("default") {
            assert_eq!(&decoded[field], default, "spec.{field}");
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} defaults found");
}
