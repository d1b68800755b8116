//! Helm actions as a Flux HelmRelease user ports them: each setting is the
//! helm flag of its own action (read from a wrapper's log of every helm
//! command line), `force-at`, `retries: -1`, values at a path,
//! post-renderers and `commonMetadata`, `helm test`.

use super::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use std::sync::Arc;
use std::time::Duration;

/// Each helm command line of `release` the wrapper logged, as its
/// arguments (in order).
fn runs_of(log: &std::path::Path, release: &str) -> Vec<Vec<String>> {
    helm_calls(log)
        .into_iter()
        .filter(|c| c.on(release))
        .map(|c| c.words)
        .collect()
}

fn has(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

fn value_of<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.windows(2)
        .find(|w| w[0] == flag)
        .map(|w| w[1].as_str())
}

async fn annotate(f: &Fixture, name: &str, key: &str, value: &str) {
    patch(
        f,
        name,
        json!({ "metadata": { "annotations": { key: value } } }),
    )
    .await;
}

async fn configmap(f: &Fixture, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get_opt(name)
        .await
        .unwrap()
}

async fn gone(f: &Fixture, name: &str) {
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    eventually(&format!("{name} to be gone"), 120, || async {
        get(f, name).await.is_none().then_some(())
    })
    .await;
}

crate::under_both_helms!(
    each_setting_is_the_helm_flag_of_its_own_action,
    force_at_runs_one_forced_upgrade_per_value,
    a_post_renderer_and_common_metadata_are_live_and_stored_and_a_patch_change_is_one_revision,
    a_failed_helm_test_is_remediated_unless_ignored,
    hooks_are_post_rendered_unless_the_strategy_is_nohooks,
);

async fn each_setting_is_the_helm_flag_of_its_own_action(helm: HelmUnderTest) {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting(&f, &helm.binary(&f));
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "flags",
        json!({
            "chart": { "path": "tiny" },
            "values": { "hookConfigMap": true },
            "install": { "disableHooks": true, "skipSchemaValidation": true, "disableOpenAPIValidation": true },
            "upgrade": { "force": true, "cleanupOnFail": true },
            "maxHistory": 2,
            "uninstall": { "keepHistory": true, "deletionPropagation": "orphan" }
        }),
    )
    .await;
    ready(&f, "flags", "InstallSucceeded", 1).await;
    assert!(
        configmap(&f, "flags-hooked").await.is_none(),
        "install.disableHooks: the post-install hook never ran"
    );
    for (i, greeting) in ["a", "b", "c", "d"].iter().enumerate() {
        let set = format!("greeting={greeting}");
        patch(&f, "flags", json!({ "spec": { "set": [set] } })).await;
        ready(&f, "flags", "UpgradeSucceeded", i as i64 + 2).await;
    }
    // The upgrades ran their hooks: disableHooks is the install's only.
    let hooked = configmap(&f, "flags-hooked")
        .await
        .expect("the upgrade hook ran");
    assert_eq!(hooked.data.unwrap()["revision"], "5");
    eventually(
        "maxHistory: 2 revisions kept after 4 upgrades",
        30,
        || async {
            let kept: Vec<i64> = revisions(&f, "flags").await.into_keys().collect();
            (kept == [4, 5]).then_some(())
        },
    )
    .await;
    let runs = runs_of(&log, "flags");
    assert_eq!(runs.len(), 5, "an install and 4 upgrades: {runs:?}");
    let install = &runs[0];
    // Over nothing: `helm install`, which keeps a single revision.
    assert_eq!(install[0], "install", "{install:?}");
    assert_eq!(value_of(install, "--history-max"), None, "{install:?}");
    assert!(
        has(install, "--no-hooks")
            && has(install, "--skip-schema-validation")
            && has(install, "--disable-openapi-validation")
    );
    assert!(
        !has(install, helm.force_flag()) && !has(install, "--cleanup-on-fail"),
        "{install:?}"
    );
    for upgrade in &runs[1..] {
        assert!(
            has(upgrade, helm.force_flag()) && has(upgrade, "--cleanup-on-fail"),
            "{upgrade:?}"
        );
        assert!(
            !has(upgrade, "--no-hooks")
                && !has(upgrade, "--skip-schema-validation")
                && !has(upgrade, "--disable-openapi-validation")
        );
    }
    for run in &runs[1..] {
        assert_eq!(run[0], "upgrade", "{run:?}");
        assert_eq!(value_of(run, "--history-max"), Some("2"), "{run:?}");
    }

    // Deleted: uninstalled with its history kept, children orphaned.
    gone(&f, "flags").await;
    let runs = runs_of(&log, "flags");
    let uninstall = runs.last().unwrap();
    assert_eq!(uninstall[0], "uninstall");
    assert!(
        has(uninstall, "--keep-history") && !has(uninstall, "--wait"),
        "{uninstall:?}"
    );
    assert_eq!(value_of(uninstall, "--cascade"), Some("orphan"));
    assert!(!has(uninstall, "--no-hooks") && !has(uninstall, "--history-max"));
    let kept = revisions(&f, "flags").await;
    assert_eq!(kept[&5]["status"], "uninstalled", "{kept:?}");

    // A new HelmApp of that name installs over the kept entry.
    apply(
        &f,
        "flags",
        json!({ "chart": { "path": "tiny" }, "uninstall": { "wait": true } }),
    )
    .await;
    ready(&f, "flags", "InstallSucceeded", 6).await;
    let runs = runs_of(&log, "flags");
    assert_eq!(
        value_of(runs.last().unwrap(), "--history-max"),
        Some("5"),
        "maxHistory's default"
    );
    // uninstall.wait: helm waits for the objects to be gone (background
    // cascade: the API server deletes them at once, no garbage collector
    // needed).
    gone(&f, "flags").await;
    let runs = runs_of(&log, "flags");
    let uninstall = runs.last().unwrap();
    assert_eq!(uninstall[0], "uninstall");
    assert!(has(uninstall, "--wait"), "{uninstall:?}");
    assert!(configmap(&f, "flags-tiny").await.is_none());
    operator.stop().await;
}

async fn force_at_runs_one_forced_upgrade_per_value(helm: HelmUnderTest) {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting(&f, &helm.binary(&f));
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(&f, "forced", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "forced", "InstallSucceeded", 1).await;
    annotate(&f, "forced", "hossted.com/force-at", "first").await;
    let app = ready(&f, "forced", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.unwrap().last_handled_force_at, "first");
    let runs = runs_of(&log, "forced");
    assert_eq!(runs.len(), 2);
    assert!(
        !has(&runs[0], helm.force_flag()) && has(&runs[1], helm.force_flag()),
        "{runs:?}"
    );

    // The value acted on: a reconcile (asked by reconcile-at) runs nothing.
    let mark = operator.mark();
    annotate(&f, "forced", "hossted.com/reconcile-at", "look").await;
    operator.reconciled_since(mark).await;
    operator.settle().await;
    assert_eq!(
        runs_of(&log, "forced").len(),
        2,
        "one run per force-at value"
    );
    assert_eq!(revisions(&f, "forced").await.len(), 2);
    // A new value: one more.
    annotate(&f, "forced", "hossted.com/force-at", "second").await;
    ready(&f, "forced", "UpgradeSucceeded", 3).await;
    operator.stop().await;
}

/// A helm that logs `start <unix seconds> <args>` before each run.
fn timed_helm(f: &Fixture) -> (std::path::PathBuf, std::path::PathBuf) {
    let log = f.cp.dir().join("helm-timed.log");
    let wrapper = f.cp.dir().join("helm-timed.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{}echo \"$(date +%s.%N) $*\" >> '{}'\nexec '{}' \"$@\"\n",
            version_passes_through(&f.cp.helm_binary()),
            log.display(),
            f.cp.helm_binary().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, log)
}

#[tokio::test]
async fn retries_minus_one_keeps_retrying_with_growing_waits() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = timed_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "forever",
        json!({ "chart": { "path": "tiny" }, "remediation": { "retries": -1 } }),
    )
    .await;
    ready(&f, "forever", "InstallSucceeded", 1).await;
    patch(
        &f,
        "forever",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    let app = eventually("a fifth failed upgrade", 180, || async {
        let app = get(&f, "forever").await?;
        (app.status.as_ref()?.failures >= 5).then_some(app)
    })
    .await;
    let ready_reason = app.status.unwrap().conditions[0].reason.clone();
    assert_eq!(ready_reason, "UpgradeFailed", "never RetriesExhausted");
    let starts: Vec<f64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| {
            let call = HelmCall::parse(l);
            // A render proving a failed attempt's revision ours is none.
            call.releases() && !call.dry_run() && call.on("forever")
        })
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    // The install, then failed attempts 1..=5 (maybe a sixth under way).
    assert!(starts.len() >= 6, "{starts:?}");
    let failed = &starts[1..];
    // After failure k the next attempt waits 2^(k-1) s from the failure
    // (its time kept to the second): at least 2^(k-1) - 1 s between starts.
    for (k, floor) in [(3, 3.0), (4, 7.0)] {
        let gap = failed[k] - failed[k - 1];
        assert!(
            gap >= floor,
            "after failure {k}: {gap:.2} s < {floor} s ({failed:?})"
        );
    }
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains(" rollback "),
        "no remediation while retrying for ever"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_value_at_a_target_path_goes_there_and_nowhere_else() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.secret(
        NS,
        "db",
        &[
            ("password", "s3cr3t,with=comma"),
            ("values.yaml", "greeting: doc\n"),
        ],
    )
    .await;
    let raw: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "raw" },
        "data": { "port": "5432", "quoted": "'x'" }
    }))
    .unwrap();
    raw.create(&PostParams::default(), &cm).await.unwrap();
    let operator = f.start_delivery().await;
    let from = |key: &str, path: &str, literal: bool| json!({ "kind": "ConfigMap", "name": "raw", "key": key, "targetPath": path, "literal": literal });
    apply(
        &f,
        "targeted",
        json!({
            "chart": { "path": "tiny" },
            "values": { "greeting": "inline", "other": { "kept": true } },
            "valuesFrom": [
                { "kind": "Secret", "name": "db", "key": "password", "targetPath": "greeting" },
                from("port", "typed.port", false), from("quoted", "typed.quoted", false),
                from("port", "literal.port", true), from("quoted", "literal.quoted", true)
            ]
        }),
    )
    .await;
    ready(&f, "targeted", "InstallSucceeded", 1).await;
    let cm = configmap(&f, "targeted-tiny").await.unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], "s3cr3t,with=comma");
    let out = output_ok(
        f.cp.helm()
            .args(["get", "values", "targeted", "-n", NS, "-o", "json"]),
    );
    let values: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        values,
        json!({ "greeting": "s3cr3t,with=comma", "other": { "kept": true },
                "typed": { "port": 5432, "quoted": "x" },
                "literal": { "port": "5432", "quoted": "'x'" } }),
        "the key at its path, after the inline values, and nowhere else; \
         `literal` (Flux's, helm's --set-literal): the string as written"
    );
    operator.stop().await;
}

/// The objects of the release's stored manifest (`helm get manifest`).
fn stored_objects(f: &Fixture, release: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    let out = output_ok(f.cp.helm().args(["get", "manifest", release, "-n", NS]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    serde_yaml_ng::Deserializer::from_str(&text)
        .filter_map(|d| serde_json::Value::deserialize(d).ok())
        .filter(|v| !v.is_null())
        .collect()
}

async fn a_post_renderer_and_common_metadata_are_live_and_stored_and_a_patch_change_is_one_revision(
    helm: HelmUnderTest,
) {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f
        .start_delivery_with(|s| s.helm.binary = helm.binary(&f))
        .await;
    let spec = |value: &str| {
        json!({
            "chart": { "path": "tiny" },
            "postRenderers": [{ "kustomize": { "patches": [{
                "target": { "kind": "ConfigMap" },
                "patch": format!(r#"[{{"op": "add", "path": "/data/patched", "value": "{value}"}}]"#)
            }]}}],
            "commonMetadata": { "labels": { "team": "platform" }, "annotations": { "owner": "ops" } }
        })
    };
    apply(&f, "rendered", spec("yes")).await;
    ready(&f, "rendered", "InstallSucceeded", 1).await;
    let live = configmap(&f, "rendered-tiny").await.unwrap();
    assert_eq!(live.data.as_ref().unwrap()["patched"], "yes");
    assert_eq!(live.metadata.labels.as_ref().unwrap()["team"], "platform");
    assert_eq!(live.metadata.annotations.as_ref().unwrap()["owner"], "ops");
    assert_eq!(
        live.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "Helm",
        "the chart's own labels stay"
    );
    let stored = stored_objects(&f, "rendered");
    let cm = stored.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(
        cm["data"]["patched"], "yes",
        "what helm stored is what it applied"
    );
    assert_eq!(cm["metadata"]["labels"]["team"], "platform");

    patch(&f, "rendered", json!({ "spec": spec("again") })).await;
    ready(&f, "rendered", "UpgradeSucceeded", 2).await;
    operator.settle().await;
    assert_eq!(revisions(&f, "rendered").await.len(), 2, "one new revision");
    let live = configmap(&f, "rendered-tiny").await.unwrap();
    assert_eq!(live.data.unwrap()["patched"], "again");
    let left = std::fs::read_dir(f.cp.dir().join("delivery/post-render"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "each run's settings file is removed after it");

    // A patch that is not one: refused before helm runs.
    apply(
        &f,
        "misrendered",
        json!({ "chart": { "path": "tiny" },
                "postRenderers": [{ "kustomize": { "patches": [{ "patch": "42" }] } }] }),
    )
    .await;
    let app = with_reason(&f, "misrendered", "PostRendererInvalid").await;
    let message = &app.status.unwrap().conditions[0].message;
    assert!(
        message.starts_with("postRenderers[0].kustomize.patches[0]: "),
        "{message}"
    );
    assert!(revisions(&f, "misrendered").await.is_empty());
    operator.stop().await;
}

/// Sets the phase of each `helm test` pod (`<release>-test`, and the
/// chart's second test `<release>-smoke`) in [`NS`] as `phases` says for
/// its release, as a kubelet would.
fn test_pods(
    f: &Fixture,
    phases: Arc<parking_lot::Mutex<BTreeMap<String, String>>>,
) -> tokio::task::JoinHandle<()> {
    let client = f.cp.client();
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, NS);
        loop {
            if let Ok(list) = pods.list(&ListParams::default()).await {
                for p in list.items {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let Some(release) = name
                        .strip_suffix("-test")
                        .or_else(|| name.strip_suffix("-smoke"))
                    else {
                        continue;
                    };
                    let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
                    if phase == "Succeeded" || phase == "Failed" {
                        continue;
                    }
                    let Some(want) = phases.lock().get(release).cloned() else {
                        continue;
                    };
                    let body = json!({ "status": { "phase": want } });
                    let _ = pods
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

async fn a_failed_helm_test_is_remediated_unless_ignored(helm: HelmUnderTest) {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting(&f, &helm.binary(&f));
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let phases = Arc::new(parking_lot::Mutex::new(BTreeMap::from([
        ("tested".to_string(), "Succeeded".to_string()),
        ("lenient".to_string(), "Failed".to_string()),
    ])));
    let kubelet = test_pods(&f, phases.clone());

    // Passing tests: Ready, the test in the history, an Event.
    apply(
        &f,
        "tested",
        json!({ "chart": { "path": "tiny" }, "test": { "enable": true },
                "remediation": { "retries": 0, "onFailure": "rollback" },
                "rollback": { "wait": true } }),
    )
    .await;
    let app = ready(&f, "tested", "InstallSucceeded", 1).await;
    let history = app.status.unwrap().history;
    assert_eq!(
        (history[0].action.as_str(), history[0].result.as_str()),
        ("test", "succeeded")
    );
    an_event(&f, NS, "tested", "TestSucceeded").await;

    // Failing tests after an upgrade: remediated (rollback), then nothing more.
    phases.lock().insert("tested".into(), "Failed".into());
    patch(&f, "tested", json!({ "spec": { "set": ["greeting=new"] } })).await;
    let app = with_reason(&f, "tested", "RetriesExhausted").await;
    let st = app.status.unwrap();
    let actions: Vec<(&str, &str)> = st
        .history
        .iter()
        .map(|h| (h.action.as_str(), h.result.as_str()))
        .collect();
    assert_eq!(
        &actions[..3],
        [
            ("rollback", "succeeded"),
            ("test", "failed"),
            ("upgrade", "succeeded")
        ],
        "{actions:?}"
    );
    let kinds: Vec<String> = runs_in(&log)
        .into_iter()
        .filter(|r| r.ends_with(" tested"))
        .collect();
    assert_eq!(
        kinds,
        [
            "install tested",
            "test tested",
            "upgrade tested",
            "test tested",
            "rollback tested"
        ]
    );
    an_event(&f, NS, "tested", "TestFailed").await;
    // rollback.wait: helm waits (helm 4: its watcher), for Jobs too.
    let rollback = runs_of(&log, "tested")
        .into_iter()
        .rfind(|r| r[0] == "rollback")
        .expect("a rollback ran");
    assert!(
        has(&rollback, "--wait") && has(&rollback, "--wait-for-jobs"),
        "{rollback:?}"
    );
    // What an alert names: the app, not Ready, and why — the gauge is read
    // from the operator's cache, which follows the status it wrote.
    let series = |name: &str, reason: &str| {
        format!("hossted_helmapp_ready{{namespace=\"apps\",name=\"{name}\",reason=\"{reason}\"}}")
    };
    gauge_reaches(&operator, &series("tested", "RetriesExhausted"), 0.0).await;

    // ignoreFailures: reported, not remediated.
    apply(
        &f,
        "lenient",
        json!({ "chart": { "path": "tiny" }, "test": { "enable": true, "ignoreFailures": true } }),
    )
    .await;
    let app = ready(&f, "lenient", "InstallSucceeded", 1).await;
    gauge_reaches(&operator, &series("lenient", "InstallSucceeded"), 1.0).await;
    assert_eq!(app.status.unwrap().history[0].result, "failed");
    operator.settle().await;
    let kinds: Vec<String> = runs_in(&log)
        .into_iter()
        .filter(|r| r.ends_with(" lenient"))
        .collect();
    assert_eq!(
        kinds,
        ["install lenient", "test lenient"],
        "no uninstall, no retry"
    );
    an_event(&f, NS, "lenient", "TestFailed").await;
    kubelet.abort();
    operator.stop().await;
}

#[tokio::test]
async fn the_flux_port_example_installs_as_written() {
    let f = Fixture::new().await;
    let operator = f.start_delivery().await;
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/helmapp-flux-port.yaml"
    );
    f.kubectl(&["apply", "-f", example]);
    let app = helmapp_ready(&f, "hossted-operator", "ported", "InstallSucceeded", 1).await;
    assert_eq!(
        app.status.unwrap().last_handled_force_at,
        "2026-11-25T08:00:00Z"
    );
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), "hossted-operator")
        .get("ported-tiny")
        .await
        .unwrap();
    let data = cm.data.unwrap();
    assert_eq!(
        (data["ported"].as_str(), data["merged"].as_str()),
        ("from-flux", "yes"),
        "both patches, the merge patch by the object it names"
    );
    assert_eq!(cm.metadata.labels.unwrap()["team"], "platform");
    operator.stop().await;
}

/// A kubelet for the hook Pods of `release` (`<release>-hook`, the
/// pre-install hook, and `<release>-upgrade-hook`, the pre-upgrade one)
/// whose container sleeps `sleep`: each Pod succeeds `sleep` after it was
/// first seen. A Pod helm makes again (a retry: a new uid) sleeps anew.
fn sleeping_hooks(f: &Fixture, release: &str, sleep: Duration) -> tokio::task::JoinHandle<()> {
    let client = f.cp.client();
    let hooks = [format!("{release}-hook"), format!("{release}-upgrade-hook")];
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, NS);
        let mut seen: BTreeMap<String, std::time::Instant> = BTreeMap::new();
        loop {
            if let Ok(list) = pods.list(&ListParams::default()).await {
                for p in list.items {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if !hooks.contains(&name) {
                        continue;
                    }
                    let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
                    if phase == "Succeeded" || phase == "Failed" {
                        continue;
                    }
                    let uid = p.metadata.uid.clone().unwrap_or_default();
                    let since = *seen.entry(uid).or_insert_with(std::time::Instant::now);
                    if since.elapsed() >= sleep {
                        let body = json!({ "status": { "phase": "Succeeded" } });
                        let _ = pods
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                            .await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// `12.3s` (a history entry's `duration`) in seconds.
fn seconds(duration: &str) -> f64 {
    duration
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a duration in seconds: {duration:?}"))
}

/// Issue 52: each action's own timeout over `spec.timeout` (ten minutes
/// here). The chart's hooks sleep 20 s (no kubelet runs them: one here
/// makes each hook Pod succeed 20 s after it appears). The install, with
/// `install.timeout: 1m`, waits its pre-install hook out and succeeds; the
/// upgrade, with `upgrade.timeout: 5s`, fails at its own timeout — before
/// its pre-upgrade hook could have finished, so under the install's
/// timeout (or `spec.timeout`) it would have succeeded.
#[tokio::test]
async fn an_upgrade_fails_at_its_own_timeout_and_the_install_had_its_own() {
    const HOOK_SLEEPS: Duration = Duration::from_secs(20);
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f.start_delivery_with(|s| s.helm.binary = wrapper).await;
    let kubelet = sleeping_hooks(&f, "timed", HOOK_SLEEPS);
    apply(
        &f,
        "timed",
        json!({ "chart": { "path": "tiny" }, "values": { "hook": true }, "timeout": "10m",
                "install": { "timeout": "1m" }, "upgrade": { "timeout": "5s" } }),
    )
    .await;
    let installed = ready(&f, "timed", "InstallSucceeded", 1).await;
    let history = installed.status.unwrap().history;
    let install = history.iter().find(|h| h.action == "install").unwrap();
    // The install waited for its hook's 20 s, within its own minute.
    let ran = seconds(&install.duration);
    assert!(
        (HOOK_SLEEPS.as_secs_f64()..60.0).contains(&ran),
        "{install:?}"
    );

    patch(
        &f,
        "timed",
        json!({ "spec": { "values": { "upgradeHook": true } } }),
    )
    .await;
    let failed = ready(&f, "timed", "UpgradeFailed", 1).await;
    let history = failed.status.unwrap().history;
    // The first upgrade (the history is newest first; retries follow it).
    let upgrade = history
        .iter()
        .rev()
        .find(|h| h.action == "upgrade")
        .unwrap();
    assert_eq!(upgrade.result, "failed");
    // helm gave up at upgrade.timeout: not before it, and before the
    // hook's 20 s were up — a causal bound (with the install's minute or
    // spec.timeout's ten the hook would have ended and the upgrade
    // succeeded), not a measure of speed.
    let ran = seconds(&upgrade.duration);
    assert!(
        (5.0..HOOK_SLEEPS.as_secs_f64()).contains(&ran),
        "{upgrade:?}"
    );
    let runs = runs_of(&log, "timed");
    let timeouts: Vec<&str> = runs
        .iter()
        .filter(|r| r[0] == "install" || r[0] == "upgrade")
        .filter_map(|r| value_of(r, "--timeout"))
        .collect();
    // The install with its own, each upgrade (retries too) with its own.
    assert_eq!(timeouts.first(), Some(&"60s"), "{runs:?}");
    assert!(
        timeouts.len() > 1 && timeouts[1..].iter().all(|t| *t == "5s"),
        "{runs:?}"
    );
    kubelet.abort();
    operator.stop().await;
}

/// Issue 52: `test.filters` runs only what they let through. Excluding:
/// the excluded test hook is never created, the other one runs. Including
/// (a `name` without `exclude`): the named test alone runs, the other is
/// never created.
#[tokio::test]
async fn test_filters_run_the_named_test_alone_or_leave_the_excluded_one_out() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f.start_delivery_with(|s| s.helm.binary = wrapper).await;
    let phases = Arc::new(parking_lot::Mutex::new(BTreeMap::from([
        ("filtered".to_string(), "Succeeded".to_string()),
        ("chosen".to_string(), "Succeeded".to_string()),
    ])));
    let kubelet = test_pods(&f, phases);
    apply(
        &f,
        "filtered",
        json!({ "chart": { "path": "tiny" }, "values": { "smokeTest": true },
                "test": { "enable": true, "filters": [{ "name": "filtered-smoke", "exclude": true }] } }),
    )
    .await;
    apply(
        &f,
        "chosen",
        json!({ "chart": { "path": "tiny" }, "values": { "smokeTest": true },
                "test": { "enable": true, "filters": [{ "name": "chosen-smoke" }] } }),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(f.cp.client(), NS);

    // Excluding.
    let app = ready(&f, "filtered", "InstallSucceeded", 1).await;
    let history = app.status.unwrap().history;
    assert_eq!(
        (history[0].action.as_str(), history[0].result.as_str()),
        ("test", "succeeded")
    );
    assert!(
        pods.get_opt("filtered-test").await.unwrap().is_some(),
        "the test ran"
    );
    assert!(
        pods.get_opt("filtered-smoke").await.unwrap().is_none(),
        "the excluded test was never created"
    );
    let test = runs_of(&log, "filtered")
        .into_iter()
        .find(|r| r[0] == "test")
        .unwrap();
    assert_eq!(value_of(&test, "--filter"), Some("!name=filtered-smoke"));

    // Including: the named test alone.
    let app = ready(&f, "chosen", "InstallSucceeded", 1).await;
    let history = app.status.unwrap().history;
    assert_eq!(
        (history[0].action.as_str(), history[0].result.as_str()),
        ("test", "succeeded")
    );
    assert!(
        pods.get_opt("chosen-smoke").await.unwrap().is_some(),
        "the named test ran"
    );
    assert!(
        pods.get_opt("chosen-test").await.unwrap().is_none(),
        "the test not named was never created"
    );
    let test = runs_of(&log, "chosen")
        .into_iter()
        .find(|r| r[0] == "test")
        .unwrap();
    assert_eq!(value_of(&test, "--filter"), Some("name=chosen-smoke"));
    assert_eq!(
        test.iter().filter(|w| *w == "--filter").count(),
        1,
        "{test:?}"
    );
    kubelet.abort();
    operator.stop().await;
}

/// Issue 52: Flux's `postRenderStrategy` — by default (`combined`, helm
/// 4's) the post-renderers and `commonMetadata` change the chart's hooks
/// too (helm 4 only: helm 3 never sends them); `nohooks` leaves a hook as
/// the chart has it while the release's other objects change.
async fn hooks_are_post_rendered_unless_the_strategy_is_nohooks(helm: HelmUnderTest) {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f
        .start_delivery_with(|s| s.helm.binary = helm.binary(&f))
        .await;
    let spec = |strategy: Option<&str>| {
        let mut spec = json!({
            "chart": { "path": "tiny" },
            "values": { "hookConfigMap": true },
            "commonMetadata": { "labels": { "team": "platform" } }
        });
        if let Some(s) = strategy {
            spec["postRenderStrategy"] = json!(s);
        }
        spec
    };
    apply(&f, "combined", spec(None)).await;
    apply(&f, "nohooks", spec(Some("nohooks"))).await;
    ready(&f, "combined", "InstallSucceeded", 1).await;
    ready(&f, "nohooks", "InstallSucceeded", 1).await;
    let team = |cm: Option<ConfigMap>| {
        cm.expect("the object")
            .metadata
            .labels
            .unwrap_or_default()
            .get("team")
            .cloned()
    };
    // helm 3 never pipes hooks through a post-renderer: under it every
    // strategy is `nohooks` (docs/helm.md).
    let hooks_reach_the_post_renderer = matches!(helm, HelmUnderTest::Four);
    assert_eq!(
        team(configmap(&f, "combined-hooked").await).as_deref(),
        hooks_reach_the_post_renderer.then_some("platform"),
        "the hook post-rendered under helm 4"
    );
    assert_eq!(
        team(configmap(&f, "nohooks-hooked").await),
        None,
        "the hook as the chart has it"
    );
    assert_eq!(
        team(configmap(&f, "nohooks-tiny").await).as_deref(),
        Some("platform"),
        "the release's other objects post-rendered"
    );
    operator.stop().await;
}
