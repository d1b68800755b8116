//! Child HelmApps that another object keeps (a HelmAppSet its apps, a
//! Hosstedproject its `spec.helm` entries and toggles): created when
//! missing, replaced when their spec differs, deleted when no longer
//! wanted. What 404 and 409 mean here is decided once, in this file.

use apis::helmapp::HelmApp;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};

use super::shard::SHARD_LABEL;

/// What [`create_or_replace`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Created,
    Replaced,
    /// Already as wanted (or being deleted: left to go).
    Unchanged,
    /// It exists but the cache has not seen it yet (409 on create): the
    /// next pass, which its watch event brings, looks again.
    NotYetSeen,
}

/// Creates `wanted` when `existing` (the cached child of that name) is
/// `None`; otherwise replaces the child's spec when it differs, with the
/// cached resourceVersion (a concurrent edit conflicts and is retried):
/// fields the owner dropped are dropped from the child too.
pub async fn create_or_replace(
    api: &Api<HelmApp>,
    existing: Option<&HelmApp>,
    wanted: HelmApp,
) -> Result<Applied, kube::Error> {
    let Some(existing) = existing else {
        return match api.create(&PostParams::default(), &wanted).await {
            Ok(_) => Ok(Applied::Created),
            Err(e) if runtime::is_conflict(&e) => move_into_shard(api, wanted).await,
            Err(e) => Err(e),
        };
    };
    if existing.spec == wanted.spec || existing.metadata.deletion_timestamp.is_some() {
        return Ok(Applied::Unchanged);
    }
    let mut updated = existing.clone();
    updated.spec = wanted.spec;
    api.replace(&existing.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(Applied::Replaced)
}

/// A create that met an existing child this process does not hold: either
/// its cache has not seen it yet, or its owner moved to this shard and the
/// child still carries the old shard's label (docs/shards.md) — then it is
/// this owner's (same controller UID), and takes the owner's shard label,
/// which brings it into this process's informers.
async fn move_into_shard(api: &Api<HelmApp>, wanted: HelmApp) -> Result<Applied, kube::Error> {
    let Some(mut found) = api.get_opt(&wanted.name_any()).await? else {
        return Ok(Applied::NotYetSeen);
    };
    let owner = |a: &HelmApp| {
        a.owner_references()
            .iter()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.clone())
    };
    let shard_of = |a: &HelmApp| a.labels().get(SHARD_LABEL).cloned();
    if owner(&found).is_none()
        || owner(&found) != owner(&wanted)
        || shard_of(&found) == shard_of(&wanted)
    {
        return Ok(Applied::NotYetSeen);
    }
    match shard_of(&wanted) {
        Some(shard) => found.labels_mut().insert(SHARD_LABEL.to_string(), shard),
        None => found.labels_mut().remove(SHARD_LABEL),
    };
    api.replace(&wanted.name_any(), &PostParams::default(), &found)
        .await?;
    Ok(Applied::Replaced)
}

/// Deletes child `name` (its own finalizer decides about its release);
/// one already gone is done.
pub async fn delete(api: &Api<HelmApp>, name: &str) -> Result<(), kube::Error> {
    runtime::ignore_not_found(api.delete(name, &DeleteParams::default()).await).map(|_| ())
}
