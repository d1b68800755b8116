//! Proves the control plane from `envtest` is a real kube-apiserver + etcd:
//! CRDs, watches, RBAC, helm releases, isolation between harnesses, and
//! clean teardown.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use envtest::{Assets, ControlPlane, Error, eventually};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Api, Client};

async fn start() -> ControlPlane {
    ControlPlane::start().await.expect("control plane starts")
}

/// Whether `pid` is a live process (a zombie awaiting its reaper is dead).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => false,
    }
}

fn run_ok(mut cmd: Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn chart(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/charts")
        .join(name)
}

fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn crd_is_established_and_custom_objects_can_be_created_listed_and_watched() {
    let cp = start().await;
    let client = cp.client();
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.test.hossted.dev" },
        "spec": {
            "group": "test.hossted.dev",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"] },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "properties": { "size": { "type": "integer" } } }
                } } }
            }]
        }
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    eventually("CRD Established", 30, || async {
        let crd = crds.get("widgets.test.hossted.dev").await.ok()?;
        let established = crd
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await;

    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("test.hossted.dev", "v1", "Widget"));
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let widget = |name: &str, size: i64| {
        let mut w = DynamicObject::new(name, &ar);
        w.data = serde_json::json!({ "spec": { "size": size } });
        w
    };
    // The discovery document may lag the Established condition briefly.
    eventually("first widget created", 30, || async {
        widgets
            .create(&PostParams::default(), &widget("first", 1))
            .await
            .ok()
    })
    .await;

    let list = widgets.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].data["spec"]["size"], 1);
    let rv = list.metadata.resource_version.clone().unwrap();

    let mut stream = widgets
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    widgets
        .create(&PostParams::default(), &widget("second", 2))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(30), stream.try_next())
        .await
        .expect("a watch event within 30 s")
        .unwrap()
        .expect("the watch stream stays open");
    match event {
        WatchEvent::Added(obj) => {
            assert_eq!(obj.metadata.name.as_deref(), Some("second"));
            assert_eq!(obj.data["spec"]["size"], 2);
        }
        other => panic!("expected Added(second), got {other:?}"),
    }

    // The real kubectl sees them too, through the CRD's short name.
    let names = run_ok({
        let mut c = cp.kubectl();
        c.args(["get", "wd", "-n", "default", "-o", "name"]);
        c
    });
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "widget.test.hossted.dev/first",
            "widget.test.hossted.dev/second"
        ]
    );
}

fn is_forbidden<T: std::fmt::Debug>(r: &Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 403)
}

async fn grant_pod_list(admin: &Client, subject: Subject, role: &str) {
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role_obj = ClusterRole {
        metadata: ObjectMeta {
            name: Some(role.into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["".into()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["list".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    roles
        .create(&PostParams::default(), &role_obj)
        .await
        .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(role.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![subject]),
    };
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test]
async fn rbac_is_enforced_for_service_accounts_and_users() {
    let cp = start().await;
    let admin = cp.client();

    // A ServiceAccount with a real bound token.
    let sa_client = cp
        .client_for_service_account("rbac-test", "reader")
        .await
        .unwrap();
    let sa_pods: Api<Pod> = Api::namespaced(sa_client, "rbac-test");
    let denied = sa_pods.list(&ListParams::default()).await;
    assert!(
        is_forbidden(&denied),
        "expected 403 before any grant, got {denied:?}"
    );

    // A user with a client certificate.
    let user_client = cp.client_for_user("alice", Some("auditors")).await.unwrap();
    let user_pods: Api<Pod> = Api::all(user_client);
    let denied = user_pods.list(&ListParams::default()).await;
    assert!(
        is_forbidden(&denied),
        "expected 403 before any grant, got {denied:?}"
    );

    grant_pod_list(
        &admin,
        Subject {
            kind: "ServiceAccount".into(),
            name: "reader".into(),
            namespace: Some("rbac-test".into()),
            ..Default::default()
        },
        "sa-pod-reader",
    )
    .await;
    // Grant the user through its group, proving the certificate's O is read.
    grant_pod_list(
        &admin,
        Subject {
            kind: "Group".into(),
            name: "auditors".into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        },
        "group-pod-reader",
    )
    .await;

    // The RBAC authorizer picks grants up from its own informer: poll.
    eventually("ServiceAccount may list pods", 30, || async {
        sa_pods.list(&ListParams::default()).await.ok()
    })
    .await;
    eventually("user may list pods", 30, || async {
        user_pods.list(&ListParams::default()).await.ok()
    })
    .await;
    // Only what was granted: listing secrets stays forbidden.
    let secrets: Api<Secret> = Api::namespaced(
        cp.client_for_service_account("rbac-test", "reader")
            .await
            .unwrap(),
        "rbac-test",
    );
    assert!(is_forbidden(&secrets.list(&ListParams::default()).await));
}

fn release_secret_names(secrets: &[Secret]) -> Vec<String> {
    let mut names: Vec<String> = secrets
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn helm_install_and_upgrade_write_release_secrets() {
    let cp = start().await;
    run_ok({
        let mut c = cp.helm();
        c.args(["install", "demo"]).arg(chart("tiny")).args([
            "-n",
            "helm-test",
            "--create-namespace",
        ]);
        c
    });
    let secrets: Api<Secret> = Api::namespaced(cp.client(), "helm-test");
    let owned_by_helm = ListParams::default().labels("owner=helm");
    let list = secrets.list(&owned_by_helm).await.unwrap().items;
    assert_eq!(release_secret_names(&list), ["sh.helm.release.v1.demo.v1"]);
    assert_eq!(list[0].type_.as_deref(), Some("helm.sh/release.v1"));
    let labels = list[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("name").map(String::as_str), Some("demo"));
    assert_eq!(labels.get("status").map(String::as_str), Some("deployed"));

    // The chart's own object exists too.
    let cm = run_ok({
        let mut c = cp.kubectl();
        c.args([
            "get",
            "configmap",
            "demo-tiny",
            "-n",
            "helm-test",
            "-o",
            "jsonpath={.data.greeting}",
        ]);
        c
    });
    assert_eq!(cm, "hello");

    run_ok({
        let mut c = cp.helm();
        c.args(["upgrade", "demo"]).arg(chart("tiny")).args([
            "-n",
            "helm-test",
            "--set",
            "greeting=hi",
        ]);
        c
    });
    let list = secrets.list(&owned_by_helm).await.unwrap().items;
    assert_eq!(
        release_secret_names(&list),
        ["sh.helm.release.v1.demo.v1", "sh.helm.release.v1.demo.v2"]
    );
    let status_of = |name: &str| {
        list.iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .and_then(|s| s.metadata.labels.as_ref()?.get("status").cloned())
    };
    assert_eq!(
        status_of("sh.helm.release.v1.demo.v1").as_deref(),
        Some("superseded")
    );
    assert_eq!(
        status_of("sh.helm.release.v1.demo.v2").as_deref(),
        Some("deployed")
    );
}

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
