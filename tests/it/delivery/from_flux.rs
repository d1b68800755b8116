//! `hossted-operator convert` end to end: a release Flux's helm-controller
//! made (its objects carry helm-controller's origin labels), the
//! HelmRelease and HelmRepository that describe it converted, the HelmApp
//! applied: it adopts the release as it is — the chart and values render
//! the same objects, so no helm upgrade runs and no revision is added —
//! and a later change upgrades it as any HelmApp's.

use super::*;

#[tokio::test]
async fn a_converted_helmrelease_adopts_flux_s_release_without_a_new_revision() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();

    // What helm-controller leaves: a release whose objects carry its
    // origin labels (its post-renderer), made with helm's own storage.
    let post_renderer = f.cp.dir().join("flux-origin-labels.sh");
    std::fs::write(
        &post_renderer,
        format!(
            "#!/bin/sh\nsed 's/^  labels:$/  labels:\\n    helm.toolkit.fluxcd.io\\/name: web\\n    helm.toolkit.fluxcd.io\\/namespace: {NS}/'\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&post_renderer, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut helm3 = std::process::Command::new(HelmUnderTest::Three.binary(&f));
    let reference = f.cp.helm();
    helm3.envs(reference.get_envs().filter_map(|(k, v)| Some((k, v?))));
    helm3.args([
        "install",
        "web",
        "tiny",
        "--repo",
        repo.url(),
        "--version",
        "0.1.0",
        "-n",
        NS,
        "--set",
        "greeting=from-flux",
        "--post-renderer",
        post_renderer.to_str().unwrap(),
    ]);
    // Off the test's runtime: the chart repository answers on it.
    tokio::task::spawn_blocking(move || output_ok(&mut helm3))
        .await
        .unwrap();
    let live: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let labels = live.get("web-tiny").await.unwrap().metadata.labels.unwrap();
    assert_eq!(
        labels
            .get("helm.toolkit.fluxcd.io/name")
            .map(String::as_str),
        Some("web"),
        "the fixture carries Flux's origin labels"
    );

    // Converted from the HelmRelease that describes it.
    let flux = f.cp.dir().join("flux.yaml");
    std::fs::write(
        &flux,
        format!(
            "apiVersion: source.toolkit.fluxcd.io/v1\nkind: HelmRepository\nmetadata: {{ name: charts, namespace: {NS} }}\nspec: {{ url: {url} }}\n---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {{ name: web, namespace: {NS} }}\nspec:\n  interval: 5m\n  chart: {{ spec: {{ chart: tiny, version: 0.1.0, sourceRef: {{ kind: HelmRepository, name: charts }} }} }}\n  values: {{ greeting: from-flux }}\n",
            url = repo.url()
        ),
    )
    .unwrap();
    let out = operator_binary()
        .arg("convert")
        .arg(&flux)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let converted = f.cp.dir().join("helmapp.yaml");
    std::fs::write(&converted, &out.stdout).unwrap();

    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    f.kubectl(&["apply", "-f", converted.to_str().unwrap()]);
    let app = helmapp_ready(&f, NS, "web", "UpToDate", 1).await;
    assert_eq!(app.status.unwrap().history[0].action, "adopt");
    let storage = revisions(&f, "web").await;
    assert_eq!(
        storage.keys().copied().collect::<Vec<_>>(),
        [1],
        "adopted without a new revision"
    );
    assert_eq!(
        storage[&1].get("hossted.com/helmapp-uid"),
        get(&f, "web").await.unwrap().metadata.uid.as_ref(),
        "the storage says whose it is now"
    );
    let upgrades: Vec<String> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| HelmCall::parse(l).releases() && !l.contains("--dry-run"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        upgrades,
        Vec::<String>::new(),
        "no helm install or upgrade ran"
    );

    // A change afterwards upgrades it as any HelmApp's.
    patch(
        &f,
        "web",
        json!({ "spec": { "values": { "greeting": "ours" } } }),
    )
    .await;
    // (Flux waits by default, so the converted HelmApp does: `Ready` once
    // its objects are; the history says what ran.)
    eventually("upgraded to revision 2 and ready", 120, || async {
        let app = get(&f, "web").await?;
        let st = app.status.as_ref()?;
        let last = st.history.first()?;
        let upgraded = last.action == "upgrade" && last.result == "succeeded";
        (is_ready(&app) && st.revision == 2 && upgraded).then_some(())
    })
    .await;
    let labels = live.get("web-tiny").await.unwrap().metadata.labels.unwrap();
    assert!(
        !labels.contains_key("helm.toolkit.fluxcd.io/name"),
        "our upgrade leaves Flux's labels behind"
    );
    operator.stop().await;
}

/// Issue 52: a HelmRelease using the fields that convert since (drift
/// ignore targets by group, version and selectors; `postRenderStrategy`;
/// a patch target by label; `valuesFrom[].literal`; the strategies, every
/// per-action timeout and test filters; `disableWaitForJobs` of install,
/// upgrade and rollback, `disableWait` of rollback and uninstall;
/// `upgrade.chartNameChangeStrategy`; `chart.spec.verify` by cosign, the
/// chart really signed; inline values over valuesFrom) converts with none
/// of them noted as lost, each where the HelmApp has it, installs, and
/// each does what Flux's does; the generated table lists each as
/// converted.
#[tokio::test]
async fn a_helmrelease_using_every_newly_converted_field_installs_as_converted() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let raw: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "raw" }, "data": { "greeting": "'as, written'", "label": "from-configmap" }
    }))
    .unwrap();
    raw.create(&PostParams::default(), &cm).await.unwrap();
    // The chart in an OCI registry, signed with a cosign key: what
    // `chart.spec.verify` asks for.
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let registry = envtest::OciRegistry::start(&f.cp, false).await.unwrap();
    let (oci, digest) = registry
        .push_with_digest(&f.cp, &charts.join("tiny"))
        .unwrap();
    let keys = f.cp.dir().join("cosign-every");
    std::fs::create_dir_all(&keys).unwrap();
    envtest::signing::cosign(&f.cp, &keys, &["generate-key-pair"]).unwrap();
    envtest::signing::cosign_sign(&f.cp, &keys, &oci, &digest, &["--key", "cosign.key"]).unwrap();
    let public = std::fs::read_to_string(keys.join("cosign.pub")).unwrap();
    f.secret(NS, "cosign-pub", &[("cosign.pub", public.as_str())])
        .await;
    let flux = f.cp.dir().join("flux-every.yaml");
    std::fs::write(
        &flux,
        format!(
            r#"apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {{ name: charts, namespace: {NS} }}
spec: {{ type: oci, url: "oci://{host}/charts", insecure: true }}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {{ name: every, namespace: {NS} }}
spec:
  interval: 5m
  chart:
    spec:
      chart: tiny
      version: 0.1.0
      sourceRef: {{ kind: HelmRepository, name: charts }}
      verify: {{ provider: cosign, secretRef: {{ name: cosign-pub }} }}
  values: {{ hookConfigMap: true, label: tuned }}
  valuesFrom:
    - {{ kind: ConfigMap, name: raw, valuesKey: greeting, targetPath: greeting, literal: true }}
    - {{ kind: ConfigMap, name: raw, valuesKey: label, targetPath: label }}
  postRenderStrategy: nohooks
  postRenderers:
    - kustomize:
        patches:
          - target: {{ kind: ConfigMap, labelSelector: "extra=tuned" }}
            patch: '[{{"op": "add", "path": "/data/patched", "value": "by-label"}}]'
  driftDetection:
    mode: enabled
    ignore:
      - paths: [/data]
        target: {{ group: "^$", version: v1, kind: ConfigMap, labelSelector: "extra=tuned", annotationSelector: "!absent" }}
  install: {{ timeout: 2m, disableWaitForJobs: true, strategy: {{ name: RetryOnFailure, retryInterval: 30s }} }}
  upgrade:
    timeout: 3m
    disableWaitForJobs: true
    chartNameChangeStrategy: InPlaceUpdate
    strategy: {{ name: RetryOnFailure, retryInterval: 30s }}
  rollback: {{ timeout: 4m, disableWait: true, disableWaitForJobs: true }}
  uninstall: {{ timeout: 1m, disableWait: true }}
  test: {{ enable: false, timeout: 2m, filters: [{{ name: every-smoke, exclude: true }}] }}
"#,
            host = registry.host()
        ),
    )
    .unwrap();
    let out = operator_binary()
        .arg("convert")
        .arg(&flux)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "nothing noted as lost: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each field where the HelmApp has it (read from what convert wrote:
    // a `false` here is the converter's, not a default).
    let app: serde_json::Value =
        serde_yaml_ng::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let spec = &app["spec"];
    for (at, want) in [
        ("/chart/oci", json!(oci)),
        (
            "/chart/verify",
            json!({ "provider": "cosign", "secretRef": { "name": "cosign-pub" } }),
        ),
        ("/install/timeout", json!("2m")),
        ("/upgrade/timeout", json!("3m")),
        ("/rollback/timeout", json!("4m")),
        ("/uninstall/timeout", json!("1m")),
        ("/test/timeout", json!("2m")),
        ("/install/disableWaitForJobs", json!(true)),
        ("/upgrade/disableWaitForJobs", json!(true)),
        ("/rollback/disableWaitForJobs", json!(true)),
        ("/wait", json!(true)),
        ("/rollback/wait", json!(false)),
        ("/uninstall/wait", json!(false)),
        ("/upgrade/chartNameChangeStrategy", json!("InPlaceUpdate")),
    ] {
        assert_eq!(spec.pointer(at), Some(&want), "{at}: {spec}");
    }
    let converted = f.cp.dir().join("every.yaml");
    std::fs::write(&converted, &out.stdout).unwrap();

    let operator = f.start_delivery().await;
    f.kubectl(&["apply", "-f", converted.to_str().unwrap()]);
    // (Converted, it waits as Flux does: `Ready` once its objects are; the
    // history says what ran.)
    let installed = eventually("installed and ready", 120, || async {
        let app = get(&f, "every").await?;
        let st = app.status.as_ref()?;
        let last = st.history.first()?;
        let installed = last.action == "install" && last.result == "succeeded";
        (is_ready(&app) && st.revision == 1 && installed).then_some(app.clone())
    })
    .await;
    // `chart.spec.verify`: the chart installed was the one the key signed.
    let verification = installed
        .status
        .unwrap()
        .verification
        .expect("status.verification");
    assert_eq!(
        (verification.provider.as_str(), verification.digest.as_str()),
        ("cosign", digest.as_str())
    );
    assert!(
        verification
            .signer
            .starts_with(&format!("key {NS}/cosign-pub/cosign.pub")),
        "{}",
        verification.signer
    );
    let live = raw.get("every-tiny").await.unwrap();
    assert_eq!(
        live.metadata.labels.as_ref().unwrap()["extra"],
        "tuned",
        "Flux's order: the inline value over the same key from valuesFrom"
    );
    let data = live.data.unwrap();
    assert_eq!(
        (data["greeting"].as_str(), data["patched"].as_str()),
        ("'as, written'", "by-label"),
        "the literal value as written; the patch on the object its label selects"
    );
    let hook = raw.get("every-hooked").await.unwrap();
    assert!(
        !hook.data.unwrap().contains_key("patched"),
        "nohooks: the hook as the chart has it"
    );
    // The drift rule's target selects the ConfigMap: an edit of its data
    // stays.
    let mark = operator.mark();
    raw.patch(
        "every-tiny",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "greeting": "edited" } })),
    )
    .await
    .unwrap();
    operator.reconciled_since(mark).await;
    operator.settle().await;
    assert_eq!(
        raw.get("every-tiny").await.unwrap().data.unwrap()["greeting"],
        "edited"
    );

    // The generated table says each converts.
    let table = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/from-flux.md"),
    )
    .unwrap();
    for field in [
        "chart.spec.verify.provider",
        "chart.spec.verify.secretRef",
        "driftDetection.ignore[].target.group",
        "driftDetection.ignore[].target.version",
        "driftDetection.ignore[].target.labelSelector",
        "driftDetection.ignore[].target.annotationSelector",
        "postRenderStrategy",
        "valuesFrom[].literal",
        "valuesFrom[].targetPath",
        "install.strategy.name",
        "install.strategy.retryInterval",
        "upgrade.strategy.name",
        "upgrade.strategy.retryInterval",
        "install.timeout",
        "upgrade.timeout",
        "rollback.timeout",
        "uninstall.timeout",
        "test.timeout",
        "install.disableWaitForJobs",
        "upgrade.disableWaitForJobs",
        "rollback.disableWaitForJobs",
        "rollback.disableWait",
        "uninstall.disableWait",
        "upgrade.chartNameChangeStrategy",
        "test.filters[].name",
        "test.filters[].exclude",
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| `{field}` |")))
            .unwrap_or_else(|| panic!("{field}: no row"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert!(
            !cells[2].is_empty() && cells[3].is_empty(),
            "{field} is not listed as converted: {row}"
        );
    }
    operator.stop().await;
}
