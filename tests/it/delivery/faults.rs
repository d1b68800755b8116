//! Faults (issue 43): while the API server is down no helm process starts —
//! a helm then would only fail to connect, and every retry used to spawn
//! another — and once it is back every HelmApp converges.

use super::*;

/// Seconds since the epoch, as the wrapper's `date +%s.%N` writes them.
pub(super) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The start times of the runs that write a revision (`install`,
/// `upgrade`) the wrapper logged.
fn release_starts(log: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let at: f64 = words.next()?.parse().ok()?;
            matches!(words.next()?, "install" | "upgrade").then_some(at)
        })
        .collect()
}

#[tokio::test]
async fn no_helm_starts_while_the_api_server_is_down_and_every_app_converges_after() {
    let mut f = Fixture::new().await;
    f.namespace(NS).await;
    let helm = f.cp.helm_binary();
    let log = f.cp.dir().join("helm-starts.log");
    let gate = f.cp.dir().join("helm-gate");
    let wrapper = f.cp.dir().join("gated-helm.sh");
    // Logs each start, then waits while the gate file exists.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}echo \"$(date +%s.%N) $*\" >> '{log}'\nwhile [ -e '{gate}' ]; do sleep 0.05; done\nexec '{helm}' \"$@\"\n",
            version = version_passes_through(&helm),
            log = log.display(),
            gate = gate.display(),
            helm = helm.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let names = ["down-a", "down-b", "down-c"];
    for name in names {
        apply(&f, name, json!({ "chart": { "path": "tiny" } })).await;
    }
    for name in names {
        ready(&f, name, "InstallSucceeded", 1).await;
    }

    // Three upgrades start and wait at the gate; the API server goes down;
    // the gate opens: each fails to connect.
    std::fs::write(&gate, "").unwrap();
    for name in names {
        patch(
            &f,
            name,
            json!({ "spec": { "values": { "greeting": "two" } } }),
        )
        .await;
    }
    let installs = names.len();
    eventually("three upgrades at the gate", 60, || async {
        (release_starts(&log).len() == installs + names.len()).then_some(())
    })
    .await;
    f.cp.stop_apiserver();
    let down_at = now();
    std::fs::remove_file(&gate).unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    let up_at = now();
    let during: Vec<f64> = release_starts(&log)
        .into_iter()
        .filter(|t| *t > down_at && *t < up_at)
        .collect();
    assert_eq!(
        during,
        Vec::<f64>::new(),
        "helm started while the API was down"
    );
    f.cp.start_apiserver().await.unwrap();

    for name in names {
        let app = ready(&f, name, "UpgradeSucceeded", 2).await;
        assert_eq!(
            app.status.unwrap().failures,
            0,
            "{name}: the outage spent no retry"
        );
    }
    // One more upgrade each, after the outage: none failed for it.
    assert_eq!(release_starts(&log).len(), installs + 2 * names.len());
    assert_eq!(
        sample(&operator.scrape(), "hossted_api_reachable"),
        Some(1.0),
        "reachable again"
    );
    operator.stop().await;
}

/// A chart at `version` whose objects carry no `app.kubernetes.io/instance`
/// label (charts need not set it; helm adds only `managed-by` and its
/// release annotations): a Service and a ConfigMap.
fn unlabelled_chart(f: &Fixture, version: &str) -> std::path::PathBuf {
    let dir =
        f.cp.dir()
            .join(format!("unlabelled-{version}"))
            .join("bare");
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: bare\nversion: {version}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/objects.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}-app\nspec:\n  ports: [{port: 80}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-env\ndata:\n  chart: {{ .Chart.Version | quote }}\n",
    )
    .unwrap();
    dir
}

/// [`unlabelled_chart`] at `version`, published in `repo` (packaged, its
/// index written again).
fn publish_unlabelled(f: &Fixture, repo: &envtest::ChartRepo, version: &str) {
    let dir = repo.dir().to_str().unwrap().to_string();
    let chart = unlabelled_chart(f, version);
    f.helm(&["package", chart.to_str().unwrap(), "--destination", &dir]);
    f.helm(&["repo", "index", &dir, "--url", repo.url()]);
}

/// Once `name`'s status shows chart `version`.
async fn chart_version_shown(f: &Fixture, name: &str, version: &str) {
    eventually(&format!("status.chartVersion {version}"), 60, || async {
        let app = get(f, name).await?;
        (app.status?.chart_version == version).then_some(())
    })
    .await;
}

/// A Service and a ConfigMap of the release, deleted the moment
/// `status.chartVersion` shows a chart-version upgrade, are put back —
/// though the chart sets no `app.kubernetes.io/instance` label: a deletion
/// is mapped to its release by helm's own annotations.
#[tokio::test]
async fn a_deletion_right_after_a_chart_version_upgrade_is_put_back() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let repo = envtest::ChartRepo::start(&f.cp, &[&unlabelled_chart(&f, "1.0.0")], None)
        .await
        .unwrap();
    let operator = f.start_delivery().await;
    let chart = |version: &str| json!({ "repo": repo.url(), "name": "bare", "version": version });
    apply(&f, "quick", json!({ "chart": chart("1.0.0") })).await;
    ready(&f, "quick", "InstallSucceeded", 1).await;
    publish_unlabelled(&f, &repo, "1.1.0");
    patch(&f, "quick", json!({ "spec": { "chart": chart("1.1.0") } })).await;
    chart_version_shown(&f, "quick", "1.1.0").await;
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(f.cp.client(), NS);
    let configmaps: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let service = services
        .get("quick-app")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let configmap = configmaps
        .get("quick-env")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    services
        .delete("quick-app", &DeleteParams::default())
        .await
        .unwrap();
    configmaps
        .delete("quick-env", &DeleteParams::default())
        .await
        .unwrap();
    eventually("both put back", 30, || async {
        let s = services.get_opt("quick-app").await.ok()??;
        let c = configmaps.get_opt("quick-env").await.ok()??;
        (s.metadata.uid.as_deref() != Some(service.as_str())
            && c.metadata.uid.as_deref() != Some(configmap.as_str()))
        .then_some(())
    })
    .await;
    operator.stop().await;
}

/// Issue 58, 1: the Service alone — a kind cached only with helm's label,
/// which this chart does not set — deleted the moment `status.chartVersion`
/// shows the upgrade. A digest was recorded for it, so its absence from
/// the cache is read at once (never left to the slow poll of unwatched
/// kinds): put back.
#[tokio::test]
async fn a_service_alone_deleted_right_after_a_chart_version_upgrade_is_put_back() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let repo = envtest::ChartRepo::start(&f.cp, &[&unlabelled_chart(&f, "1.0.0")], None)
        .await
        .unwrap();
    let operator = f.start_delivery().await;
    let chart = |version: &str| json!({ "repo": repo.url(), "name": "bare", "version": version });
    // A long interval: only the deletion's event can bring it back in time.
    let spec = |version: &str| json!({ "chart": chart(version), "interval": "1h", "drift": { "mode": "enabled" } });
    apply(&f, "lone", spec("1.0.0")).await;
    ready(&f, "lone", "InstallSucceeded", 1).await;
    publish_unlabelled(&f, &repo, "1.1.0");
    patch(&f, "lone", json!({ "spec": spec("1.1.0") })).await;
    chart_version_shown(&f, "lone", "1.1.0").await;
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(f.cp.client(), NS);
    let service = services
        .get("lone-app")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    services
        .delete("lone-app", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service put back", 30, || async {
        let s = services.get_opt("lone-app").await.ok()??;
        (s.metadata.uid.as_deref() != Some(service.as_str())).then_some(())
    })
    .await;
    operator.stop().await;
}

/// Issue 58, 2: `drift.mode: enabled`, a digest recorded (an edit put back
/// while running), the operator stopped, the ConfigMap edited, the
/// operator started: the edit is put back — though the first reconcile of
/// the new process finds the chart still being fetched (a drift found is
/// recorded only by the step that acts on it).
#[tokio::test]
async fn an_edit_made_while_the_operator_was_stopped_is_put_back() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let repo = envtest::ChartRepo::start(&f.cp, &[&unlabelled_chart(&f, "1.0.0")], None)
        .await
        .unwrap();
    let operator = f.start_delivery().await;
    let spec = json!({
        "chart": { "repo": repo.url(), "name": "bare", "version": "1.0.0" },
        "interval": "1h",
        "drift": { "mode": "enabled" }
    });
    apply(&f, "asleep", spec).await;
    ready(&f, "asleep", "InstallSucceeded", 1).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let edit = |value: &'static str| {
        let configmaps = configmaps.clone();
        async move {
            configmaps
                .patch(
                    "asleep-env",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "data": { "chart": value } })),
                )
                .await
                .unwrap();
        }
    };
    let chart_value =
        || async { configmaps.get("asleep-env").await.unwrap().data.unwrap()["chart"].clone() };
    // Edited and put back while running: a digest is recorded.
    edit("edited while running").await;
    eventually("the running edit put back", 30, || async {
        (chart_value().await == "1.0.0").then_some(())
    })
    .await;
    operator.stop().await;
    edit("edited while stopped").await;
    let operator = f.start_delivery().await;
    eventually("the edit made while stopped put back", 30, || async {
        (chart_value().await == "1.0.0").then_some(())
    })
    .await;
    operator.stop().await;
}

/// A helm wrapper that logs `<time> start <pid>` and `<time> end <pid>`
/// around each run of the real helm (its pid is the run's process group).
pub(super) fn logging_helm(f: &Fixture, log: &std::path::Path) -> std::path::PathBuf {
    gated_logging_helm(f, log, &f.cp.dir().join("no-gate"))
}

/// [`logging_helm`] whose runs, once logged, wait while the file `gate`
/// exists.
fn gated_logging_helm(
    f: &Fixture,
    log: &std::path::Path,
    gate: &std::path::Path,
) -> std::path::PathBuf {
    let helm = f.cp.helm_binary();
    let wrapper = f.cp.dir().join("logging-helm.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}echo \"$(date +%s.%N) start $$\" >> '{log}'\nwhile [ -e '{gate}' ]; do sleep 0.05; done\n'{helm}' \"$@\"\nrc=$?\necho \"$(date +%s.%N) end $$\" >> '{log}'\nexit $rc\n",
            version = version_passes_through(&helm),
            log = log.display(),
            gate = gate.display(),
            helm = helm.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

/// `(time, started, pid)` of each line of a [`logging_helm`] log.
pub(super) fn helm_log(log: &std::path::Path) -> Vec<(f64, bool, i32)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let at = w.next()?.parse().ok()?;
            let started = w.next()? == "start";
            Some((at, started, w.next()?.parse().ok()?))
        })
        .collect()
}

/// The pids of runs started and not ended.
fn running(log: &std::path::Path) -> Vec<i32> {
    let mut open = Vec::new();
    for (_, started, pid) in helm_log(log) {
        match started {
            true => open.push(pid),
            false => open.retain(|p| *p != pid),
        }
    }
    open
}

/// The operator binary as its own process — a pod the test can kill —
/// running delivery alone with `helm` as the wrapper `helm`.
fn delivery_pod(f: &Fixture, helm: &std::path::Path, work: &str) -> std::process::Child {
    delivery_pod_serving(f, helm, work, "0")
}

/// [`delivery_pod`] serving its metrics at `metrics` (`0`: none).
fn delivery_pod_serving(
    f: &Fixture,
    helm: &std::path::Path,
    work: &str,
    metrics: &str,
) -> std::process::Child {
    f.operator_command(f.cp.kubeconfig_path())
        .args([
            "run",
            "--controllers",
            "delivery",
            "--privileged-namespaces=*",
        ])
        .args([
            "--metrics-bind-address",
            metrics,
            "--health-probe-bind-address",
            "0",
        ])
        .arg("--helm-binary")
        .arg(helm)
        .arg("--work-dir")
        .arg(f.cp.dir().join(work))
        .arg("--chart-path-root")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The pod is SIGKILLed mid-upgrade — the operator and its helm, no chance
/// to clean up — while helm waits on a pre-upgrade hook with revision 2
/// stored `pending-upgrade`. The next operator unlocks it and upgrades;
/// never two helm processes at once.
#[tokio::test]
async fn a_pod_killed_mid_upgrade_leaves_a_pending_release_the_next_operator_unlocks() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let log = f.cp.dir().join("helm-runs.log");
    let wrapper = logging_helm(&f, &log);
    let mut pod = delivery_pod(&f, &wrapper, "killed-work");
    let spec = |greeting: &str| json!({ "chart": { "path": "tiny" }, "values": { "upgradeHook": true, "greeting": greeting } });
    apply(&f, "killed", spec("one")).await;
    ready(&f, "killed", "InstallSucceeded", 1).await;
    patch(&f, "killed", json!({ "spec": spec("two") })).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(f.cp.client(), NS);
    eventually("helm waiting on the pre-upgrade hook", 60, || async {
        pods.get_opt("killed-upgrade-hook").await.ok()?.map(|_| ())
    })
    .await;
    let stored = revisions(&f, "killed").await;
    assert_eq!(
        stored
            .get(&2)
            .and_then(|l| l.get("status"))
            .map(String::as_str),
        Some("pending-upgrade")
    );

    // The pod dies: the operator and every helm group, at once.
    let helms = running(&log);
    assert_eq!(helms.len(), 1, "one helm runs the upgrade");
    pod.kill().unwrap();
    for pid in &helms {
        // SAFETY: kill(2) on a process group our child started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    pod.wait().unwrap();
    let killed_at = now();
    let old_hook = pods.get("killed-upgrade-hook").await.unwrap().metadata.uid;

    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    // helm replaces the hook Pod; this one may run.
    eventually("the upgrade's new hook Pod", 60, || async {
        let hook = pods.get_opt("killed-upgrade-hook").await.ok()??;
        (hook.metadata.uid != old_hook).then_some(())
    })
    .await;
    f.set_pod_phase(NS, "killed-upgrade-hook", "Succeeded")
        .await;
    let app = ready(&f, "killed", "UpgradeSucceeded", 3).await;
    let history = app.status.unwrap().history;
    assert!(
        history
            .iter()
            .any(|h| h.action == "unlock" && h.revision == 2),
        "revision 2 unlocked: {history:?}"
    );
    // One helm at a time: the killed run counts as running until the kill.
    let mut at_once = 0;
    for (at, started, pid) in helm_log(&log) {
        if started {
            at_once += 1;
            assert_eq!(
                at_once, 1,
                "a second helm started while one ran (pid {pid} at {at})"
            );
        } else {
            at_once -= 1;
        }
        if helms.contains(&pid) && started {
            // Killed: it never logs its end.
            assert!(at < killed_at);
            at_once -= 1;
        }
    }
    operator.stop().await;
}

/// Many upgrades asked for at once, the API server killed as they start:
/// those that wait for a helm slot never start one while it is down.
#[tokio::test]
async fn runs_waiting_for_a_slot_start_no_helm_while_the_api_server_is_down() {
    let mut f = Fixture::new().await;
    f.namespace(NS).await;
    let log = f.cp.dir().join("helm-runs.log");
    let gate = f.cp.dir().join("slot-gate");
    let wrapper = gated_logging_helm(&f, &log, &gate);
    let operator = f
        .start_delivery_with(|s| {
            s.helm.binary = wrapper.clone();
            s.helm.max_concurrent = 1;
        })
        .await;
    let names: Vec<String> = (0..8).map(|i| format!("slot-{i}")).collect();
    for name in &names {
        apply(&f, name, json!({ "chart": { "path": "tiny" } })).await;
    }
    for name in &names {
        ready(&f, name, "InstallSucceeded", 1).await;
    }
    // The first upgrade holds the one slot, waiting at the gate (helm
    // itself not started: nothing of it reaches the storage).
    std::fs::write(&gate, "").unwrap();
    let before = helm_log(&log).len();
    for name in &names {
        patch(
            &f,
            name,
            json!({ "spec": { "values": { "greeting": "two" } } }),
        )
        .await;
    }
    eventually("the first upgrade started", 60, || async {
        (helm_log(&log).len() > before).then_some(())
    })
    .await;
    f.cp.stop_apiserver();
    std::fs::remove_file(&gate).unwrap();
    let down_at = now();
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    let up_at = now();
    let during: Vec<f64> = helm_log(&log)
        .into_iter()
        .filter(|(at, started, _)| *started && *at > down_at + 1.0 && *at < up_at)
        .map(|(at, _, _)| at - down_at)
        .collect();
    f.cp.start_apiserver().await.unwrap();
    assert_eq!(
        during,
        Vec::<f64>::new(),
        "helm started while the API server was down (seconds into the outage)"
    );
    for name in &names {
        let app = ready(&f, name, "UpgradeSucceeded", 2).await;
        assert_eq!(
            app.status.unwrap().failures,
            0,
            "{name}: the outage spent no retry"
        );
    }
    operator.stop().await;
}

/// What lets the operator record its own revision when the storage read
/// after a run fails: the release helm prints (`--output json`) has the
/// content digest of the revision helm stores — under helm 4 and helm 3.
#[tokio::test]
async fn the_release_helm_prints_has_the_content_digest_of_the_revision_it_stores() {
    use hossted_operator::lean::storage::{content_digest, content_digest_of_json};
    let f = Fixture::new().await;
    f.namespace(NS).await;
    for (version, release) in [
        (HelmUnderTest::Four, "printed"),
        (HelmUnderTest::Three, "printed3"),
    ] {
        // The assets' helm command (its homes), with this binary.
        let mut helm = std::process::Command::new(version.binary(&f));
        let reference = f.cp.helm();
        helm.envs(reference.get_envs().filter_map(|(k, v)| Some((k, v?))));
        let out = output_ok(helm.args([
            "upgrade",
            "--install",
            release,
            &chart("tiny"),
            "-n",
            NS,
            "-o",
            "json",
            "--set",
            "greeting=printed",
        ]));
        let printed = content_digest_of_json(&out.stdout).expect("helm printed a release");
        let stored = Api::<Secret>::namespaced(f.cp.client(), NS)
            .get(&format!("sh.helm.release.v1.{release}.v1"))
            .await
            .unwrap();
        let payload = stored.data.unwrap()["release"].0.clone();
        assert_eq!(content_digest(&payload), Some(printed), "{release}");
    }
}

/// etcd frozen (SIGSTOP) while upgrades are asked for: the API server
/// answers but nothing reaches storage. Once it thaws every app converges,
/// no retry spent, no helm run repeated for it.
#[tokio::test]
async fn with_etcd_frozen_every_app_converges_after_the_thaw_spending_no_retry() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let log = f.cp.dir().join("helm-runs.log");
    let wrapper = logging_helm(&f, &log);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let names = ["cold-a", "cold-b", "cold-c"];
    for name in names {
        apply(&f, name, json!({ "chart": { "path": "tiny" } })).await;
    }
    for name in names {
        ready(&f, name, "InstallSucceeded", 1).await;
    }
    let before = helm_log(&log)
        .iter()
        .filter(|(_, started, _)| *started)
        .count();
    for name in names {
        patch(
            &f,
            name,
            json!({ "spec": { "values": { "greeting": "thawed" } } }),
        )
        .await;
    }
    f.cp.freeze_etcd();
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    f.cp.thaw_etcd();
    for name in names {
        let app = eventually(&format!("{name}: upgraded after the thaw"), 120, || async {
            let app = get(&f, name).await?;
            let st = app.status.as_ref()?;
            let settled = st.observed_generation == app.metadata.generation;
            (is_ready(&app) && settled && st.revision >= 2).then_some(app)
        })
        .await;
        assert_eq!(
            app.status.unwrap().failures,
            0,
            "{name}: the freeze spent a retry"
        );
    }
    let runs = helm_log(&log)
        .iter()
        .filter(|(_, started, _)| *started)
        .count()
        - before;
    assert_eq!(runs, names.len(), "one upgrade per app, none repeated");
    operator.stop().await;
}

/// An upgrade succeeds, and the API server goes down before the operator
/// could read the storage or write the status. Through the outage the app
/// waits parked — no reconcile retried at the rate limiter's pace — and
/// the revision its own helm made, which the cache saw and the status does
/// not hold, is not taken for someone else's (no `StorageTampered`).
/// After the outage the app is `Ready` (`UpToDate`: the upgrade's own
/// report was cut off) at revision 2 with both revisions recorded, and no
/// `StorageTampered` Event was ever written.
#[tokio::test]
async fn an_outage_right_after_a_successful_upgrade_is_waited_out_and_reports_no_tampering() {
    let mut f = Fixture::new().await;
    f.namespace(NS).await;
    let helm = f.cp.helm_binary();
    let (hold, done) = (f.cp.dir().join("hold"), f.cp.dir().join("done"));
    let wrapper = f.cp.dir().join("holding-helm.sh");
    // Runs helm; while `hold` exists, says `done` and waits before exiting.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}'{helm}' \"$@\"\nrc=$?\nif [ -e '{hold}' ]; then touch '{done}'; while [ -e '{hold}' ]; do sleep 0.05; done; fi\nexit $rc\n",
            version = version_passes_through(&helm),
            helm = helm.display(),
            hold = hold.display(),
            done = done.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let name = "cut-off";
    apply(&f, name, json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, name, "InstallSucceeded", 1).await;
    let retries = "workqueue_retries_total{name=\"helmapp\"}";
    let retries_before = sample(&operator.scrape(), retries).unwrap_or(0.0);

    std::fs::write(&hold, "").unwrap();
    patch(
        &f,
        name,
        json!({ "spec": { "values": { "greeting": "two" } } }),
    )
    .await;
    eventually("the upgrade done, its helm held", 60, || async {
        done.exists().then_some(())
    })
    .await;
    // Revision 2 is stored; the operator's cache saw it, its status not.
    eventually("revision 2 in the storage", 30, || async {
        revisions(&f, name).await.contains_key(&2).then_some(())
    })
    .await;
    f.cp.stop_apiserver();
    std::fs::remove_file(&hold).unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let retries_during = sample(&operator.scrape(), retries).unwrap_or(0.0) - retries_before;
    f.cp.start_apiserver().await.unwrap();

    let app = ready(&f, name, "UpToDate", 2).await;
    let status = app.status.unwrap();
    let mut recorded: Vec<i64> = status.storage_digests.iter().map(|d| d.revision).collect();
    recorded.sort();
    assert_eq!(recorded, vec![1, 2], "both revisions recorded as ours");
    assert_eq!(status.failures, 0, "the outage spent no retry");
    assert_eq!(
        retries_during, 0.0,
        "reconciles retried at the rate limiter's pace during the outage"
    );
    // A repair (its object deleted): its Event is written after any the
    // outage queued (one writer, in order).
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(f.cp.client(), NS)
        .delete(&format!("{name}-tiny"), &Default::default())
        .await
        .unwrap();
    an_event(&f, NS, name, "DriftRepaired").await;
    assert!(
        !reasons_of_events(&f, name)
            .await
            .contains(&"StorageTampered".to_string()),
        "the outage was reported as tampering"
    );
    operator.stop().await;
}

/// The pod is killed after helm finished an upgrade and before the
/// operator recorded it: revision 2 is `deployed`, labelled ours, and no
/// status knows it. The next operator renders the configuration, finds it
/// is what revision 2 holds, and records it — no `StorageTampered`, no
/// second upgrade. The same revision edited before the restart is not
/// taken for ours.
#[tokio::test]
async fn a_revision_finished_as_the_pod_died_is_proven_ours_by_its_render() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let helm = f.cp.helm_binary();
    let dir = f.cp.dir().to_path_buf();
    let wrapper = dir.join("holding-helm.sh");
    // Runs helm; after an upgrade (not a dry run) of release R while
    // `hold-R` exists, says `done-R` and waits before exiting.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{version}'{helm}' \"$@\"\nrc=$?\ncase \"$*\" in *--dry-run*) exit $rc ;; esac\nrel=; seen=; for a in \"$@\"; do if [ -n \"$seen\" ] && [ -z \"$rel\" ]; then rel=$a; fi; [ \"$a\" = -- ] && seen=1; done\nif [ \"$1\" = upgrade ] && [ -e '{dir}/hold-'\"$rel\" ]; then touch '{dir}/done-'\"$rel\"; while [ -e '{dir}/hold-'\"$rel\" ]; do sleep 0.05; done; fi\nexit $rc\n",
            version = version_passes_through(&helm),
            helm = helm.display(),
            dir = dir.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spec =
        |greeting: &str| json!({ "chart": { "path": "tiny" }, "values": { "greeting": greeting } });
    for name in ["finished", "edited"] {
        let mut pod = delivery_pod(&f, &wrapper, &format!("work-{name}"));
        apply(&f, name, spec("one")).await;
        ready(&f, name, "InstallSucceeded", 1).await;
        let (hold, done) = (
            dir.join(format!("hold-{name}")),
            dir.join(format!("done-{name}")),
        );
        std::fs::write(&hold, "").unwrap();
        patch(&f, name, json!({ "spec": spec("two") })).await;
        eventually("helm finished, the operator not told", 60, || async {
            done.exists().then_some(())
        })
        .await;
        pod.kill().unwrap();
        pod.wait().unwrap();
        std::fs::remove_file(&hold).unwrap();
        let stored = revisions(&f, name).await;
        assert_eq!(
            stored
                .get(&2)
                .and_then(|l| l.get("status"))
                .map(String::as_str),
            Some("deployed")
        );
        assert_eq!(get(&f, name).await.unwrap().status.unwrap().revision, 1);
    }
    // Revision 2 of `edited` changed before anyone looked: a ConfigMap
    // added to its manifest.
    let secret = Api::<Secret>::namespaced(f.cp.client(), NS)
        .get("sh.helm.release.v1.edited.v2")
        .await
        .unwrap();
    let mut release = super::storage_trust::payload(&secret);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!(
        "{manifest}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: {NS}\n"
    ));
    Api::<Secret>::namespaced(f.cp.client(), NS)
        .replace(
            "sh.helm.release.v1.edited.v2",
            &PostParams::default(),
            &super::storage_trust::with_payload(secret, &release),
        )
        .await
        .unwrap();

    let operator = f.start_delivery().await;
    let app = ready(&f, "finished", "UpToDate", 2).await;
    let mut recorded: Vec<i64> = app
        .status
        .unwrap()
        .storage_digests
        .iter()
        .map(|d| d.revision)
        .collect();
    recorded.sort();
    assert_eq!(recorded, [1, 2], "revision 2 recorded as ours");
    assert_eq!(
        revisions(&f, "finished").await.len(),
        2,
        "no second upgrade"
    );
    assert!(
        !reasons_of_events(&f, "finished")
            .await
            .contains(&"StorageTampered".to_string())
    );
    with_reason(&f, "edited", "StorageTampered").await;
    assert_eq!(revisions(&f, "edited").await.len(), 2, "no helm ran on it");
    operator.stop().await;
}

/// The pod is SIGKILLed while it holds a first release's record for its
/// rollout (`decide::ready::hold`; no drain writes it): the server has the
/// run's intent and no revision. The next operator proves revision 1 its
/// own by a render (a `--dry-run` of helm's in its log) and records it —
/// no second install, never `StorageTampered`.
#[tokio::test]
async fn a_record_held_when_the_operator_dies_is_proven_by_a_render_and_recorded() {
    use k8s_openapi::api::apps::v1::Deployment;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let (helm, log) = counting_helm(&f);
    let port = free_port();
    let mut pod = delivery_pod_serving(&f, &helm, "work-first", &format!("127.0.0.1:{port}"));
    apply(
        &f,
        "orphaned",
        json!({ "chart": { "path": "podinfo" }, "wait": true }),
    )
    .await;
    eventually("its record held", 60, || async {
        let (_, body) = http_get(&format!("http://127.0.0.1:{port}/metrics")).await?;
        (sample(&body, "hossted_helmapp_records_held") == Some(1.0)).then_some(())
    })
    .await;
    let published = get(&f, "orphaned").await.unwrap().status.unwrap();
    assert_eq!(published.revision, 0, "held, not written");
    assert_eq!(published.run_intent.as_ref().map(|i| i.revision), Some(1));
    pod.kill().unwrap();
    pod.wait().unwrap();
    let runs_before = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .count();
    let rolled_out = json!({ "status": { "observedGeneration": 1, "replicas": 0,
                                         "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0 } });
    Api::<Deployment>::namespaced(f.cp.client(), NS)
        .patch_status(
            "orphaned-podinfo",
            &PatchParams::default(),
            &Patch::Merge(&rolled_out),
        )
        .await
        .unwrap();
    let mut pod = delivery_pod(&f, &helm, "work-next");
    let app = eventually("revision 1 recorded and Ready", 60, || async {
        let app = get(&f, "orphaned").await?;
        let status = app.status.as_ref()?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        (status.revision == 1 && ready.status == "True").then_some(app)
    })
    .await;
    pod.kill().unwrap();
    pod.wait().unwrap();
    let status = app.status.unwrap();
    assert!(status.run_intent.is_none(), "recorded: the intent cleared");
    assert_eq!(
        revisions(&f, "orphaned")
            .await
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![1],
        "no second run"
    );
    let next_runs: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .skip(runs_before)
        .map(String::from)
        .collect();
    assert!(
        next_runs
            .iter()
            .any(|l| l.split_whitespace().any(|a| a == "--dry-run=client")),
        "proven by a render: {next_runs:?}"
    );
    let writing: Vec<_> = next_runs
        .iter()
        .filter(|l| matches!(l.split_whitespace().next(), Some("install" | "upgrade")))
        .filter(|l| !l.split_whitespace().any(|a| a == "--dry-run=client"))
        .collect();
    assert!(writing.is_empty(), "a helm run that writes: {writing:?}");
}
