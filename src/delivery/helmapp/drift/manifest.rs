//! The objects of a release revision, as its manifest has them: read from
//! the revision's storage Secret when drift must be decided, and kept in a
//! small cache bounded by bytes (a settled release is read once, not on
//! every check).

use std::collections::VecDeque;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::Value;

/// Manifest text kept at most, over all releases.
const CACHE_BYTES: usize = 8 << 20;

/// The objects of one revision (documents that are empty or not objects
/// are left out).
pub type Objects = Arc<Vec<Value>>;

/// Recently read manifests, `namespace/secret` → objects, newest last.
#[derive(Default)]
pub struct Manifests {
    recent: Mutex<VecDeque<(String, usize, Objects)>>,
}

impl Manifests {
    /// The objects of the revision stored in Secret `namespace/secret`.
    pub async fn read(
        &self,
        client: &Client,
        namespace: &str,
        secret: &str,
    ) -> Result<Objects, String> {
        let key = format!("{namespace}/{secret}");
        if let Some(found) = self.recent.lock().iter().find(|(k, ..)| *k == key) {
            return Ok(found.2.clone());
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let stored = api
            .get(secret)
            .await
            .map_err(|e| format!("reading Helm's storage {key}: {e}"))?;
        let payload = stored
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .map(|b| b.0.as_slice())
            .unwrap_or_default();
        let manifest = crate::cached::helm::release_manifest(payload)
            .map_err(|e| format!("decoding Helm's storage {key}: {e}"))?;
        let objects = Arc::new(objects_of(&manifest)?);
        let mut recent = self.recent.lock();
        recent.push_back((key, manifest.len(), objects.clone()));
        let mut total: usize = recent.iter().map(|(_, n, _)| n).sum();
        while total > CACHE_BYTES && recent.len() > 1 {
            if let Some((_, n, _)) = recent.pop_front() {
                total -= n;
            }
        }
        Ok(objects)
    }
}

/// The objects of a rendered manifest, each document checked against the
/// YAML budget first (a manifest is what a chart rendered: a tenant's).
pub fn objects_of(manifest: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in crate::cached::marker::documents(manifest) {
        crate::cached::yaml::check(doc)
            .map_err(|e| format!("the release's manifest is refused: {e}"))?;
        let value: Value = serde_yaml_ng::from_str(doc)
            .map_err(|e| format!("the release's manifest is not YAML: {e}"))?;
        if value.get("kind").and_then(Value::as_str).is_some() {
            out.push(value);
        }
    }
    Ok(out)
}

/// The object of `objects` with this kind, name and namespace (`""`: as
/// written without one).
pub fn find<'a>(
    objects: &'a [Value],
    kind: &str,
    namespace: &str,
    name: &str,
    release_ns: &str,
) -> Option<&'a Value> {
    objects.iter().find(|o| {
        let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let ns = match s("/metadata/namespace") {
            "" => release_ns,
            ns => ns,
        };
        s("/kind") == kind
            && s("/metadata/name") == name
            && (ns == namespace || namespace.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_read_per_document_and_found_by_identity() {
        let manifest = "---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  a: \"1\"\n---\n# Source: c/templates/empty.yaml\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: other\n";
        let objects = objects_of(manifest).unwrap();
        assert_eq!(objects.len(), 2);
        assert!(find(&objects, "ConfigMap", "apps", "web", "apps").is_some());
        assert!(find(&objects, "Service", "apps", "web", "apps").is_none());
        assert!(find(&objects, "Service", "other", "web", "apps").is_some());
        let bomb = format!(
            "a: &a [{}]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
            "x,".repeat(100)
        );
        assert!(objects_of(&bomb).is_err());
    }
}
