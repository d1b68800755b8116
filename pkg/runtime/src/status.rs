//! [`StatusWriter`]: the one way a controller writes an object's status.
//!
//! A lister lags behind the writes its own controller makes: the watch
//! event of a status patch arrives after the patch returns, and a reconcile
//! that starts in between would read the old status, decide again, and
//! write again. The writer remembers the status it wrote last per object
//! and reads that one instead until the lister has caught up: it shows the
//! resourceVersion the write returned, or (a later write of someone else's
//! on top) the status that was written.
//!
//! resourceVersions are compared for equality only: the API conventions
//! make them opaque strings, never numbers to order. (Equality with the
//! version a write was *based on* is not enough: the controller's own
//! other writes, e.g. a finalizer patch, make versions in between.)

use std::collections::HashMap;
use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::core::Request;
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Writes the status of `K` objects (status type `S`) when it changed.
///
/// ```no_run
/// # async fn demo(client: kube::Client, cm: k8s_openapi::api::core::v1::Namespace) {
/// use k8s_openapi::api::core::v1::{Namespace, NamespaceStatus};
/// let writer = runtime::StatusWriter::new(client, |n: &Namespace| n.status.clone());
/// let mut status = writer.current(&cm);
/// status.phase = Some("Active".into());
/// writer.write(&cm, &status).await.expect("written, or nothing to write");
/// # }
/// ```
pub struct StatusWriter<K, S> {
    client: Client,
    status_of: fn(&K) -> Option<S>,
    /// Per object key: the resourceVersion the last write returned, and the
    /// status it wrote. Invariant: an entry exists only while the lister has
    /// not caught up with that write; it goes at the first read that shows
    /// it has.
    written: Mutex<HashMap<String, (String, S)>>,
}

/// What [`StatusWriter::write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The status was already this: no request.
    Unchanged,
    /// Patched.
    Patched,
    /// The object is gone (404): nothing to write to.
    Gone,
}

impl<K, S> StatusWriter<K, S>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
    S: Clone + Default + PartialEq + Serialize,
{
    /// A writer for `client`; `status_of` reads an object's status.
    pub fn new(client: Client, status_of: fn(&K) -> Option<S>) -> Self {
        StatusWriter {
            client,
            status_of,
            written: Mutex::default(),
        }
    }

    /// The newest status of `obj` (a lister's copy): its own, or the one
    /// written last when the lister has not caught up with that write.
    pub fn current(&self, obj: &K) -> S {
        let key = key_of(obj);
        let listed_rv = obj.resource_version().unwrap_or_default();
        let listed = (self.status_of)(obj).unwrap_or_default();
        let mut written = self.written.lock();
        match written.get(&key) {
            Some((rv, status)) if !caught_up(rv, status, &listed_rv, &listed) => status.clone(),
            _ => {
                written.remove(&key);
                listed
            }
        }
    }

    /// Writes `status` to `obj` with a JSON merge patch of the status
    /// subresource, unless [`StatusWriter::current`] is already `status`.
    pub async fn write(&self, obj: &K, status: &S) -> Result<Written, kube::Error> {
        if self.current(obj) == *status {
            return Ok(Written::Unchanged);
        }
        let patch = serde_json::json!({ "status": status });
        // A Request rather than an `Api`: one path for namespaced and
        // cluster-scoped kinds alike.
        let namespace = obj.namespace();
        let request = Request::new(K::url_path(&(), namespace.as_deref()))
            .patch_subresource(
                "status",
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .map_err(kube::Error::BuildRequest)?;
        match self.client.request::<K>(request).await {
            Ok(returned) => {
                let rv = returned.resource_version().unwrap_or_default();
                self.written
                    .lock()
                    .insert(key_of(obj), (rv, status.clone()));
                Ok(Written::Patched)
            }
            Err(e) if is_not_found(&e) => Ok(Written::Gone),
            Err(e) => Err(e),
        }
    }

    /// Forgets what was written to `obj` (it is gone).
    pub fn forget(&self, obj: &K) {
        self.written.lock().remove(&key_of(obj));
    }
}

/// Whether a lister showing `listed` at `listed_rv` has seen the write that
/// returned `written_rv` with `written` (or something after it).
fn caught_up<S: PartialEq>(written_rv: &str, written: &S, listed_rv: &str, listed: &S) -> bool {
    written_rv == listed_rv || written == listed
}

fn key_of<K: Resource>(obj: &K) -> String {
    match obj.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", obj.meta().name.as_deref().unwrap_or_default()),
        None => obj.meta().name.clone().unwrap_or_default(),
    }
}

/// A 404 from the API: the object (or its namespace) is gone.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A 409 from the API: it exists already, or the write lost a race.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// `result`, with a 404 counted as done (deleting what is already gone).
pub fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::caught_up;

    #[test]
    fn the_lister_has_caught_up_at_the_written_version_or_the_written_status() {
        // The write returned "12" with "ready".
        assert!(caught_up("12", &"ready", "12", &"ready"));
        // A version in between (our own finalizer patch, "11"): not yet.
        assert!(!caught_up("12", &"ready", "11", &""));
        // The version the write was based on: not yet.
        assert!(!caught_up("12", &"ready", "10", &""));
        // Someone wrote on top ("13"), our status in it: caught up.
        assert!(caught_up("12", &"ready", "13", &"ready"));
    }
}
