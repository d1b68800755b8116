//! What a webhook request may do, and the checks before it (see the
//! module docs of `super`).

use std::net::SocketAddr;

use apis::helmapp::HelmApp;
use hyper::StatusCode;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use serde_json::json;

use crate::delivery::helmapp::Nudge;
use crate::delivery::names::RECONCILE_AT;

/// The largest body taken.
pub const MAX_BODY: usize = 64 * 1024;

/// What a verified request can do, and what checks it.
pub struct Receiver {
    pub nudge: Nudge,
    pub client: kube::Client,
    pub leading: runtime::Leading,
    /// The HMAC key (`--webhook-secret-file`).
    pub key: Vec<u8>,
    pub limit: super::limit::RateLimit,
}

/// A request as the receiver needs it.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub body: &'a [u8],
    pub from: SocketAddr,
}

/// `chart-pushed`'s body.
#[derive(Debug, Deserialize)]
struct Pushed {
    #[serde(default)]
    repo: String,
    #[serde(default)]
    oci: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

/// `reconcile`'s body.
#[derive(Debug, Deserialize)]
struct Reconcile {
    kind: String,
    namespace: String,
    name: String,
}

impl Receiver {
    /// Whether a request from `from` may be read at all (429 otherwise).
    pub fn admit(&self, from: SocketAddr) -> bool {
        self.limit.allow(from.ip(), std::time::Instant::now())
    }

    /// The answer to a request whose body was read whole (see the module
    /// docs for the order of the checks).
    pub async fn answer(&self, r: &Request<'_>) -> (StatusCode, String) {
        if r.method != "POST" {
            return (StatusCode::METHOD_NOT_ALLOWED, String::new());
        }
        if !matches!(r.path, "/hooks/chart-pushed" | "/hooks/reconcile") {
            return (StatusCode::NOT_FOUND, String::new());
        }
        let now = chrono::Utc::now().timestamp();
        if let Err(why) = super::signature::verify(&self.key, r.timestamp, r.signature, r.body, now)
        {
            log::warn!(
                "webhook: {} from {} refused: signature {why:?}",
                r.path,
                r.from
            );
            return (StatusCode::UNAUTHORIZED, String::new());
        }
        if !self.leading.now() {
            return (StatusCode::SERVICE_UNAVAILABLE, String::new());
        }
        let answer = match r.path {
            "/hooks/chart-pushed" => self.chart_pushed(r.body),
            _ => self.reconcile(r.body).await,
        };
        answer.unwrap_or_else(|(code, message)| (code, format!("{message}\n")))
    }

    fn chart_pushed(&self, body: &[u8]) -> Result<(StatusCode, String), (StatusCode, String)> {
        let p: Pushed = serde_json::from_slice(body).map_err(bad)?;
        let source = match (p.repo.as_str(), p.oci.as_str()) {
            (repo, "") if !repo.is_empty() => repo,
            ("", oci) if !oci.is_empty() => oci,
            _ => return Err(bad("give one of repo and oci")),
        };
        let queued = self.nudge.chart_pushed(source, &p.name);
        log::info!(
            "webhook: chart {} {} pushed to {source}: {} HelmApp(s) queued",
            p.name,
            p.version,
            queued.len()
        );
        Ok((
            StatusCode::ACCEPTED,
            json!({ "queued": queued }).to_string(),
        ))
    }

    async fn reconcile(&self, body: &[u8]) -> Result<(StatusCode, String), (StatusCode, String)> {
        let r: Reconcile = serde_json::from_slice(body).map_err(bad)?;
        if r.kind != "HelmApp" {
            return Err(bad("kind must be HelmApp"));
        }
        if !self.nudge.exists(&r.namespace, &r.name) {
            return Err((StatusCode::NOT_FOUND, "no such HelmApp".into()));
        }
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let patch = json!({ "metadata": { "annotations": { RECONCILE_AT: at } } });
        Api::<HelmApp>::namespaced(self.client.clone(), &r.namespace)
            .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                log::warn!("webhook: reconcile of {}/{}: {e}", r.namespace, r.name);
                (
                    StatusCode::BAD_GATEWAY,
                    "the API refused the annotation".into(),
                )
            })?;
        log::info!(
            "webhook: reconcile of HelmApp {}/{} asked",
            r.namespace,
            r.name
        );
        Ok((
            StatusCode::ACCEPTED,
            json!({ RECONCILE_AT: at }).to_string(),
        ))
    }
}

fn bad(e: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, e.to_string())
}
