//! The API client against a local receiver.

use envtest::Receiver;
use hossted_operator::inventory::poster::{ApiConfig, Delivery, PostError, Poster, Token};
use serde_json::json;

const TOKEN: &str = "s3cr3t-token-value";

fn poster(url: &str) -> Poster {
    Poster::new(ApiConfig::new(&format!("{url}/v1/"), TOKEN)).unwrap()
}

async fn post(url: &str, body: serde_json::Value) -> Result<Delivery, PostError> {
    let p = poster(url);
    tokio::task::spawn_blocking(move || p.post("/apps", &body))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_2xx_is_delivered_with_the_contract_headers() {
    let api = Receiver::start().await.unwrap();
    let body = json!({ "app_api_info": { "type": "k8s" } });
    assert_eq!(
        post(api.url(), body.clone()).await,
        Ok(Delivery::Delivered { status: 200 })
    );
    let r = &api.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/apps"));
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.header("user-agent"),
        Some(concat!("hossted-operator/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(r.json(), body);
}

#[tokio::test]
async fn redirects_auth_errors_429_5xx_and_no_answer_are_unavailable_other_4xx_rejected() {
    let api = Receiver::start().await.unwrap();
    let unavailable = [301, 302, 307, 401, 403, 408, 425, 429, 503, 500];
    api.respond_with(&unavailable);
    api.respond_with(&[400, 404]);
    for _ in unavailable {
        let err = post(api.url(), json!({})).await.unwrap_err();
        assert!(matches!(err, PostError::Unavailable { .. }), "{err}");
        assert!(!err.to_string().contains(TOKEN));
    }
    for status in [400, 404] {
        match post(api.url(), json!({})).await {
            Err(PostError::Rejected { status: s, .. }) => assert_eq!(s, status),
            other => panic!("expected Rejected({status}), got {other:?}"),
        }
    }
    // A redirect is never followed (it was, as a body-less GET whose 200
    // counted as delivered).
    assert!(
        api.requests()
            .iter()
            .all(|r| r.method == "POST" && r.path == "/v1/apps"),
        "{:?}",
        api.requests()
            .iter()
            .map(|r| (&r.method, &r.path))
            .collect::<Vec<_>>()
    );
    let answered: Vec<u16> = api.requests().iter().map(|r| r.answered).collect();
    assert_eq!(answered, [&unavailable[..], &[400, 404]].concat());
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let err = post(&closed, json!({})).await.unwrap_err();
    assert!(matches!(err, PostError::Unavailable { .. }), "{err}");
    assert!(!err.to_string().contains(TOKEN) && !format!("{err:?}").contains(TOKEN));
    assert!(!format!("{:?}", ApiConfig::new("x", TOKEN)).contains(TOKEN));
}

#[tokio::test]
async fn the_token_file_is_read_for_every_request() {
    let api = Receiver::start().await.unwrap();
    let dir = tempfile_dir();
    let file = dir.join("token");
    std::fs::write(&file, "first-token\n").unwrap();
    let mut config = ApiConfig::new(&format!("{}/v1", api.url()), "");
    config.token = Token::File(file.clone());
    let p = std::sync::Arc::new(Poster::new(config).unwrap());
    let send = |p: std::sync::Arc<Poster>| async move {
        tokio::task::spawn_blocking(move || p.post("/apps", &json!({})))
            .await
            .unwrap()
    };
    assert!(send(p.clone()).await.is_ok());
    std::fs::write(&file, "rotated-token").unwrap(); // a Secret update
    assert!(send(p.clone()).await.is_ok());
    let auth: Vec<String> = api
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or_default().to_string())
        .collect();
    assert_eq!(auth, ["Bearer first-token", "Bearer rotated-token"]);
    std::fs::remove_file(&file).unwrap();
    let err = send(p).await.unwrap_err();
    assert!(matches!(err, PostError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("token file"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("poster-{}-{}", std::process::id(), uuid_like()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test]
async fn a_ca_file_makes_a_tls_api_signed_by_a_private_ca_trusted() {
    // A TLS-intercepting proxy's CA, as HOSSTED_CA_FILE names it.
    let (api, ca_pem) = Receiver::start_tls().await.unwrap();
    let dir = tempfile_dir();
    let ca_file = dir.join("proxy-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let send = |config: ApiConfig| async move {
        let p = Poster::new(config).unwrap();
        tokio::task::spawn_blocking(move || p.post("/apps", &json!({ "n": 1 })))
            .await
            .unwrap()
    };
    let url = format!("{}/v1", api.url());
    assert!(url.starts_with("https://"), "{url}");

    // Without the CA: the system roots do not trust it — unavailable, and
    // no request reached the receiver.
    let err = send(ApiConfig::new(&url, TOKEN)).await.unwrap_err();
    assert!(matches!(err, PostError::Unavailable { .. }), "{err}");
    assert!(api.requests().is_empty());

    // With it: delivered over TLS.
    let mut config = ApiConfig::new(&url, TOKEN);
    config.ca_file = Some(ca_file);
    assert_eq!(send(config).await, Ok(Delivery::Delivered { status: 200 }));
    let got = api.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/v1/apps");
    assert_eq!(
        got[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let _ = std::fs::remove_dir_all(dir);
}
