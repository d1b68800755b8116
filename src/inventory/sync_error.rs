//! What makes an inventory reconcile fail (and be retried with backoff).

use super::poster::PostError;

/// Why a reconcile must be retried (with backoff).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Api(#[from] PostError),
    #[error("writing status: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        source: serde_json::Error,
    },
}
