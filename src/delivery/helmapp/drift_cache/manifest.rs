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

/// Recently read manifests, newest last: one revision per release (the
/// one read last), each under the digest of the payload it was read from
/// — a Secret of the same name written again (a release installed anew
/// starts at `v1` again) is another entry, never this one.
#[derive(Default)]
pub struct Manifests {
    recent: Mutex<VecDeque<Kept>>,
}

/// One revision's objects as compact JSON.
struct Kept {
    /// `namespace/secret`.
    key: String,
    /// `namespace/<release>`: the Secret's name without its `.vN`.
    release: String,
    /// `sha256:<hex>` of the payload they were read from.
    digest: String,
    json: Arc<str>,
}

impl Kept {
    fn bytes(&self) -> usize {
        self.key.len() + self.release.len() + self.digest.len() + self.json.len()
    }
}

impl Manifests {
    /// The objects of the revision stored in Secret `namespace/secret`,
    /// whose payload the caller knows by `digest` (`sha256:<hex>`, as
    /// Helm's storage cache has it; `None`: not known — read afresh).
    pub async fn read(
        &self,
        client: &Client,
        namespace: &str,
        secret: &str,
        digest: Option<&str>,
    ) -> Result<Objects, String> {
        let key = format!("{namespace}/{secret}");
        if let Some(objects) = digest.and_then(|d| self.cached(&key, d)) {
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
        let read_digest = crate::lean::storage::release_digest(payload);
        let manifest = crate::lean::helm::release_manifest(payload)
            .map_err(|e| format!("decoding Helm's storage {key}: {e}"))?;
        self.remember(namespace, secret, &read_digest, &manifest)
    }

    /// Keeps the objects of `manifest`, read from the revision stored in
    /// Secret `namespace/secret` whose payload has `digest` — a storage
    /// read made anyway (the one after a run) spares [`Self::read`] its
    /// own.
    pub fn remember(
        &self,
        namespace: &str,
        secret: &str,
        digest: &str,
        manifest: &str,
    ) -> Result<Objects, String> {
        let objects = objects_of(manifest)?;
        if let Ok(json) = serde_json::to_string(&objects) {
            let release = match secret.rsplit_once(".v") {
                Some((release, n)) if n.bytes().all(|b| b.is_ascii_digit()) => release,
                _ => secret,
            };
            self.keep(Kept {
                release: format!("{namespace}/{release}"),
                key: format!("{namespace}/{secret}"),
                digest: digest.to_string(),
                json: json.into(),
            });
        }
        Ok(Arc::new(objects))
    }

    /// The objects kept for `key` read from a payload of `digest`. One that
    /// does not parse back (nested deeper than serde_json's recursion
    /// limit) counts as not kept: it is read again.
    fn cached(&self, key: &str, digest: &str) -> Option<Objects> {
        let json = self
            .recent
            .lock()
            .iter()
            .find(|k| k.key == key && k.digest == digest)
            .map(|k| k.json.clone())?;
        serde_json::from_str(&json).ok().map(Arc::new)
    }

    /// Keeps `kept` in the place of every earlier revision of its release;
    /// the oldest go once all pass [`CACHE_BYTES`].
    fn keep(&self, kept: Kept) {
        let mut recent = self.recent.lock();
        recent.retain(|k| k.release != kept.release);
        recent.push_back(kept);
        let mut total: usize = recent.iter().map(Kept::bytes).sum();
        while total > CACHE_BYTES && recent.len() > 1 {
            if let Some(k) = recent.pop_front() {
                total -= k.bytes();
            }
        }
    }

    /// How many revisions are kept (one per release at most).
    pub fn len(&self) -> usize {
        self.recent.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.recent.lock().is_empty()
    }
}

/// The objects of a rendered manifest, each document checked against the
/// YAML budget first (a manifest is what a chart rendered: a tenant's).
pub fn objects_of(manifest: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in crate::lean::marker::documents(manifest) {
        crate::lean::yaml::check(doc)
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

    fn kept(release: &str, revision: u32, digest: &str, json: Arc<str>) -> Kept {
        Kept {
            key: format!("apps/sh.helm.release.v1.{release}.v{revision}"),
            release: format!("apps/sh.helm.release.v1.{release}"),
            digest: digest.into(),
            json,
        }
    }

    #[test]
    fn kept_objects_parse_back_the_same_and_the_oldest_leave_first() {
        let m = Manifests::default();
        let objects = objects_of(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  a: \"1\"\n",
        )
        .unwrap();
        let v1 = "apps/sh.helm.release.v1.a.v1";
        m.keep(kept(
            "a",
            1,
            "d1",
            serde_json::to_string(&objects).unwrap().into(),
        ));
        assert_eq!(*m.cached(v1, "d1").unwrap(), objects);
        let big: Arc<str> = format!("[\"{}\"]", "x".repeat(CACHE_BYTES / 2)).into();
        m.keep(kept("b", 1, "d", big.clone()));
        m.keep(kept("c", 1, "d", big));
        assert!(
            m.cached(v1, "d1").is_none(),
            "past the byte bound, the oldest left"
        );
        assert!(m.cached("apps/sh.helm.release.v1.b.v1", "d").is_none());
        assert!(m.cached("apps/sh.helm.release.v1.c.v1", "d").is_some());
    }

    /// A Secret of the same name written again (the release uninstalled and
    /// installed anew: `v1` again) is never answered from what was kept of
    /// the earlier one; and a release keeps one revision, the last read.
    #[test]
    fn a_payload_of_another_digest_is_not_the_kept_one_and_one_revision_stays() {
        let m = Manifests::default();
        let json: Arc<str> = "[]".into();
        m.keep(kept("a", 1, "first", json.clone()));
        let v1 = "apps/sh.helm.release.v1.a.v1";
        assert!(m.cached(v1, "first").is_some());
        assert!(m.cached(v1, "installed-again").is_none());
        m.keep(kept("a", 2, "second", json.clone()));
        m.keep(kept("other", 1, "x", json));
        assert!(m.cached(v1, "first").is_none(), "an earlier revision left");
        assert!(m.cached("apps/sh.helm.release.v1.a.v2", "second").is_some());
        assert_eq!(m.len(), 2);
    }
}

#[cfg(test)]
mod remembered_tests {
    use super::*;

    /// A client whose every request fails the test.
    fn no_requests() -> Client {
        let service = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            panic!("no request was expected: {} {}", req.method(), req.uri());
            #[allow(unreachable_code)]
            Ok::<http::Response<kube::client::Body>, std::convert::Infallible>(http::Response::new(
                kube::client::Body::empty(),
            ))
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_manifest_remembered_from_the_storage_read_after_a_run_is_read_without_a_request() {
        let m = Manifests::default();
        let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n";
        m.remember("apps", "sh.helm.release.v1.web.v2", "sha256:aa", manifest)
            .expect("kept");
        let objects = m
            .read(
                &no_requests(),
                "apps",
                "sh.helm.release.v1.web.v2",
                Some("sha256:aa"),
            )
            .await
            .expect("read from what was kept");
        assert_eq!(objects[0]["metadata"]["name"], "web");
        // Another payload under the same name is not this one.
        assert!(
            m.cached("apps/sh.helm.release.v1.web.v2", "sha256:bb")
                .is_none()
        );
    }
}
