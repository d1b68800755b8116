//! Two operator processes with leader election: exactly one reports and
//! says so in its metrics; killing the leader hands over to the other;
//! nothing is posted twice.

use std::process::{Child, Stdio};
use std::time::Instant;

use crate::support::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;

struct Candidate {
    child: Child,
    metrics: String,
}

impl Candidate {
    fn start(f: &Fixture, name: &str) -> Self {
        let port = free_port();
        let child = f
            .operator_command(f.cp.kubeconfig_path())
            .env("POD_NAME", name)
            .args([
                "run",
                "--leader-elect",
                "--leader-election-namespace",
                "hossted-operator",
            ])
            // Short lease timings: the behaviour is the same, the test quicker;
            // a 6 s renew deadline rides out a busy 2-core machine.
            .args(["--leader-elect-lease-duration", "8s"])
            .args(["--leader-elect-renew-deadline", "6s"])
            .args(["--leader-elect-retry-period", "500ms"])
            .args(["--coalesce-window", "100ms"])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{port}")])
            .args(["--health-probe-bind-address", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Candidate {
            child,
            metrics: format!("http://127.0.0.1:{port}"),
        }
    }

    /// `(hossted_leader, successful reconciles, /readyz status)` once it answers.
    async fn state(&self) -> Option<(f64, f64, u16)> {
        let (_, text) = http_get(&format!("{}/metrics", self.metrics)).await?;
        let (ready, _) = http_get(&format!("{}/readyz", self.metrics)).await?;
        let leader = sample(&text, "hossted_leader")?;
        let reconciles = sample(
            &text,
            "hossted_reconcile_total{controller=\"hosstedproject\",result=\"success\"}",
        )
        .unwrap_or(0.0);
        Some((leader, reconciles, ready))
    }
}

async fn holder(f: &Fixture) -> String {
    Api::<Lease>::namespaced(f.cp.client(), "hossted-operator")
        .get_opt("hossted-operator")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default()
}

#[tokio::test]
async fn one_leader_reports_and_a_standby_takes_over_without_reposting() {
    let f = Fixture::new().await;
    f.namespace("hossted-operator").await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;
    let mut a = Candidate::start(&f, "op-a");
    let mut b = Candidate::start(&f, "op-b");

    f.wait_requests("/v1/apps", 1, 60).await;
    let first = holder(&f).await;
    let (leader, standby, standby_prefix) = if first.starts_with("op-a_") {
        (&mut a, &mut b, "op-b_")
    } else {
        assert!(first.starts_with("op-b_"), "unexpected holder {first:?}");
        (&mut b, &mut a, "op-a_")
    };
    // Both are ready; only the holder says it leads, and only it reconciles.
    let (l, s) = eventually("both candidates' metrics", 60, || async {
        let (l, s) = (leader.state().await?, standby.state().await?);
        (l.1 >= 1.0 && s.2 == 200).then_some((l, s))
    })
    .await;
    assert_eq!(
        (l.0, l.2),
        (1.0, 200),
        "the leader: hossted_leader 1, ready"
    );
    assert_eq!(s.0, 0.0, "a standby must not report hossted_leader 1");
    assert_eq!(s.1, 0.0, "the standby reconciled");
    assert_eq!(
        f.requests_to("/v1/apps").len(),
        1,
        "both candidates reported"
    );
    assert_eq!(
        f.api
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/register"))
            .count(),
        1
    );

    // Kill the leader outright: the standby takes over once the lease expires.
    leader.child.kill().unwrap();
    leader.child.wait().unwrap();
    let killed = Instant::now();
    eventually("the standby to take the lease", 40, || async {
        holder(&f).await.starts_with(standby_prefix).then_some(())
    })
    .await;
    println!(
        "takeover after SIGKILL of the leader: {:?}",
        killed.elapsed()
    );

    // The new leader starts warm, reconciles, and re-sends nothing
    // delivered before.
    eventually("the new leader to reconcile", 60, || async {
        let (leading, reconciles, _) = standby.state().await?;
        (leading == 1.0 && reconciles >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        f.requests_to("/v1/apps").len(),
        1,
        "an app was posted twice across the failover"
    );
    f.helm_upgrade("web", "web", "apps", "port=81");
    let posts = f.wait_requests("/v1/apps", 2, 30).await;
    assert_eq!(posts[1].json()["app_info"]["helm_info"]["revision"], 2);

    // SIGTERM: the leader drains, releases the lease and exits 0.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(standby.child.id() as i32, libc::SIGTERM) };
    let status = standby.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(holder(&f).await, "", "the lease was not released");
    assert_eq!(f.requests_to("/v1/apps").len(), 2);
}

/// The pids a slow helm wrapper wrote: itself and the `sleep` it started
/// (both in the process group the operator gave the run).
fn pids_in(file: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Running, not a zombie waiting to be reaped.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.to_string()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// A leader-electing operator whose helm hangs: it records its pid and
/// its child's in the returned file, then waits. Started with a HelmApp
/// `apps/hangs`, once that helm runs.
async fn leader_with_a_hanging_helm(
    f: &Fixture,
    extra: &[&str],
) -> (std::process::Child, std::path::PathBuf) {
    f.namespace("apps").await;
    f.namespace("hossted-operator").await;
    f.helmapp_crd().await;
    let pids = f.cp.dir().join("helm-pids");
    let wrapper = f.cp.dir().join("hanging-helm.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}echo $$ >> '{p}'\nsleep 600 &\necho $! >> '{p}'\nwait\n",
            version = version_passes_through(&f.cp.helm_binary()),
            p = pids.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = f
        .operator_command(f.cp.kubeconfig_path())
        .env("POD_NAME", "leader")
        .args([
            "run",
            "--controllers",
            "inventory,delivery",
            "--leader-elect",
            "--privileged-namespaces=*",
        ])
        .args(["--leader-election-namespace", "hossted-operator"])
        .args(["--leader-elect-lease-duration", "8s"])
        .args(["--leader-elect-renew-deadline", "6s"])
        .args(["--leader-elect-retry-period", "500ms"])
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .args(extra)
        .arg("--helm-binary")
        .arg(&wrapper)
        .arg("--work-dir")
        .arg(f.cp.dir().join("operator-work"))
        .arg("--chart-path-root")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(f.cp.dir().join("operator.log")).unwrap())
        .spawn()
        .unwrap();
    let happ: serde_json::Value = json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "hangs", "namespace": "apps" },
        "spec": { "chart": { "path": "tiny" } }
    });
    let file = f.cp.dir().join("hangs.json");
    std::fs::write(&file, happ.to_string()).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    eventually("helm to be running", 60, || async {
        let p = pids_in(&pids);
        (p.len() == 2 && p.iter().all(|&p| alive(p))).then_some(())
    })
    .await;
    (child, pids)
}

#[tokio::test]
async fn on_sigterm_helm_is_killed_and_gone_before_the_lease_is_released() {
    let f = Fixture::new().await;
    let (mut child, pids) = leader_with_a_hanging_helm(&f, &["--shutdown-timeout", "2s"]).await;
    eventually("the lease held", 30, || async {
        (holder(&f).await.starts_with("leader")).then_some(())
    })
    .await;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // Watch the Lease: the moment it is released, no helm may be running.
    let started = Instant::now();
    let alive_at_release = loop {
        if holder(&f).await.is_empty() {
            break pids_in(&pids)
                .into_iter()
                .filter(|p| alive(*p))
                .collect::<Vec<_>>();
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "the lease was never released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(
        alive_at_release,
        Vec::<i32>::new(),
        "helm still ran when the lease was released"
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// The API server hangs (frozen: connections open, no answers) and a helm
/// runs: SIGTERM still ends the process within `--shutdown-timeout` — the
/// drain, the helm kill, the Lease release and the Events' flush share it
/// — and no helm outlives it.
#[tokio::test]
async fn on_sigterm_with_the_api_server_hung_the_operator_exits_within_the_shutdown_timeout() {
    const BUDGET_SECS: u64 = 3;
    let f = Fixture::new().await;
    let budget = format!("{BUDGET_SECS}s");
    let (mut child, pids) = leader_with_a_hanging_helm(&f, &["--shutdown-timeout", &budget]).await;
    eventually("the lease held", 30, || async {
        (holder(&f).await.starts_with("leader")).then_some(())
    })
    .await;
    f.cp.freeze_apiserver();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let signalled = Instant::now();
    // Far longer than the budget: a process that hangs is reported, not waited for.
    let exited = loop {
        if child.try_wait().unwrap().is_some() {
            break Some(signalled.elapsed());
        }
        if signalled.elapsed().as_secs() > 60 {
            break None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    f.cp.thaw_apiserver();
    let exited = exited.expect("the operator had not exited 60 s after SIGTERM");
    // Without a shared budget the steps take at least the drain (3 s) +
    // the 6 s renew deadline + 5 s of Event flush: 14 s. The bound sits
    // half way, the budget and 7 s more: a busy machine's scheduling never
    // reaches it, and steps that each took their own time always pass it.
    assert!(
        exited.as_secs_f64() < (BUDGET_SECS + 7) as f64,
        "exited {exited:?} after SIGTERM with --shutdown-timeout {budget}"
    );
    for pid in pids_in(&pids) {
        eventually(
            &format!("helm process {pid} to be gone"),
            5,
            || async move { (!alive(pid)).then_some(()) },
        )
        .await;
    }
}

#[tokio::test]
async fn losing_the_lease_kills_running_helm_process_groups_before_the_operator_exits() {
    let f = Fixture::new().await;
    let (mut child, pids) = leader_with_a_hanging_helm(&f, &[]).await;

    // Another holder takes the lease: this replica cannot renew it.
    let leases: Api<Lease> = Api::namespaced(f.cp.client(), "hossted-operator");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    leases
        .patch(
            "hossted-operator",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": {
                "holderIdentity": "another-replica", "leaseDurationSeconds": 600,
                "renewTime": now, "acquireTime": now } })),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "the operator did not stop after losing its lease"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "a lost lease is not a clean exit");
    for pid in pids_in(&pids) {
        // Reaped by init once killed; give the kernel a moment.
        eventually(
            &format!("helm process {pid} to be gone"),
            5,
            || async move { (!alive(pid)).then_some(()) },
        )
        .await;
    }
}

#[tokio::test]
async fn a_missing_lease_namespace_is_one_plain_warning_and_retried_until_it_exists() {
    let f = Fixture::new().await;
    let log = f.cp.dir().join("candidate.log");
    let port = free_port();
    let mut child = f
        .operator_command(f.cp.kubeconfig_path())
        .env("POD_NAME", "op-a")
        .env("RUST_LOG", "info")
        .args([
            "run",
            "--leader-elect",
            "--leader-election-namespace",
            "absent",
        ])
        .args(["--leader-elect-retry-period", "200ms"])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{port}")])
        .args(["--health-probe-bind-address", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let missing = |text: &str| {
        text.lines()
            .filter(|l| l.contains("cannot create the Lease absent/"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // Retried every 200 ms: many attempts, one line.
    eventually("the warning", 60, || async {
        (!missing(&read()).is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let text = read();
    let lines = missing(&text);
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains("create the namespace or set --leader-election-namespace"),
        "{}",
        lines[0]
    );
    assert!(
        !text.contains("ErrorResponse") && !text.contains("Status {"),
        "{text}"
    );

    // Once the namespace exists, the same process takes the Lease.
    f.namespace("absent").await;
    eventually("leadership", 60, || async {
        read().contains("became leader").then_some(())
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
}

/// Two delivery replicas; the leader is SIGKILLed while its helm waits on
/// a pre-upgrade hook (revision 2 stored `pending-upgrade`). Its helm goes
/// with it; the standby takes the lease once it expires, unlocks revision
/// 2 at once — it was left before the standby led — and upgrades.
#[tokio::test]
async fn the_leader_killed_mid_upgrade_hands_the_release_to_the_standby_which_unlocks_it() {
    let f = Fixture::new().await;
    f.namespace("apps").await;
    f.namespace("hossted-operator").await;
    f.helmapp_crd().await;
    let pids = f.cp.dir().join("helm-pids");
    let wrapper = f.cp.dir().join("pid-helm.sh");
    // Logs "<replica> <pid>", then is helm (the operator's own child).
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}echo \"$REPLICA $$\" >> '{p}'\nexec '{helm}' \"$@\"\n",
            version = version_passes_through(&f.cp.helm_binary()),
            p = pids.display(),
            helm = f.cp.helm_binary().display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let replica = |name: &str| {
        f.operator_command(f.cp.kubeconfig_path())
            .env("POD_NAME", name)
            .env("REPLICA", name)
            .args(["run", "--controllers", "delivery", "--leader-elect"])
            .args(["--leader-election-namespace", "hossted-operator"])
            .args(["--leader-elect-lease-duration", "8s"])
            .args(["--leader-elect-renew-deadline", "6s"])
            .args(["--leader-elect-retry-period", "500ms"])
            .args([
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                "0",
            ])
            .arg("--privileged-namespaces=*")
            .arg("--helm-binary")
            .arg(&wrapper)
            .arg("--work-dir")
            .arg(f.cp.dir().join(format!("work-{name}")))
            .arg("--chart-path-root")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = replica("first");
    eventually("first leads", 30, || async {
        holder(&f).await.starts_with("first").then_some(())
    })
    .await;
    let mut second = replica("second");
    let spec = |greeting: &str| json!({ "chart": { "path": "tiny" }, "values": { "upgradeHook": true, "greeting": greeting } });
    apply_helmapp(&f, "apps", "handed", spec("one")).await;
    helmapp_ready(&f, "apps", "handed", "InstallSucceeded", 1).await;
    patch_helmapp(&f, "apps", "handed", json!({ "spec": spec("two") })).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(f.cp.client(), "apps");
    eventually("the leader's helm waiting on the hook", 60, || async {
        pods.get_opt("handed-upgrade-hook").await.ok()?.map(|_| ())
    })
    .await;
    let stored = storage_revisions(&f, "apps", "handed").await;
    assert_eq!(
        stored
            .get(&2)
            .and_then(|l| l.get("status"))
            .map(String::as_str),
        Some("pending-upgrade")
    );
    let leader_helm: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("first ")?.parse().ok())
        .collect();
    let old_hook = pods.get("handed-upgrade-hook").await.unwrap().metadata.uid;

    first.kill().unwrap();
    first.wait().unwrap();
    for pid in leader_helm {
        eventually(
            &format!("the leader's helm {pid} gone with it"),
            10,
            || async move { (!alive(pid)).then_some(()) },
        )
        .await;
    }
    eventually("the standby leads", 60, || async {
        holder(&f).await.starts_with("second").then_some(())
    })
    .await;
    eventually("the standby's upgrade and its new hook Pod", 60, || async {
        let hook = pods.get_opt("handed-upgrade-hook").await.ok()??;
        (hook.metadata.uid != old_hook).then_some(())
    })
    .await;
    f.set_pod_phase("apps", "handed-upgrade-hook", "Succeeded")
        .await;
    let app = helmapp_ready(&f, "apps", "handed", "UpgradeSucceeded", 3).await;
    let history = app.status.unwrap().history;
    assert!(
        history
            .iter()
            .any(|h| h.action == "unlock" && h.revision == 2),
        "revision 2 unlocked by the standby: {history:?}"
    );
    let _ = second.kill();
    let _ = second.wait();
}
