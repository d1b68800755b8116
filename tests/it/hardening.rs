//! The inventory under the failures an SRE meets: status writes refused,
//! redirects, auth errors, churn, duplicates, slow installs, removals,
//! toggles, one bad payload among good ones.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

async fn wait_ready(f: &Fixture, name: &str, want: (&str, &str)) -> apis::Hosstedproject {
    eventually(
        &format!("{name} Ready={}/{}", want.0, want.1),
        60,
        || async {
            let hp = f.get_hp(name).await;
            (ready(&hp)? == (want.0.to_string(), want.1.to_string())).then_some(hp)
        },
    )
    .await
}

fn app_name(r: &envtest::Recorded) -> String {
    r.json()["app_api_info"]["app_name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

const DENY_STATUS: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: { name: freeze-hp-status }
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["hossted.com"]
        apiVersions: ["v1"]
        operations: ["UPDATE"]
        resources: ["hosstedprojects/status"]
  validations:
    - expression: "false"
      message: status writes are frozen by policy
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: { name: freeze-hp-status }
spec:
  policyName: freeze-hp-status
  validationActions: [Deny]
"#;

#[tokio::test]
async fn a_refused_status_write_resends_the_same_app_uuid_until_it_is_written() {
    let f = Fixture::new().await;
    f.hosstedproject("cluster", json!({})).await;
    let operator = f.start_operator();
    wait_ready(&f, "cluster", ("True", "Reporting")).await;

    let policy = f.cp.dir().join("freeze.yaml");
    std::fs::write(&policy, DENY_STATUS).unwrap();
    f.kubectl(&["apply", "-f", policy.to_str().unwrap()]);
    // The policy is enforced once the apiserver has loaded it.
    eventually("the policy to refuse status writes", 30, || async {
        let patch = json!({ "status": { "dnsUpdated": true } });
        let refused = Api::<apis::Hosstedproject>::all(f.cp.client())
            .patch_status("cluster", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_err();
        refused.then_some(())
    })
    .await;

    f.helm_install("web", "web", "apps");
    let posts = f.wait_requests("/v1/apps", 3, 90).await;
    let uuids: std::collections::BTreeSet<String> = posts
        .iter()
        .map(|p| {
            p.json()["app_api_info"]["app_uuid"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(uuids.len(), 1, "one release, several app UUIDs: {uuids:?}");
    assert_eq!(f.get_hp("cluster").await.status.unwrap().app_count, 0);

    f.kubectl(&["delete", "-f", policy.to_str().unwrap()]);
    let hp = eventually("the delivery written", 120, || async {
        let hp = f.get_hp("cluster").await;
        (hp.status.as_ref()?.app_count == 1).then_some(hp)
    })
    .await;
    let recorded = &hp.status.unwrap().delivered().0[0].app_uuid;
    assert!(uuids.contains(recorded), "{recorded} was never sent");
    let sent = f.requests_to("/v1/apps").len();
    let mark = operator.mark();
    f.set_pod_phase("apps", "web-web-0", "Running").await;
    operator.reconciled_since(mark).await;
    assert_eq!(
        f.requests_to("/v1/apps").len(),
        sent,
        "re-sent after the status was written"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_redirect_is_not_delivery_and_an_auth_error_is_retried() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;
    // Registration: 401 (a token not yet valid), then 200. The app: 301, then 200.
    f.api.respond_with(&[401, 200, 301]);
    let operator = f.start_operator();

    let regs = f
        .api
        .wait_for(
            |r| r.path.ends_with("/register"),
            2,
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        regs.iter().map(|r| r.answered).collect::<Vec<_>>(),
        [401, 200]
    );
    let posts = f.wait_requests("/v1/apps", 2, 60).await;
    assert_eq!(
        posts.iter().map(|r| r.answered).collect::<Vec<_>>(),
        [301, 200]
    );
    assert!(
        f.api.requests().iter().all(|r| r.method == "POST"),
        "a redirect was followed: {:?}",
        f.api
            .requests()
            .iter()
            .map(|r| (&r.method, &r.path))
            .collect::<Vec<_>>()
    );
    let hp = wait_ready(&f, "cluster", ("True", "Reporting")).await;
    assert_eq!(hp.status.unwrap().app_count, 1);
    assert_eq!(f.requests_to("/v1/apps").len(), 2);
    operator.stop().await;
}

#[tokio::test]
async fn label_churn_on_pods_of_no_release_costs_nothing() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;
    let operator = f.start_operator();
    f.wait_requests("/v1/apps", 1, 60).await;
    wait_ready(&f, "cluster", ("True", "Reporting")).await;

    let pods: Api<Pod> = Api::namespaced(f.cp.client(), "apps");
    let lonely = Pod {
        metadata: ObjectMeta {
            name: Some("lonely".into()),
            ..Default::default()
        },
        spec: Some(
            serde_json::from_value(json!({ "containers": [{ "name": "c", "image": "busybox" }] }))
                .unwrap(),
        ),
        ..Default::default()
    };
    pods.create(&PostParams::default(), &lonely).await.unwrap();
    operator.settle().await;
    let before = f.get_hp("cluster").await;
    let mark = operator.mark();
    for i in 0..20 {
        let patch = json!({ "metadata": { "labels": { "flip": i.to_string() } } });
        pods.patch("lonely", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // 4x the coalescing window
    assert_eq!(
        operator.mark(),
        mark,
        "a pod of no release caused a reconcile"
    );
    let after = f.get_hp("cluster").await;
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(f.requests_to("/v1/apps").len(), 1);

    // The operator was listening: a real change is reported.
    f.helm_upgrade("web", "web", "apps", "port=81");
    let posts = f.wait_requests("/v1/apps", 2, 30).await;
    assert_eq!(posts[1].json()["app_info"]["helm_info"]["revision"], 2);
    operator.stop().await;
}

#[tokio::test]
async fn a_second_hosstedproject_is_a_duplicate_and_sends_nothing() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("first", json!({})).await;
    let operator = f.start_operator();
    f.wait_requests("/v1/apps", 1, 60).await;
    wait_ready(&f, "first", ("True", "Reporting")).await;

    let mark = operator.mark();
    f.hosstedproject("second", json!({})).await;
    let hp = wait_ready(&f, "second", ("False", "Duplicate")).await;
    operator.reconciled_since(mark).await;
    let status = hp.status.unwrap();
    assert!(
        status.conditions[0].message.contains("first"),
        "{:?}",
        status.conditions
    );
    assert!(
        status.cluster_uuid.is_empty(),
        "a duplicate made a cluster UUID"
    );
    assert_eq!(f.requests_to("/v1/apps").len(), 1);
    let registrations = f
        .api
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/register"))
        .count();
    assert_eq!(registrations, 1);

    // The first goes: the second takes over (and registers its own cluster UUID).
    Api::<apis::Hosstedproject>::all(f.cp.client())
        .delete("first", &Default::default())
        .await
        .unwrap();
    wait_ready(&f, "second", ("True", "Reporting")).await;
    operator.stop().await;
}

#[tokio::test]
async fn an_install_is_one_post_once_settled_an_uninstall_one_more_and_a_toggle_re_registers() {
    let f = Fixture::new().await;
    f.hosstedproject("cluster", json!({})).await;
    let operator = f.start_operator();
    wait_ready(&f, "cluster", ("True", "Reporting")).await;

    // The install waits for its pre-install hook Pod: pending-install.
    let mut install = f.cp.helm();
    install.args([
        "install",
        "slow",
        &chart("tiny"),
        "-n",
        "slow",
        "--create-namespace",
        "--set",
        "hook=true",
    ]);
    let install = tokio::task::spawn_blocking(move || output_ok(&mut install));
    let pods: Api<Pod> = Api::namespaced(f.cp.client(), "slow");
    eventually("the hook Pod", 60, || async {
        pods.get_opt("slow-hook").await.ok().flatten()
    })
    .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(f.cp.client(), "slow");
    eventually("the pending-install revision", 30, || async {
        let s = secrets
            .get_opt("sh.helm.release.v1.slow.v1")
            .await
            .ok()
            .flatten()?;
        (s.metadata.labels?.get("status")? == "pending-install").then_some(())
    })
    .await;
    // A reconcile that certainly saw it: one caused by a change made now.
    let mark = operator.mark();
    f.kubectl(&["label", "ns", "slow", "touched=0"]);
    operator.reconciled_since(mark).await;
    assert!(
        f.requests_to("/v1/apps").is_empty(),
        "a pending-install was sent"
    );
    f.set_pod_phase("slow", "slow-hook", "Succeeded").await;
    install.await.unwrap();
    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(
        posts[0].json()["app_info"]["helm_info"]["status"],
        "deployed"
    );
    let mark = operator.mark();
    f.kubectl(&["label", "ns", "slow", "touched=1", "--overwrite"]);
    operator.reconciled_since(mark).await;
    assert_eq!(f.requests_to("/v1/apps").len(), 1, "an install is one POST");

    f.helm(&["uninstall", "slow", "-n", "slow"]);
    let posts = f.wait_requests("/v1/apps", 2, 60).await;
    let gone = posts[1].json();
    assert_eq!(gone["app_info"]["helm_info"]["status"], "uninstalled");
    assert_eq!(
        gone["app_api_info"]["app_uuid"],
        posts[0].json()["app_api_info"]["app_uuid"]
    );
    let hp = eventually("the release forgotten", 30, || async {
        let hp = f.get_hp("cluster").await;
        (hp.status.as_ref()?.app_count == 0).then_some(hp)
    })
    .await;
    assert!(hp.status.unwrap().apps.is_empty());

    // A toggle re-sends the registration, once.
    f.patch_spec("cluster", json!({ "monitoring": { "enable": true } }))
        .await;
    let regs = f
        .api
        .wait_for(
            |r| r.path.ends_with("/register"),
            2,
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(regs[1].json()["options_state"]["monitoring"], true);
    let mark = operator.mark();
    f.kubectl(&["label", "ns", "slow", "touched=2", "--overwrite"]);
    operator.reconciled_since(mark).await;
    let regs = f
        .api
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/register"))
        .count();
    assert_eq!(regs, 2);
    assert_eq!(
        f.requests_to("/v1/apps").len(),
        2,
        "nothing more after the uninstall"
    );
    operator.stop().await;
}

#[tokio::test]
async fn one_rejected_payload_does_not_hold_back_the_others() {
    let f = Fixture::new().await;
    for name in ["a", "b", "c"] {
        f.helm_install(name, "tiny", "apps");
    }
    f.hosstedproject("cluster", json!({})).await;
    // Every app: 503 first (the API is down: one attempt, then backoff)...
    f.api.respond_with(&[200, 503]);
    // ... then b is refused for good, the others accepted.
    f.api
        .respond_when(|r| (r.path == "/v1/apps" && app_name(r) == "b").then_some(400));
    let operator = f.start_operator();

    let hp = eventually("a and c delivered", 90, || async {
        let hp = f.get_hp("cluster").await;
        (hp.status.as_ref()?.app_count == 2).then_some(hp)
    })
    .await;
    let mut names: Vec<String> = hp
        .status
        .unwrap()
        .delivered()
        .0
        .iter()
        .map(|h| h.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "c"]);
    wait_ready(&f, "cluster", ("False", "ApiRejected")).await;
    let b_posts = || {
        f.requests_to("/v1/apps")
            .iter()
            .filter(|r| app_name(r) == "b")
            .count()
    };
    let sent = b_posts();
    let mark = operator.mark();
    f.kubectl(&["label", "ns", "apps", "touched=1"]);
    operator.reconciled_since(mark).await;
    assert_eq!(
        b_posts(),
        sent,
        "the refused payload was sent again unchanged"
    );
    operator.stop().await;
}
