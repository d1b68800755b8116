//! The API client against a local receiver.

use envtest::Receiver;
use hossted_operator::inventory::poster::{ApiConfig, Delivery, PostError, Poster};
use serde_json::json;

const TOKEN: &str = "s3cr3t-token-value";

fn poster(url: &str) -> Poster {
    Poster::new(ApiConfig {
        base_url: format!("{url}/v1/"),
        token: TOKEN.into(),
        dry_run: false,
    })
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
async fn http_429_5xx_and_no_answer_are_unavailable_other_4xx_rejected() {
    let api = Receiver::start().await.unwrap();
    api.respond_with(&[429, 503, 500, 400, 404]);
    for _ in 0..3 {
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
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let err = post(&closed, json!({})).await.unwrap_err();
    assert!(matches!(err, PostError::Unavailable { .. }), "{err}");
    assert!(!err.to_string().contains(TOKEN) && !format!("{err:?}").contains(TOKEN));
    assert!(
        !format!(
            "{:?}",
            ApiConfig {
                base_url: "x".into(),
                token: TOKEN.into(),
                dry_run: false
            }
        )
        .contains(TOKEN)
    );
}
