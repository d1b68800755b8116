//! Child HelmApps that another object keeps (a HelmAppSet its apps, a
//! Hosstedproject its `spec.helm` entries and toggles): created when
//! missing, replaced when their spec differs, deleted when no longer
//! wanted. What 404 and 409 mean here is decided once, in this file.

use apis::helmapp::HelmApp;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};

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
            Err(e) if runtime::is_conflict(&e) => Ok(Applied::NotYetSeen),
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

/// Deletes child `name` (its own finalizer decides about its release);
/// one already gone is done.
pub async fn delete(api: &Api<HelmApp>, name: &str) -> Result<(), kube::Error> {
    runtime::ignore_not_found(api.delete(name, &DeleteParams::default()).await).map(|_| ())
}
