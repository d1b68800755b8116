//! The objects of a release revision, as its manifest has them: read from
//! the revision's storage Secret when drift must be decided, and kept in a
//! small cache bounded by bytes (a settled release is read once, not on
//! every check). The cache keeps the objects as compact JSON and parses
//! them on each use: a parsed `serde_json::Value` tree takes about ten
//! times the bytes of its text, which at 1,000 releases was most of the
//! operator's memory.

use std::collections::VecDeque;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::Value;

/// Bytes of compact JSON kept at most, over all releases.
const CACHE_BYTES: usize = 8 << 20;

/// The objects of one revision (documents that are empty or not objects
/// are left out).
pub type Objects = Arc<Vec<Value>>;

/// Recently read manifests, `namespace/secret` → their objects as compact
/// JSON, newest last.
#[derive(Default)]
pub struct Manifests {
    recent: Mutex<VecDeque<(String, Arc<str>)>>,
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
        if let Some(objects) = self.cached(&key) {
            return Ok(objects);
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
        let objects = objects_of(&manifest)?;
        if let Ok(json) = serde_json::to_string(&objects) {
            self.keep(key, json.into());
        }
        Ok(Arc::new(objects))
    }

    /// The objects kept for `key`. One that does not parse back (nested
    /// deeper than serde_json's recursion limit) counts as not kept: it is
    /// read again.
    fn cached(&self, key: &str) -> Option<Objects> {
        let json = self
            .recent
            .lock()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, json)| json.clone())?;
        serde_json::from_str(&json).ok().map(Arc::new)
    }

    fn keep(&self, key: String, json: Arc<str>) {
        let mut recent = self.recent.lock();
        recent.retain(|(k, _)| *k != key);
        recent.push_back((key, json));
        let mut total: usize = recent.iter().map(|(k, j)| k.len() + j.len()).sum();
        while total > CACHE_BYTES && recent.len() > 1 {
            if let Some((k, j)) = recent.pop_front() {
                total -= k.len() + j.len();
            }
        }
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

    #[test]
    fn kept_objects_parse_back_the_same_and_the_oldest_leave_first() {
        let m = Manifests::default();
        let objects = objects_of(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  a: \"1\"\n",
        )
        .unwrap();
        m.keep(
            "apps/v1".into(),
            serde_json::to_string(&objects).unwrap().into(),
        );
        assert_eq!(*m.cached("apps/v1").unwrap(), objects);
        assert!(m.cached("apps/v2").is_none());
        let big: Arc<str> = format!("[\"{}\"]", "x".repeat(CACHE_BYTES / 2)).into();
        m.keep("apps/v2".into(), big.clone());
        m.keep("apps/v3".into(), big);
        assert!(
            m.cached("apps/v1").is_none(),
            "past the byte bound, the oldest left"
        );
        assert!(m.cached("apps/v2").is_none());
        assert!(m.cached("apps/v3").is_some());
    }
}
