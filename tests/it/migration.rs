//! Taking over from the Go operator: a Hosstedproject whose status the Go
//! operator wrote is neither registered again nor re-reported, keeps the
//! Go operator's app UUIDs, and is rewritten in the compact form.

use crate::support::*;
use apis::Hosstedproject;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const CLUSTER_UUID: &str = "K-5d1e7a8b-3d8f-4e61-a2c4-0b7e9c52aa01";
const GO_APP_UUID: &str = "A-9f3c2b1a-4d5e-4f60-8a7b-1c2d3e4f5a6b";

#[tokio::test]
async fn a_status_the_go_operator_wrote_is_taken_over_without_a_resend() {
    let f = Fixture::new().await;
    f.helm_install("web", "tiny", "shop");
    f.hosstedproject("cluster", json!({})).await;
    // What the Go operator 0.7.6 leaves behind: no condition, no
    // observedGeneration, one helmStatus entry per release.
    let go_status = json!({ "status": {
        "clusterUUID": CLUSTER_UUID,
        "lastReconcileTimestamp": "2026-11-01T10:00:00Z",
        "helmStatus": [{
            "name": "web", "namespace": "shop", "appUUID": GO_APP_UUID,
            "revision": 1, "updated": "2026-11-01T09:59:00Z", "status": "deployed",
            "chart": "tiny", "appVersion": "1.0.0", "hossted_helm": false
        }],
        "revision": [1],
        "reconcileHelmReleases": { "shop/web": "1" }
    }});
    Api::<Hosstedproject>::all(f.cp.client())
        .patch_status(
            "cluster",
            &PatchParams::default(),
            &Patch::Merge(&go_status),
        )
        .await
        .unwrap();

    let operator = f.start_operator();
    let hp = eventually("the status taken over", 60, || async {
        let hp = f.get_hp("cluster").await;
        (!hp.status.as_ref()?.apps.is_empty()).then_some(hp)
    })
    .await;
    // Whatever the take-over set off (the follow-up reconcile of its own
    // status write) has run. A mark taken only now could come after that
    // last reconcile, and nothing would begin after it.
    operator.settle().await;
    assert!(
        f.api.requests().is_empty(),
        "a Go-registered cluster and a Go-reported release were sent again: {:?}",
        f.api.requests()
    );
    let st = hp.status.unwrap();
    assert_eq!(st.cluster_uuid, CLUSTER_UUID);
    let (delivered, unreadable) = st.delivered();
    assert!(unreadable.is_empty());
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].app_uuid, GO_APP_UUID);
    assert!(
        st.helm_status.is_empty()
            && st.revision.is_empty()
            && st.reconcile_helm_releases.is_empty(),
        "the Go operator's per-release fields are replaced: {st:?}"
    );

    // The next revision goes out under the Go operator's UUID.
    f.helm_upgrade("web", "tiny", "shop", "greeting=hi");
    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(posts[0].json()["app_api_info"]["app_uuid"], GO_APP_UUID);
    assert_eq!(posts[0].json()["app_info"]["helm_info"]["revision"], 2);
    assert!(
        f.requests_to(&format!("/v1/clusters/{CLUSTER_UUID}/register"))
            .is_empty()
    );
    operator.stop().await;
}
