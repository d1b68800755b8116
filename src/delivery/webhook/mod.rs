//! Push to deploy: the webhook receiver (`--webhook-bind-address`, off by
//! default). A CI job that published a chart, or anyone holding the
//! shared key, asks the operator to look now instead of at the next
//! `interval`:
//!
//! - `POST /hooks/chart-pushed` `{"repo" | "oci", "name", "version"}`: the
//!   cached resolutions of that source are dropped and every HelmApp whose
//!   chart comes from there is reconciled now ([`PushTrigger::chart_pushed`]);
//!   its run is the normal one (hash, approval, tenancy). The answer is
//!   how many were queued, never which.
//! - `POST /hooks/chart-pushed` `{"git", "ref"}`: a push to a Git
//!   repository (from a Git host's webhook): its checkouts are dropped and
//!   every HelmApp whose chart or values files come from it at a ref the
//!   push may move is reconciled now ([`PushTrigger::git_pushed`]).
//! - `POST /hooks/reconcile` `{"kind": "HelmApp", "namespace", "name"}`:
//!   sets `hossted.com/reconcile-at`, as `kubectl hossted reconcile` does.
//!
//! A request is signed with the shared key (`--webhook-secret-file`: any
//! namespace) or, naming the namespace in `X-Hossted-Namespace`, with that
//! namespace's key (`--webhook-secret-dir`: only that namespace —
//! `reconcile` of another is 403, `chart-pushed` queues only its HelmApps).
//!
//! Each request is checked in this order, cheapest first, and a refusal
//! says nothing but its status (the log says why): the per-address rate
//! limit (429, [`limit`]); the method and path (405, 404); the body, at
//! most [`MAX_BODY`] (413); the signature (401, [`signature`]); a replay
//! of a request already taken within the window (401, [`replay`]); this
//! replica leads (503). Then 202 with what was queued.

pub mod config;
pub mod limit;
mod receiver;
pub mod replay;
mod serve;
pub mod signature;

use std::sync::Arc;

use crate::delivery::pushed::PushTrigger;
pub use config::WebhookConfig;
pub use receiver::{MAX_BODY, Receiver};
pub use serve::WebhookServer;

/// Starts the receiver of `config` for `manager`'s controllers (it answers
/// 503 while this replica does not lead); it runs until the returned
/// server is dropped.
pub async fn start(
    manager: &runtime::Manager,
    nudge: PushTrigger,
    config: &WebhookConfig,
) -> Result<WebhookServer, String> {
    let receiver = Receiver {
        nudge,
        client: manager.client(),
        leading: manager.leading(),
        keys: config.keys.clone(),
        limit: limit::RateLimit::default(),
        replays: Default::default(),
    };
    serve::start(config.address, config.tls.clone(), Arc::new(receiver)).await
}
