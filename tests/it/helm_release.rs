//! `helm::decode_release` on release Secrets written by the real `helm` CLI.

use std::path::Path;

use envtest::ControlPlane;
use hossted_operator::lean::helm::{ReleaseSummary, decode_release};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

fn helm(cp: &ControlPlane, args: &[&str]) {
    let out = cp.helm().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn decoded(cp: &ControlPlane, ns: &str, secret: &str) -> ReleaseSummary {
    let s = Api::<Secret>::namespaced(cp.client(), ns)
        .get(secret)
        .await
        .unwrap();
    let data = s.data.unwrap_or_default();
    let payload = data.get("release").expect("a release entry");
    decode_release(&payload.0).unwrap()
}

#[tokio::test]
async fn releases_written_by_helm_decode_to_their_summary() {
    let cp = ControlPlane::start().await.unwrap();
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let (tiny, hossted) = (charts.join("tiny"), charts.join("hossted-app"));
    helm(
        &cp,
        &[
            "install",
            "plain",
            tiny.to_str().unwrap(),
            "-n",
            "apps",
            "--create-namespace",
        ],
    );
    helm(
        &cp,
        &["install", "marked", hossted.to_str().unwrap(), "-n", "apps"],
    );
    helm(
        &cp,
        &[
            "upgrade",
            "marked",
            hossted.to_str().unwrap(),
            "-n",
            "apps",
            "--set",
            "message=v2",
        ],
    );

    let plain = decoded(&cp, "apps", "sh.helm.release.v1.plain.v1").await;
    assert_eq!(
        (
            plain.name.as_str(),
            plain.namespace.as_str(),
            plain.version,
            plain.status.as_str()
        ),
        ("plain", "apps", 1, "deployed")
    );
    assert_eq!(
        (plain.chart.as_str(), plain.app_version.as_str()),
        ("tiny", "1.0.0")
    );
    assert!(!plain.hossted_helm);
    // RFC 3339 with the offset Helm wrote.
    assert!(
        plain.updated.contains('T') && plain.updated.len() >= 20,
        "{}",
        plain.updated
    );

    let v1 = decoded(&cp, "apps", "sh.helm.release.v1.marked.v1").await;
    let v2 = decoded(&cp, "apps", "sh.helm.release.v1.marked.v2").await;
    assert_eq!((v1.version, v1.status.as_str()), (1, "superseded"));
    assert_eq!((v2.version, v2.status.as_str()), (2, "deployed"));
    assert_eq!(
        (v2.chart.as_str(), v2.app_version.as_str()),
        ("hossted-app", "23.0.5")
    );
    assert!(v1.hossted_helm && v2.hossted_helm);
    // The first deployment is kept across revisions: the app UUID's seed.
    assert!(!v1.first_deployed.is_empty());
    assert_eq!(v1.first_deployed, v2.first_deployed);
    assert_ne!(v2.first_deployed, v2.updated);
}
