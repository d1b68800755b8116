//! The operator when the API fails, when reporting is stopped, and when a
//! Helm release is corrupt — each on its own control plane.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use serde_json::json;

pub(crate) async fn warning_events(f: &Fixture, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(f.cp.client(), "default")
        .list(
            &ListParams::default().fields(&format!("involvedObject.name=cluster,reason={reason}")),
        )
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect()
}

#[tokio::test]
async fn an_unavailable_api_is_retried_with_backoff_and_status_follows_delivery() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;
    // Registration succeeds; the app POST gets 503 ten times, then 200.
    let mut script = vec![200];
    script.extend([503; 10]);
    f.api.respond_with(&script);
    let operator = f.start_operator();

    let posts = f.wait_requests("/v1/apps", 11, 60).await;
    let answered: Vec<u16> = posts.iter().map(|r| r.answered).collect();
    assert_eq!(answered[..10], [503; 10]);
    assert_eq!(answered[10], 200);
    assert!(
        posts.iter().all(|p| p.json() == posts[0].json()),
        "the retries re-send the same payload"
    );
    // With backoff: the rate limiter's step (5 ms, doubling) puts the
    // retries at 5, 15, 35, 75, 155, 315, 635 and 1,275 ms after the first
    // attempt — so at most 8 attempts in its first second. Counted in a
    // window, an upper bound: a slow machine only makes fewer; without
    // backoff all eleven would fall in it.
    let first = posts[0].at;
    let in_first_second = posts
        .iter()
        .filter(|p| p.at - first < Duration::from_secs(1))
        .count();
    assert!(
        in_first_second <= 8,
        "{in_first_second} attempts in the first second: {:?}",
        posts.iter().map(|p| p.at - first).collect::<Vec<_>>()
    );
    // And the whole sequence waited the steps out (5 ms × (2¹⁰ − 1) before
    // the eleventh attempt): a lower bound no slow machine meets without
    // the backoff, as eleven requests take far less.
    let last = posts[10].at - first;
    assert!(
        last >= Duration::from_millis(5000),
        "the eleventh attempt came {last:?} after the first"
    );
    let hp = eventually("status after delivery", 30, || async {
        let hp = f.get_hp("cluster").await;
        (hp.status.as_ref()?.app_count == 1).then_some(hp)
    })
    .await;
    assert_eq!(ready(&hp), Some(("True".into(), "Reporting".into())));
    assert!(
        !warning_events(&f, "ApiUnavailable").await.is_empty(),
        "no ApiUnavailable event"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(f.requests_to("/v1/apps").len(), 11, "delivered once");
    operator.stop().await;
}

#[tokio::test]
async fn a_rejected_payload_gives_a_warning_and_a_condition_without_a_retry_storm() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({})).await;
    f.api.respond_with(&[200, 400]);
    let operator = f.start_operator();

    f.wait_requests("/v1/apps", 1, 60).await;
    let hp = eventually("the ApiRejected condition", 30, || async {
        let hp = f.get_hp("cluster").await;
        (ready(&hp)? == ("False".to_string(), "ApiRejected".to_string())).then_some(hp)
    })
    .await;
    let message = &hp.status.unwrap().conditions[0].message;
    assert!(message.contains("HTTP 400"), "{message}");
    let events = eventually("an ApiRejected event", 30, || async {
        let e = warning_events(&f, "ApiRejected").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        events[0]
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("HTTP 400")
    );
    assert!(
        !events[0]
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(TOKEN)
    );

    // Other changes trigger reconciles, but the same payload is not re-sent.
    for phase in ["Running", "Failed"] {
        let mark = operator.mark();
        f.set_pod_phase("apps", "web-web-0", phase).await;
        operator.reconciled_since(mark).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let posts = f.requests_to("/v1/apps");
    // The pod phase is part of the payload: each change is a new payload and
    // may be sent once; an unchanged one never twice.
    let mut bodies: Vec<String> = posts.iter().map(|p| p.json().to_string()).collect();
    let total = bodies.len();
    bodies.sort();
    bodies.dedup();
    assert_eq!(
        bodies.len(),
        total,
        "a rejected payload was sent again: {total} posts"
    );
    assert!(total <= 3, "retry storm: {total} posts");
    operator.stop().await;
}

#[tokio::test]
async fn nothing_is_posted_while_stopped_and_reports_resume_after() {
    let f = Fixture::new().await;
    f.helm_install("web", "web", "apps");
    f.hosstedproject("cluster", json!({ "stop": true })).await;
    let operator = f.start_operator();

    let hp = eventually("the Stopped condition", 30, || async {
        let hp = f.get_hp("cluster").await;
        (ready(&hp)? == ("False".to_string(), "Stopped".to_string())).then_some(hp)
    })
    .await;
    assert_eq!(hp.status.unwrap().app_count, 0);
    // The upgrade is seen and reconciled — and still nothing is sent.
    let mark = operator.mark();
    f.helm_upgrade("web", "web", "apps", "port=81");
    operator.reconciled_since(mark).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        f.api.requests().is_empty(),
        "posted while stopped: {:?}",
        f.api.requests()
    );

    f.set_stop("cluster", false).await;
    let posts = f.wait_requests("/v1/apps", 1, 30).await;
    assert_eq!(posts[0].json()["app_info"]["helm_info"]["revision"], 2);
    assert_eq!(f.requests_to("/v1/apps").len(), 1);
    eventually("Ready again", 30, || async {
        (ready(&f.get_hp("cluster").await)? == ("True".to_string(), "Reporting".to_string()))
            .then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn a_corrupt_release_is_named_in_a_warning_and_the_others_are_still_reported() {
    let f = Fixture::new().await;
    f.helm_install("good", "tiny", "apps");
    let corrupt = Secret {
        metadata: ObjectMeta {
            name: Some("sh.helm.release.v1.broken.v1".into()),
            labels: Some(
                [
                    ("owner", "helm"),
                    ("name", "broken"),
                    ("version", "1"),
                    ("status", "deployed"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            ..Default::default()
        },
        type_: Some("helm.sh/release.v1".into()),
        string_data: Some(
            [(
                "release".to_string(),
                "H4sIAAAAAAAA/this is not gzip".to_string(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(f.cp.client(), "apps")
        .create(&PostParams::default(), &corrupt)
        .await
        .unwrap();
    f.hosstedproject("cluster", json!({})).await;
    let operator = f.start_operator();

    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(posts[0].json()["app_api_info"]["app_name"], "good");
    let events = eventually("an InvalidRelease event", 30, || async {
        let e = warning_events(&f, "InvalidRelease").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    let message = events[0].message.clone().unwrap_or_default();
    assert!(
        message.contains("apps/sh.helm.release.v1.broken.v1"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(f.requests_to("/v1/apps").len(), 1);
    assert_eq!(f.get_hp("cluster").await.status.unwrap().app_count, 1);
    operator.stop().await;
}

/// A release Secret as anyone who may write Secrets could forge it: a
/// well-formed payload (`name`, `namespace`, `version` as given) under the
/// storage labels of `label_name`.
pub(crate) async fn forge(f: &Fixture, secret: &str, label_name: &str, release: serde_json::Value) {
    let json = serde_json::to_vec(&release).unwrap();
    let payload = hossted_operator::lean::helm::encode_release(&json);
    let labels = [
        ("owner", "helm"),
        ("name", label_name),
        ("version", "1"),
        ("status", "deployed"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let forged = Secret {
        metadata: ObjectMeta {
            name: Some(secret.into()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some("helm.sh/release.v1".into()),
        data: Some([("release".to_string(), k8s_openapi::ByteString(payload))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(f.cp.client(), "apps")
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_forged_release_is_never_reported_nor_kept_in_status() {
    let f = Fixture::new().await;
    f.helm_install("good", "tiny", "apps");
    let release = |name: &str, ns: &str| {
        json!({ "name": name, "namespace": ns, "version": 1,
                "info": { "status": "deployed", "first_deployed": "2026-11-01T10:00:00Z",
                          "last_deployed": "2026-11-01T10:00:00Z" },
                "chart": { "metadata": { "name": "tiny", "version": "0.1.0" } },
                "manifest": "" })
    };
    // A 100,000-character name (it would push the project's status past
    // etcd's limit), and a release claiming another namespace.
    forge(
        &f,
        "sh.helm.release.v1.huge.v1",
        "huge",
        release(&"x".repeat(100_000), "apps"),
    )
    .await;
    forge(
        &f,
        "sh.helm.release.v1.moved.v1",
        "moved",
        release("moved", "kube-system"),
    )
    .await;
    f.hosstedproject("cluster", json!({})).await;
    let operator = f.start_operator();

    let posts = f.wait_requests("/v1/apps", 1, 60).await;
    assert_eq!(posts[0].json()["app_api_info"]["app_name"], "good");
    let named = eventually("both named in InvalidRelease warnings", 30, || async {
        let messages: Vec<String> = warning_events(&f, "InvalidRelease")
            .await
            .into_iter()
            .filter_map(|e| e.message)
            .collect();
        let named = |s: &str| messages.iter().any(|m| m.contains(s));
        (named("apps/sh.helm.release.v1.huge.v1") && named("apps/sh.helm.release.v1.moved.v1"))
            .then_some(messages)
    })
    .await;
    assert!(
        named.iter().all(|m| m.len() < 2_000),
        "a forged name is never echoed whole"
    );
    operator.settle().await;
    assert_eq!(f.requests_to("/v1/apps").len(), 1);
    let status = f.get_hp("cluster").await.status.unwrap();
    assert_eq!(status.app_count, 1);
    let kept = serde_json::to_string(&status.apps).unwrap();
    assert!(!kept.contains("xxxx") && !kept.contains("moved"), "{kept}");

    // One Warning on each forged Secret itself, matched by its UID (as
    // `kubectl describe secret` finds it), however many reconciles saw it.
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), "apps");
    for name in ["sh.helm.release.v1.huge.v1", "sh.helm.release.v1.moved.v1"] {
        let uid = secrets.get(name).await.unwrap().metadata.uid.unwrap();
        let on_secret = eventually("a Warning on the Secret", 30, || async {
            let events = Api::<Event>::namespaced(f.cp.client(), "apps")
                .list(&ListParams::default().fields(&format!(
                    "involvedObject.kind=Secret,involvedObject.name={name},involvedObject.uid={uid},reason=InvalidRelease"
                )))
                .await
                .unwrap()
                .items;
            (!events.is_empty()).then_some(events)
        })
        .await;
        assert_eq!(on_secret.len(), 1, "{name}");
        assert_eq!(
            on_secret[0].count.unwrap_or(1),
            1,
            "{name}: warned more than once"
        );
        assert_eq!(on_secret[0].type_.as_deref(), Some("Warning"));
    }
    operator.stop().await;
}
