//! Chart digests (issue 37): the same OCI tag pushed again with other
//! bytes. Tracked (the default), it is one upgrade with the new
//! `status.chartDigest`; pinned by `chart.digest` it is never given to helm
//! (`VerificationFailed`, the release untouched); with
//! `hossted.com/digest-tracking: disabled` it upgrades nothing.

use super::*;

/// `examples/charts/tiny` at its own version with another default
/// greeting: other bytes under the same tag.
fn tiny_with_other_bytes(f: &Fixture) -> std::path::PathBuf {
    let to = super::sources::chart_at_version(f, "tiny", "0.1.0");
    let values = to.join("values.yaml");
    let text = std::fs::read_to_string(&values).unwrap();
    std::fs::write(
        &values,
        text.replace("greeting: hello", "greeting: repushed"),
    )
    .unwrap();
    to
}

#[tokio::test]
async fn a_tag_pushed_again_upgrades_once_is_refused_when_pinned_and_ignored_when_untracked() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let registry = envtest::OciRegistry::start(&f.cp, false).await.unwrap();
    let oci = registry.push(&f.cp, &charts.join("tiny")).unwrap();
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let chart = json!({ "oci": oci, "version": "0.1.0", "insecure": true });
    apply(&f, "tracked", json!({ "chart": chart, "interval": "1s" })).await;
    let first = ready(&f, "tracked", "InstallSucceeded", 1).await;
    let digest = first.status.unwrap().chart_digest;
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    let mut pinned = chart.clone();
    pinned["digest"] = json!(digest);
    apply(&f, "pinned", json!({ "chart": pinned, "interval": "1s" })).await;
    ready(&f, "pinned", "InstallSucceeded", 1).await;
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
                "metadata": { "name": "untracked", "namespace": NS,
                              "annotations": { "hossted.com/digest-tracking": "disabled" } },
                "spec": { "chart": chart, "interval": "1s" } }))
            .unwrap(),
        )
        .await
        .unwrap();
    ready(&f, "untracked", "InstallSucceeded", 1).await;

    // The same tag, other bytes.
    registry.push(&f.cp, &tiny_with_other_bytes(&f)).unwrap();
    let upgraded = ready(&f, "tracked", "UpgradeSucceeded", 2).await;
    let status = upgraded.status.unwrap();
    assert_ne!(status.chart_digest, digest, "the new artifact is recorded");
    let live: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    assert_eq!(
        live.get("tracked-tiny").await.unwrap().data.unwrap()["greeting"],
        "repushed"
    );

    let refused = with_reason(&f, "pinned", "VerificationFailed").await;
    let message = refused.status.unwrap().conditions[0].message.clone();
    assert!(message.contains(&digest), "names the pin: {message}");
    an_event(&f, NS, "pinned", "VerificationFailed").await;
    assert_eq!(revisions(&f, "pinned").await.len(), 1, "untouched");
    let helm_on_pinned = helm_calls(&log)
        .iter()
        .filter(|c| c.releases() && c.on("pinned"))
        .count();
    assert_eq!(helm_on_pinned, 1, "only its install ran");

    // Untracked: looked at again after its interval, and not upgraded.
    let mark = operator.mark();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    operator.reconciled_since(mark).await;
    assert_eq!(revisions(&f, "untracked").await.len(), 1, "not upgraded");
    assert_eq!(
        get(&f, "untracked")
            .await
            .unwrap()
            .status
            .unwrap()
            .chart_digest,
        digest,
        "still what it was installed from"
    );
    operator.stop().await;
}
