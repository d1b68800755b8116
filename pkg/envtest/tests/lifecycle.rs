//! A control plane's processes: several in one test process, restart,
//! cleanup on drop and on a killed harness, start failures that say why.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use envtest::{Assets, ControlPlane, Error};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;

mod common;
use common::*;

#[tokio::test]
async fn two_control_planes_in_one_process_do_not_interfere() {
    let (a, b) = tokio::join!(ControlPlane::start(), ControlPlane::start());
    let (a, b) = (
        a.expect("first control plane"),
        b.expect("second control plane"),
    );
    assert_ne!(a.server_url(), b.server_url());
    assert_ne!(a.etcd_url(), b.etcd_url());
    assert_ne!(a.dir(), b.dir());

    let ns_a: Api<Namespace> = Api::all(a.client());
    let ns_b: Api<Namespace> = Api::all(b.client());
    ns_a.create(&PostParams::default(), &namespace("only-in-a"))
        .await
        .unwrap();
    ns_b.create(&PostParams::default(), &namespace("only-in-b"))
        .await
        .unwrap();
    assert!(ns_a.get_opt("only-in-a").await.unwrap().is_some());
    assert!(ns_a.get_opt("only-in-b").await.unwrap().is_none());
    assert!(ns_b.get_opt("only-in-a").await.unwrap().is_none());

    // Stopping one leaves the other working.
    drop(a);
    assert!(ns_b.get_opt("only-in-b").await.unwrap().is_some());
}

#[tokio::test]
async fn drop_kills_both_processes_and_removes_the_directory() {
    let cp = start().await;
    let (etcd, apiserver) = cp.pids();
    let apiserver = apiserver.expect("apiserver running");
    let dir = cp.dir().to_path_buf();
    assert!(alive(etcd) && alive(apiserver) && dir.exists());
    drop(cp);
    assert!(!alive(etcd), "etcd {etcd} survived drop");
    assert!(
        !alive(apiserver),
        "kube-apiserver {apiserver} survived drop"
    );
    assert!(!dir.exists(), "{} survived drop", dir.display());
}

#[tokio::test]
async fn apiserver_can_be_restarted_and_keeps_its_data() {
    let mut cp = start().await;
    let ns: Api<Namespace> = Api::all(cp.client());
    ns.create(&PostParams::default(), &namespace("survives"))
        .await
        .unwrap();
    cp.stop_apiserver();
    assert!(
        ns.get_opt("survives").await.is_err(),
        "a stopped apiserver answered"
    );
    cp.start_apiserver().await.expect("apiserver restarts");
    assert!(ns.get_opt("survives").await.unwrap().is_some());
}

#[tokio::test]
async fn a_process_that_fails_to_start_reports_its_stderr() {
    let err = ControlPlane::builder()
        .apiserver_arg("--no-such-flag=1")
        .start()
        .await
        .err()
        .expect("an unknown flag must fail the start");
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            Error::StartFailed {
                process: "kube-apiserver",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("unknown flag: --no-such-flag"),
        "stderr missing from: {msg}"
    );
}

#[tokio::test]
async fn a_missing_asset_says_to_run_setup_envtest() {
    let empty = tempfile::tempdir().unwrap();
    let err = ControlPlane::builder()
        .assets(Assets::in_dir(empty.path()))
        .start()
        .await
        .err()
        .expect("no binaries, no control plane");
    assert!(matches!(err, Error::AssetMissing { .. }), "{err}");
    assert!(err.to_string().contains("hack/setup-envtest.sh"), "{err}");
}

/// `envtest up` killed with SIGKILL (no destructor runs) still takes etcd
/// and kube-apiserver with it.
#[test]
fn killing_the_harness_process_leaves_no_orphan() {
    let mut up = Command::new(env!("CARGO_BIN_EXE_envtest"))
        .arg("up")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = up.stdout.take().unwrap();
    let mut pids = Vec::new();
    let mut kubeconfig = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.starts_with("envtest: ready") {
            // "... (etcd pid N, kube-apiserver pid M)"
            pids = line
                .split(|c: char| !c.is_ascii_digit())
                .rev()
                .filter(|s| !s.is_empty())
                .take(2)
                .map(|s| s.parse::<u32>().unwrap())
                .collect();
        }
        if let Some(p) = line.strip_prefix("KUBECONFIG=") {
            kubeconfig = Some(PathBuf::from(p));
            break;
        }
    }
    assert_eq!(pids.len(), 2, "envtest up did not print its pids");
    assert!(pids.iter().all(|&p| alive(p)));
    up.kill().unwrap();
    up.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "orphans survived SIGKILL of their harness: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGKILL skips the destructor that removes the directory: tidy up.
    if let Some(dir) = kubeconfig.as_deref().and_then(Path::parent) {
        let _ = std::fs::remove_dir_all(dir);
    }
}
