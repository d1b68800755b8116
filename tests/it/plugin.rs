//! `kubectl hossted`, run by the real kubectl as a plugin (the binary
//! linked as `kubectl-hossted` on the PATH) against a real control plane
//! with the operator delivering.

use std::path::PathBuf;

use crate::support::*;
use serde_json::json;

/// A directory holding `kubectl-hossted`, a link to the operator binary.
pub(crate) fn plugin_dir(f: &Fixture) -> PathBuf {
    let dir = f.cp.dir().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kubectl-hossted");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hossted-operator"), &link).unwrap();
    dir
}

/// `kubectl hossted <args>`: (exit status, stdout, stderr). Awaited, not
/// blocked on: the operator runs on this test's runtime.
pub(crate) async fn kubectl_hossted(
    f: &Fixture,
    dir: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = f.cp.kubectl();
    cmd.env("PATH", path).arg("hossted").args(args);
    let out = tokio::process::Command::from(cmd).output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn kubectl_hossted_lists_apps_and_asks_the_operator_to_act_now() {
    let f = Fixture::new().await;
    f.namespace("apps").await;
    let operator = f.start_delivery().await;
    let dir = plugin_dir(&f);
    apply_helmapp(&f, "apps", "web", json!({ "chart": { "path": "tiny" } })).await;
    helmapp_ready(&f, "apps", "web", "InstallSucceeded", 1).await;

    let (ok, out, err) = kubectl_hossted(&f, &dir, &["get", "-n", "apps"]).await;
    assert!(ok, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "READY",
            "STATUS",
            "REVISION",
            "CHART@VERSION",
            "CLUSTER",
            "DRIFT",
            "UPDATE",
            "WAITING",
            "AGE"
        ]
    );
    assert_eq!(
        &rows[1][..7],
        [
            "web",
            "True",
            "InstallSucceeded",
            "1",
            "tiny@0.1.0",
            "in-cluster",
            "0"
        ]
    );

    // A HelmApp 200 levels deep (its managedFields as deep) is listed with
    // the others, not the end of the listing.
    let mut values = json!(1);
    for _ in 0..200 {
        values = json!({ "a": values });
    }
    let deep = json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "deep", "namespace": "apps" },
        "spec": { "chart": { "path": "tiny" }, "values": values }
    });
    let url = kube::Api::<apis::helmapp::HelmApp>::namespaced(f.cp.client(), "apps")
        .resource_url()
        .to_string();
    let req = kube::core::Request::new(&url)
        .create(&Default::default(), serde_json::to_vec(&deep).unwrap())
        .unwrap();
    f.cp.client()
        .request::<serde::de::IgnoredAny>(req)
        .await
        .unwrap();
    let listed = envtest::eventually("deep listed as InvalidValues", 60, || async {
        let (ok, out, _) = kubectl_hossted(&f, &dir, &["get", "-n", "apps"]).await;
        let rows: Vec<Vec<String>> = out
            .lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect();
        let deep = rows.iter().find(|r| r[0] == "deep")?;
        (ok && deep[2] == "InvalidValues").then_some(rows)
    })
    .await;
    assert!(listed.iter().any(|r| r[0] == "web"), "{listed:?}");

    // force: one upgrade with --force, waited for.
    let (ok, out, err) = kubectl_hossted(&f, &dir, &["force", "-n", "apps", "web", "--wait"]).await;
    assert!(ok, "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("acted on in ")), "{out}");
    let app = get_helmapp(&f, "apps", "web").await.unwrap();
    assert_eq!(
        app.status.as_ref().unwrap().revision,
        2,
        "--wait returned after the run"
    );

    // reconcile: the annotation set; a settled release runs nothing and
    // writes nothing (so there is no acted-on value to wait for).
    let (ok, out, err) = kubectl_hossted(&f, &dir, &["reconcile", "-n", "apps", "web"]).await;
    assert!(ok, "{out}{err}");
    let app = get_helmapp(&f, "apps", "web").await.unwrap();
    let asked = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("hossted.com/reconcile-at"));
    assert!(out.contains(asked.expect("annotated").as_str()), "{out}");
    operator.settle().await;
    assert_eq!(
        get_helmapp(&f, "apps", "web")
            .await
            .unwrap()
            .status
            .unwrap()
            .revision,
        2
    );

    // A HelmApp that does not exist: an error naming it, exit status 1.
    let (ok, _, err) = kubectl_hossted(&f, &dir, &["reconcile", "-n", "apps", "nosuch"]).await;
    assert!(!ok);
    assert!(err.contains("apps/nosuch"), "{err}");
    operator.stop().await;
}

#[tokio::test]
async fn kubectl_hossted_diff_shows_what_the_next_reconcile_would_change() {
    let f = Fixture::new().await;
    f.namespace("apps").await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();
    let operator = f.start_delivery().await;
    let dir = plugin_dir(&f);
    let spec = |greeting: &str| {
        json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "0.1.0" },
                "values": { "greeting": greeting } })
    };
    apply_helmapp(&f, "apps", "served", spec("one")).await;
    helmapp_ready(&f, "apps", "served", "InstallSucceeded", 1).await;
    let helm = f.cp.helm_binary();
    let helm = helm.to_str().unwrap();
    let diff = |d: &'static str| {
        let dir = dir.clone();
        let f = &f;
        async move { kubectl_hossted(f, &dir, &["diff", "-n", "apps", d, "--helm-binary", helm]).await }
    };
    let (ok, out, err) = diff("served").await;
    assert!(ok, "in sync: exit 0, no output: {out}{err}");
    assert_eq!(out, "");

    // The operator stopped, the values edited: the diff is the change.
    operator.stop().await;
    patch_helmapp(&f, "apps", "served", json!({ "spec": spec("two") })).await;
    let (ok, out, err) = diff("served").await;
    assert!(!ok, "a difference: exit 1: {err}");
    assert!(
        out.contains("-  greeting: one\n+  greeting: two\n"),
        "{out}{err}"
    );
    assert!(
        out.contains("+++ apps/served next: ConfigMap served-tiny"),
        "{out}"
    );
    // A valuesFrom Secret's value the chart renders into a ConfigMap is
    // masked, as a Secret's own data is (and as status.pendingChange,
    // which keeps only names, never shows it).
    f.secret("apps", "greeting", &[("value", "s3cr\"t-gr33ting")])
        .await;
    let from_secret = json!({ "spec": { "valuesFrom": [
        { "kind": "Secret", "name": "greeting", "key": "value", "targetPath": "greeting" }
    ] } });
    patch_helmapp(&f, "apps", "served", from_secret).await;
    let (ok, out, err) = diff("served").await;
    assert!(!ok, "a difference: exit 1: {err}");
    assert!(
        out.contains("+  greeting: "),
        "the changed line is shown: {out}"
    );
    assert!(!out.contains("s3cr") && !out.contains("gr33ting"), "{out}");
    assert!(out.contains("[redacted]"), "{out}");
    let (_, _, err) = diff("nosuch").await;
    assert!(err.contains("apps/nosuch"), "{err}");
}

#[tokio::test]
async fn kubectl_hossted_approve_runs_the_pending_change_and_only_that_one() {
    let f = Fixture::new().await;
    f.namespace("apps").await;
    let _operator = f.start_delivery().await;
    let dir = plugin_dir(&f);
    let spec = json!({ "chart": { "path": "tiny" }, "approval": "manual" });
    apply_helmapp(&f, "apps", "held", spec).await;
    helmapp_with_reason(&f, "apps", "held", "AwaitingApproval").await;
    let hash = envtest::eventually("a pending change", 60, || async {
        let app = get_helmapp(&f, "apps", "held").await?;
        Some(app.status?.pending_change?.config_hash)
    })
    .await;

    let approve = |extra: &'static [&'static str]| {
        let dir = dir.clone();
        let f = &f;
        async move {
            let mut args = vec!["approve", "-n", "apps", "held"];
            args.extend(extra);
            kubectl_hossted(f, &dir, &args).await
        }
    };
    let (ok, _, err) = approve(&["--hash", "0000"]).await;
    assert!(!ok, "another hash is not approved");
    assert!(err.contains(&hash), "names the pending one: {err}");
    assert!(storage_revisions(&f, "apps", "held").await.is_empty());

    let (ok, out, err) = approve(&["--wait"]).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!("hossted.com/approve={hash}")),
        "{out}"
    );
    let app = helmapp_ready(&f, "apps", "held", "InstallSucceeded", 1).await;
    assert_eq!(app.status.unwrap().config_hash, hash);

    let (ok, _, err) = approve(&[]).await;
    assert!(!ok, "nothing waits any more");
    assert!(err.contains("nothing waits for approval"), "{err}");
}

#[tokio::test]
async fn an_old_and_a_new_values_from_secret_value_awaiting_approval_appear_nowhere() {
    // Issue 57: the live side of the diff showed the Secret's old value
    // (the redactor knew the current inputs only).
    const OLD: &str = "old-sekrit-greeting-4711";
    const NEW: &str = "new-sekrit-greeting-0815";
    let f = Fixture::new().await;
    f.namespace("apps").await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();
    let operator = f.start_delivery().await;
    let dir = plugin_dir(&f);
    f.secret("apps", "greeting", &[("value", OLD)]).await;
    apply_helmapp(
        &f,
        "apps",
        "held",
        json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "0.1.0" },
                "valuesFrom": [{ "kind": "Secret", "name": "greeting", "key": "value",
                                 "targetPath": "greeting" }] }),
    )
    .await;
    let installed = helmapp_ready(&f, "apps", "held", "InstallSucceeded", 1).await;
    let installed_hash = installed.status.unwrap().config_hash;
    let rendered = || async {
        kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(f.cp.client(), "apps")
            .get("held-tiny")
            .await
            .unwrap()
            .data
            .unwrap_or_default()["greeting"]
            .clone()
    };
    assert_eq!(
        rendered().await,
        OLD,
        "the chart renders the Secret's value"
    );

    // Approval manual, seen by the operator (nothing waits: Approved=True),
    // then the Secret changed: a pending change, nothing run.
    patch_helmapp(
        &f,
        "apps",
        "held",
        json!({ "spec": { "approval": "manual" } }),
    )
    .await;
    envtest::eventually("held approved as it runs", 60, || async {
        let app = get_helmapp(&f, "apps", "held").await?;
        app.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Approved" && c.status == "True")
            .then_some(())
    })
    .await;
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(f.cp.client(), "apps")
        .patch(
            "greeting",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({ "stringData": { "value": NEW } })),
        )
        .await
        .unwrap();
    let pending = envtest::eventually("the new value awaiting approval", 60, || async {
        let app = get_helmapp(&f, "apps", "held").await?;
        let p = app.status?.pending_change?;
        (p.config_hash != installed_hash).then_some(p)
    })
    .await;
    assert!(
        pending
            .objects
            .changed
            .iter()
            .any(|o| o == "ConfigMap held-tiny"),
        "{pending:?}"
    );
    helmapp_with_reason(&f, "apps", "held", "AwaitingApproval").await;
    assert_eq!(rendered().await, OLD, "nothing ran");
    let hidden = |what: &str, text: &str| {
        for value in [OLD, NEW, "sekrit"] {
            assert!(!text.contains(value), "{value} in {what}: {text}");
        }
    };

    // (a) kubectl hossted diff: the ConfigMap's line changed, both sides
    // masked.
    let helm = f.cp.helm_binary();
    let (ok, out, err) = kubectl_hossted(
        &f,
        &dir,
        &[
            "diff",
            "-n",
            "apps",
            "held",
            "--helm-binary",
            helm.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!ok, "a difference: exit 1: {out}{err}");
    assert!(
        out.contains("+++ apps/held next: ConfigMap held-tiny"),
        "{out}{err}"
    );
    assert!(
        out.contains("-  greeting: ") && out.contains("+  greeting: "),
        "the changed line is shown on both sides: {out}"
    );
    assert!(out.contains("[redacted]"), "{out}");
    hidden("kubectl hossted diff", &format!("{out}{err}"));

    // (b) The status (and the Events about the app).
    let app = get_helmapp(&f, "apps", "held").await.unwrap();
    let events = kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(f.cp.client(), "apps")
        .list(&kube::api::ListParams::default().fields("involvedObject.name=held"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| e.message.unwrap_or_default())
        .collect::<Vec<_>>();
    hidden(
        "the status and Events",
        &format!(
            "{}\n{events:?}",
            serde_json::to_string(&app.status).unwrap()
        ),
    );

    // (c) The web view's pending-change page, its diff rendered.
    let ui = crate::ui::start_ui(f.cp.kubeconfig_path(), &helm, &[]).await;
    let cookie = crate::ui::sign_in(&ui).await;
    let url = format!("{}/app/apps/held/pending", ui.origin);
    let page = envtest::eventually("the pending-change page with its diff", 60, || async {
        let a = crate::ui::exchange("GET", &url, Some(&cookie), None).await;
        (a.status == 200
            && a.body
                .contains(&format!("data-pending-hash=\"{}\"", pending.config_hash))
            && a.body.contains("aria-label=\"Unified diff\""))
        .then_some(a.body)
    })
    .await;
    assert!(page.contains("[redacted]"), "{page}");
    hidden("the pending-change page", &page);
    operator.stop().await;
}
