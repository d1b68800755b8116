//! Unlock: a release left `pending-*` by a crashed helm is marked `failed`
//! in Helm's storage — what helm itself does when its wait times out — so
//! that the next step can upgrade it.

use crate::lean::helm::HelmStatus;
use apis::helmapp::{HelmApp, HistoryAction, HistoryResult};
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::{GetParams, PostParams};
use kube::core::Request;
use record::EventType;
use serde_json::{Value, json};

use super::outcome::{DeliveryError, Outcome};
use crate::delivery::helmapp::context::{Context, run_key};
use crate::delivery::helmapp::decide::conditions::{Reason, push_history};
use crate::delivery::helmapp::decide::observed::Observed;
use crate::delivery::tenancy::impersonate;

/// Unlocks the newest revision of `o`'s release, then asks for a new plan.
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    message: &str,
) -> Result<Outcome, DeliveryError> {
    let cluster = ctx.on(o);
    let Some(newest) = o.newest.as_mut() else {
        return Ok(Outcome::Replan);
    };
    let user = o.identity.user();
    if !mark_failed(
        &cluster,
        &o.target.namespace,
        &newest.secret,
        user.as_deref(),
    )
    .await?
    {
        // The cache was behind: no longer pending. Decided again on it.
        return Ok(Outcome::Replan);
    }
    newest.status = HelmStatus::Failed;
    let revision = newest.revision;
    ctx.recorder.event(
        app,
        EventType::Warning,
        Reason::ReleaseUnlocked.as_str(),
        message,
    );
    let hash = o.hash().unwrap_or_default().to_string();
    let status = &mut o.status;
    let version = status.chart_version.clone();
    push_history(
        status,
        HistoryAction::Unlock,
        revision,
        &version,
        &hash,
        HistoryResult::Succeeded,
    );
    status.last_action = "unlock".into();
    if crate::delivery::helmapp::observe::storage::record_after_action(&ctx.on(o).client, o)
        .await
        .is_none()
    {
        ctx.interrupted.lock().insert(run_key(app));
    }
    Ok(Outcome::Replan)
}

/// Rewrites the storage Secret `ns/name` with its release's status
/// `failed`, as `as_user` (read and written as the HelmApp's identity, as
/// helm would) — if the fresh read still says `pending-*` (`false`: it
/// does not, nothing written).
async fn mark_failed(
    cluster: &crate::delivery::helmapp::cluster::Cluster,
    ns: &str,
    name: &str,
    as_user: Option<&str>,
) -> Result<bool, DeliveryError> {
    let url = Request::new(Secret::url_path(&(), Some(ns)));
    let mut get = url
        .get(name, &GetParams::default())
        .map_err(DeliveryError::Request)?;
    impersonate(&mut get, as_user).map_err(DeliveryError::Impersonation)?;
    let mut secret: Secret = cluster.client.request(get).await?;
    let data = secret.data.get_or_insert_with(Default::default);
    let raw = data.get("release").map(|b| b.0.clone()).ok_or_else(|| {
        DeliveryError::UnreadableRelease {
            secret: format!("{ns}/{name}"),
            why: "it has no data.release".into(),
        }
    })?;
    let broken = |why: String| DeliveryError::UnreadableRelease {
        secret: format!("{ns}/{name}"),
        why,
    };
    let json = crate::lean::helm::release_json(&raw).map_err(|e| broken(e.to_string()))?;
    let mut release: Value = serde_json::from_slice(&json).map_err(|e| broken(e.to_string()))?;
    let pending = release["info"]["status"]
        .as_str()
        .is_some_and(|s| s.starts_with("pending-"));
    if !pending {
        return Ok(false);
    }
    release["info"]["status"] = json!("failed");
    release["info"]["description"] =
        json!("unlocked by hossted-operator: pending with no helm running on it");
    let json = serde_json::to_vec(&release).map_err(|e| broken(e.to_string()))?;
    data.insert(
        "release".into(),
        k8s_openapi::ByteString(crate::lean::helm::encode_release(&json)),
    );
    secret
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("status".into(), "failed".into());
    // Replace with its resourceVersion: a helm that woke up wins.
    let body = serde_json::to_vec(&secret).map_err(|e| broken(e.to_string()))?;
    let mut replace = url
        .replace(name, &PostParams::default(), body)
        .map_err(DeliveryError::Request)?;
    impersonate(&mut replace, as_user).map_err(DeliveryError::Impersonation)?;
    let _: Secret = cluster.client.request(replace).await?;
    Ok(true)
}
