//! Hostile input to the inventory (docs/security.md "Hostile input"): whoever
//! can write a Secret labelled `owner=helm` must not crash, stall or bloat
//! the operator that reports every release of the cluster.

use crate::failures::forge;
use crate::support::*;
use serde_json::json;

/// `levels` levels of 10 aliases each: 10^levels nodes once expanded.
fn alias_bomb(levels: usize) -> String {
    let mut text = String::from("hossted_helm: true\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..levels {
        let refs = vec![format!("*l{}", i - 1); 10].join(", ");
        text.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
    }
    text
}

#[tokio::test]
async fn a_release_manifest_that_is_an_alias_bomb_is_reported_unmarked_and_costs_nothing() {
    let f = Fixture::new().await;
    f.helm_install("good", "tiny", "apps");
    // 10^10 nodes expanded (yaml-rust2's loader would clone every one of
    // them): the marker refuses it unread.
    let manifest = alias_bomb(10);
    assert!(manifest.len() < 2_000);
    forge(
        &f,
        "sh.helm.release.v1.bomb.v1",
        "bomb",
        json!({ "name": "bomb", "namespace": "apps", "version": 1,
                "info": { "status": "deployed", "first_deployed": "2026-11-01T10:00:00Z",
                          "last_deployed": "2026-11-01T10:00:00Z" },
                "chart": { "metadata": { "name": "tiny", "version": "0.1.0" } },
                "manifest": manifest }),
    )
    .await;
    f.hosstedproject("cluster", json!({})).await;
    let operator = f.start_operator();
    let posts = f.wait_requests("/v1/apps", 2, 60).await;
    let bomb = posts
        .iter()
        .map(|p| p.json())
        .find(|p| p["app_api_info"]["app_name"] == "bomb")
        .expect("the release is still reported");
    assert_eq!(bomb["app_info"]["helm_info"]["hossted_helm"], false);
    assert!(
        posts
            .iter()
            .any(|p| p.json()["app_api_info"]["app_name"] == "good")
    );
    operator.stop().await;
}
