//! The binary and its helm processes: the --controllers flag and metrics, ServiceAccounts bounding a chart, the cap on helm processes.

use super::*;

#[tokio::test]
async fn the_binary_runs_delivery_with_controllers_flag_and_counts_helm_runs_in_metrics() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    f.hosstedproject("cluster", json!({})).await;
    let metrics_port = free_port();
    let work = f.cp.dir().join("operator-work");
    let mut cmd = f.operator_command(f.cp.kubeconfig_path());
    cmd.args(["run", "--controllers", "inventory,delivery"])
        .args([
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics_port}"),
        ]);
    delivery_flags(&mut cmd, &f.cp, &work);
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    apply(&f, "viabinary", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "viabinary", "InstallSucceeded", 1).await;
    // The inventory sees what delivery did: one report of the new release.
    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(posts[0].json()["app_api_info"]["app_name"], "viabinary");
    let url = format!("http://127.0.0.1:{metrics_port}/metrics");
    eventually("helm runs in the metrics", 30, || {
        let url = url.clone();
        async move {
            let (_, text) = http_get(&url).await?;
            let runs = sample(
                &text,
                "hossted_helm_runs_total{action=\"upgrade\",result=\"success\"}",
            );
            let ready = sample(&text, "hossted_helmapps{ready=\"True\"}");
            (runs == Some(1.0) && ready == Some(1.0)).then_some(())
        }
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn helm_runs_with_none_of_the_operators_environment() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    // A helm that writes the environment it was given, then runs the real one.
    let env_log = f.cp.dir().join("helm-env.log");
    let wrapper = f.cp.dir().join("env-helm.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nenv >> '{}'\nexec '{}' \"$@\"\n",
            env_log.display(),
            f.cp.helm_binary().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    // operator_command gives it the API token, URL and e-mail.
    let mut child = f
        .operator_command(f.cp.kubeconfig_path())
        .env("HELM_DEBUG", "false")
        .args([
            "run",
            "--controllers",
            "delivery",
            "--privileged-namespaces=*",
        ])
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .arg("--helm-binary")
        .arg(&wrapper)
        .arg("--work-dir")
        .arg(f.cp.dir().join("env-work"))
        .arg("--chart-path-root")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    apply(&f, "envless", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "envless", "InstallSucceeded", 1).await;
    let _ = child.kill();
    let _ = child.wait();
    let dumped = std::fs::read_to_string(&env_log).unwrap();
    let names: std::collections::BTreeSet<&str> = dumped
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for gone in ["HOSSTED_AUTH_TOKEN", "HOSSTED_API_URL", "EMAIL_ID"] {
        assert!(!names.contains(gone), "helm got {gone}: {names:?}");
    }
    assert!(!dumped.contains(TOKEN), "the token's value reached helm");
    // What it needs is kept: the kubeconfig, PATH, helm's own settings.
    for kept in ["KUBECONFIG", "PATH", "HELM_DEBUG", "HELM_CACHE_HOME"] {
        assert!(names.contains(kept), "helm lacks {kept}: {names:?}");
    }
}

#[tokio::test]
async fn a_service_account_bounds_what_a_chart_may_do_and_cross_namespace_refs_can_be_refused() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // A tenant ServiceAccount that may do anything in its namespace but
    // create Services.
    tenant_account(
        &f,
        r#"
  - apiGroups: ["", apps, networking.k8s.io]
    resources: [secrets, configmaps, deployments, statefulsets, ingresses]
    verbs: ["*"]
  - apiGroups: [""]
    resources: [services]
    verbs: [get, list, watch]"#,
    );
    let operator = f
        .start_delivery_with(|s| s.tenancy.no_cross_namespace_refs = true)
        .await;
    apply(
        &f,
        "tenant",
        json!({ "chart": { "path": "full" }, "serviceAccountName": "tenant" }),
    )
    .await;
    // Under the tenancy contract a refusal by RBAC is `Forbidden` (was
    // `InstallFailed`): a state, retried, never remediated.
    let app = with_reason(&f, "tenant", "Forbidden").await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(
        message.contains("forbidden") && message.contains("services"),
        "helm ran as the tenant: {message}"
    );
    apply(
        &f,
        "elsewhere",
        json!({ "chart": { "path": "tiny" }, "targetNamespace": "kube-system" }),
    )
    .await;
    let app = with_reason(&f, "elsewhere", "CrossNamespaceRef").await;
    assert!(
        app.status.unwrap().conditions[0]
            .message
            .contains("--no-cross-namespace-refs")
    );
    assert!(revisions(&f, "elsewhere").await.is_empty());
    operator.stop().await;
}

#[tokio::test]
async fn never_more_helm_processes_than_the_cap_and_never_two_on_one_release() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    // A slow helm that logs when each run starts and ends.
    let log = f.cp.dir().join("helm-spans.log");
    let wrapper = f.cp.dir().join("slow-helm.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}echo \"start $$ $(date +%s%N) $*\" >> '{log}'\nsleep 1\n'{helm}' \"$@\"\nrc=$?\necho \"end $$ $(date +%s%N)\" >> '{log}'\nexit $rc\n",
            version = version_passes_through(&f.cp.helm_binary()),
            log = log.display(),
            helm = f.cp.helm_binary().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let operator = f
        .start_delivery_with(|s| {
            s.helm.binary = wrapper.clone();
            s.helm.max_concurrent = 2;
            s.workers = 6;
        })
        .await;
    let names: Vec<String> = (0..6).map(|i| format!("capped-{i}")).collect();
    for name in &names {
        apply(&f, name, json!({ "chart": { "path": "tiny" } })).await;
    }
    // While they install, keep asking one of them to reconcile again.
    for round in 0..5 {
        patch(&f, "capped-0", json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": round.to_string() } } })).await;
        patch(
            &f,
            "capped-0",
            json!({ "spec": { "values": { "greeting": format!("v{round}") } } }),
        )
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    for name in &names {
        eventually(&format!("{name} ready"), 120, || async {
            let app = get(&f, name).await?;
            is_ready(&app).then_some(())
        })
        .await;
    }
    operator.settle().await;

    // Replay the spans: how many ran at once, and per release.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut events: Vec<(u128, i32, String)> = Vec::new(); // (time, +1/-1, pid)
    let mut release_of = std::collections::HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, t) = (
            parts[0],
            parts[1].to_string(),
            parts[2].parse::<u128>().unwrap(),
        );
        if kind == "start" {
            // `upgrade --install <release> ...` or `uninstall <release> ...`
            let release = parts[3..]
                .iter()
                .find(|a| a.starts_with("capped-"))
                .unwrap()
                .to_string();
            release_of.insert(pid.clone(), release);
            events.push((t, 1, pid));
        } else {
            events.push((t, -1, pid));
        }
    }
    events.sort_by_key(|e| (e.0, e.1));
    let (mut running, mut most) = (0, 0);
    let mut per_release: std::collections::HashMap<String, i32> = Default::default();
    for (_, delta, pid) in &events {
        running += delta;
        most = most.max(running);
        let r = per_release.entry(release_of[pid].clone()).or_default();
        *r += delta;
        assert!(*r <= 1, "two helm runs at once on {}", release_of[pid]);
    }
    assert!(
        most <= 2,
        "{most} helm processes at once with --max-concurrent-helm 2"
    );
    assert_eq!(
        most, 2,
        "the cap was reached (the test would not show it otherwise)"
    );
    assert!(release_of.values().filter(|r| *r == "capped-0").count() >= 2);
    operator.stop().await;
}

/// The operator SIGKILLed outside a container (no pod to take its children
/// along): the helm it ran dies with it, so the next operator, which
/// unlocks a release left pending at once, never races it.
#[tokio::test]
async fn helm_dies_with_an_operator_killed_outright() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let pids = f.cp.dir().join("helm-pids");
    let wrapper = f.cp.dir().join("endless-helm.sh");
    // The wrapper becomes the endless process: the operator's own child.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}echo $$ >> '{p}'\nexec sleep 600\n",
            version = version_passes_through(&f.cp.helm_binary()),
            p = pids.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = f
        .operator_command(f.cp.kubeconfig_path())
        .args([
            "run",
            "--controllers",
            "delivery",
            "--privileged-namespaces=*",
        ])
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .arg("--helm-binary")
        .arg(&wrapper)
        .arg("--work-dir")
        .arg(f.cp.dir().join("endless-work"))
        .arg("--chart-path-root")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    apply(&f, "endless", json!({ "chart": { "path": "tiny" } })).await;
    let running = |p: i32| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.to_string()))
            .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
    };
    let helm: i32 = eventually("helm to run", 60, || async {
        let text = std::fs::read_to_string(&pids).ok()?;
        let pid = text.split_whitespace().next()?.parse().ok()?;
        running(pid).then_some(pid)
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    eventually("helm gone with its operator", 10, || async move {
        (!running(helm)).then_some(())
    })
    .await;
}
