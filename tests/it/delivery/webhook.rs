//! Push to deploy: the webhook receiver refuses what is not signed, fresh
//! and small (401 / 401 / 401 / 413, nothing re-resolved), answers 503
//! while its replica does not lead, and a signed `chart-pushed` re-resolves
//! a HelmApp at once — a new 1.2.0 within its `1.x` range is installed
//! although its `interval` is an hour.

use super::sources::publish_tiny;
use super::*;
use hossted_operator::delivery;
use hossted_operator::delivery::webhook::signature::sign;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(super) const KEY: &str = "a-shared-webhook-key-for-tests";

/// POSTs `body` to `path` with the given headers; the status code.
pub(super) async fn post(
    at: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> u16 {
    post_answer(at, path, headers, body).await.0
}

/// POSTs `body` to `path` with the given headers; the status code and the
/// answer's body.
pub(super) async fn post_answer(
    at: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: hooks\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // The server may answer (413) before it reads a large body, and close.
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The headers of a request signed at `at` (Unix seconds) with `key`.
pub(super) fn signed(key: &str, at: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let ts = at.to_string();
    vec![
        ("X-Hossted-Timestamp", ts.clone()),
        ("X-Hossted-Signature", sign(key.as_bytes(), &ts, body)),
    ]
}

pub(super) fn webhook_settings(f: &Fixture) -> delivery::WebhookConfig {
    let file = f.cp.dir().join("webhook-key");
    std::fs::write(&file, format!("{KEY}\n")).unwrap();
    let address = Some("127.0.0.1:0".parse().unwrap());
    delivery::WebhookConfig::from_flags(address, Some(&file), None, None, None)
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn only_a_signed_push_re_resolves_and_installs_the_new_version_at_once() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();
    publish_tiny(&f, &repo, "1.1.0");
    let config = webhook_settings(&f);
    let operator = f
        .start_delivery_with(|s| s.webhook = Some(config.clone()))
        .await;
    let hooks = operator.webhook_address();
    apply(
        &f,
        "pushed",
        json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "1.x" }, "interval": "1h" }),
    )
    .await;
    let app = ready(&f, "pushed", "InstallSucceeded", 1).await;
    assert_eq!(app.status.unwrap().chart_version, "1.1.0");

    // 1.2.0 is published; within the hour nothing looks unless pushed.
    // The mark is taken before any refused request: none may queue one.
    operator.settle().await;
    let mark = operator.mark();
    publish_tiny(&f, &repo, "1.2.0");
    let body = json!({ "repo": repo.url(), "name": "tiny", "version": "1.2.0" }).to_string();
    let body = body.as_bytes();
    let now = chrono::Utc::now().timestamp();
    let path = "/hooks/chart-pushed";
    assert_eq!(post(hooks, path, &[], body).await, 401, "unsigned");
    assert_eq!(
        post(
            hooks,
            path,
            &signed("another-key-entirely", now, body),
            body
        )
        .await,
        401,
        "signed with another key"
    );
    assert_eq!(
        post(hooks, path, &signed(KEY, now - 301, body), body).await,
        401,
        "stale"
    );
    let big = vec![b' '; 64 * 1024 + 1];
    assert_eq!(post(hooks, path, &signed(KEY, now, &big), &big).await, 413);
    let other = json!({ "kind": "HelmApp", "namespace": NS, "name": "nosuch" }).to_string();
    let other = other.as_bytes();
    assert_eq!(
        post(hooks, "/hooks/reconcile", &signed(KEY, now, other), other).await,
        404,
        "a signed request is answered: the refusals above were not for want of a route"
    );
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        operator.mark(),
        mark,
        "nothing was queued by the refused requests"
    );
    let app = get(&f, "pushed").await.unwrap();
    assert_eq!(
        app.status.unwrap().chart_version,
        "1.1.0",
        "nothing re-resolved"
    );

    // Signed: re-resolved now, and 1.2.0 installed.
    assert_eq!(post(hooks, path, &signed(KEY, now, body), body).await, 202);
    let app = ready(&f, "pushed", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.unwrap().chart_version, "1.2.0");
}

#[tokio::test]
async fn a_replica_that_does_not_lead_answers_503_to_a_signed_request() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let config = webhook_settings(&f);
    // A manager that never runs never leads.
    let options = runtime::ManagerOptions::new("hossted", "standby");
    let mut manager = runtime::Manager::new(f.cp.client(), options);
    let settings = delivery::Settings {
        webhook: Some(config.clone()),
        ..f.delivery_settings()
    };
    let added = delivery::add_to(&mut manager, settings).expect("delivery starts");
    let server = delivery::webhook::start(&manager, added.nudge, &config)
        .await
        .unwrap();
    let body = json!({ "kind": "HelmApp", "namespace": NS, "name": "web" }).to_string();
    let body = body.as_bytes();
    let now = chrono::Utc::now().timestamp();
    let at = server.address;
    assert_eq!(
        post(at, "/hooks/reconcile", &signed(KEY, now, body), body).await,
        503
    );
    assert_eq!(
        post(at, "/hooks/reconcile", &[], body).await,
        401,
        "unsigned: 401 first"
    );
}

const TEAM_A_KEY: &str = "a-key-of-team-a-only-for-tests";

/// The reconcile-at annotation of HelmApp `ns/name` (empty: none).
async fn reconcile_at(f: &Fixture, ns: &str, name: &str) -> String {
    get_helmapp(f, ns, name)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .get("hossted.com/reconcile-at")
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_replay_is_refused_and_a_namespace_key_acts_only_on_its_namespace() {
    let f = Fixture::new().await;
    for ns in ["team-a", "team-b"] {
        f.namespace(ns).await;
    }
    let shared = f.cp.dir().join("webhook-key");
    std::fs::write(&shared, format!("{KEY}\n")).unwrap();
    let dir = f.cp.dir().join("webhook-keys");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("team-a"), TEAM_A_KEY).unwrap();
    let address = Some("127.0.0.1:0".parse().unwrap());
    let config =
        delivery::WebhookConfig::from_flags(address, Some(&shared), Some(&dir), None, None)
            .unwrap()
            .unwrap();
    let operator = f
        .start_delivery_with(|s| s.webhook = Some(config.clone()))
        .await;
    let hooks = operator.webhook_address();
    for ns in ["team-a", "team-b"] {
        apply_helmapp(&f, ns, "web", json!({ "chart": { "path": "tiny" } })).await;
        helmapp_ready(&f, ns, "web", "InstallSucceeded", 1).await;
    }
    let reconcile =
        |ns: &str| json!({ "kind": "HelmApp", "namespace": ns, "name": "web" }).to_string();
    let now = chrono::Utc::now().timestamp();

    // Signed with the shared key: taken once; the same request again is a
    // replay.
    let body = reconcile("team-b");
    let headers = signed(KEY, now, body.as_bytes());
    assert_eq!(
        post(hooks, "/hooks/reconcile", &headers, body.as_bytes()).await,
        202
    );
    let first = reconcile_at(&f, "team-b", "web").await;
    assert!(!first.is_empty());
    assert_eq!(
        post(hooks, "/hooks/reconcile", &headers, body.as_bytes()).await,
        401,
        "replayed"
    );
    assert_eq!(
        reconcile_at(&f, "team-b", "web").await,
        first,
        "the replay did nothing"
    );

    // Signed with team-a's key: team-a only.
    let as_team_a = |body: &str, at: i64| {
        let mut h = signed(TEAM_A_KEY, at, body.as_bytes());
        h.push(("X-Hossted-Namespace", "team-a".to_string()));
        h
    };
    let body = reconcile("team-b");
    assert_eq!(
        post(
            hooks,
            "/hooks/reconcile",
            &as_team_a(&body, now),
            body.as_bytes()
        )
        .await,
        403,
        "team-a's key naming team-b"
    );
    assert_eq!(reconcile_at(&f, "team-b", "web").await, first);
    let body = reconcile("team-a");
    assert_eq!(
        post(
            hooks,
            "/hooks/reconcile",
            &as_team_a(&body, now),
            body.as_bytes()
        )
        .await,
        202
    );
    assert!(!reconcile_at(&f, "team-a", "web").await.is_empty());
    // team-a's key without naming it is not the shared key.
    let body = reconcile("team-a");
    assert_eq!(
        post(
            hooks,
            "/hooks/reconcile",
            &signed(TEAM_A_KEY, now + 1, body.as_bytes()),
            body.as_bytes()
        )
        .await,
        401
    );

    // chart-pushed answers with a count, never names.
    let body = json!({ "repo": "https://charts.example.invalid", "name": "tiny" }).to_string();
    let (code, answer) = post_answer(
        hooks,
        "/hooks/chart-pushed",
        &signed(KEY, now, body.as_bytes()),
        body.as_bytes(),
    )
    .await;
    assert_eq!(code, 202);
    let answer: serde_json::Value = serde_json::from_str(answer.trim()).unwrap();
    assert_eq!(answer, json!({ "queued": 0 }));
    operator.stop().await;
}

/// A namespace's key refreshes only what its namespace alone uses: a push
/// signed by team-a for a repository team-b uses too leaves team-b's
/// remembered resolution alone (team-b's next reconcile, within its hour,
/// does not upgrade), where the shared key's push refreshes it for all.
#[tokio::test]
async fn a_namespace_key_does_not_drop_what_other_namespaces_fetched() {
    let f = Fixture::new().await;
    for ns in ["team-a", "team-b"] {
        f.namespace(ns).await;
    }
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();
    publish_tiny(&f, &repo, "1.1.0");
    let shared = f.cp.dir().join("webhook-key");
    std::fs::write(&shared, format!("{KEY}\n")).unwrap();
    let dir = f.cp.dir().join("webhook-keys");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("team-a"), TEAM_A_KEY).unwrap();
    let address = Some("127.0.0.1:0".parse().unwrap());
    let config =
        delivery::WebhookConfig::from_flags(address, Some(&shared), Some(&dir), None, None)
            .unwrap()
            .unwrap();
    let operator = f
        .start_delivery_with(|s| s.webhook = Some(config.clone()))
        .await;
    let hooks = operator.webhook_address();
    let spec = json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": "1.x" }, "interval": "1h" });
    for ns in ["team-a", "team-b"] {
        apply_helmapp(&f, ns, "web", spec.clone()).await;
        helmapp_ready(&f, ns, "web", "InstallSucceeded", 1).await;
    }
    publish_tiny(&f, &repo, "1.2.0");
    let now = chrono::Utc::now().timestamp();
    let pushed = json!({ "repo": repo.url(), "name": "tiny" }).to_string();
    let mut as_team_a = signed(TEAM_A_KEY, now, pushed.as_bytes());
    as_team_a.push(("X-Hossted-Namespace", "team-a".to_string()));
    let (code, answer) =
        post_answer(hooks, "/hooks/chart-pushed", &as_team_a, pushed.as_bytes()).await;
    assert_eq!(code, 202);
    let answer: serde_json::Value = serde_json::from_str(answer.trim()).unwrap();
    assert_eq!(answer, json!({ "queued": 1 }), "team-a's app only");

    // team-b's values edited now: its upgrade uses the resolution it
    // remembered (its interval is an hour), not one team-a's key dropped.
    patch_helmapp(
        &f,
        "team-b",
        "web",
        json!({ "spec": { "values": { "edited": true } } }),
    )
    .await;
    let upgraded = helmapp_ready(&f, "team-b", "web", "UpgradeSucceeded", 2).await;
    assert_eq!(
        upgraded.status.unwrap().chart_version,
        "1.1.0",
        "team-b not refreshed by team-a's key"
    );

    // The shared key's push refreshes the source for everyone.
    let headers = signed(KEY, now + 1, pushed.as_bytes());
    assert_eq!(
        post(hooks, "/hooks/chart-pushed", &headers, pushed.as_bytes()).await,
        202
    );
    let app = helmapp_ready(&f, "team-a", "web", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.unwrap().chart_version, "1.2.0");
    let app = helmapp_ready(&f, "team-b", "web", "UpgradeSucceeded", 3).await;
    assert_eq!(app.status.unwrap().chart_version, "1.2.0");
    operator.stop().await;
}
