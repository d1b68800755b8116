//! Where charts come from: a path under the root, HTTP repositories with credentials, OCI registries over TLS or plain HTTP, and the chart's CRDs.

use super::*;

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

/// Adds `tiny` at `version` to the repository.
pub(super) fn publish_tiny(f: &Fixture, repo: &envtest::ChartRepo, version: &str) {
    let copy = chart_at_version(f, "tiny", version);
    let dir = repo.dir().to_str().unwrap().to_string();
    f.helm(&["package", copy.to_str().unwrap(), "--destination", &dir]);
    f.helm(&["repo", "index", &dir, "--url", repo.url()]);
}

/// A copy of the chart directory `name` with its Chart.yaml at `version`.
pub(super) fn chart_at_version(f: &Fixture, name: &str, version: &str) -> std::path::PathBuf {
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
    for line in lines.lines().filter(|l| HelmCall::parse(l).releases()) {
        assert!(
            !line.contains("oci://"),
            "helm was given a registry: {line}"
        );
        let chart = &HelmCall::parse(line).positionals[1];
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
    an_event(&f, NS, "tenant", "CRDsFailed").await;
    assert_eq!(
        widget_fields(&f).await,
        Some(vec!["color".to_string(), "size".to_string()]),
        "the tenant replaced the CRD"
    );
    assert!(revisions(&f, "tenant").await.is_empty(), "helm ran");
    operator.stop().await;
}

#[tokio::test]
async fn the_crd_refuses_a_release_or_chart_name_helm_would_misread() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let api: Api<HelmApp> = Api::namespaced(f.cp.client(), NS);
    let app = |spec: serde_json::Value| -> HelmApp {
        serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "named", "namespace": NS }, "spec": spec
        }))
        .unwrap()
    };
    for (spec, field) in [
        (
            json!({ "releaseName": "--dry-run", "chart": { "path": "tiny" } }),
            "releaseName",
        ),
        (
            json!({ "releaseName": "a".repeat(54), "chart": { "path": "tiny" } }),
            "releaseName",
        ),
        (
            json!({ "chart": { "repo": "https://charts.example.com", "name": "../other/alloy" } }),
            "chart.name",
        ),
        (
            json!({ "timeout": "25h", "chart": { "path": "tiny" } }),
            "timeout",
        ),
    ] {
        match api.create(&PostParams::default(), &app(spec.clone())).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "{spec}: {}", s.message);
                let causes = s.details.map(|d| d.causes).unwrap_or_default();
                assert!(
                    causes.iter().any(|c| c.field.ends_with(field)),
                    "{spec}: {causes:?}"
                );
            }
            other => panic!("{spec} was accepted: {other:?}"),
        }
    }
    // Helm's own names pass.
    api.create(
        &PostParams::default(),
        &app(json!({ "releaseName": "web-1.prod", "chart": { "path": "tiny" } })),
    )
    .await
    .unwrap();
}
