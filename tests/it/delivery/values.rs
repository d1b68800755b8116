//! Values from every source: one revision per change of what is named, and never on a command line, in status or in an Event.

use super::*;

#[tokio::test]
async fn values_from_a_secret_and_base64_are_one_revision_each_and_only_the_named_key_counts() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.secret(
        NS,
        "vals",
        &[("values.yaml", "greeting: from-secret\n"), ("other", "x")],
    )
    .await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "fromsecret",
        json!({
            "chart": { "path": "tiny" },
            "valuesFrom": [{ "kind": "Secret", "name": "vals" }]
        }),
    )
    .await;
    ready(&f, "fromsecret", "InstallSucceeded", 1).await;
    let greeting = || async {
        Api::<ConfigMap>::namespaced(f.cp.client(), NS)
            .get("fromsecret-tiny")
            .await
            .unwrap()
            .data
            .unwrap_or_default()["greeting"]
            .clone()
    };
    assert_eq!(greeting().await, "from-secret");

    // Another key of that Secret: the HelmApp is looked at, nothing runs.
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), NS);
    let mark = operator.mark();
    secrets
        .patch(
            "vals",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "stringData": { "other": "y" } })),
        )
        .await
        .unwrap();
    operator.reconciled_since(mark).await;
    assert_eq!(revisions(&f, "fromsecret").await.len(), 1);

    // The named key: re-queued by the watch alone, one new revision.
    secrets
        .patch(
            "vals",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "stringData": { "values.yaml": "greeting: edited\n" } })),
        )
        .await
        .unwrap();
    ready(&f, "fromsecret", "UpgradeSucceeded", 2).await;
    assert_eq!(greeting().await, "edited");

    // valuesBase64 (a tenant collector's configuration), applied after valuesFrom.
    use base64::Engine;
    let doc = base64::engine::general_purpose::STANDARD.encode("greeting: from-base64\n");
    patch(&f, "fromsecret", json!({ "spec": { "valuesBase64": doc } })).await;
    ready(&f, "fromsecret", "UpgradeSucceeded", 3).await;
    assert_eq!(greeting().await, "from-base64");
    operator.settle().await;
    assert_eq!(revisions(&f, "fromsecret").await.len(), 3);
    operator.stop().await;
}

#[tokio::test]
async fn values_never_reach_a_command_line_a_status_or_an_event() {
    const FROM_SECRET: &str = "leak-canary-from-secret";
    const FROM_SET: &str = "leak-canary-from-set";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.secret(
        NS,
        "private",
        &[("values.yaml", &format!("greeting: {FROM_SECRET}\n"))],
    )
    .await;
    // The wrapper logs every helm command line in full.
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "private",
        json!({
            "chart": { "path": "tiny" },
            "valuesFrom": [{ "kind": "Secret", "name": "private" }],
            "set": [format!("extra={FROM_SET}")]
        }),
    )
    .await;
    ready(&f, "private", "InstallSucceeded", 1).await;
    // And a failure, whose message helm prints with the values around.
    patch(
        &f,
        "private",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    ready(&f, "private", "UpgradeFailed", 1).await;
    let command_lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        helm_calls(&log).iter().any(|c| c.subcommand == "upgrade"),
        "{command_lines}"
    );
    let status = serde_json::to_string(&get(&f, "private").await.unwrap().status).unwrap();
    let events = f.kubectl(&["get", "events", "-n", NS, "-o", "json"]);
    for canary in [FROM_SECRET, FROM_SET] {
        assert!(
            !command_lines.contains(canary),
            "{canary} on a helm command line"
        );
        assert!(!status.contains(canary), "{canary} in the status");
        assert!(!events.contains(canary), "{canary} in an Event");
    }
    // It did reach helm (on its standard input): the release has it.
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get("private-tiny")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], FROM_SECRET);
    operator.stop().await;
}

/// The apiserver echoes a refused value Go-quoted (`"lab\"el-…"`): that
/// form is scrubbed too, from the status, every Event and the log (the
/// binary runs with `RUST_LOG=debug`, its log read whole).
#[tokio::test]
async fn a_value_the_apiserver_echoes_quoted_is_redacted_too() {
    const CANARY: &str = "lab\"el-canary-quoted";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    f.secret(NS, "label", &[("value", CANARY)]).await;
    let log_path = f.cp.dir().join("quoted.log");
    let mut cmd = operator_binary();
    cmd.env("KUBECONFIG", f.cp.kubeconfig_path())
        .env("RUST_LOG", "debug")
        .args([
            "run",
            "--controllers",
            "delivery",
            "--metrics-bind-address",
            "0",
        ]);
    delivery_flags(&mut cmd, &f.cp, &f.cp.dir().join("quoted-work"));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    apply(
        &f,
        "quoted",
        json!({
            "chart": { "path": "tiny" },
            "valuesFrom": [{ "kind": "Secret", "name": "label", "key": "value", "targetPath": "label" }]
        }),
    )
    .await;
    let app = with_reason(&f, "quoted", "InstallFailed").await;
    // The status may be written before the failure's log line: the log
    // is read once it has one (or after 30 s), then the operator stops.
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("[redacted]")
        && started.elapsed() < std::time::Duration::from_secs(30)
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let status = serde_json::to_string(&app.status).unwrap();
    assert!(
        status.contains("[redacted]"),
        "helm's message, scrubbed: {status}"
    );
    let events = f.kubectl(&["get", "events", "-n", NS, "-o", "json"]);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    // helm's message reached the log, scrubbed: the check below is not
    // passed for want of the message.
    assert!(
        logged.contains("[redacted]"),
        "the failure was logged: {logged}"
    );
    for text in [&status, &events, &logged] {
        assert!(!text.contains("el-canary-quoted"), "{text}");
    }
}
