//! Update notices: a repository that gains a version outside what the
//! HelmApp allows is noticed — `status.latestAvailable`, one
//! `UpdateAvailable` Event, the gauge — and nothing is upgraded.

use super::sources::publish_tiny;
use super::*;

async fn update_events(f: &Fixture, name: &str) -> Vec<i32> {
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(f.cp.client(), NS)
        .list(&kube::api::ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("UpdateAvailable"))
        .map(|e| e.count.unwrap_or(1))
        .collect()
}

#[tokio::test]
async fn a_newer_chart_outside_the_range_is_noticed_once_and_not_installed() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();
    let operator = f.start_delivery().await;
    apply(
        &f,
        "pinned",
        json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "0.x" }, "interval": "1s" }),
    )
    .await;
    let app = ready(&f, "pinned", "InstallSucceeded", 1).await;
    let st = app.status.unwrap();
    assert_eq!(
        (st.chart_version.as_str(), st.latest_available.as_str()),
        ("0.1.0", "0.1.0")
    );
    let gauge = "hossted_helmapp_update_available{namespace=\"apps\",name=\"pinned\"}";
    gauge_reaches(&operator, gauge, 0.0).await;

    // 2.0.0 published (and a pre-release above it, which is never offered).
    publish_tiny(&f, &repo, "2.0.0");
    publish_tiny(&f, &repo, "3.0.0-rc.1");
    patch(
        &f,
        "pinned",
        json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": "1" } } }),
    )
    .await;
    let app = eventually("latestAvailable 2.0.0", 60, || async {
        let app = get(&f, "pinned").await?;
        (app.status.as_ref()?.latest_available == "2.0.0").then_some(app)
    })
    .await;
    assert_eq!(
        app.status.as_ref().unwrap().revision,
        1,
        "0.x does not allow 2.0.0: nothing upgraded"
    );
    eventually("one UpdateAvailable Event", 30, || async {
        (update_events(&f, "pinned").await == [1]).then_some(())
    })
    .await;
    gauge_reaches(&operator, gauge, 1.0).await;
    // Looked at again: the same version is not announced again.
    let mark = operator.mark();
    patch(
        &f,
        "pinned",
        json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": "2" } } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    assert_eq!(update_events(&f, "pinned").await, [1]);
    assert_eq!(revisions(&f, "pinned").await.len(), 1);
    operator.stop().await;
}
