//! `dependsOn` any object and CEL health checks (issue 39,
//! docs/dependencies.md), against the real apiserver with a CRD the test
//! makes (Gadget, `example.hossted.com/v1`, whose status nothing but the
//! test writes).

use std::time::Duration;

use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

use super::*;

const GADGETS: &str = "example.hossted.com/v1";

fn gadgets(f: &Fixture) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.hossted.com", "v1", "Gadget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    Api::namespaced_with(f.cp.client(), NS, &resource)
}

/// The Gadget CRD, served.
async fn gadget_crd(f: &Fixture) {
    let crd = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/charts/gadget/crds/gadgets.yaml");
    output_ok(f.cp.kubectl().args(["apply", "-f"]).arg(&crd));
    eventually("the Gadget CRD served", 30, || async {
        gadgets(f).list(&Default::default()).await.ok()
    })
    .await;
}

/// Gadget `name` with `spec` and then `status` (set before anything
/// depends on it: it never has no status while watched).
async fn gadget(f: &Fixture, name: &str, spec: serde_json::Value, status: serde_json::Value) {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": GADGETS, "kind": "Gadget",
        "metadata": { "name": name, "namespace": NS }, "spec": spec
    }))
    .unwrap();
    gadgets(f)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    gadget_status(f, name, status).await;
}

async fn gadget_status(f: &Fixture, name: &str, status: serde_json::Value) {
    gadgets(f)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
}

fn ready_condition(status: &str) -> serde_json::Value {
    json!({ "conditions": [{ "type": "Ready", "status": status, "reason": "Test",
        "message": "set by the test", "lastTransitionTime": "2026-01-01T00:00:00Z" }] })
}

fn on_gadget(name: &str) -> serde_json::Value {
    json!({ "apiVersion": GADGETS, "kind": "Gadget", "name": name })
}

/// `(reason, message)` of the HelmApp's `Ready` condition.
fn ready_reason(app: &HelmApp) -> (String, String) {
    app.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// Waits until the HelmApp's `Ready` says `reason`, then proves it stays
/// so with no release: a reconcile after that point changes nothing.
async fn holds(f: &Fixture, operator: &Operator, name: &str, reason: &str) -> HelmApp {
    let app = with_reason(f, name, reason).await;
    operator.settle().await;
    assert!(
        revisions(f, name).await.is_empty(),
        "{name} installed while {reason}"
    );
    assert_eq!(ready_reason(&get(f, name).await.unwrap()).0, reason);
    app
}

#[tokio::test]
async fn a_helmapp_waits_for_a_custom_resource_by_kstatus_or_by_its_ready_expr() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    gadget_crd(&f).await;
    gadget(&f, "db", json!({}), ready_condition("False")).await;
    // kstatus would call this one ready (Ready=True); its readyExpr does not.
    let running_soon =
        json!({ "phase": "Starting", "conditions": ready_condition("True")["conditions"] });
    gadget(&f, "queue", json!({}), running_soon).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "web",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [on_gadget("db")] }),
    )
    .await;
    let mut with_expr = on_gadget("queue");
    with_expr["readyExpr"] = json!("dep.status.phase == 'Running' && self.metadata.generation > 0");
    apply(
        &f,
        "worker",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [with_expr] }),
    )
    .await;
    holds(&f, &operator, "web", "DependencyNotReady").await;
    holds(&f, &operator, "worker", "DependencyNotReady").await;
    let metrics = operator.scrape();
    assert_eq!(
        sample(&metrics, "hossted_dependency_informers"),
        Some(1.0),
        "one informer for the one kind named\n{metrics}"
    );

    // The status changes: the watch re-queues the dependent (nothing polls
    // a watched kind), and it installs.
    gadget_status(&f, "db", ready_condition("True")).await;
    ready(&f, "web", "InstallSucceeded", 1).await;
    assert!(
        revisions(&f, "worker").await.is_empty(),
        "worker followed kstatus, not its readyExpr"
    );
    gadget_status(&f, "queue", json!({ "phase": "Running" })).await;
    ready(&f, "worker", "InstallSucceeded", 1).await;

    // No HelmApp names the kind any more: its informer stops.
    for name in ["web", "worker"] {
        let api: Api<HelmApp> = Api::namespaced(f.cp.client(), NS);
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("the Gadget informer stopped", 60, || async {
        let metrics = operator.scrape();
        (sample(&metrics, "hossted_dependency_informers") == Some(0.0)).then_some(())
    })
    .await;
    assert_eq!(
        sample(
            &operator.scrape(),
            "hossted_dependency_informers_started_total"
        ),
        Some(1.0),
        "started once for both apps"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_failed_health_check_expression_fails_readiness_at_once() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    gadget_crd(&f).await;
    // The chart's Gadget, made first with helm's adoption metadata and a
    // status kstatus calls ready (no conditions) but the expression calls
    // failed.
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": GADGETS, "kind": "Gadget",
        "metadata": { "name": "broken-gadget", "namespace": NS,
            "labels": { "app.kubernetes.io/managed-by": "Helm" },
            "annotations": { "meta.helm.sh/release-name": "broken", "meta.helm.sh/release-namespace": NS } },
        "spec": { "size": "small" }
    }))
    .unwrap();
    gadgets(&f)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    gadget_status(&f, "broken-gadget", json!({ "phase": "Broken" })).await;
    let operator = f.start_delivery().await;
    let checks = json!([{ "apiVersion": GADGETS, "kind": "Gadget",
        "failed": "self.status.?phase.orValue('') == 'Broken'",
        "current": "self.status.?phase.orValue('') == 'Running'" }]);
    apply(
        &f,
        "broken",
        json!({ "chart": { "path": "gadget" }, "wait": true, "timeout": "10m",
                "healthCheckExprs": checks }),
    )
    .await;
    // Within the test's wait, far below the 10 minute timeout.
    let app = with_reason(&f, "broken", "ReadinessFailed").await;
    let (_, message) = ready_reason(&app);
    assert!(
        message.contains("Gadget broken-gadget failed: its failed expression is true"),
        "{message}"
    );
    // The same expressions judge it ready once it runs.
    gadget_status(&f, "broken-gadget", json!({ "phase": "Running" })).await;
    with_reason(&f, "broken", "UpToDate").await;
    operator.stop().await;
}

#[tokio::test]
async fn a_tenant_dependency_its_identity_may_not_read_is_forbidden_until_a_role_allows_it() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    gadget_crd(&f).await;
    gadget(&f, "db", json!({}), ready_condition("True")).await;
    tenant_account(
        &f,
        r#"
  - apiGroups: [""]
    resources: [secrets, configmaps]
    verbs: ["*"]"#,
    );
    let operator = f.start_delivery().await;
    apply(
        &f,
        "tenant",
        json!({ "chart": { "path": "reach" }, "serviceAccountName": "tenant",
                "dependsOn": [on_gadget("db")] }),
    )
    .await;
    let app = holds(&f, &operator, "tenant", "Forbidden").await;
    let (_, message) = ready_reason(&app);
    assert!(
        message.contains("ServiceAccount apps/tenant may not read it"),
        "{message}"
    );
    // The operator could read it; the tenant may not: nothing says "not found".
    assert!(!message.contains("does not exist"), "{message}");

    let role = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: gadget-reader, namespace: apps }
rules: [{ apiGroups: [example.hossted.com], resources: [gadgets], verbs: [get] }]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: gadget-reader, namespace: apps }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: gadget-reader }
subjects: [{ kind: ServiceAccount, name: tenant, namespace: apps }]
"#;
    let file = f.cp.dir().join("gadget-reader.yaml");
    std::fs::write(&file, role).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    // Looked at again with backoff: no change of the HelmApp is needed.
    ready(&f, "tenant", "InstallSucceeded", 1).await;
    operator.stop().await;
}

/// The column a message names (`… column N: …`).
fn column_of(message: &str) -> Option<u32> {
    let (_, rest) = message.split_once(", column ")?;
    rest.split(':').next()?.parse().ok()
}

#[tokio::test]
async fn a_syntax_error_names_its_column_and_a_costly_expression_stops_at_the_limit() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    gadget_crd(&f).await;
    let items: Vec<i64> = (0..2_000).collect();
    gadget(
        &f,
        "big",
        json!({ "items": items }),
        json!({ "phase": "Running" }),
    )
    .await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let mut typo = on_gadget("big");
    typo["readyExpr"] = json!("dep.status.phase == ) ");
    apply(
        &f,
        "typo",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [typo] }),
    )
    .await;
    let mut costly = on_gadget("big");
    costly["readyExpr"] = json!("dep.spec.items.all(x, dep.spec.items.exists(y, y == x))");
    apply(
        &f,
        "costly",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [costly] }),
    )
    .await;
    let app = holds(&f, &operator, "typo", "InvalidExpression").await;
    let (_, message) = ready_reason(&app);
    assert!(
        message.starts_with("dependsOn[0].readyExpr: syntax error at line 1"),
        "{message}"
    );
    assert_eq!(column_of(&message), Some(21), "the `)`: {message}");
    holds(&f, &operator, "costly", "ExpressionCostExceeded").await;
    assert!(runs_in(&log).is_empty(), "no helm ran: {:?}", runs_in(&log));
    // Mended, it proceeds.
    patch(
        &f,
        "typo",
        json!({ "spec": { "dependsOn": [{ "apiVersion": GADGETS, "kind": "Gadget", "name": "big",
            "readyExpr": "dep.status.phase == 'Running'" }] } }),
    )
    .await;
    ready(&f, "typo", "InstallSucceeded", 1).await;
    operator.stop().await;
}

#[tokio::test]
async fn a_secret_another_controller_writes_is_waited_for_and_its_values_never_held() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    // The expression holds only if the operator kept the key and not the
    // value (what an expression sees of a Secret).
    let tls = json!({ "apiVersion": "v1", "kind": "Secret", "name": "web-tls",
        "readyExpr": "'tls.crt' in dep.data && dep.data['tls.crt'] == ''" });
    apply(
        &f,
        "web",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [tls] }),
    )
    .await;
    holds(&f, &operator, "web", "DependencyNotFound").await;
    f.secret(NS, "web-tls", &[("tls.crt", "certificate bytes")])
        .await;
    ready(&f, "web", "InstallSucceeded", 1).await;
    operator.stop().await;
}

#[tokio::test]
async fn a_ready_expr_on_a_helmapp_dependency_decides_instead_of_its_ready_condition() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(&f, "db", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "db", "InstallSucceeded", 1).await;
    apply(
        &f,
        "api",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [{ "name": "db",
            "readyExpr": "dep.status.revision >= 2" }] }),
    )
    .await;
    // db is Ready, but at revision 1.
    holds(&f, &operator, "api", "DependencyNotReady").await;
    patch(&f, "db", json!({ "spec": { "values": { "edit": 1 } } })).await;
    ready(&f, "db", "UpgradeSucceeded", 2).await;
    ready(&f, "api", "InstallSucceeded", 1).await;
    operator.stop().await;
}

/// CPU time (user + system, in seconds) process `pid` has used so far,
/// every thread of it counted, its children not: fields 14 and 15 of
/// `/proc/<pid>/stat`, in clock ticks.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name (in parentheses, perhaps with spaces in it)
    // come fields 3 (state) onward.
    let (_, rest) = stat.rsplit_once(") ").unwrap();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf(3) only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / per_second as f64
}

#[tokio::test]
async fn a_quadratic_ready_expr_is_refused_by_its_cost_and_leaves_the_operator_idle() {
    // Issue 57: `in` is linear in the list, so this is 4×10⁸ comparisons;
    // charged one step per node it passed the estimate, was given up at
    // its deadline while its thread ran on, and each backoff poll started
    // another (~8.7 CPU-s a minute).
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    gadget_crd(&f).await;
    let items: Vec<i64> = (0..20_000).collect();
    gadget(
        &f,
        "huge",
        json!({ "values": { "a": items } }),
        json!({ "phase": "Running" }),
    )
    .await;
    // The binary, not the in-process operator: its CPU time is its own,
    // not this test binary's (other tests run in it at the same time).
    let operator = super::windows::OperatorProcess::start(&f, &f.cp.helm_binary(), 0);
    let mut quadratic = on_gadget("huge");
    quadratic["readyExpr"] = json!("dep.spec.values.a.all(x, x in dep.spec.values.a)");
    apply(
        &f,
        "quadratic",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [quadratic] }),
    )
    .await;
    // Created at the same time, depending on nothing.
    apply(&f, "bystander", json!({ "chart": { "path": "tiny" } })).await;

    let refused = eventually("quadratic: ExpressionCostExceeded", 60, || async {
        let app = get(&f, "quadratic").await?;
        let c = app
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        (c.reason == "ExpressionCostExceeded").then_some(c)
    })
    .await;
    assert_eq!(refused.status, "False");
    assert!(
        refused.message.starts_with("dependsOn[0].readyExpr: "),
        "names the expression: {}",
        refused.message
    );
    // Refused by its bound before it ran — not given up at the deadline
    // ("took longer than 500ms") with its thread running on.
    assert!(
        refused.message.contains("over the limit of 1000000"),
        "{}",
        refused.message
    );
    let other = ready(&f, "bystander", "InstallSucceeded", 1).await;
    assert!(is_ready(&other), "{:?}", other.status);

    // Back to idle: 10 s after the refusal (backoff polls of the dependent
    // among them) cost next to nothing.
    let before = cpu_seconds(operator.pid());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let spent = cpu_seconds(operator.pid()) - before;
    assert!(
        spent < 2.0,
        "the operator spent {spent:.2} CPU-s in the 10 s after the refusal"
    );
    assert_eq!(
        ready_reason(&get(&f, "quadratic").await.unwrap()).0,
        "ExpressionCostExceeded"
    );
    assert!(
        revisions(&f, "quadratic").await.is_empty(),
        "quadratic installed"
    );
}
