//! The converter as tables: the field list of HelmRelease v2 against
//! [`fields::FIELDS`], a release setting every field, and releases in the
//! shapes of Flux's own examples.

use super::*;

fn docs(yaml: &str) -> Vec<Value> {
    read_documents(yaml).expect("YAML")
}

/// `field` of the fixture with list markers and indexes dropped.
fn generic(field: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for c in field.chars() {
        match c {
            '[' => {
                skipping = true;
                out.push_str("[]");
            }
            ']' => skipping = false,
            _ if skipping => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn every_field_of_helmrelease_v2_has_a_fate_and_every_fate_a_field() {
    let fixture = include_str!("../../tests/fixtures/flux-helmrelease-v2-spec-fields.txt");
    let known: Vec<&str> = fixture
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    let table: Vec<&str> = fields::FIELDS.iter().map(|(f, _)| *f).collect();
    let missing: Vec<&&str> = known.iter().filter(|f| !table.contains(f)).collect();
    assert!(
        missing.is_empty(),
        "HelmRelease v2 fields the converter does not know: {missing:?}"
    );
    let extra: Vec<&&str> = table.iter().filter(|f| !known.contains(f)).collect();
    assert!(
        extra.is_empty(),
        "fields in the table that HelmRelease v2 has not: {extra:?}"
    );
}

/// A HelmRelease that sets every field, and its sources.
const EVERYTHING: &str = r#"
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: charts, namespace: flux-system }
spec: { url: https://charts.example.com, secretRef: { name: repo-auth }, interval: 1h }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: web, namespace: apps, labels: { team: a, sharding.fluxcd.io/key: shard1 } }
spec:
  chart:
    metadata: { labels: { a: b }, annotations: { c: d } }
    spec:
      chart: web
      version: ">=1.0.0 <2.0.0"
      interval: 5m
      reconcileStrategy: Revision
      ignoreMissingValuesFiles: true
      valuesFiles: [values-prod.yaml]
      verify: { provider: cosign, secretRef: { name: cosign-pub } }
      sourceRef: { apiVersion: source.toolkit.fluxcd.io/v1, kind: HelmRepository, name: charts, namespace: flux-system }
  commonMetadata: { labels: { env: prod }, annotations: { owner: ops } }
  dependsOn:
    - { name: db, namespace: data, readyExpr: "true" }
  driftDetection:
    mode: enabled
    ignore:
      - paths: [/spec/replicas]
        target: { group: apps, version: v1, kind: Deployment, name: web, namespace: apps, labelSelector: a=b, annotationSelector: c=d }
  healthCheckExprs:
    - { apiVersion: example.com/v1, kind: Thing, current: "true", inProgress: "false", failed: "false" }
  install:
    crds: CreateReplace
    createNamespace: true
    disableHooks: true
    disableOpenAPIValidation: true
    disableSchemaValidation: true
    disableTakeOwnership: true
    disableWait: false
    disableWaitForJobs: true
    remediation: { ignoreTestFailures: true, remediateLastFailure: true, retries: 2 }
    replace: true
    serverSideApply: false
    skipCRDs: false
    strategy: { name: RetryOnFailure, retryInterval: 1m }
    timeout: 10m
  interval: 2m
  kubeConfig:
    configMapRef: { name: remote }
    secretRef: { name: remote, key: value }
  maxHistory: 7
  persistentClient: true
  postRenderStrategy: nohooks
  postRenderers:
    - kustomize:
        images: [{ name: nginx, newName: registry.example.com/nginx, newTag: "1.27", digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000" }]
        patches:
          - patch: '[{"op": "add", "path": "/metadata/labels/x", "value": "y"}]'
            target: { kind: Deployment, labelSelector: a=b }
  releaseName: web-release
  rollback: { cleanupOnFail: true, disableHooks: true, disableWait: true, disableWaitForJobs: true, force: true, recreate: true, serverSideApply: auto, timeout: 3m }
  serviceAccountName: deployer
  storageNamespace: elsewhere
  suspend: false
  targetNamespace: apps-target
  test: { enable: true, filters: [{ name: smoke, exclude: true }], ignoreFailures: false, timeout: 4m }
  timeout: 10m
  uninstall: { deletionPropagation: foreground, disableHooks: true, disableWait: true, keepHistory: true, timeout: 2m }
  upgrade:
    chartNameChangeStrategy: InPlaceUpdate
    cleanupOnFail: true
    crds: CreateReplace
    disableHooks: true
    disableOpenAPIValidation: true
    disableSchemaValidation: true
    disableTakeOwnership: true
    disableWait: false
    disableWaitForJobs: true
    force: true
    preserveValues: true
    remediation: { ignoreTestFailures: true, remediateLastFailure: true, retries: 3, strategy: uninstall }
    serverSideApply: enabled
    strategy: { name: RetryOnFailure, retryInterval: 1m }
    timeout: 10m
  values: { replicas: 2 }
  valuesFrom:
    - { kind: Secret, name: web-values, valuesKey: prod.yaml, targetPath: app.config, literal: true, optional: true }
    - { kind: ConfigMap, name: plain }
  waitStrategy: { name: poller }
"#;

/// The value at `path` (dotted, `[]` for the first item) of `spec`.
fn at<'a>(spec: &'a Value, path: &str) -> Option<&'a Value> {
    let mut v = spec;
    for step in path.split('.') {
        let (key, item) = match step.strip_suffix("[]") {
            Some(k) => (k, true),
            None => (step, false),
        };
        v = v.get(key)?;
        if item {
            v = v.get(0)?;
        }
    }
    Some(v)
}

#[test]
fn a_release_setting_every_field_maps_each_it_can_and_names_each_it_cannot() {
    let converted = convert(&docs(EVERYTHING));
    assert_eq!(converted.apps.len(), 1);
    let spec = &converted.apps[0]["spec"];
    let noted: Vec<String> = converted.notes.iter().map(|n| generic(&n.field)).collect();
    for (field, fate) in fields::FIELDS {
        if field.starts_with("chartRef") {
            // chartRef and chart exclude each other: the OCI example below
            // maps chartRef.
            continue;
        }
        match fate {
            Fate::Mapped(target) => assert!(
                at(spec, target).is_some(),
                "{field} → {target} is not in the HelmApp: {spec:#}"
            ),
            Fate::Dropped(_) => assert!(
                noted.iter().any(|n| n == field),
                "{field} has no equivalent but no note says so: {noted:?}"
            ),
            Fate::Container | Fate::Ignored => {}
        }
    }
    // What the values are, for the fields whose names change.
    assert_eq!(
        spec["chart"],
        json!({ "repo": "https://charts.example.com", "name": "web",
        "version": ">=1.0.0 <2.0.0", "credentialsSecretRef": { "name": "repo-auth" },
        "verify": { "provider": "cosign", "secretRef": { "name": "cosign-pub" } } })
    );
    assert_eq!(spec["adopt"], true);
    assert_eq!(spec["crds"], "CreateReplace");
    assert_eq!(spec["wait"], true);
    assert_eq!(
        spec["remediation"],
        json!({ "retries": 3, "onFailure": "uninstall" })
    );
    assert_eq!(spec["install"]["skipSchemaValidation"], true);
    for action in ["install", "upgrade"] {
        assert_eq!(
            spec[action]["strategy"],
            json!({ "name": "RetryOnFailure", "retryInterval": "1m" }),
            "{action}"
        );
    }
    assert_eq!(spec["upgrade"]["serverSideApply"], "enabled");
    // Each action keeps its own timeout; the HelmRelease's is the default.
    assert_eq!(spec["timeout"], "10m");
    assert_eq!(spec["rollback"]["timeout"], "3m");
    assert_eq!(spec["uninstall"]["timeout"], "2m");
    assert_eq!(
        spec["test"]["filters"],
        json!([{ "name": "smoke", "exclude": true }])
    );
    assert_eq!(
        spec["dependsOn"],
        json!([{ "kind": "HelmApp", "name": "db", "namespace": "data", "readyExpr": "true" }])
    );
    assert_eq!(
        spec["healthCheckExprs"],
        json!([{ "apiVersion": "example.com/v1", "kind": "Thing", "current": "true",
        "inProgress": "false", "failed": "false" }])
    );
    assert_eq!(
        spec["valuesFrom"],
        json!([{ "kind": "Secret", "name": "web-values", "key": "prod.yaml",
        "targetPath": "app.config", "literal": true, "optional": true }, { "kind": "ConfigMap", "name": "plain" }])
    );
    assert_eq!(
        spec["drift"]["ignore"],
        json!([{ "paths": ["/spec/replicas"],
        "target": { "group": "apps", "version": "v1", "kind": "Deployment", "name": "web",
                    "namespace": "apps", "labelSelector": "a=b", "annotationSelector": "c=d" } }])
    );
    assert_eq!(
        spec["postRenderers"][0]["kustomize"]["patches"][0]["target"],
        json!({ "kind": "Deployment", "labelSelector": "a=b" })
    );
    assert_eq!(spec["postRenderStrategy"], "nohooks");
    assert_eq!(
        spec["inlineValuesLast"], true,
        "Flux merges inline values after valuesFrom"
    );
    assert_eq!(spec["interval"], "2m");
    assert_eq!(spec["releaseName"], "web-release");
    assert_eq!(
        converted.apps[0]["metadata"],
        json!({ "name": "web", "namespace": "apps",
                "labels": { "team": "a", "sharding.hossted.com/key": "shard1" } }),
        "Flux's shard label becomes ours"
    );
    // Each note names its release and reads as a sentence.
    assert!(converted.notes.iter().all(|n| n.release == "apps/web"));
    let recreate = converted
        .notes
        .iter()
        .find(|n| n.field == "rollback.recreate")
        .expect("recreate noted");
    assert_eq!(
        recreate.to_string(),
        "HelmRelease apps/web: spec.rollback.recreate not converted: helm 4 has no --recreate-pods"
    );
}

#[test]
fn flux_example_shapes_convert_to_the_helmapps_one_would_write() {
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "podinfo from a HelmRepository (Flux's getting-started shape)",
            r#"
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: podinfo, namespace: default }
spec: { interval: 5m, url: https://stefanprodan.github.io/podinfo }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: podinfo, namespace: default }
spec:
  interval: 10m
  timeout: 5m
  chart:
    spec:
      chart: podinfo
      version: '6.5.*'
      sourceRef: { kind: HelmRepository, name: podinfo }
      interval: 5m
  releaseName: podinfo
  install: { remediation: { retries: 3 } }
  upgrade: { remediation: { retries: 3 } }
  test: { enable: true }
  driftDetection: { mode: enabled, ignore: [{ paths: ["/spec/replicas"], target: { kind: Deployment } }] }
  values: { replicaCount: 2 }
"#,
            json!({ "adopt": true, "chart": { "repo": "https://stefanprodan.github.io/podinfo", "name": "podinfo",
                "version": "6.5.*" }, "interval": "10m", "timeout": "5m", "releaseName": "podinfo", "wait": true,
                "rollback": { "wait": true }, "uninstall": { "wait": true },
                "remediation": { "retries": 3 }, "test": { "enable": true },
                "drift": { "mode": "enabled", "ignore": [{ "paths": ["/spec/replicas"], "target": { "kind": "Deployment" } }] },
                "values": { "replicaCount": 2 } }),
        ),
        (
            "an OCIRepository by chartRef (Flux's OCI shape)",
            r#"
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: { name: podinfo, namespace: flux-system }
spec: { interval: 10m, url: oci://ghcr.io/stefanprodan/charts/podinfo, ref: { semver: ">= 6.0.0" } }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: podinfo, namespace: flux-system }
spec:
  interval: 10m
  chartRef: { kind: OCIRepository, name: podinfo }
  targetNamespace: apps
  install: { createNamespace: true, disableWait: true }
  upgrade: { disableWait: true }
"#,
            json!({ "adopt": true, "chart": { "oci": "oci://ghcr.io/stefanprodan/charts/podinfo", "version": ">= 6.0.0" },
                "interval": "10m", "targetNamespace": "apps", "releaseName": "apps-podinfo",
                "createNamespace": true, "wait": false,
                "rollback": { "wait": true }, "uninstall": { "wait": true } }),
        ),
        (
            "a HelmRepository of type oci",
            r#"
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: bitnami, namespace: apps }
spec: { type: oci, url: oci://registry-1.docker.io/bitnamicharts, secretRef: { name: hub } }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: redis, namespace: apps }
spec:
  interval: 1h
  chart: { spec: { chart: redis, version: 19.x, sourceRef: { kind: HelmRepository, name: bitnami } } }
  valuesFrom: [{ kind: ConfigMap, name: redis-values }]
  upgrade: { remediation: { retries: 4, strategy: rollback } }
"#,
            json!({ "adopt": true, "chart": { "oci": "oci://registry-1.docker.io/bitnamicharts/redis", "version": "19.x",
                "credentialsSecretRef": { "name": "hub" } }, "interval": "1h", "wait": true,
                "rollback": { "wait": true }, "uninstall": { "wait": true },
                "valuesFrom": [{ "kind": "ConfigMap", "name": "redis-values" }],
                "remediation": { "retries": 4, "onFailure": "rollback" } }),
        ),
        (
            "remediateLastFailure: false leaves the last failure as helm left it",
            r#"
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: charts, namespace: apps }
spec: { url: https://charts.example.com }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: web, namespace: apps }
spec:
  chart: { spec: { chart: web, sourceRef: { kind: HelmRepository, name: charts } } }
  upgrade: { remediation: { retries: 2, strategy: rollback, remediateLastFailure: false } }
"#,
            json!({ "adopt": true, "chart": { "repo": "https://charts.example.com", "name": "web" },
                "wait": true, "rollback": { "wait": true }, "uninstall": { "wait": true },
                "remediation": { "retries": 2, "onFailure": "none" } }),
        ),
    ];
    for (what, yaml, want) in cases {
        let converted = convert(&docs(yaml));
        assert_eq!(converted.apps.len(), 1, "{what}");
        assert_eq!(converted.apps[0]["spec"], want, "{what}");
        assert!(converted.notes.is_empty(), "{what}: {:?}", converted.notes);
    }
}

#[test]
fn a_source_not_in_the_input_or_not_convertible_is_said_and_the_rest_converted() {
    let converted = convert(&docs(
        r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: a, namespace: apps }
spec: { chart: { spec: { chart: a, sourceRef: { kind: HelmRepository, name: missing } } }, values: { x: 1 } }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: b, namespace: apps }
spec: { chart: { spec: { chart: ./charts/b, sourceRef: { kind: GitRepository, name: repo } } } }
"#,
    ));
    assert_eq!(converted.apps.len(), 2);
    assert_eq!(converted.apps[0]["spec"]["values"], json!({ "x": 1 }));
    let fields: Vec<(&str, &str)> = converted
        .notes
        .iter()
        .map(|n| (n.release.as_str(), n.field.as_str()))
        .collect();
    assert_eq!(
        fields,
        [
            ("apps/a", "chart.spec.sourceRef"),
            ("apps/b", "chart.spec.sourceRef")
        ]
    );
}

#[test]
fn a_chart_from_a_git_repository_converts_with_its_values_files() {
    let converted = convert(&docs(
        r#"
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: { name: platform, namespace: flux-system }
spec: { url: https://git.example/platform.git, ref: { semver: ">=1.0.0 <2" }, secretRef: { name: git-auth }, interval: 5m }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: web, namespace: apps }
spec:
  interval: 10m
  chart:
    spec:
      chart: ./charts/web
      version: "*"
      sourceRef: { kind: GitRepository, name: platform, namespace: flux-system }
      valuesFiles: [./charts/web/values.yaml, ./env/prod.yaml]
      ignoreMissingValuesFiles: true
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: { name: pinned, namespace: apps }
spec: { url: https://git.example/pinned.git, ref: { name: refs/tags/v3.0.0 }, recurseSubmodules: true }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: api, namespace: apps }
spec: { chart: { spec: { chart: charts/api, sourceRef: { kind: GitRepository, name: pinned } } } }
"#,
    ));
    assert_eq!(converted.apps.len(), 2);
    let web = &converted.apps[0]["spec"];
    assert_eq!(
        web["chart"],
        json!({ "git": { "url": "https://git.example/platform.git", "path": "charts/web",
        "ref": { "semver": ">=1.0.0 <2" }, "secretRef": { "name": "git-auth" } } })
    );
    assert_eq!(
        web["valuesFiles"],
        json!(["charts/web/values.yaml", "env/prod.yaml"])
    );
    assert_eq!(web["ignoreMissingValuesFiles"], true);
    let api = &converted.apps[1]["spec"];
    assert_eq!(api["chart"]["git"]["ref"], json!({ "tag": "v3.0.0" }));
    // Only what does not convert is said: the submodules.
    let notes: Vec<String> = converted.notes.iter().map(|n| n.to_string()).collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("recurseSubmodules"), "{notes:?}");
    assert!(notes[0].starts_with("HelmRelease apps/api:"), "{notes:?}");
}

/// Flux's shard label is carried over; a value no `--shard` can take is
/// said so, not dropped.
#[test]
fn a_shard_no_process_can_take_is_carried_over_and_said() {
    let converted = convert(&docs(
        r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: web, namespace: apps, labels: { sharding.fluxcd.io/key: Shard_A } }
spec:
  chart: { spec: { chart: web, sourceRef: { kind: HelmRepository, name: repo } } }
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: repo, namespace: apps }
spec: { url: https://charts.example.com }
"#,
    ));
    assert_eq!(
        converted.apps[0]["metadata"]["labels"],
        json!({ "sharding.hossted.com/key": "Shard_A" })
    );
    let note = converted
        .notes
        .iter()
        .find(|n| n.field == "metadata.labels[sharding.fluxcd.io/key]")
        .expect("the shard noted");
    assert!(note.why.contains("is not a shard name"), "{}", note.why);
}

#[test]
fn a_retry_interval_beside_remediate_on_failure_is_left_out() {
    let converted = convert(&docs(
        r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: web, namespace: apps }
spec:
  chart: { spec: { chart: web, sourceRef: { kind: HelmRepository, name: repo } } }
  upgrade: { strategy: { name: RemediateOnFailure, retryInterval: 1m } }
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: repo, namespace: apps }
spec: { url: https://charts.example.com }
"#,
    ));
    assert_eq!(
        converted.apps[0]["spec"]["upgrade"]["strategy"],
        json!({ "name": "RemediateOnFailure" })
    );
}

#[test]
fn signatures_convert_to_chart_verify_and_notation_says_it_would_not_be_checked() {
    let converted = convert(&docs(
        r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: keyless, namespace: apps }
spec:
  chartRef: { kind: OCIRepository, name: web }
---
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: { name: web, namespace: apps }
spec:
  url: oci://ghcr.io/example/web
  ref: { semver: "1.x" }
  verify:
    provider: cosign
    matchOIDCIdentity: [{ issuer: "^https://token.actions.githubusercontent.com$", subject: "^https://github.com/example/.*$" }]
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: notary, namespace: apps }
spec:
  chart: { spec: { chart: web, sourceRef: { kind: HelmRepository, name: oci }, verify: { provider: notation, secretRef: { name: certs } } } }
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: oci, namespace: apps }
spec: { type: oci, url: oci://ghcr.io/example }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: signed, namespace: apps }
spec:
  chart: { spec: { chart: ./charts/web, sourceRef: { kind: GitRepository, name: repo } } }
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: { name: repo, namespace: apps }
spec:
  url: https://git.example.com/web.git
  ref: { tag: v1.0.0 }
  verify: { mode: TagAndHEAD, secretRef: { name: pgp-keys } }
"#,
    ));
    let spec = |name: &str| {
        converted
            .apps
            .iter()
            .find(|a| a["metadata"]["name"] == name)
            .map(|a| a["spec"].clone())
            .unwrap()
    };
    assert_eq!(
        spec("keyless")["chart"]["verify"],
        json!({ "provider": "cosign", "matchOIDCIdentity": [{
            "issuer": "^https://token.actions.githubusercontent.com$",
            "subject": "^https://github.com/example/.*$" }] })
    );
    // Notation: nothing set, and said — never a silent unverified chart.
    assert!(spec("notary")["chart"].get("verify").is_none());
    assert!(
        converted
            .notes
            .iter()
            .any(|n| n.release == "apps/notary" && n.field == "chart.spec.verify.provider"),
        "{:?}",
        converted.notes
    );
    assert_eq!(
        spec("signed")["chart"]["verify"],
        json!({ "mode": "TagAndHEAD", "secretRef": { "name": "pgp-keys" } })
    );
}

/// A kubeconfig Secret names the same remote cluster as it did for Flux:
/// its name and key as they are (both default the key alike). Workload
/// identity (`configMapRef`) has no counterpart, and is said.
#[test]
fn a_kubeconfig_secret_converts_as_it_is_and_workload_identity_is_said() {
    let converted = convert(&docs(
        r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: remote, namespace: apps }
spec:
  chart: { spec: { chart: web, sourceRef: { kind: HelmRepository, name: repo } } }
  serviceAccountName: deployer
  kubeConfig: { secretRef: { name: prod-kubeconfig, key: value.yaml } }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: default-key, namespace: apps }
spec:
  chart: { spec: { chart: web, sourceRef: { kind: HelmRepository, name: repo } } }
  kubeConfig: { secretRef: { name: staging-kubeconfig } }
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: { name: workload, namespace: apps }
spec:
  chart: { spec: { chart: web, sourceRef: { kind: HelmRepository, name: repo } } }
  kubeConfig: { configMapRef: { name: gke-fleet } }
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: { name: repo, namespace: apps }
spec: { url: https://charts.example.com }
"#,
    ));
    let spec = |name: &str| {
        converted
            .apps
            .iter()
            .find(|a| a["metadata"]["name"] == name)
            .map(|a| a["spec"].clone())
            .unwrap()
    };
    let remote = spec("remote");
    assert_eq!(
        remote["kubeConfig"],
        json!({ "secretRef": { "name": "prod-kubeconfig", "key": "value.yaml" } })
    );
    // Impersonated in the remote cluster, as Flux does.
    assert_eq!(remote["serviceAccountName"], "deployer");
    // The HelmApp's own type reads it.
    let typed: apis::helmapp::KubeConfigReference =
        serde_json::from_value(remote["kubeConfig"].clone()).expect("a kubeConfig");
    assert_eq!(typed.secret_ref.name, "prod-kubeconfig");
    assert_eq!(typed.secret_ref.key, "value.yaml");
    // No key: none written, and both default it to `value`, then
    // `value.yaml`.
    assert_eq!(
        spec("default-key")["kubeConfig"],
        json!({ "secretRef": { "name": "staging-kubeconfig" } })
    );
    // Workload identity: nothing set — the release would otherwise go to
    // the operator's own cluster unsaid — and the reason given.
    assert!(spec("workload").get("kubeConfig").is_none());
    let notes: Vec<String> = converted.notes.iter().map(|n| n.to_string()).collect();
    assert_eq!(
        notes,
        [
            "HelmRelease apps/workload: spec.kubeConfig.configMapRef.name not converted: \
          workload identity (configMapRef) is not supported: put a kubeconfig with inline \
          credentials in a Secret and name it in kubeConfig.secretRef"
        ]
    );
}

#[test]
fn input_that_is_not_yaml_is_refused() {
    assert!(read_documents("a: [1, 2\n").is_err());
    assert!(read_documents("kind: HelmRelease\n---\n").is_ok_and(|d| d.len() == 1));
}

#[test]
fn the_committed_field_table_is_the_converters() {
    let committed = include_str!("../../docs/reference/from-flux.md");
    assert!(
        committed == fields::markdown(),
        "docs/reference/from-flux.md is stale: run hack/update-crds.sh and commit the result"
    );
}
