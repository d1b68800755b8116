//! [`StatusWriter`]: the one way a controller writes an object's status.
//!
//! A lister lags behind the writes its own controller makes: the watch
//! event of a status patch arrives after the patch returns, and a reconcile
//! that starts in between would read the old status, decide again, and
//! write again. The writer remembers the status it wrote last per object
//! and reads that one instead until the lister has caught up: its informer
//! delivered the resourceVersion the write returned ([`StatusWriter::follow`];
//! a watch delivers versions in order, so whatever comes later is newer),
//! or the lister shows that version or the status that was written.
//!
//! resourceVersions are compared for equality only: the API conventions
//! make them opaque strings, never numbers to order. (Equality with the
//! version a write was *based on* is not enough: the controller's own
//! other writes, e.g. a finalizer patch, make versions in between.)
//!
//! When two controllers write conditions of one object (the inventory's
//! `Ready` and delivery's `Delivering` on a Hosstedproject), each writer
//! names the condition types it owns ([`StatusWriter::owning_conditions`]):
//! those go by server-side apply under its own field manager — the CRD
//! makes `conditions` a map list keyed by `type`, so an apply touches only
//! its own entries — and the rest of the status by merge patch without the
//! `conditions` key. Neither can clobber the other's condition from a stale
//! copy.
//!
//! A controller may also *hold* a status back for a while
//! ([`StatusWriter::hold`]): this process reads it as the object's status
//! ([`StatusWriter::current`]), nothing is sent, and the next
//! [`StatusWriter::write`] sends it with whatever changed since — two
//! changes a moment apart in one request. A clean shutdown writes what is
//! held ([`StatusWriter::flush_held`], from the reconciler's
//! `Reconciler::drained`); a crash loses it: only a status the controller
//! can rebuild from the cluster may be held.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

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
    /// When two statuses count as the same (default: equal).
    unchanged: fn(&S, &S) -> bool,
    /// Per object key: the resourceVersion the last write returned, and the
    /// status it wrote. Invariant: an entry exists only while the lister has
    /// not caught up with that write; it goes at the first read that shows
    /// it has.
    written: Arc<Mutex<HashMap<String, (String, S)>>>,
    /// Per object key: a status held back ([`StatusWriter::hold`]) for the
    /// object of that UID until that instant. Invariants: at most
    /// [`MAX_HELD`] entries of [`MAX_HELD_BYTES`] in all; an entry goes at
    /// the next write to its object that the server answered, when its
    /// object is forgotten, and when read for another UID. Past its
    /// instant it is still this process's newest status: only a write
    /// replaces it.
    held: Arc<Mutex<HeldStatuses<S>>>,
    /// The followed informer's store (set by [`StatusWriter::follow`]):
    /// [`StatusWriter::current`] reads an object's newest copy there, not
    /// the caller's — a reconcile holds the copy it started with, and the
    /// entry of `written` goes as soon as the store is past it, so the
    /// caller's older copy would be taken for the newest.
    store: Arc<std::sync::OnceLock<cache::Store<K>>>,
    /// Set by [`StatusWriter::owning_conditions`]: the conditions are not
    /// merge-patched but applied, only these types, under this manager.
    conditions: Option<OwnedConditions>,
}

/// The condition types one writer owns, and the field manager it applies
/// them as.
#[derive(Clone, Copy, Debug)]
struct OwnedConditions {
    field_manager: &'static str,
    types: &'static [&'static str],
    /// The whole status (its owned conditions included) is applied in one
    /// request: see [`StatusWriter::applying_whole_status`].
    whole: bool,
}

/// How many statuses one writer holds back at once, and how many bytes
/// they weigh serialized: past either (or [`MAX_HELD_ONE`] for one),
/// [`StatusWriter::hold`] refuses and the caller writes. (A status is as large as its object may be: a
/// count alone would not bound the memory.)
pub const MAX_HELD: usize = 4096;
pub const MAX_HELD_BYTES: usize = 16 << 20;
/// The heaviest one status held back may be (serialized).
pub const MAX_HELD_ONE: usize = 256 << 10;

/// A status held back ([`StatusWriter::hold`]).
#[derive(Debug, Clone)]
struct Held<S> {
    uid: Option<String>,
    until: std::time::Instant,
    status: S,
    /// Its size serialized, counted in [`HeldStatuses::bytes`].
    bytes: usize,
}

/// A write whose request was sent with a held status taken out: dropped
/// before its answer (a shutdown aborting the reconcile), the write may or
/// may not have landed, so the status it sent — the held one and more —
/// is held again in its place, for a drain's flush to send (never the
/// older held one, which could undo a write that landed).
struct Unanswered<'a, S> {
    held: &'a Mutex<HeldStatuses<S>>,
    key: String,
    /// `None` once answered.
    newer: Option<Held<S>>,
}

impl<S> Unanswered<'_, S> {
    fn answered(&mut self) {
        self.newer = None;
    }
}

impl<S> Drop for Unanswered<'_, S> {
    fn drop(&mut self) {
        if let Some(newer) = self.newer.take() {
            let _ = self.held.lock().insert(self.key.clone(), newer);
        }
    }
}

/// The statuses held back, by object key. Invariant: `bytes` is the sum
/// of their `bytes`.
struct HeldStatuses<S> {
    by_key: HashMap<String, Held<S>>,
    bytes: usize,
}

impl<S> Default for HeldStatuses<S> {
    fn default() -> Self {
        HeldStatuses {
            by_key: HashMap::new(),
            bytes: 0,
        }
    }
}

impl<S> HeldStatuses<S> {
    fn remove(&mut self, key: &str) {
        let _ = self.take(key);
    }

    fn take(&mut self, key: &str) -> Option<Held<S>> {
        let gone = self.by_key.remove(key)?;
        self.bytes -= gone.bytes;
        Some(gone)
    }

    /// Holds `held` under `key` (replacing what was), unless the bounds
    /// would be passed.
    fn insert(&mut self, key: String, held: Held<S>) -> bool {
        let replaced = self.by_key.get(&key).map(|h| h.bytes);
        let count = self.by_key.len() + usize::from(replaced.is_none());
        let bytes = self.bytes - replaced.unwrap_or(0) + held.bytes;
        if count > MAX_HELD || bytes > MAX_HELD_BYTES || held.bytes > MAX_HELD_ONE {
            return false;
        }
        self.bytes = bytes;
        self.by_key.insert(key, held);
        true
    }
}

/// How many statuses a [`StatusWriter`] holds back now
/// ([`StatusWriter::held_count`]).
#[derive(Clone)]
pub struct HeldCount(std::sync::Arc<dyn Fn() -> usize + Send + Sync>);

impl HeldCount {
    pub fn get(&self) -> usize {
        (self.0)()
    }
}

impl std::fmt::Debug for HeldCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldCount({})", self.get())
    }
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
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + 'static,
    S: Clone + Default + PartialEq + Serialize,
{
    /// A writer for `client`; `status_of` reads an object's status.
    pub fn new(client: Client, status_of: fn(&K) -> Option<S>) -> Self {
        StatusWriter {
            client,
            status_of,
            unchanged: |a, b| a == b,
            written: Arc::default(),
            held: Arc::default(),
            store: Arc::default(),
            conditions: None,
        }
    }

    /// Writes only the conditions of `types` (from `status.conditions`),
    /// by server-side apply under `field_manager` (forced: the types are
    /// this writer's alone), and the rest of the status by a merge patch
    /// that leaves `conditions` out. Conditions of other types in the
    /// status handed to [`StatusWriter::write`] are never written.
    ///
    /// Needs `status.conditions` to be a map list keyed by `type`
    /// (`x-kubernetes-list-type: map`) in the object's CRD.
    pub fn owning_conditions(
        mut self,
        field_manager: &'static str,
        types: &'static [&'static str],
    ) -> Self {
        self.conditions = Some(OwnedConditions {
            field_manager,
            types,
            whole: false,
        });
        self
    }

    /// With [`StatusWriter::owning_conditions`]: the whole status — every
    /// field, and the owned conditions — is applied in one server-side
    /// apply under the writer's field manager, so a reader never sees the
    /// conditions ahead of (or behind) the fields they summarise
    /// (`Ready=True, 1 app reported` with `appCount: 0`). For the writer
    /// that owns everything in the status but other writers' conditions.
    /// A field that leaves the status is removed by a merge patch first
    /// (rare: a field another manager set, such as one the Go operator
    /// wrote).
    pub fn applying_whole_status(mut self) -> Self {
        if let Some(owned) = self.conditions.as_mut() {
            owned.whole = true;
        }
        self
    }

    /// Drops what was written to an object as soon as `informer` delivers
    /// that write (or the object's deletion): from then on its lister is at
    /// or past the write, whatever it shows.
    pub fn follow(&self, informer: &cache::SharedInformer<K>)
    where
        K: cache::Object,
        S: Send + 'static,
    {
        let _ = self.store.set(informer.store());
        let written = self.written.clone();
        let held = self.held.clone();
        informer.add_event_handler(cache::HandlerFn(move |e: &cache::Event<K>| {
            observed(&written, e);
            forget_held_of_gone(&held, e);
        }));
    }

    /// Counts two statuses as the same when `unchanged` says so (e.g. a
    /// timestamp alone is no change): no write.
    pub fn unchanged_when(mut self, unchanged: fn(&S, &S) -> bool) -> Self {
        self.unchanged = unchanged;
        self
    }

    /// The newest status of `obj` in this process: the one held back
    /// ([`StatusWriter::hold`]), else [`StatusWriter::published`].
    pub fn current(&self, obj: &K) -> S {
        let key = key_of(obj);
        {
            let mut held = self.held.lock();
            match held.by_key.get(&key) {
                Some(h) if h.uid == obj.meta().uid => return h.status.clone(),
                Some(_) => {
                    held.remove(&key);
                }
                None => {}
            }
        }
        self.published(obj)
    }

    /// The newest status of `obj` on the server as this process knows it
    /// (a lister's copy): its own, or the one written last when the lister
    /// has not caught up with that write. A held status is not in it.
    pub fn published(&self, obj: &K) -> S {
        let key = key_of(obj);
        let newest = self
            .store
            .get()
            .and_then(|s| s.get(&key))
            .filter(|n| n.meta().uid == obj.meta().uid);
        let obj = newest.as_deref().unwrap_or(obj);
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
    /// subresource ([`status_merge_patch`]), unless
    /// [`StatusWriter::current`] is already `status`. With
    /// [`StatusWriter::owning_conditions`], the owned conditions are applied
    /// instead (a request only for the part that changed).
    pub async fn write(&self, obj: &K, status: &S) -> Result<Written, kube::Error> {
        // Taken out before the request: whatever was held is in `status`
        // (the caller made it from it), and nothing may send the held one
        // after this write (a drain's flush).
        let key = key_of(obj);
        let taken = self.held.lock().take(&key);
        let mut unanswered = taken.as_ref().map(|held| Unanswered {
            held: &self.held,
            key: key.clone(),
            newer: Some(Held {
                uid: held.uid.clone(),
                until: held.until,
                status: status.clone(),
                bytes: serde_json::to_vec(status).map_or(held.bytes, |b| b.len()),
            }),
        });
        let written = self.send(obj, status).await;
        if let Some(unanswered) = unanswered.as_mut() {
            unanswered.answered();
        }
        if written.is_err()
            && let Some(held) = taken
            && !self.held.lock().insert(key.clone(), held)
        {
            // Full meanwhile: the retry reads the published status.
            log::warn!("status of {key}: the held status could not be kept after a failed write");
        }
        written
    }

    /// How many statuses are held back now, to read from anywhere (a
    /// metric).
    pub fn held_count(&self) -> HeldCount
    where
        S: Send + 'static,
    {
        let held = self.held.clone();
        HeldCount(std::sync::Arc::new(move || held.lock().by_key.len()))
    }

    /// Holds `status` back as `obj`'s until `until` (see the module docs):
    /// [`StatusWriter::current`] reads it, nothing is sent. `false` when
    /// the bounds are reached ([`MAX_HELD`], [`MAX_HELD_BYTES`],
    /// [`MAX_HELD_ONE`]): the caller writes instead.
    pub fn hold(&self, obj: &K, status: S, until: std::time::Instant) -> bool {
        let Ok(bytes) = serde_json::to_vec(&status).map(|b| b.len()) else {
            return false;
        };
        let held = Held {
            uid: obj.meta().uid.clone(),
            until,
            status,
            bytes,
        };
        self.held.lock().insert(key_of(obj), held)
    }

    /// Writes every status held back (a clean shutdown: they would go with
    /// the process), each to its object as the followed store holds it, a
    /// few at once; one whose object is gone, or is another UID now, is
    /// dropped. How many were written.
    pub async fn flush_held(&self) -> usize {
        use futures::StreamExt;
        let mut held: Vec<(String, Held<S>)> = self
            .held
            .lock()
            .by_key
            .iter()
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect();
        // The nearest to its end first: when the drain's time runs out,
        // what is left unwritten is what would have been held longest.
        held.sort_by_key(|(_, h)| h.until);
        let Some(store) = self.store.get() else {
            return 0;
        };
        let writes = held.into_iter().map(|(key, h)| async move {
            let Some(obj) = store.get(&key).filter(|o| o.meta().uid == h.uid) else {
                self.held.lock().remove(&key);
                return false;
            };
            match self.write(&obj, &h.status).await {
                Ok(_) => true,
                Err(e) => {
                    log::warn!("status of {key}: the held status was not written: {e}");
                    false
                }
            }
        });
        futures::stream::iter(writes)
            .buffer_unordered(8)
            .filter(|w| std::future::ready(*w))
            .count()
            .await
    }

    /// Until when `obj`'s status is held back (`None`: it is not).
    pub fn held_until(&self, obj: &K) -> Option<std::time::Instant> {
        let held = self.held.lock();
        held.by_key
            .get(&key_of(obj))
            .filter(|h| h.uid == obj.meta().uid)
            .map(|h| h.until)
    }

    /// [`StatusWriter::write`]'s request, against the published status.
    async fn send(&self, obj: &K, status: &S) -> Result<Written, kube::Error> {
        let current = self.published(obj);
        if (self.unchanged)(&current, status) {
            return Ok(Written::Unchanged);
        }
        let mut body = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
        let mut previous = serde_json::to_value(&current).map_err(kube::Error::SerdeError)?;
        let mut returned = None;
        if let Some(owned) = self.conditions.filter(|o| o.whole) {
            let (now, before) = (owned.pick(&mut body), owned.pick(&mut previous));
            if body == previous && now == before {
                return Ok(Written::Unchanged);
            }
            let mut gone = body.clone();
            null_removed(&mut gone, &previous);
            if let Some(gone) = only_nulls(&gone) {
                let patch = serde_json::json!({ "status": gone });
                if self
                    .request(obj, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?
                    .is_none()
                {
                    return Ok(Written::Gone);
                }
            }
            if let Some(fields) = body.as_object_mut() {
                fields.insert("conditions".into(), now);
            }
            returned = self.apply_status(obj, owned, body).await?;
            if returned.is_none() {
                return Ok(Written::Gone);
            }
        } else {
            if let Some(owned) = self.conditions {
                let (now, before) = (owned.pick(&mut body), owned.pick(&mut previous));
                if now != before {
                    log::debug!("status of {}: conditions changed", key_of(obj));
                    returned = self
                        .apply_status(obj, owned, serde_json::json!({ "conditions": now }))
                        .await?;
                    if returned.is_none() {
                        return Ok(Written::Gone);
                    }
                }
            }
            if body != previous {
                log::debug!(
                    "status of {}: {} changed",
                    key_of(obj),
                    changed_fields(&body, &previous).join(", ")
                );
                null_removed(&mut body, &previous);
                let patch = serde_json::json!({ "status": body });
                returned = self
                    .request(obj, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                if returned.is_none() {
                    return Ok(Written::Gone);
                }
            }
        }
        let Some(returned) = returned else {
            // Only conditions of other writers differ: not ours to write.
            return Ok(Written::Unchanged);
        };
        let rv = returned;
        let key = key_of(obj);
        // Remembered only while the followed store holds the object: one
        // that left it (deleted, or out of a label selector — a shard
        // moved it) would otherwise keep this status past every later
        // write of another process, and serve it when it comes back.
        let followed = self.store.get();
        if followed.is_none_or(|s| s.get(&key).is_some()) {
            self.written.lock().insert(key, (rv, status.clone()));
        }
        Ok(Written::Patched)
    }

    /// Applies `status` (this writer's conditions only, and with
    /// [`StatusWriter::applying_whole_status`] its other fields) to
    /// `obj`'s status.
    async fn apply_status(
        &self,
        obj: &K,
        owned: OwnedConditions,
        status: serde_json::Value,
    ) -> Result<Option<String>, kube::Error> {
        let mut metadata = serde_json::json!({ "name": obj.name_any() });
        if let Some(ns) = obj.namespace() {
            metadata["namespace"] = ns.into();
        }
        let body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": metadata,
            "status": status,
        });
        let params = PatchParams::apply(owned.field_manager).force();
        self.request(obj, &params, &Patch::Apply(&body)).await
    }

    /// Patches `obj`'s status subresource; the resourceVersion it then
    /// has, `None` when it is gone (404). Only that is read of the answer:
    /// an object the apiserver stored deeper than a decoder of `K` goes (its
    /// `managedFields` are as deep as the object) is still written to.
    async fn request<P: Serialize + Debug>(
        &self,
        obj: &K,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<Option<String>, kube::Error> {
        // A Request rather than an `Api`: one path for namespaced and
        // cluster-scoped kinds alike.
        let namespace = obj.namespace();
        let request = Request::new(K::url_path(&(), namespace.as_deref()))
            .patch_subresource("status", &obj.name_any(), params, patch)
            .map_err(kube::Error::BuildRequest)?;
        let answer = ignore_not_found(self.client.request::<Versioned>(request).await)?;
        Ok(answer.map(|v| v.metadata.resource_version.unwrap_or_default()))
    }

    /// Forgets what was written to `obj` (it is gone).
    pub fn forget(&self, obj: &K) {
        self.forget_key(&key_of(obj));
    }

    /// Forgets what was written to the object of `key` (`namespace/name`,
    /// or `name` for a cluster-scoped kind).
    pub fn forget_key(&self, key: &str) {
        self.written.lock().remove(key);
        self.held.lock().remove(key);
    }
}

/// The JSON merge patch `{"status": status}` that turns `previous` into
/// `status`. A merge patch merges maps, so whatever `previous` has and
/// `status` lacks (an entry gone from a map, a field left empty and not
/// serialized) is named as `null`. A status that does not serialize is an
/// error — never an empty patch (`{"status": null}` would delete the whole
/// status).
pub fn status_merge_patch(
    status: &impl Serialize,
    previous: &impl Serialize,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut body = serde_json::to_value(status)?;
    let previous = serde_json::to_value(previous)?;
    null_removed(&mut body, &previous);
    Ok(serde_json::json!({ "status": body }))
}

impl OwnedConditions {
    /// Takes `conditions` out of a serialized status and returns those of
    /// the owned types (a list, possibly empty).
    fn pick(&self, status: &mut serde_json::Value) -> serde_json::Value {
        let all = status
            .as_object_mut()
            .and_then(|s| s.remove("conditions"))
            .and_then(|c| match c {
                serde_json::Value::Array(items) => Some(items),
                _ => None,
            })
            .unwrap_or_default();
        let mine = all
            .into_iter()
            .filter(|c| {
                c.get("type")
                    .and_then(|t| t.as_str())
                    .is_some_and(|t| self.types.contains(&t))
            })
            .collect();
        serde_json::Value::Array(mine)
    }
}

/// The `null`s of `value` (nested maps kept as the path to them), or
/// `None` when it has none.
fn only_nulls(value: &serde_json::Value) -> Option<serde_json::Value> {
    let map = value.as_object()?;
    let kept: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::Null => Some((k.clone(), serde_json::Value::Null)),
            v => only_nulls(v).map(|n| (k.clone(), n)),
        })
        .collect();
    (!kept.is_empty()).then_some(serde_json::Value::Object(kept))
}

/// Adds to `new` a `null` for every key of `old` it lacks, in nested maps too.
fn null_removed(new: &mut serde_json::Value, old: &serde_json::Value) {
    let (Some(new), Some(old)) = (new.as_object_mut(), old.as_object()) else {
        return;
    };
    for (key, old_value) in old {
        match new.get_mut(key) {
            Some(new_value) => null_removed(new_value, old_value),
            None => {
                new.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
}

/// What a watch event tells the memory of written statuses.
fn observed<K: Resource, S>(written: &Mutex<HashMap<String, (String, S)>>, e: &cache::Event<K>) {
    let (obj, gone) = match e {
        cache::Event::Add(o) | cache::Event::Update { new: o, .. } => (o, false),
        cache::Event::Delete(o) => (o, true),
    };
    let key = key_of(obj.as_ref());
    let mut written = written.lock();
    let delivered = written
        .get(&key)
        .is_some_and(|(rv, _)| gone || obj.resource_version().as_deref() == Some(rv.as_str()));
    if delivered {
        written.remove(&key);
    }
}

/// An object gone from the followed informer (deleted, or out of this
/// process's selection: a shard moved it): what was held for it is not
/// this process's to write any more.
fn forget_held_of_gone<K: Resource, S>(held: &Mutex<HeldStatuses<S>>, e: &cache::Event<K>) {
    if let cache::Event::Delete(o) = e {
        held.lock().remove(&key_of(o.as_ref()));
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

/// The top-level fields of `now` that differ from `before` (for the
/// debug log of a status write: which fields, never their values).
fn changed_fields(now: &serde_json::Value, before: &serde_json::Value) -> Vec<String> {
    let (Some(now), before) = (now.as_object(), before.as_object()) else {
        return vec!["status".into()];
    };
    let mut keys: Vec<String> = now
        .iter()
        .filter(|(k, v)| before.and_then(|b| b.get(*k)) != Some(*v))
        .map(|(k, _)| k.clone())
        .chain(
            before
                .into_iter()
                .flat_map(|b| b.keys())
                .filter(|k| !now.contains_key(*k))
                .cloned(),
        )
        .collect();
    keys.sort();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// A writer of ConfigMaps' `data` as their status, against `url`.
    fn map_writer(
        url: &str,
    ) -> StatusWriter<ConfigMap, std::collections::BTreeMap<String, String>> {
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        StatusWriter::new(client, |d: &ConfigMap| d.data.clone())
    }

    fn cm(rv: &str) -> Arc<ConfigMap> {
        let mut c = ConfigMap::default();
        c.metadata.name = Some("c".into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(rv.into());
        Arc::new(c)
    }

    #[test]
    fn a_write_is_forgotten_once_its_watch_event_is_delivered() {
        let written: Mutex<HashMap<String, (String, u32)>> = Mutex::default();
        written.lock().insert("ns/c".into(), ("12".into(), 2));
        // An older version arrives: the write is still ahead.
        observed(&written, &cache::Event::Add(cm("11")));
        assert!(written.lock().contains_key("ns/c"));
        // The write itself: from now on the lister is at or past it (a
        // later version, with someone else's status, wins).
        observed(
            &written,
            &cache::Event::Update {
                old: cm("11"),
                new: cm("12"),
            },
        );
        assert!(!written.lock().contains_key("ns/c"));
        written.lock().insert("ns/c".into(), ("14".into(), 3));
        observed(&written, &cache::Event::Delete(cm("13")));
        assert!(!written.lock().contains_key("ns/c"), "gone");
    }

    /// The race a reconcile runs: it starts with the lister's copy (no
    /// status yet), writes, the informer delivers the write (the entry
    /// goes), then the reconcile asks again with the copy it started with.
    #[tokio::test]
    async fn current_reads_the_newest_copy_not_the_one_a_reconcile_started_with() {
        let writer = map_writer("http://127.0.0.1:9");
        let store = cache::Store::<ConfigMap>::new();
        let _ = writer.store.set(store.clone());
        let started_with = cm("11");
        let written = std::collections::BTreeMap::from([("revision".to_string(), "7".to_string())]);
        writer
            .written
            .lock()
            .insert("ns/c".into(), ("12".into(), written.clone()));
        assert_eq!(
            writer.current(&started_with),
            written,
            "the write, not yet delivered"
        );
        // Delivered: the store holds it, the entry goes.
        let mut delivered = (*cm("12")).clone();
        delivered.data = Some(written.clone());
        let delivered = Arc::new(delivered);
        store.upsert(delivered.clone());
        observed(
            &writer.written,
            &cache::Event::Update {
                old: cm("11"),
                new: delivered,
            },
        );
        assert!(writer.written.lock().is_empty());
        assert_eq!(
            writer.current(&started_with),
            written,
            "the copy the reconcile started with is older than the store's"
        );
    }

    /// A held status is what this process reads, never what a write is
    /// compared with: the write that follows sends it (and goes through
    /// even when the caller's status equals the held one); it is only
    /// for the object of the UID it was held for; past [`MAX_HELD`] a
    /// hold is refused.
    #[tokio::test]
    async fn a_held_status_is_read_as_current_but_written_against_the_published_one() {
        let writer = map_writer("http://127.0.0.1:9");
        let mut obj = (*cm("11")).clone();
        obj.metadata.uid = Some("u1".into());
        let held = std::collections::BTreeMap::from([("revision".to_string(), "1".to_string())]);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        assert!(writer.hold(&obj, held.clone(), until));
        assert_eq!(writer.current(&obj), held, "read as the newest");
        assert_eq!(
            writer.published(&obj),
            Default::default(),
            "not on the server"
        );
        assert_eq!(writer.held_until(&obj), Some(until));
        // The write of the same status is not "unchanged": it is sent
        // (here to an address that refuses) and, failed, stays held.
        assert!(writer.write(&obj, &held).await.is_err(), "sent");
        assert_eq!(writer.current(&obj), held, "kept after a failed write");
        // Another object of the same name (deleted and made again).
        let mut other = obj.clone();
        other.metadata.uid = Some("u2".into());
        assert_eq!(writer.held_until(&other), None);
        assert_eq!(writer.current(&other), Default::default());
        assert_eq!(
            writer.held_until(&obj),
            None,
            "dropped once read for another UID"
        );
        // Bounded.
        for i in 0..MAX_HELD {
            let mut o = obj.clone();
            o.metadata.name = Some(format!("c{i}"));
            assert!(writer.hold(&o, held.clone(), until));
        }
        assert!(!writer.hold(&obj, held.clone(), until), "full");
        writer.forget_key("ns/c0");
        assert!(writer.hold(&obj, held.clone(), until), "room again");
        let all = writer.held.lock().bytes;
        assert_eq!(all, MAX_HELD * serde_json::to_vec(&held).unwrap().len());
        for i in 0..MAX_HELD {
            writer.forget_key(&format!("ns/c{i}"));
        }
        // By weight: one heavier than its bound is refused; statuses up to
        // it are held until the next would pass the bound of all.
        let weighing =
            |n: usize| std::collections::BTreeMap::from([("x".to_string(), "y".repeat(n))]);
        assert!(
            !writer.hold(&other, weighing(MAX_HELD_ONE), until),
            "one too heavy"
        );
        let one = MAX_HELD_ONE - 64;
        let mut kept = 0;
        for i in 0.. {
            let mut o = obj.clone();
            o.metadata.name = Some(format!("w{i}"));
            if !writer.hold(&o, weighing(one), until) {
                break;
            }
            kept += 1;
        }
        let each = serde_json::to_vec(&weighing(one)).unwrap().len();
        assert_eq!(kept, (MAX_HELD_BYTES - all / MAX_HELD) / each);
        assert!(writer.held.lock().bytes <= MAX_HELD_BYTES);
        // Gone from the followed informer (deleted, or out of a shard's
        // selection): its held status goes.
        assert!(writer.held_until(&obj).is_some());
        forget_held_of_gone(
            &writer.held,
            &cache::Event::Update {
                old: Arc::new(obj.clone()),
                new: Arc::new(obj.clone()),
            },
        );
        assert!(writer.held_until(&obj).is_some(), "updated: still held");
        forget_held_of_gone(&writer.held, &cache::Event::Delete(Arc::new(obj.clone())));
        assert_eq!(writer.held_until(&obj), None);
    }

    /// A write dropped before its answer (a shutdown aborting the
    /// reconcile) may have landed: what it sent is held in place of the
    /// older held status, so a drain's flush can never undo it.
    #[tokio::test]
    async fn a_write_dropped_before_its_answer_leaves_what_it_sent_held() {
        // Accepts, never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let writer = map_writer(&url);
        let mut obj = (*cm("11")).clone();
        obj.metadata.uid = Some("u1".into());
        let older = std::collections::BTreeMap::from([("revision".to_string(), "1".to_string())]);
        let mut newer = older.clone();
        newer.insert("ready".into(), "True".into());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        assert!(writer.hold(&obj, older, until));
        let dropped = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            writer.write(&obj, &newer),
        )
        .await;
        assert!(dropped.is_err(), "not answered");
        assert_eq!(writer.current(&obj), newer);
        assert_eq!(writer.held_until(&obj), Some(until));
        let all = writer.held.lock().bytes;
        assert_eq!(all, serde_json::to_vec(&newer).unwrap().len());
        drop(silent);
    }

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

    #[test]
    fn only_the_removed_fields_are_kept_for_the_removal_patch() {
        let mut body = serde_json::json!({ "a": 1, "m": { "k": "v" } });
        let previous = serde_json::json!({ "a": 1, "gone": "x", "m": { "k": "v", "old": "y" } });
        null_removed(&mut body, &previous);
        assert_eq!(
            only_nulls(&body),
            Some(serde_json::json!({ "gone": null, "m": { "old": null } }))
        );
        assert_eq!(
            only_nulls(&serde_json::json!({ "a": 1, "m": { "k": 2 } })),
            None
        );
    }

    #[test]
    fn an_owning_writer_picks_its_condition_types_and_takes_the_list_out() {
        let owned = OwnedConditions {
            field_manager: "m",
            types: &["Ready"],
            whole: false,
        };
        let mut status = serde_json::json!({
            "apps": 1,
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Delivering"}],
        });
        let mine = owned.pick(&mut status);
        assert_eq!(
            mine,
            serde_json::json!([{"type": "Ready", "status": "True"}])
        );
        assert_eq!(
            status,
            serde_json::json!({"apps": 1}),
            "merge-patched without conditions"
        );
        let mut none = serde_json::json!({});
        assert_eq!(
            owned.pick(&mut none),
            serde_json::json!([]),
            "an empty list removes ours"
        );
    }
}

/// What a status write reads of the object it returns: its
/// resourceVersion. Every other field is skipped unread (serde_json skips
/// without recursion, whatever the depth).
#[derive(serde::Deserialize)]
struct Versioned {
    metadata: VersionOnly,
}

#[derive(serde::Deserialize)]
struct VersionOnly {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}
