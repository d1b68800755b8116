//! The operator's own chart (`charts/hossted-operator`): it lints, renders
//! what `kubectl kustomize manifests/…` installs where it matters, installs
//! and upgrades into a real control plane, keeps its CRDs, and refuses a bad
//! value with the field named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use envtest::{Assets, ControlPlane};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/hossted-operator")
}

fn tool(name: &'static str) -> Command {
    Command::new(Assets::locate().binary(name).expect("the test assets"))
}

/// Every document of `text`, by `Kind/name`.
fn objects(text: &str) -> BTreeMap<String, Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter(|v| v.is_object())
        .map(|v| {
            let key = format!(
                "{}/{}",
                v["kind"].as_str().unwrap_or_default(),
                v["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, v)
        })
        .collect()
}

fn rendered(values: &[&str]) -> BTreeMap<String, Value> {
    let mut cmd = tool("helm");
    cmd.args(["template", "hossted-operator"])
        .arg(chart_dir())
        .args(["--namespace", "hossted-operator"]);
    for v in values {
        cmd.args(["--set", v]);
    }
    let out = output_ok(&mut cmd);
    objects(&String::from_utf8_lossy(&out.stdout))
}

fn kustomized(dir: &str) -> BTreeMap<String, Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let out = output_ok(tool("kubectl").arg("kustomize").arg(path));
    objects(&String::from_utf8_lossy(&out.stdout))
}

/// What must agree between an object the manifests install and the
/// chart's: the fields that decide what runs and what it may do (strings
/// with their whitespace runs made one space: kustomize re-folds the CEL
/// of the admission policy).
fn what_matters(o: &Value) -> Value {
    spaced(fields_that_matter(o))
}

fn spaced(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(s.split_whitespace().collect::<Vec<_>>().join(" ")),
        Value::Array(a) => Value::Array(a.into_iter().map(spaced).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, spaced(v))).collect()),
        other => other,
    }
}

fn fields_that_matter(o: &Value) -> Value {
    let pod = &o["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    match o["kind"].as_str().unwrap_or_default() {
        "Deployment" => json!({
            "args": c["args"], "env": c["env"], "envFrom": c["envFrom"],
            "securityContext": c["securityContext"], "resources": c["resources"],
            "volumeMounts": c["volumeMounts"], "ports": c["ports"],
            "probes": [c["livenessProbe"], c["readinessProbe"]],
            "pod": { "securityContext": pod["securityContext"], "volumes": pod["volumes"],
                     "serviceAccountName": pod["serviceAccountName"],
                     "terminationGracePeriodSeconds": pod["terminationGracePeriodSeconds"] },
        }),
        "ClusterRole" | "Role" => json!({ "rules": o["rules"], "labels": labels_of_rbac(o) }),
        "ClusterRoleBinding" | "RoleBinding" => {
            json!({ "roleRef": o["roleRef"], "subjects": o["subjects"] })
        }
        // The values differ (an e-mail, a URL): the variables must not.
        "ConfigMap" if o["metadata"]["name"] == "hossted-operator-config" => {
            let keys: Vec<&String> = o["data"]
                .as_object()
                .map(|m| m.keys().collect())
                .unwrap_or_default();
            json!(keys)
        }
        "ConfigMap" => o["data"].clone(),
        "CustomResourceDefinition" => o["spec"].clone(),
        "NetworkPolicy" => o["spec"].clone(),
        "Service" => json!({ "ports": o["spec"]["ports"], "selector": o["spec"]["selector"] }),
        "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => o["spec"].clone(),
        "ServiceAccount" => json!({}),
        other => panic!("no comparison for {other}"),
    }
}

/// The JSON pointers where `a` and `b` differ (a number is its value:
/// `-1.0` as kustomize writes `-1`).
fn differences(a: &Value, b: &Value, at: &str) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter()
                .flat_map(|k| {
                    let (p, q) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    differences(p, q, &format!("{at}/{k}"))
                })
                .collect()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .flat_map(|(i, (p, q))| differences(p, q, &format!("{at}/{i}")))
            .collect(),
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => Vec::new(),
        _ if a == b => Vec::new(),
        _ => vec![format!("{at}: {a} ≠ {b}")],
    }
}

/// The aggregation labels of a role (the chart adds its own labels).
fn labels_of_rbac(o: &Value) -> Value {
    let labels = o["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    json!(
        labels
            .into_iter()
            .filter(|(k, _)| k.starts_with("rbac.authorization.k8s.io/"))
            .collect::<BTreeMap<_, _>>()
    )
}

fn agree(manifests: &str, values: &[&str]) {
    let want = kustomized(manifests);
    let got = rendered(values);
    for (key, o) in &want {
        if o["kind"] == "Namespace" {
            continue; // `helm install --create-namespace`
        }
        let chart = got.get(key).unwrap_or_else(|| {
            panic!("{manifests} installs {key}, the chart ({values:?}) does not")
        });
        let differ = differences(&what_matters(chart), &what_matters(o), "");
        assert!(
            differ.is_empty(),
            "{key}: the chart ({values:?}) and {manifests} disagree at {differ:?}"
        );
    }
    let extra: Vec<&String> = got
        .keys()
        .filter(|k| !want.contains_key(*k) && !k.starts_with("Service/"))
        .collect();
    assert!(
        extra.is_empty(),
        "only the chart ({values:?}) installs {extra:?}"
    );
}

#[test]
fn the_chart_lints_and_renders_what_the_manifests_install() {
    for values in [&[][..], &["controllers={inventory,delivery}"][..]] {
        let mut lint = tool("helm");
        lint.arg("lint").arg(chart_dir()).arg("--strict");
        for v in values {
            lint.args(["--set", v]);
        }
        output_ok(&mut lint);
    }
    agree("manifests", &[]);
    agree("manifests/delivery", &["controllers={inventory,delivery}"]);
    agree(
        "manifests/webhook",
        &["controllers={inventory,delivery}", "webhook.enabled=true"],
    );
    // Off by default: no listener, no Service, no port opened.
    let plain = rendered(&["controllers={inventory,delivery}"]);
    assert!(!plain.contains_key("Service/hossted-operator-webhook"));
    assert!(!plain.contains_key("NetworkPolicy/hossted-operator-webhook"));
    let args =
        &plain["Deployment/hossted-operator"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        !args.to_string().contains("--webhook"),
        "no webhook flag by default: {args}"
    );
    // With delivery, the pod is kept off link-local addresses (metadata).
    let egress = &plain["NetworkPolicy/hossted-operator-egress"]["spec"]["egress"][1]["to"];
    assert_eq!(
        egress[0]["ipBlock"]["except"],
        json!(["169.254.0.0/16", "100.100.100.200/32"])
    );
    assert_eq!(
        egress[1]["ipBlock"]["except"],
        json!(["fe80::/10", "fd00:ec2::254/128", "fd20:ce::254/128"])
    );
    assert!(!rendered(&[]).contains_key("NetworkPolicy/hossted-operator-egress"));
    // The CRDs are templates helm keeps on uninstall.
    let crd = &rendered(&[])["CustomResourceDefinition/hosstedprojects.hossted.com"];
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
}

#[test]
fn the_charts_app_version_is_the_operators() {
    let chart: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let out = output_ok(operator_binary().arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("hossted-operator {}", chart["appVersion"].as_str().unwrap())
    );
}

fn helm_in(cp: &ControlPlane, args: &[&str]) -> std::process::Output {
    let mut cmd = cp.helm();
    cmd.args(args);
    cmd.output().expect("helm")
}

fn kubectl_in(cp: &ControlPlane, args: &[&str]) -> String {
    let out = output_ok(cp.kubectl().args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_chart_installs_upgrades_keeps_its_crds_and_refuses_a_bad_value() {
    // A bare control plane: the chart brings its own CRDs.
    let cp = ControlPlane::start().await.expect("control plane");
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    let base = ["--namespace", "hossted-operator", "--create-namespace"];
    let install = |extra: &[&str]| {
        let mut args = vec!["upgrade", "--install", "hossted-operator", chart];
        args.extend(base);
        args.extend(extra);
        helm_in(&cp, &args)
    };
    // A wrong value: refused by the schema, which names the field.
    let refused = install(&["--set", "delivery.maxConcurrentHelm=0"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("/delivery/maxConcurrentHelm"), "{stderr}");
    let refused = install(&["--set", "controllers={inventory,deliver}"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("/controllers/1"));

    let out = install(&["--set", "api.email=ops@example.com"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = |cp: &ControlPlane| {
        let out = helm_in(
            cp,
            &[
                "status",
                "hossted-operator",
                "-n",
                "hossted-operator",
                "-o",
                "json",
            ],
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        (
            v["version"].as_i64().unwrap_or(0),
            v["info"]["status"].as_str().unwrap_or("").to_string(),
        )
    };
    assert_eq!(status(&cp), (1, "deployed".into()));
    let crds = kubectl_in(&cp, &["get", "crd", "-o", "name"]);
    assert!(crds.contains("hosstedprojects.hossted.com"), "{crds}");
    assert!(
        !crds.contains("helmapps.hossted.com"),
        "delivery's CRDs only with delivery"
    );

    // Delivery turned on by an upgrade: the same release, one revision on.
    let out = install(&[
        "--set",
        "api.email=ops@example.com",
        "--set",
        "controllers={inventory,delivery}",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status(&cp), (2, "deployed".into()));
    kubectl_in(
        &cp,
        &[
            "get",
            "crd",
            "helmapps.hossted.com",
            "helmappsets.hossted.com",
        ],
    );
    let edit = kubectl_in(
        &cp,
        &["get", "clusterrole", "hossted-helmapp-edit", "-o", "json"],
    );
    let edit: Value = serde_json::from_str(&edit).unwrap();
    assert_eq!(
        edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    let args = kubectl_in(
        &cp,
        &[
            "get",
            "deployment",
            "hossted-operator",
            "-n",
            "hossted-operator",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ],
    );
    assert!(args.contains("--controllers=inventory,delivery"), "{args}");

    // Turned off again, and uninstalled: the CRDs stay (deleting one
    // deletes every object of it).
    let out = install(&["--set", "api.email=ops@example.com"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = helm_in(
        &cp,
        &["uninstall", "hossted-operator", "-n", "hossted-operator"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kubectl_in(
        &cp,
        &[
            "get",
            "crd",
            "hosstedprojects.hossted.com",
            "helmapps.hossted.com",
            "helmappsets.hossted.com",
        ],
    );
}

/// `shards: [a, b]` (docs/shards.md): the main Deployment as before, one
/// more per shard running delivery alone with `--shard`, on pods no other
/// Deployment selects, each scraped by a Service of its own; the webhook
/// and the inventory's credentials stay with the main one.
#[test]
fn shards_add_one_deployment_each_with_its_own_pods() {
    let values = [
        "controllers={inventory,delivery}",
        "shards={a,b}",
        "webhook.enabled=true",
        "networkPolicy.enabled=true",
    ];
    let mut lint = tool("helm");
    lint.arg("lint").arg(chart_dir()).arg("--strict");
    for v in values {
        lint.args(["--set", v]);
    }
    output_ok(&mut lint);
    let objects = rendered(&values);
    let deployment = |name: &str| {
        objects
            .get(&format!("Deployment/{name}"))
            .unwrap_or_else(|| panic!("no Deployment/{name}"))
    };
    let args = |d: &Value| -> Vec<String> {
        serde_json::from_value(d["spec"]["template"]["spec"]["containers"][0]["args"].clone())
            .unwrap()
    };
    let selector = |d: &Value| d["spec"]["selector"]["matchLabels"].clone();
    let main = deployment("hossted-operator");
    assert!(args(main).contains(&"--controllers=inventory,delivery".to_string()));
    assert!(!args(main).iter().any(|a| a.starts_with("--shard")));
    let mut selectors = vec![selector(main)];
    for shard in ["a", "b"] {
        let d = deployment(&format!("hossted-operator-shard-{shard}"));
        let a = args(d);
        assert!(a.contains(&"--controllers=delivery".to_string()), "{a:?}");
        assert!(a.contains(&format!("--shard={shard}")), "{a:?}");
        assert!(!a.iter().any(|x| x.starts_with("--webhook")), "{a:?}");
        let env = &d["spec"]["template"]["spec"]["containers"][0]["envFrom"];
        assert!(
            env.as_array()
                .unwrap()
                .iter()
                .all(|e| e["secretRef"].is_null()),
            "a shard gets no API credentials: {env}"
        );
        assert_eq!(
            d["spec"]["template"]["metadata"]["labels"],
            selector(d),
            "its pods carry its selector"
        );
        let service = &objects[&format!("Service/hossted-operator-metrics-shard-{shard}")];
        assert_eq!(service["spec"]["selector"], selector(d));
        selectors.push(selector(d));
    }
    // No Deployment's selector matches another's pods.
    for (i, s) in selectors.iter().enumerate() {
        for (j, pods) in selectors.iter().enumerate() {
            let matches = s
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| pods.get(k) == Some(v));
            assert_eq!(matches, i == j, "selector {s} and pods {pods}");
        }
    }
    // The network policies cover every operator pod.
    let policy = &objects["NetworkPolicy/hossted-operator-egress"]["spec"]["podSelector"];
    assert_eq!(
        policy["matchExpressions"][0]["values"],
        json!(["hossted-operator", "hossted-operator-shard"])
    );
    // Shards without delivery: refused, saying why.
    let out = tool("helm")
        .args(["template", "x"])
        .arg(chart_dir())
        .args(["--set", "shards={a}"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("delivery must be among controllers"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ui.enabled` (docs/ui.md "Served in the cluster"): `ui --serve` with
/// sign-in flags and the client secret as a mounted file (never an
/// argument), a ServiceAccount whose one permission is impersonating users
/// and groups, the reader user's read of HelmApps and HelmAppSets, a
/// Service, the Ingress when asked; neither sign-in nor `anonymous:
/// read-only`: refused, saying what to set.
#[test]
fn the_served_ui_only_impersonates_and_needs_sign_in_or_read_only() {
    let values = [
        "ui.enabled=true",
        "ui.oidc.issuer=https://id.example.com",
        "ui.oidc.clientID=hossted-ui",
        "ui.publicURL=https://ui.example.com",
        "ui.ingress.enabled=true",
        "ui.ingress.host=ui.example.com",
    ];
    let mut lint = tool("helm");
    lint.arg("lint").arg(chart_dir()).arg("--strict");
    for v in values {
        lint.args(["--set", v]);
    }
    output_ok(&mut lint);
    let objects = rendered(&values);
    let deployment = &objects["Deployment/hossted-ui"];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "hossted-ui");
    let args: Vec<String> = serde_json::from_value(pod["containers"][0]["args"].clone()).unwrap();
    for want in [
        "--serve",
        "--oidc-issuer=https://id.example.com",
        "--oidc-client-id=hossted-ui",
        "--public-url=https://ui.example.com",
        "--oidc-client-secret-file=/etc/hossted-ui/oidc/client-secret",
    ] {
        assert!(args.contains(&want.to_string()), "{want} not in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--anonymous")),
        "{args:?}"
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"], "hossted-ui-oidc",
        "the client secret is mounted"
    );
    assert_eq!(
        objects["ClusterRole/hossted-ui-impersonator"]["rules"],
        json!([{ "apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"] }]),
        "the UI's identity may impersonate, nothing else"
    );
    let subjects = &objects["ClusterRoleBinding/hossted-ui-impersonator"]["subjects"];
    assert_eq!(
        subjects,
        &json!([{ "kind": "ServiceAccount", "name": "hossted-ui", "namespace": "hossted-operator" }])
    );
    assert_eq!(
        objects["ClusterRoleBinding/hossted-ui-reader"]["subjects"][0]["name"],
        "hossted-ui:reader"
    );
    // No other binding names the UI's ServiceAccount.
    let binds_ui = |o: &Value| {
        o["subjects"].as_array().is_some_and(|s| {
            s.iter()
                .any(|s| s["kind"] == "ServiceAccount" && s["name"] == "hossted-ui")
        })
    };
    let bindings: Vec<&String> = objects.keys().filter(|k| binds_ui(&objects[*k])).collect();
    assert_eq!(
        bindings,
        vec!["ClusterRoleBinding/hossted-ui-impersonator"],
        "the UI's ServiceAccount is bound to another role"
    );
    assert_eq!(
        objects["Service/hossted-ui"]["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        objects["Ingress/hossted-ui"]["spec"]["rules"][0]["host"],
        "ui.example.com"
    );
    // Read-only to anyone, when asked.
    let anonymous = rendered(&["ui.enabled=true", "ui.anonymous=read-only"]);
    let args: Vec<String> = serde_json::from_value(
        anonymous["Deployment/hossted-ui"]["spec"]["template"]["spec"]["containers"][0]["args"]
            .clone(),
    )
    .unwrap();
    assert!(
        args.contains(&"--anonymous=read-only".to_string()),
        "{args:?}"
    );
    // Neither: refused, saying what to set.
    let out = tool("helm")
        .args(["template", "x"])
        .arg(chart_dir())
        .args(["--set", "ui.enabled=true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("set ui.oidc.issuer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Off by default: nothing of it.
    assert!(
        !rendered(&[]).keys().any(|k| k.contains("hossted-ui")),
        "the UI is rendered without ui.enabled"
    );
}
