//! Where an object of any kind lives in the API: its kind's plural and
//! scope, from the API server's discovery of its group version — asked
//! once per group version and kept for the process's life (a kind that a
//! later CRD adds is looked up when first needed: an unknown kind is not
//! remembered).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use parking_lot::Mutex;

/// A kind's plural and whether it is namespaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub plural: String,
    pub namespaced: bool,
}

/// Discovery, cached per `apiVersion`.
#[derive(Default)]
pub struct Resources {
    known: Mutex<HashMap<String, Arc<HashMap<String, Resource>>>>,
}

impl Resources {
    /// `kind` of `api_version`: `Ok(None)` when the server does not serve
    /// it.
    pub async fn lookup(
        &self,
        client: &Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<Resource>, String> {
        let cached = self.known.lock().get(api_version).cloned();
        if let Some(kinds) = cached.as_ref().filter(|k| k.contains_key(kind)) {
            return Ok(kinds.get(kind).cloned());
        }
        let path = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        let request = http::Request::get(&path)
            .body(Vec::new())
            .map_err(|e| format!("{path}: {e}"))?;
        let list: APIResourceList = match client.request(request).await {
            Ok(list) => list,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(format!("discovery of {api_version}: {e}")),
        };
        let kinds: HashMap<String, Resource> = list
            .resources
            .into_iter()
            .filter(|r| !r.name.contains('/'))
            .map(|r| {
                let resource = Resource {
                    plural: r.name,
                    namespaced: r.namespaced,
                };
                (r.kind, resource)
            })
            .collect();
        let found = kinds.get(kind).cloned();
        self.known
            .lock()
            .insert(api_version.to_string(), Arc::new(kinds));
        Ok(found)
    }
}

/// The path of an object (`namespace` is ignored for a cluster-scoped
/// kind) — without its name: `kube::core::Request` appends it.
pub fn collection_path(api_version: &str, resource: &Resource, namespace: &str) -> String {
    let root = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    if resource.namespaced {
        format!("{root}/namespaces/{namespace}/{}", resource.plural)
    } else {
        format!("{root}/{}", resource.plural)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_group_kinds_and_cluster_scoped_ones_have_their_paths() {
        let r = |plural: &str, namespaced| Resource {
            plural: plural.into(),
            namespaced,
        };
        assert_eq!(
            collection_path("v1", &r("configmaps", true), "apps"),
            "/api/v1/namespaces/apps/configmaps"
        );
        assert_eq!(
            collection_path("apps/v1", &r("deployments", true), "apps"),
            "/apis/apps/v1/namespaces/apps/deployments"
        );
        assert_eq!(
            collection_path(
                "rbac.authorization.k8s.io/v1",
                &r("clusterroles", false),
                "apps"
            ),
            "/apis/rbac.authorization.k8s.io/v1/clusterroles"
        );
    }
}
