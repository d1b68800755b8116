//! Helm's storage is checked before it is trusted (DELIVERY.md "Tenancy").
//! It lives in the target namespace, where others may write Secrets: a
//! hand-edited revision could make helm's next upgrade or uninstall delete
//! what it lists — anything, when helm runs as the operator. So the
//! operator records the digest of the newest revision after each helm
//! action it takes (`status.history[].releaseDigest`), and before the next
//! one compares the newest revision with it.
//!
//! The cache may lag behind our own last run: a difference is confirmed
//! with a fresh read of the storage before it counts.

use apis::helmapp::HelmAppStatus;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::{Api, Client};

use super::observed::Observed;
use super::target::Target;
use crate::cached::storage::{HELMAPP_UID_LABEL, release_digest};

/// The newest revision of a release, read from the API now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Newest {
    pub revision: i64,
    /// The owner HelmApp's UID (label; empty: none).
    pub owner: String,
    /// [`release_digest`] of its payload.
    pub digest: String,
}

/// Reads the newest revision of `target` from the API (not the cache).
pub async fn newest(client: &Client, target: &Target) -> Result<Option<Newest>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &target.namespace);
    let selector = format!("owner=helm,name={}", target.release);
    let list = api.list(&ListParams::default().labels(&selector)).await?;
    let version = |s: &Secret| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("version"))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    Ok(list.items.into_iter().max_by_key(version).map(|s| {
        let payload = s
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .map(|b| b.0.as_slice())
            .unwrap_or_default();
        Newest {
            revision: version(&s),
            owner: s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(HELMAPP_UID_LABEL))
                .cloned()
                .unwrap_or_default(),
            digest: release_digest(payload),
        }
    }))
}

/// The digest the operator recorded last: the first history entry that
/// has one (`None`: a release owned before the rule, or none yet).
pub fn recorded(status: &HelmAppStatus) -> Option<&str> {
    status
        .history
        .iter()
        .map(|h| h.release_digest.as_str())
        .find(|d| !d.is_empty())
}

/// Records `digest` as the trusted state of the storage (on the newest
/// history entry; nothing when there is none).
pub fn trust(status: &mut HelmAppStatus, digest: &str) {
    if let Some(h) = status.history.first_mut() {
        h.release_digest = digest.to_string();
    }
}

/// After a helm action: records the newest revision's digest when it is
/// ours. A failed read records nothing (the next check reads again and,
/// finding no digest for it, flags the difference only if it persists).
pub async fn record_after_action(client: &Client, o: &mut Observed) {
    match newest(client, &o.target).await {
        Ok(Some(n)) if n.owner == o.uid => trust(&mut o.status, &n.digest),
        Ok(_) => {}
        Err(e) => log::warn!(
            "{}: cannot read Helm's storage to record its digest: {e}",
            o.target.key()
        ),
    }
}

/// Whether the newest revision differs from what was recorded: `Some`
/// with the message for the condition. `cached` is the cached newest
/// revision's (revision, owner, digest); a difference is confirmed with a
/// fresh read (`fresh`, when this reconcile already made one). With nothing
/// recorded yet, the current digest is trusted on first sight.
pub async fn check(
    client: &Client,
    o: &mut Observed,
    cached: Option<(i64, String, String)>,
    fresh: Option<Option<Newest>>,
) -> Result<Option<String>, kube::Error> {
    let Some((_, owner, digest)) = cached.filter(|(_, owner, _)| *owner == o.uid) else {
        return Ok(None);
    };
    let Some(expected) = recorded(&o.status).map(str::to_string) else {
        trust(&mut o.status, &digest);
        return Ok(None);
    };
    if digest == expected {
        return Ok(None);
    }
    let fresh = match fresh {
        Some(f) => f,
        None => newest(client, &o.target).await?,
    };
    Ok(match fresh {
        Some(n) if n.owner == owner && n.digest != expected => Some(format!(
            "revision {} of release {} in Helm's storage is not what the operator left there ({}, recorded {expected}): someone changed it; no helm runs on it until the HelmApp's configuration changes or hossted.com/reconcile-at is set by someone who accepts the stored state",
            n.revision,
            o.target.key(),
            n.digest
        )),
        _ => None,
    })
}
