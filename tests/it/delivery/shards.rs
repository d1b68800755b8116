//! Shards (docs/shards.md): processes started with `--shard a`, `--shard b`
//! and none, on one control plane, each with its own helm that logs who ran
//! it. Every HelmApp is installed exactly once, by a process of its key;
//! a dependency in another shard is waited for; a shard's standby takes
//! over its Lease when its leader dies.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use super::*;

/// The shard label (docs/shards.md).
const KEY: &str = "sharding.hossted.com/key";
/// The lease timings every process runs with: short, so the take-over is
/// quick to watch; a 6 s renew deadline rides out a busy 2-core machine.
const LEASE_DURATION: Duration = Duration::from_secs(8);

/// One operator process: its name (written by its helm into the shared
/// log) and its shard.
struct Process {
    name: &'static str,
    shard: Option<&'static str>,
    child: Child,
}

impl Process {
    fn start(
        f: &Fixture,
        log: &std::path::Path,
        name: &'static str,
        shard: Option<&'static str>,
    ) -> Self {
        let helm = f.cp.helm_binary();
        let wrapper = f.cp.dir().join(format!("helm-{name}.sh"));
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n{}echo \"{name} $*\" >> '{}'\nexec '{}' \"$@\"\n",
                version_passes_through(&helm),
                log.display(),
                helm.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = f.operator_command(f.cp.kubeconfig_path());
        cmd.env("POD_NAME", name)
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
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"));
        if let Some(shard) = shard {
            cmd.args(["--shard", shard]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Process { name, shard, child }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates HelmApp `name` of the tiny chart, in shard `key` (none: no label).
async fn create(f: &Fixture, name: &str, key: Option<&str>, depends_on: Option<&str>) {
    let labels: BTreeMap<&str, &str> = key.map(|k| (KEY, k)).into_iter().collect();
    let mut spec = json!({ "chart": { "path": "tiny" } });
    if let Some(dep) = depends_on {
        spec["dependsOn"] = json!([{ "name": dep }]);
    }
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": NS, "labels": labels },
        "spec": spec,
    }))
    .unwrap();
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
}

/// `(process, release)` of every install or upgrade the helms logged.
fn releases_run(log: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (process, rest) = line.split_once(' ')?;
            let call = HelmCall::parse(rest);
            if !call.releases() {
                return None;
            }
            Some((process.to_string(), call.release()?.to_string()))
        })
        .collect()
}

async fn holder(f: &Fixture, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(f.cp.client(), "hossted-operator")
        .get_opt(lease)
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
        // `<POD_NAME>_<uuid>`: the process's name.
        .map(|h| h.split('_').next().unwrap_or_default().to_string())
}

#[tokio::test]
async fn each_helmapp_is_installed_once_by_its_shard_and_a_standby_takes_over_the_shards_lease() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.namespace("hossted-operator").await;
    f.helmapp_crd().await;
    let log = f.cp.dir().join("sharded-helm.log");
    let mut processes = vec![
        Process::start(&f, &log, "main", None),
        Process::start(&f, &log, "a1", Some("a")),
        Process::start(&f, &log, "a2", Some("a")),
        Process::start(&f, &log, "b1", Some("b")),
    ];
    let shard_by_process: BTreeMap<&str, Option<&str>> =
        processes.iter().map(|p| (p.name, p.shard)).collect();
    // 60 HelmApps over the three keys; one in shard b waits for a HelmApp
    // of shard a that does not exist yet (read from the API server: it is
    // in no cache of shard b).
    let keys = [None, Some("a"), Some("b")];
    let mut key_of: BTreeMap<String, Option<&str>> = BTreeMap::new();
    for i in 0..60 {
        let key = keys[i % 3];
        let name = format!("{}-{i}", key.unwrap_or("u"));
        create(&f, &name, key, None).await;
        key_of.insert(name, key);
    }
    create(&f, "b-waits", Some("b"), Some("a-late")).await;
    key_of.insert("b-waits".into(), Some("b"));
    // A HelmAppSet of shard b: its child carries the set's label.
    let set: apis::helmappset::HelmAppSet = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmAppSet",
        "metadata": { "name": "bset", "namespace": NS, "labels": { KEY: "b" } },
        "spec": { "apps": [{ "name": "web", "spec": { "chart": { "path": "tiny" } } }] },
    }))
    .unwrap();
    let sets = Api::<apis::helmappset::HelmAppSet>::namespaced(f.cp.client(), NS);
    sets.create(&PostParams::default(), &set).await.unwrap();
    key_of.insert("bset-web".into(), Some("b"));
    for name in key_of.keys().filter(|n| *n != "b-waits") {
        with_reason(&f, name, "InstallSucceeded").await;
    }
    with_reason(&f, "b-waits", "DependencyNotFound").await;
    let child = get(&f, "bset-web").await.unwrap();
    assert_eq!(
        child.metadata.labels.unwrap()[KEY],
        "b",
        "the child takes its set's shard"
    );

    // The set relabelled to shard a: its child follows (relabelled by shard
    // a, which finds it owned by the set), and nothing is installed again.
    sets.patch(
        "bset",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { KEY: "a" } } })),
    )
    .await
    .unwrap();
    eventually("the set's child moves to shard a", 60, || async {
        let child = get(&f, "bset-web").await?;
        (child.metadata.labels?.get(KEY)? == "a").then_some(())
    })
    .await;

    // The shard-a leader killed: the standby holds the Lease within its
    // duration and 5 s, and installs what shard a gets next — including
    // what shard b's HelmApp waits for.
    let leader = eventually("shard a's leader", 30, || holder(&f, "hossted-operator-a")).await;
    assert!(["a1", "a2"].contains(&leader.as_str()), "{leader}");
    assert!(
        holder(&f, "hossted-operator-b").await.as_deref() == Some("b1")
            && holder(&f, "hossted-operator").await.as_deref() == Some("main"),
        "each shard elects on its own Lease"
    );
    let at = processes.iter().position(|p| p.name == leader).unwrap();
    let killed = processes.remove(at);
    drop(killed);
    let killed_at = Instant::now();
    let standby = if leader == "a1" { "a2" } else { "a1" };
    eventually("the standby takes shard a's Lease", 30, || async {
        (holder(&f, "hossted-operator-a").await.as_deref() == Some(standby)).then_some(())
    })
    .await;
    let took = killed_at.elapsed();
    assert!(
        took <= LEASE_DURATION + Duration::from_secs(5),
        "the standby took {took:?} to take over"
    );
    create(&f, "a-late", Some("a"), None).await;
    key_of.insert("a-late".into(), Some("a"));
    with_reason(&f, "a-late", "InstallSucceeded").await;
    with_reason(&f, "b-waits", "InstallSucceeded").await;

    // From the helms' own log: each release installed exactly once, by a
    // process of its key; the late one by the standby.
    let runs = releases_run(&log);
    let mut by_release: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (process, release) in &runs {
        by_release.entry(release).or_default().push(process);
    }
    let shard_of = |process: &str| shard_by_process[process];
    for (release, key) in &key_of {
        let ran = by_release
            .get(release.as_str())
            .cloned()
            .unwrap_or_default();
        assert_eq!(ran.len(), 1, "{release} was run by {ran:?}");
        assert_eq!(shard_of(ran[0]), *key, "{release} was run by {}", ran[0]);
    }
    assert_eq!(by_release["a-late"], vec![standby]);
    assert_eq!(
        runs.len(),
        key_of.len(),
        "runs of unknown releases: {runs:?}"
    );
}

/// The chart's admission policy (with `shards: [a, b]`): a new or changed
/// shard label must name a shard that runs — a HelmApp no process takes
/// would never be reconciled, nor uninstalled — while an object keeping
/// its label can still be edited.
#[tokio::test]
async fn the_charts_policy_refuses_a_shard_label_no_process_takes() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/hossted-operator");
    let out = output_ok(
        std::process::Command::new(f.cp.helm_binary())
            .args(["template", "x", chart])
            .args(["--set", "controllers={delivery}", "--set", "shards={a,b}"])
            .args(["-s", "templates/delivery.yaml"]),
    );
    let rendered = String::from_utf8(out.stdout).unwrap();
    let policy: Vec<&str> = rendered
        .split("\n---")
        .filter(|d| d.contains("name: hossted-helmapp-shard"))
        .collect();
    assert_eq!(policy.len(), 2, "the policy and its binding: {rendered}");
    let file = f.cp.dir().join("shard-policy.yaml");
    std::fs::write(&file, policy.join("\n---\n")).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);

    let apps = Api::<HelmApp>::namespaced(f.cp.client(), NS);
    let app = |name: &str, key: Option<&str>| -> HelmApp {
        let labels: BTreeMap<&str, &str> = key.map(|k| (KEY, k)).into_iter().collect();
        serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": name, "namespace": NS, "labels": labels },
            "spec": { "chart": { "path": "tiny" }, "suspend": true },
        }))
        .unwrap()
    };
    let refused = |r: Result<HelmApp, kube::Error>| match r {
        Err(kube::Error::Api(s)) => Some(s.message),
        _ => None,
    };
    // Policies take a moment to be in force: until then a create passes
    // (and is taken back).
    let message = eventually("the policy in force", 60, || async {
        match apps
            .create(&PostParams::default(), &app("nowhere", Some("c")))
            .await
        {
            Ok(_) => {
                apps.delete("nowhere", &DeleteParams::default())
                    .await
                    .unwrap();
                None
            }
            other => refused(other),
        }
    })
    .await;
    assert!(
        message.contains("must name a shard that runs (a, b)"),
        "{message}"
    );
    apps.create(&PostParams::default(), &app("in-a", Some("a")))
        .await
        .unwrap();
    apps.create(&PostParams::default(), &app("unsharded", None))
        .await
        .unwrap();
    // Changed to a value no process takes: refused; other edits pass.
    let relabel = json!({ "metadata": { "labels": { KEY: "c" } } });
    let moved = apps
        .patch("in-a", &PatchParams::default(), &Patch::Merge(relabel))
        .await;
    assert!(refused(moved).is_some());
    let edit = json!({ "spec": { "suspend": false } });
    apps.patch("in-a", &PatchParams::default(), &Patch::Merge(edit))
        .await
        .unwrap();
}
