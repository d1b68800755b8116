//! What a webhook request may do, and the checks before it (see the
//! module docs of `super`).

use std::net::SocketAddr;

use apis::helmapp::HelmApp;
use hyper::StatusCode;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use serde_json::json;

use super::config::Signer;
use super::replay::Seen;
use crate::delivery::names::RECONCILE_AT;
use crate::delivery::pushed::PushTrigger;

/// The largest body taken.
pub const MAX_BODY: usize = 64 * 1024;

/// What a verified request can do, and what checks it.
pub struct Receiver {
    pub nudge: PushTrigger,
    pub client: kube::Client,
    pub leading: runtime::Leading,
    /// The HMAC keys (`--webhook-secret-file`, `--webhook-secret-dir`).
    pub keys: super::config::Keys,
    pub limit: super::limit::RateLimit,
    /// Signed requests seen within the window (a replay is refused).
    pub replays: super::replay::Replays,
}

/// A request as the receiver needs it.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
    /// `X-Hossted-Namespace`: the namespace whose key signed it (none: the
    /// shared key).
    pub namespace: Option<&'a str>,
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
    /// A Git repository's URL (a Git host's push).
    #[serde(default)]
    git: String,
    /// The ref pushed (`refs/heads/main`, `main`, `refs/tags/v1.2.0`).
    #[serde(default, rename = "ref")]
    reference: String,
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
        let signer = match self.signed(r) {
            Ok(signer) => signer,
            Err(code) => return (code, String::new()),
        };
        if !self.leading.now() {
            return (StatusCode::SERVICE_UNAVAILABLE, String::new());
        }
        let answer = match r.path {
            "/hooks/chart-pushed" => self.chart_pushed(r.body, &signer),
            _ => self.reconcile(r.body, &signer).await,
        };
        answer.unwrap_or_else(|(code, message)| (code, format!("{message}\n")))
    }

    /// Who signed `r`, if its signature verifies under the key it names and
    /// it was not seen before: 401 otherwise (429 when too many are
    /// remembered to tell a replay).
    fn signed(&self, r: &Request<'_>) -> Result<Signer, StatusCode> {
        let now = chrono::Utc::now().timestamp();
        let refuse = |why: &str| {
            log::warn!("webhook: {} from {} refused: {why}", r.path, r.from);
            StatusCode::UNAUTHORIZED
        };
        let Some((signer, key)) = self.keys.candidates(r.namespace) else {
            return Err(refuse("no key for the namespace it names"));
        };
        super::signature::verify(key, r.timestamp, r.signature, r.body, now)
            .map_err(|why| refuse(&format!("signature {why:?}")))?;
        let at: i64 = r.timestamp.unwrap_or_default().trim().parse().unwrap_or(0);
        let signature = r.signature.unwrap_or_default();
        match self
            .replays
            .see(at, signature, now, super::signature::WINDOW)
        {
            Seen::New => Ok(signer),
            Seen::Replayed => Err(refuse("a replay of a request already taken")),
            Seen::Full => {
                log::warn!(
                    "webhook: {} from {} refused: too many signed requests within the window to tell a replay",
                    r.path,
                    r.from
                );
                Err(StatusCode::TOO_MANY_REQUESTS)
            }
        }
    }

    fn chart_pushed(
        &self,
        body: &[u8],
        signer: &Signer,
    ) -> Result<(StatusCode, String), (StatusCode, String)> {
        let p: Pushed = serde_json::from_slice(body).map_err(bad)?;
        let only = match signer {
            Signer::Shared => None,
            Signer::Namespace(ns) => Some(ns.as_str()),
        };
        let source = match (p.repo.as_str(), p.oci.as_str(), p.git.as_str()) {
            (repo, "", "") if !repo.is_empty() => repo,
            ("", oci, "") if !oci.is_empty() => oci,
            ("", "", git) if !git.is_empty() => {
                let queued = self.nudge.git_pushed(git, &p.reference, only).len();
                log::info!(
                    "webhook: {} pushed to {git}: {queued} HelmApp(s) queued",
                    if p.reference.is_empty() {
                        "a ref"
                    } else {
                        &p.reference
                    }
                );
                let answer = json!({ "queued": queued }).to_string();
                return Ok((StatusCode::ACCEPTED, answer));
            }
            _ => return Err(bad("give one of repo, oci and git")),
        };
        // A count, never names: the sender learns nothing of who else
        // uses the source.
        let queued = self.nudge.chart_pushed(source, &p.name, only).len();
        log::info!(
            "webhook: chart {} {} pushed to {source}: {queued} HelmApp(s) queued",
            p.name,
            p.version
        );
        Ok((
            StatusCode::ACCEPTED,
            json!({ "queued": queued }).to_string(),
        ))
    }

    async fn reconcile(
        &self,
        body: &[u8],
        signer: &Signer,
    ) -> Result<(StatusCode, String), (StatusCode, String)> {
        let r: Reconcile = serde_json::from_slice(body).map_err(bad)?;
        if r.kind != "HelmApp" {
            return Err(bad("kind must be HelmApp"));
        }
        if !signer.may_act_on(&r.namespace) {
            log::warn!(
                "webhook: reconcile of {}/{} refused: signed with the key of {signer:?}",
                r.namespace,
                r.name
            );
            return Err((
                StatusCode::FORBIDDEN,
                "this key may act only on its own namespace".into(),
            ));
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
