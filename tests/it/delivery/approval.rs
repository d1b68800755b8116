//! `spec.approval: manual`: a new configuration runs nothing until
//! `hossted.com/approve` names its hash; the pending change is in status
//! and one Event, with no Secret value; a stale approval runs nothing and
//! says so; drift repair is not held back. Helm runs are read from a
//! wrapper's log (a preview's dry run is not a run).

use super::*;
use apis::helmapp::PendingChange;

/// The helm runs of `release` that change something: not the preview's
/// dry run or manifest read.
fn changing_runs(log: &std::path::Path, release: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains("--dry-run") && !l.starts_with("get manifest"))
        .filter(|l| l.split_whitespace().any(|a| a == release))
        .map(str::to_string)
        .collect()
}

async fn pending(f: &Fixture, name: &str, not: &str) -> PendingChange {
    eventually("a pending change", 60, || async {
        let app = get(f, name).await?;
        let p = app.status?.pending_change?;
        (p.config_hash != not).then_some(p)
    })
    .await
}

async fn approve(f: &Fixture, name: &str, hash: &str) {
    let body = json!({ "metadata": { "annotations": { "hossted.com/approve": hash } } });
    patch(f, name, body).await;
}

fn condition(app: &HelmApp, type_: &str) -> (String, String, String) {
    let c = app
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .unwrap_or_else(|| panic!("no {type_} condition: {:?}", app.status));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// Every Event message about `name`.
async fn event_messages(f: &Fixture, name: &str) -> Vec<(String, String)> {
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(f.cp.client(), NS)
        .list(&kube::api::ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_manual_change_waits_for_its_exact_approval_and_shows_no_secret() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let _operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let spec = |password: &str, level: &str| {
        json!({ "chart": { "path": "full" }, "approval": "manual",
                "values": { "password": password, "logLevel": level } })
    };

    // The first install waits too: everything it would add is listed.
    apply(&f, "gated", spec("first-s3cret", "info")).await;
    let first = pending(&f, "gated", "").await;
    assert!(
        first.objects.added.iter().any(|o| o == "Secret gated-db"),
        "{first:?}"
    );
    assert!(first.objects.changed.is_empty() && first.objects.removed.is_empty());
    assert!(first.diff_lines > 0);
    let app = with_reason(&f, "gated", "AwaitingApproval").await;
    assert_eq!(condition(&app, "Approved").0, "False");
    assert!(revisions(&f, "gated").await.is_empty(), "nothing installed");
    assert_eq!(changing_runs(&log, "gated"), Vec::<String>::new());

    // Approved: it runs once, and nothing waits any more.
    approve(&f, "gated", &first.config_hash).await;
    let app = ready(&f, "gated", "InstallSucceeded", 1).await;
    let st = app.status.as_ref().unwrap();
    assert_eq!(st.config_hash, first.config_hash);
    assert_eq!(st.pending_change, None);
    assert_eq!(condition(&app, "Approved").1, "Approved");
    assert_eq!(changing_runs(&log, "gated").len(), 1, "one install");

    // A change waits; the approval of the old one is stale and said so.
    patch(
        &f,
        "gated",
        json!({ "spec": spec("second-s3cret", "debug") }),
    )
    .await;
    let second = pending(&f, "gated", &first.config_hash).await;
    let mut changed = second.objects.changed.clone();
    changed.sort();
    assert_eq!(changed, ["ConfigMap gated-env", "Secret gated-db"]);
    let app = with_reason(&f, "gated", "AwaitingApproval").await;
    let (_, _, message) = condition(&app, "Approved");
    assert!(message.contains(&first.config_hash), "{message}");
    eventually("an ApprovalStale Event", 30, || async {
        let events = event_messages(&f, "gated").await;
        events
            .iter()
            .any(|(r, _)| r == "ApprovalStale")
            .then_some(())
    })
    .await;
    let shown = serde_json::to_string(&app.status).unwrap()
        + &format!("{:?}", event_messages(&f, "gated").await);
    for secret in ["first-s3cret", "second-s3cret"] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
    assert_eq!(app.status.as_ref().unwrap().revision, 1);
    let awaiting = event_messages(&f, "gated")
        .await
        .into_iter()
        .filter(|(r, _)| r == "AwaitingApproval")
        .count();
    assert_eq!(awaiting, 2, "one Event per pending configuration");

    // A further change replaces the pending one; approving it runs it once.
    patch(
        &f,
        "gated",
        json!({ "spec": spec("second-s3cret", "warn") }),
    )
    .await;
    let third = pending(&f, "gated", &second.config_hash).await;
    let mut changed = third.objects.changed.clone();
    changed.sort();
    assert_eq!(
        changed,
        ["ConfigMap gated-env", "Secret gated-db"],
        "against the live release, not the replaced change"
    );
    assert_eq!(
        changing_runs(&log, "gated").len(),
        1,
        "still the install only"
    );
    approve(&f, "gated", &third.config_hash).await;
    ready(&f, "gated", "UpgradeSucceeded", 2).await;
    assert_eq!(changing_runs(&log, "gated").len(), 2, "one upgrade");

    // Drift repair restores what was approved, without asking.
    Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .delete("gated-env", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the ConfigMap put back", 60, || async {
        Api::<ConfigMap>::namespaced(f.cp.client(), NS)
            .get_opt("gated-env")
            .await
            .ok()
            .flatten()
    })
    .await;
    let app = get(&f, "gated").await.unwrap();
    assert_eq!(app.status.as_ref().unwrap().pending_change, None);
}
