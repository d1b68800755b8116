//! The `hossted-operator` binary: configuration errors, `crd`, `collect`,
//! and `--dry-run` against a real control plane, ended by SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

#[test]
fn a_missing_required_value_is_one_line_and_exit_status_2() {
    let api = |url: &'static str| {
        [
            ("EMAIL_ID", "a@b.c"),
            ("HOSSTED_AUTH_TOKEN", "t"),
            ("HOSSTED_API_URL", url),
        ]
    };
    let no_scheme = api("api.hossted.com/v1");
    let clear_text = api("http://api.hossted.com/v1");
    let cases: [(&[(&str, &str)], &str); 6] = [
        (&[], "EMAIL_ID"),
        (&[("EMAIL_ID", "a@b.c")], "HOSSTED_API_URL"),
        (
            &[("EMAIL_ID", "a@b.c"), ("HOSSTED_API_URL", "https://x")],
            "HOSSTED_AUTH_TOKEN",
        ),
        (
            &[
                ("EMAIL_ID", "a@b.c"),
                ("HOSSTED_API_URL", "https://x"),
                ("HOSSTED_AUTH_TOKEN", "t"),
                ("RECONCILE_DURATION", "soon"),
            ],
            "RECONCILE_DURATION",
        ),
        // It used to start and retry forever, or send the token in clear text.
        (&no_scheme, "absolute https:// URL"),
        (&clear_text, "clear text"),
    ];
    for (env, missing) in cases {
        let out = operator_binary()
            .envs(env.iter().copied())
            .arg("run")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(missing), "{missing} not named in: {stderr}");
    }
}

/// `--shard` (docs/shards.md): a name that is no DNS label, or a shard
/// asked to run the inventory, is refused before anything starts.
#[test]
fn a_bad_shard_is_refused_at_start_naming_its_flag() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["--controllers", "delivery", "--shard", "A_b"],
            "is not a shard name",
        ),
        (
            &["--controllers", "delivery", "--shard", ""],
            "is not a shard name",
        ),
        (
            &["--controllers", "inventory,delivery", "--shard", "a"],
            "the inventory runs in the unsharded process only",
        ),
    ];
    for (args, why) in cases {
        let out = operator_binary()
            .envs([
                ("EMAIL_ID", "a@b.c"),
                ("HOSSTED_AUTH_TOKEN", "t"),
                ("HOSSTED_API_URL", "https://x"),
            ])
            .arg("run")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("--shard"), "{stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}

#[test]
fn a_bad_address_policy_is_refused_at_start_naming_its_flag() {
    let out = operator_binary()
        .args(["run", "--controllers", "delivery"])
        .args(["--deny-chart-source-cidrs", "169.254.0.0/16,10.0.0.0/33"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("--deny-chart-source-cidrs"), "{stderr}");
    assert!(
        stderr.contains("10.0.0.0/33"),
        "the bad entry is named: {stderr}"
    );
}

#[test]
fn crd_prints_every_checked_in_manifest_and_each_by_name() {
    let names = [
        "hosstedprojects.hossted.com",
        "helmapps.hossted.com",
        "helmappsets.hossted.com",
    ];
    let file = |name: &str| {
        std::fs::read_to_string(format!(
            "{}/{}",
            env!("CARGO_MANIFEST_DIR"),
            apis::crd_manifest_path(name)
        ))
        .unwrap()
    };
    let all = operator_binary().arg("crd").output().unwrap();
    assert!(all.status.success());
    let expected: Vec<String> = names.iter().map(|n| file(n)).collect();
    assert_eq!(String::from_utf8_lossy(&all.stdout), expected.join("---\n"));
    for name in names {
        let one = operator_binary().args(["crd", name]).output().unwrap();
        assert!(one.status.success());
        assert_eq!(String::from_utf8_lossy(&one.stdout), file(name));
    }
    let unknown = operator_binary()
        .args(["crd", "nope.example.com"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
}

#[tokio::test]
async fn dry_run_prints_each_request_and_sigterm_stops_it_cleanly() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;

    let mut child = operator_binary()
        .env("KUBECONFIG", f.cp.kubeconfig_path())
        .env("EMAIL_ID", EMAIL)
        .args(["run", "--dry-run", "--coalesce-window", "100ms"])
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            lines.push(line);
            if lines.len() == 2 {
                break;
            }
        }
        lines
    });
    let lines = tokio::time::timeout(Duration::from_secs(60), lines)
        .await
        .expect("two lines")
        .unwrap();
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(parsed[0]["method"], "POST");
    assert!(
        parsed[0]["path"].as_str().unwrap().ends_with("/register"),
        "{}",
        parsed[0]
    );
    assert_eq!(parsed[0]["body"]["email_id"], EMAIL);
    assert_eq!(parsed[1]["path"], "/apps");
    assert_eq!(parsed[1]["body"]["app_info"]["helm_info"]["name"], "web");
    // Printed is delivered: status records it.
    eventually("status after a dry run", 30, || async {
        (f.get_hp("cluster").await.status?.app_count == 1).then_some(())
    })
    .await;

    // SIGTERM: drain, exit 0, promptly.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let status = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.status.success(),
        "exit {:?}: {}",
        status.status,
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "shutdown took {:?}",
        started.elapsed()
    );
    let log = String::from_utf8_lossy(&status.stderr);
    assert!(log.contains("shutting down"), "{log}");
}

/// Runs `hossted-operator collect` against `kubeconfig` (with `EMAIL_ID` if
/// given), asserts it succeeds, and returns the JSON it printed.
async fn collect(kubeconfig: &std::path::Path, email: Option<&'static str>) -> serde_json::Value {
    let kubeconfig = kubeconfig.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = operator_binary();
        cmd.env("KUBECONFIG", kubeconfig).arg("collect");
        if let Some(email) = email {
            cmd.env("EMAIL_ID", email);
        }
        cmd.output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON array")
}

#[tokio::test]
async fn collect_prints_the_apps_of_the_current_context() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.helm_install("tiny", "tiny", "other");
    let apps = collect(f.cp.kubeconfig_path(), Some(EMAIL)).await;
    let names: Vec<&str> = apps
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["app_api_info"]["app_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web", "tiny"]);
    assert_eq!(apps[0]["app_info"]["service_info"][0]["port"], 80);
}

#[tokio::test]
async fn metrics_and_probes_are_served_while_reporting() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;
    f.api.respond_with(&[200, 503]);
    let (metrics_port, probe_port) = (free_port(), free_port());
    let mut child = f
        .operator_command(f.cp.kubeconfig_path())
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
    f.wait_requests("/v1/apps", 2, 60).await; // 503, then delivered
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    let text = eventually("the delivery in the metrics", 30, || {
        let url = metrics_url.clone();
        async move {
            let (_, text) = http_get(&url).await?;
            let delivered = sample(
                &text,
                "hossted_api_requests_total{endpoint=\"apps\",code=\"200\"}",
            );
            let finished = sample(
                &text,
                "hossted_reconcile_total{controller=\"hosstedproject\",result=\"success\"}",
            )
            .unwrap_or(0.0);
            (delivered == Some(1.0) && finished >= 1.0).then_some(text)
        }
    })
    .await;
    assert_eq!(
        sample(
            &text,
            "hossted_api_requests_total{endpoint=\"apps\",code=\"503\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "hossted_api_requests_total{endpoint=\"register\",code=\"200\"}"
        ),
        Some(1.0)
    );
    assert!(
        sample(
            &text,
            "hossted_reconcile_total{controller=\"hosstedproject\",result=\"success\"}"
        )
        .unwrap()
            >= 1.0
    );
    assert!(
        sample(
            &text,
            "hossted_reconcile_total{controller=\"hosstedproject\",result=\"error\"}"
        )
        .unwrap()
            >= 1.0,
        "the 503 reconcile"
    );
    assert!(
        sample(
            &text,
            "hossted_reconcile_duration_seconds_count{controller=\"hosstedproject\"}"
        )
        .unwrap()
            >= 2.0
    );
    assert!(sample(&text, "workqueue_adds_total{name=\"hosstedproject\"}").unwrap() >= 1.0);
    assert!(sample(&text, "workqueue_retries_total{name=\"hosstedproject\"}").unwrap() >= 1.0);
    assert_eq!(
        sample(&text, "hossted_informer_synced{kind=\"Pod\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hossted_informer_synced{kind=\"Hosstedproject\"}"),
        Some(1.0)
    );
    assert_eq!(sample(&text, "hossted_leader"), Some(1.0));
    let probes = (
        http_get(&format!("http://127.0.0.1:{probe_port}/healthz"))
            .await
            .unwrap()
            .0,
        http_get(&format!("http://127.0.0.1:{probe_port}/readyz"))
            .await
            .unwrap()
            .0,
    );
    assert_eq!(probes, (200, 200));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_reconcile_finish_before_exiting() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;
    f.api.set_delay(Duration::from_secs(3));
    let child = f
        .operator_command(f.cp.kubeconfig_path())
        .args([
            "run",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The app POST has reached the API, which takes 3 s to answer.
    f.wait_requests("/v1/apps", 1, 60).await;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {log}", out.status);
    // The reconcile finished after SIGTERM: its delivery is in status.
    let st = f.get_hp("cluster").await.status.expect("status");
    assert_eq!(
        st.app_count, 1,
        "the in-flight reconcile did not finish: {log}"
    );
    assert_eq!(st.delivered().0[0].name, "web");
}

#[tokio::test]
async fn collect_works_on_a_cluster_without_the_crd() {
    let cp = envtest::ControlPlane::start().await.unwrap();
    output_ok(cp.helm().args([
        "install",
        "web",
        &chart("web"),
        "-n",
        "apps",
        "--create-namespace",
    ]));
    let apps = collect(cp.kubeconfig_path(), None).await;
    assert_eq!(apps[0]["app_api_info"]["app_name"], "web");
    assert_eq!(apps[0]["app_api_info"]["cluster_uuid"], "");
}

#[test]
fn convert_writes_helmapps_says_what_did_not_convert_and_exits_2_only_on_unreadable_input() {
    let dir = std::env::temp_dir().join(format!("convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("flux.yaml");
    std::fs::write(
        &input,
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: HelmRepository\nmetadata: { name: charts, namespace: apps }\nspec: { url: https://charts.example.com }\n---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: { name: web, namespace: apps }\nspec:\n  chart: { spec: { chart: web, version: 1.x, sourceRef: { kind: HelmRepository, name: charts } } }\n  storageNamespace: elsewhere\n",
    )
    .unwrap();
    let out = operator_binary()
        .arg("convert")
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let app: serde_json::Value = serde_yaml_ng::from_slice(&out.stdout).unwrap();
    assert_eq!(app["kind"], "HelmApp");
    assert_eq!(app["spec"]["chart"]["repo"], "https://charts.example.com");
    assert_eq!(app["spec"]["adopt"], true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("HelmRelease apps/web: spec.storageNamespace not converted: ")),
        "{stderr}"
    );
    // From stdin too.
    let mut child = operator_binary()
        .arg("convert")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&input).unwrap())
        .unwrap();
    let piped = child.wait_with_output().unwrap();
    assert_eq!(piped.stdout, out.stdout);
    // Unreadable: a missing file, and a file that is not YAML.
    let missing = operator_binary()
        .arg("convert")
        .arg(dir.join("none.yaml"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    let broken = dir.join("broken.yaml");
    std::fs::write(&broken, "spec: [1, 2\n").unwrap();
    let refused = operator_binary()
        .arg("convert")
        .arg(&broken)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}
