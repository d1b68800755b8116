//! Adding and removing one finalizer, for every kind delivery holds
//! (HelmApp, HelmAppSet).

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

/// Adds (`present`) or removes `finalizer` on `obj`, keeping the others. The
/// patch carries `obj`'s resourceVersion: a conflict fails it (the
/// reconcile retries on fresh state). Removing it from an object already
/// gone is done.
pub(super) async fn set<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    present: bool,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if present {
        finalizers.push(finalizer.into());
    }
    let patch = json!({ "metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    // Nothing of the answer is read: a HelmApp stored deeper than its type
    // decodes (its managedFields are as deep as its values) is patched too.
    let request = kube::core::Request::new(api.resource_url())
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .map_err(kube::Error::BuildRequest)?;
    match api
        .clone()
        .into_client()
        .request::<serde::de::IgnoredAny>(request)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if runtime::is_not_found(&e) && !present => Ok(()),
        Err(e) => Err(e),
    }
}
