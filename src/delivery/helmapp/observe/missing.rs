//! Which objects of a deployed release are missing: each object its
//! manifest lists, looked up in the caches, and read by request when no
//! cache holds its kind.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Api;

use crate::delivery::helmapp::cluster::Cluster;
use crate::delivery::helmapp::decide::target::Target;
use crate::lean::manifest::ManifestObject;
use crate::lean::storage::HelmRelease;

/// Objects of `entry` (the release's newest revision, ours) that are not
/// in the caches and, asked of the API, are really gone (a cache may not
/// have seen an object helm has just created).
pub async fn missing_objects(
    cluster: &Cluster,
    target: &Target,
    entry: &HelmRelease,
) -> Vec<String> {
    let Ok(release) = entry.release.as_ref() else {
        return Vec::new();
    };
    let mut gone = Vec::new();
    for object in &release.objects {
        let ns = if object.namespace.is_empty() {
            target.namespace.as_str()
        } else {
            object.namespace.as_str()
        };
        if !cached(cluster, object, ns) && absent(cluster, object, ns).await {
            gone.push(format!("{} {ns}/{}", object.kind, object.name));
        }
    }
    gone
}

pub fn cached(cluster: &Cluster, object: &ManifestObject, ns: &str) -> bool {
    let key = format!("{ns}/{}", object.name);
    let m = &cluster.members;
    match object.kind.as_str() {
        "Deployment" => m.deployments.get(&key).is_some(),
        "StatefulSet" => m.statefulsets.get(&key).is_some(),
        "Service" => m.services.get(&key).is_some(),
        "Ingress" => m.ingresses.get(&key).is_some(),
        "Secret" => m.secrets.get(&key).is_some(),
        _ => true,
    }
}

/// Whether the API says `object` does not exist (an error says nothing:
/// not absent).
pub async fn absent(cluster: &Cluster, object: &ManifestObject, ns: &str) -> bool {
    async fn gone<K>(cluster: &Cluster, ns: &str, name: &str) -> bool
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let api: Api<K> = Api::namespaced(cluster.client.clone(), ns);
        matches!(api.get_metadata_opt(name).await, Ok(None))
    }
    let name = object.name.as_str();
    match object.kind.as_str() {
        "Deployment" => gone::<Deployment>(cluster, ns, name).await,
        "StatefulSet" => gone::<StatefulSet>(cluster, ns, name).await,
        "Service" => gone::<Service>(cluster, ns, name).await,
        "Ingress" => gone::<Ingress>(cluster, ns, name).await,
        "Secret" => gone::<Secret>(cluster, ns, name).await,
        _ => false,
    }
}
