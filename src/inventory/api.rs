//! The Hossted API as the reconciler uses it: the blocking poster run off
//! the async runtime, each request counted in the metrics, and a payload
//! the API rejected not sent again until it changes.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::Serialize;

use super::ledger::{Ledger, Target};
use super::poster::{Delivery, PostError, Poster};
use super::sync_error::SyncError;

/// `hossted_api_requests_total{endpoint,code}`.
pub type ApiRequests = Family<[(&'static str, String); 2], Counter>;

/// See the module docs.
pub struct HosstedApi {
    pub poster: Arc<Poster>,
    pub requests: ApiRequests,
}

impl HosstedApi {
    /// POSTs off the async runtime. The outer error: the body does not
    /// serialize (nothing is sent). A payload the API rejected before is
    /// not sent again until it changes.
    pub async fn post(
        &self,
        ledger: &Ledger,
        key: &str,
        target: Target,
        path: &str,
        body: &impl Serialize,
    ) -> Result<Result<(), PostError>, SyncError> {
        let json = serde_json::to_vec(body).map_err(|source| SyncError::Serialize {
            what: "a request body",
            source,
        })?;
        let fingerprint = {
            let mut h = DefaultHasher::new();
            json.hash(&mut h);
            h.finish()
        };
        if ledger.was_rejected(key, &target, fingerprint) {
            return Ok(Err(PostError::Rejected {
                path: path.to_string(),
                status: 0,
                body: "this payload was rejected before; it is sent again once it changes".into(),
            }));
        }
        let poster = self.poster.clone();
        let path_owned = path.to_string();
        let result = tokio::task::spawn_blocking(move || poster.post_json(&path_owned, json))
            .await
            .unwrap_or_else(|e| {
                Err(PostError::Unavailable {
                    path: path.to_string(),
                    reason: format!("the request task failed: {e}"),
                    status: None,
                })
            });
        let endpoint = match target {
            Target::App(_) => "apps",
            Target::Registration => "register",
        };
        let code = match &result {
            Ok(Delivery::Delivered { status }) => status.to_string(),
            Ok(Delivery::Printed) => "dry-run".to_string(),
            Err(PostError::Rejected { status, .. }) => status.to_string(),
            Err(PostError::Unavailable {
                status: Some(s), ..
            }) => s.to_string(),
            Err(PostError::Unavailable { status: None, .. }) => "error".to_string(),
        };
        self.requests
            .get_or_create(&[("endpoint", endpoint.to_string()), ("code", code)])
            .inc();
        let rejected = matches!(result, Err(PostError::Rejected { .. }));
        ledger.verdict(key, target, fingerprint, rejected);
        Ok(result.map(|_| ()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::poster::ApiConfig;
    use crate::inventory::status::tests::Unserializable;

    #[tokio::test]
    async fn a_body_that_does_not_serialize_is_an_error_and_nothing_is_sent() {
        // An unreachable API: had anything been sent, it would be counted
        // (code "error") and the outcome `Unavailable`.
        let api = HosstedApi {
            poster: Arc::new(Poster::new(ApiConfig::new("http://127.0.0.1:1/v1", "t")).unwrap()),
            requests: ApiRequests::default(),
        };
        let ledger = Ledger::default();
        let outcome = api
            .post(
                &ledger,
                "p",
                Target::Registration,
                "/clusters/K-1/register",
                &Unserializable,
            )
            .await;
        assert!(
            matches!(outcome, Err(SyncError::Serialize { .. })),
            "{outcome:?}"
        );
        let attempts = api
            .requests
            .get_or_create(&[
                ("endpoint", "register".to_string()),
                ("code", "error".into()),
            ])
            .get();
        assert_eq!(attempts, 0, "a request was attempted");
    }
}
