//! Two operator processes with leader election: exactly one reports; killing
//! the leader hands over to the other; nothing is posted twice.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;

fn candidate(f: &Fixture, name: &str) -> Child {
    f.operator_command(f.cp.kubeconfig_path())
        .env("POD_NAME", name)
        .args([
            "run",
            "--leader-elect",
            "--leader-election-namespace",
            "hossted-operator",
        ])
        .args([
            "--coalesce-window",
            "100ms",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
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
    let mut a = candidate(&f, "op-a");
    let mut b = candidate(&f, "op-b");

    f.wait_requests("/v1/apps", 1, 60).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
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
    let first = holder(&f).await;
    let (leader, standby, standby_prefix) = if first.starts_with("op-a_") {
        (&mut a, &mut b, "op-b_")
    } else {
        assert!(first.starts_with("op-b_"), "unexpected holder {first:?}");
        (&mut b, &mut a, "op-a_")
    };

    // Kill the leader outright: the standby takes over once the lease expires.
    leader.kill().unwrap();
    leader.wait().unwrap();
    let killed = Instant::now();
    eventually("the standby to take the lease", 40, || async {
        holder(&f).await.starts_with(standby_prefix).then_some(())
    })
    .await;
    let takeover = killed.elapsed();
    println!("takeover after SIGKILL of the leader: {takeover:?}");
    // client-go's bound: the lease duration (15 s) counted from the last
    // renewal the standby observed, which it polls every retry period (2 s):
    // at most 15 s + 2 x 2 s after the kill.
    assert!(
        takeover <= Duration::from_secs(19),
        "takeover took {takeover:?}"
    );

    // The new leader starts warm and re-sends nothing delivered before.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        f.requests_to("/v1/apps").len(),
        1,
        "an app was posted twice across the failover"
    );
    f.helm_upgrade("web", "web", "apps", "port=81");
    let posts = f.wait_requests("/v1/apps", 2, 30).await;
    assert_eq!(posts[1].json()["app_info"]["helm_info"]["revision"], 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(f.requests_to("/v1/apps").len(), 2);

    // SIGTERM: the leader drains, releases the lease and exits 0.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(standby.id() as i32, libc::SIGTERM) };
    let status = standby.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(holder(&f).await, "", "the lease was not released");
}
