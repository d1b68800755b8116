//! Client-go's SharedIndexInformer: one reflector filling one [`Store`], and
//! any number of event handlers, each fed through its own unbounded buffer.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::Duration;

use kube::{Api, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::reflector::{ListWatchConfig, Reflector, ReflectorStats, Sink};
use crate::{Lister, Store, object_key};

/// What an informer can mirror: a kube resource that can be decoded, cloned
/// and shared across threads — of a static type, or a `DynamicObject` whose
/// kind is known at run time ([`SharedInformer::dynamic`]). Implemented for
/// every such type.
pub trait Mirrored: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}

impl<K> Mirrored for K where K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}

/// A [`Mirrored`] type of a static kind: what the factory shares.
/// Implemented for every such type.
pub trait Object: Mirrored + Resource<DynamicType = ()> {}

impl<K> Object for K where K: Mirrored + Resource<DynamicType = ()> {}

/// Applied to every object before it is stored or handed to handlers; where
/// memory is won (drop `managedFields`, big annotations, payloads).
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// A change delivered to handlers. Objects are the stored (transformed) `Arc`s.
#[derive(Debug)]
pub enum Event<K> {
    Add(Arc<K>),
    /// Also delivered on a periodic resync and for objects found again by a
    /// relist, with `old` and `new` possibly the same version.
    Update {
        old: Arc<K>,
        new: Arc<K>,
    },
    /// The object's final state, or — when the deletion was missed and found
    /// by a relist — its last known state.
    Delete(Arc<K>),
}

impl<K: Resource> Event<K> {
    /// The object an event is about, unless the event changes nothing: an
    /// `Update` whose resourceVersion did not move (a resync or a relist
    /// re-delivering what is cached). What an enqueueing handler looks at.
    pub fn changed(&self) -> Option<&Arc<K>> {
        match self {
            Event::Update { old, new }
                if old.meta().resource_version == new.meta().resource_version =>
            {
                None
            }
            Event::Add(o) | Event::Delete(o) | Event::Update { new: o, .. } => Some(o),
        }
    }
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Event::Add(o) => Event::Add(o.clone()),
            Event::Update { old, new } => Event::Update {
                old: old.clone(),
                new: new.clone(),
            },
            Event::Delete(o) => Event::Delete(o.clone()),
        }
    }
}

/// Receives an informer's events, in order, on a thread of its own: a slow
/// handler delays only itself. Handlers of a controller should only enqueue.
pub trait EventHandler<K>: Send + 'static {
    fn on_add(&mut self, _obj: &Arc<K>) {}
    fn on_update(&mut self, _old: &Arc<K>, _new: &Arc<K>) {}
    fn on_delete(&mut self, _obj: &Arc<K>) {}
}

/// An [`EventHandler`] made of one closure taking every [`Event`].
///
/// ```
/// # use std::sync::Arc;
/// # use cache::{Event, HandlerFn};
/// # use k8s_openapi::api::core::v1::Pod;
/// let handler = HandlerFn(|e: &Event<Pod>| {
///     if let Event::Add(pod) = e { println!("added {:?}", pod.metadata.name) }
/// });
/// ```
pub struct HandlerFn<F>(pub F);

impl<K, F: FnMut(&Event<K>) + Send + 'static> EventHandler<K> for HandlerFn<F> {
    fn on_add(&mut self, obj: &Arc<K>) {
        (self.0)(&Event::Add(obj.clone()))
    }
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        (self.0)(&Event::Update {
            old: old.clone(),
            new: new.clone(),
        })
    }
    fn on_delete(&mut self, obj: &Arc<K>) {
        (self.0)(&Event::Delete(obj.clone()))
    }
}

/// Shares one LIST+WATCH of a type among any number of handlers and readers.
///
/// - The store is filled by a [`Reflector`](crate::reflector) task once
///   [`run`](Self::run) is called; [`has_synced`](Self::has_synced) is true
///   after the first complete LIST is stored.
/// - Each handler added with [`add_event_handler`](Self::add_event_handler)
///   gets its own unbounded buffer and thread, so a slow handler blocks
///   neither the reflector nor other handlers. A handler added after objects
///   are cached first receives an `Add` for each of them.
/// - With a resync period, every cached object is re-delivered as an
///   `Update` (old and new the same) that often.
pub struct SharedInformer<K: Resource> {
    kind: String,
    api_version: String,
    api: Api<K>,
    config: ListWatchConfig,
    transform: Option<Transform<K>>,
    resync: Option<Duration>,
    store: Store<K>,
    /// Handler buffers. Held while the store changes and the change is
    /// delivered, so a late handler's synthetic adds and the live stream
    /// neither overlap nor leave a gap.
    handlers: Mutex<Vec<mpsc::Sender<Event<K>>>>,
    synced: AtomicBool,
    synced_notify: Notify,
    stats: ReflectorStats,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Told of each object version that did not decode (see
    /// [`RefusalHook`]); set by the factory.
    on_refused: Mutex<Option<RefusalHook>>,
}

/// Told of each object version an informer could not decode and skipped:
/// the kind's `apiVersion` and `kind`, and the refusal (which names the
/// object and says why, without its content).
pub type RefusalHook = Arc<dyn Fn(&str, &str, &crate::Refusal) + Send + Sync>;

impl<K> SharedInformer<K>
where
    K: Object,
{
    /// An informer over `api` (whose namespace scope is used as is).
    pub fn new(
        api: Api<K>,
        config: ListWatchConfig,
        transform: Option<Transform<K>>,
        resync: Option<Duration>,
    ) -> Self {
        Self::of_type(api, &(), config, transform, resync)
    }
}

impl SharedInformer<kube::api::DynamicObject> {
    /// An informer over `api`, of the kind `resource` describes (found by
    /// discovery at run time); no resync. Not shared by the factory: its
    /// owner starts and stops it.
    pub fn dynamic(
        api: Api<kube::api::DynamicObject>,
        resource: &kube::api::ApiResource,
        config: ListWatchConfig,
        transform: Option<Transform<kube::api::DynamicObject>>,
    ) -> Self {
        Self::of_type(api, resource, config, transform, None)
    }
}

impl<K> SharedInformer<K>
where
    K: Mirrored,
{
    fn of_type(
        api: Api<K>,
        dt: &K::DynamicType,
        config: ListWatchConfig,
        transform: Option<Transform<K>>,
        resync: Option<Duration>,
    ) -> Self {
        SharedInformer {
            kind: K::kind(dt).into_owned(),
            api_version: K::api_version(dt).into_owned(),
            api,
            config,
            transform,
            resync,
            store: Store::new(),
            handlers: Mutex::new(Vec::new()),
            synced: AtomicBool::new(false),
            synced_notify: Notify::new(),
            stats: ReflectorStats::default(),
            tasks: Mutex::new(Vec::new()),
            on_refused: Mutex::new(None),
        }
    }

    /// Calls `hook` for each object version this informer cannot decode
    /// (besides its log line and [`ReflectorStats::refused`]).
    pub fn on_refused(&self, hook: RefusalHook) {
        *self.on_refused.lock() = Some(hook);
    }

    /// The cache this informer fills (shared handle).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// A lister reading this informer's cache.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(self.store.clone())
    }

    /// What the reflector has asked the API server for so far.
    pub fn stats(&self) -> &ReflectorStats {
        &self.stats
    }

    /// Whether the first complete LIST has been stored.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Relaxed)
    }

    /// Waits until [`has_synced`](Self::has_synced).
    pub async fn wait_synced(&self) {
        loop {
            let mut notified = std::pin::pin!(self.synced_notify.notified());
            notified.as_mut().enable();
            if self.has_synced() {
                return;
            }
            notified.await;
        }
    }

    /// Adds a handler (see the type's docs for its guarantees).
    pub fn add_event_handler(&self, mut handler: impl EventHandler<K>) {
        let (tx, rx) = mpsc::channel::<Event<K>>();
        let name = format!("informer-{}", self.kind.to_lowercase());
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            // Ends when the informer (every sender) is gone.
            for event in rx {
                match &event {
                    Event::Add(o) => handler.on_add(o),
                    Event::Update { old, new } => handler.on_update(old, new),
                    Event::Delete(o) => handler.on_delete(o),
                }
            }
        });
        if let Err(e) = spawned {
            log::error!("{}: cannot start a handler thread: {e}", self.kind);
            return;
        }
        let mut handlers = self.handlers.lock();
        for obj in self.store.list() {
            let _ = tx.send(Event::Add(obj));
        }
        handlers.push(tx);
    }

    /// Starts the reflector (and the resync timer) on the current Tokio
    /// runtime. Idempotent.
    pub fn run(self: &Arc<Self>) {
        let mut tasks = self.tasks.lock();
        if !tasks.is_empty() {
            return;
        }
        let me = self.clone();
        tasks.push(tokio::spawn(async move {
            let reflector = Reflector {
                api: me.api.clone(),
                config: me.config.clone(),
                kind: me.kind.clone(),
            };
            reflector.run(me.as_ref(), &me.stats).await;
        }));
        if let Some(period) = self.resync {
            let me = Arc::downgrade(self);
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(me) = me.upgrade() else { return };
                    me.resync_now();
                }
            }));
        }
    }

    /// Stops the reflector and resync tasks; the cache keeps its content.
    pub fn stop(&self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }

    /// Whether the reflector runs ([`run`](Self::run) and no
    /// [`stop`](Self::stop) since).
    pub fn is_running(&self) -> bool {
        !self.tasks.lock().is_empty()
    }

    /// Empties the cache, delivering a `Delete` for each object, and marks
    /// the informer not synced: what a stopped informer whose kind went
    /// away (its CRD was deleted) must look like to its readers.
    pub fn forget_all(&self) {
        let handlers = self.handlers.lock();
        self.synced.store(false, Relaxed);
        let (_, gone) = self.store.replace(Vec::new());
        for obj in gone {
            deliver(&handlers, Event::Delete(obj));
        }
    }

    /// Re-delivers every cached object as an `Update` to every handler.
    pub fn resync_now(&self) {
        let handlers = self.handlers.lock();
        for obj in self.store.list() {
            deliver(
                &handlers,
                Event::Update {
                    old: obj.clone(),
                    new: obj,
                },
            );
        }
    }

    fn transformed(&self, obj: K) -> Arc<K> {
        let mut obj = match &self.transform {
            Some(t) => t(obj),
            None => obj,
        };
        strip_bookkeeping(obj.meta_mut());
        Arc::new(obj)
    }
}

/// The annotation `kubectl apply` keeps a whole copy of the object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what only the apiserver and kubectl read — `managedFields` and
/// kubectl's last-applied copy — from every cached object, whatever its
/// type: together they are often most of a custom resource's bytes (a
/// HelmApp whose status the operator applies carries a field set per
/// manager), and no controller here reads them. (Server-side apply needs
/// neither in the object it is given.)
pub fn strip_bookkeeping(meta: &mut kube::api::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            meta.annotations = None;
        }
    }
}

impl<K: Resource> Drop for SharedInformer<K> {
    fn drop(&mut self) {
        for t in self.tasks.get_mut().drain(..) {
            t.abort();
        }
    }
}

fn deliver<K>(handlers: &[mpsc::Sender<Event<K>>], event: Event<K>) {
    // A handler whose thread is gone is simply skipped.
    for h in handlers {
        let _ = h.send(event.clone());
    }
}

impl<K> Sink<K> for SharedInformer<K>
where
    K: Mirrored,
{
    fn replace(&self, objs: Vec<K>, refused: &[String]) {
        let mut objs: Vec<Arc<K>> = objs.into_iter().map(|o| self.transformed(o)).collect();
        // A version that did not decode is skipped: the one last read stays.
        objs.extend(refused.iter().filter_map(|key| self.store.get(key)));
        let handlers = self.handlers.lock();
        let (changes, gone) = self.store.replace(objs);
        for (old, new) in changes {
            deliver(
                &handlers,
                match old {
                    None => Event::Add(new),
                    Some(old) => Event::Update { old, new },
                },
            );
        }
        for obj in gone {
            log::debug!(
                "{}: {} vanished while not watching",
                self.kind,
                object_key(obj.as_ref())
            );
            deliver(&handlers, Event::Delete(obj));
        }
        drop(handlers);
        if !self.synced.swap(true, Relaxed) {
            self.synced_notify.notify_waiters();
        }
    }

    fn upsert(&self, obj: K) {
        let obj = self.transformed(obj);
        let handlers = self.handlers.lock();
        let event = match self.store.upsert(obj.clone()) {
            None => Event::Add(obj),
            Some(old) => Event::Update { old, new: obj },
        };
        deliver(&handlers, event);
    }

    fn delete(&self, obj: K) {
        let obj = self.transformed(obj);
        let handlers = self.handlers.lock();
        self.store.remove(&object_key(obj.as_ref()));
        deliver(&handlers, Event::Delete(obj));
    }

    fn delete_key(&self, key: &str) {
        let handlers = self.handlers.lock();
        if let Some(last) = self.store.remove(key) {
            deliver(&handlers, Event::Delete(last));
        }
    }

    fn refused(&self, refusal: &crate::Refusal) {
        log::warn!(
            "{}: skipped a version of {} that does not decode ({}); the cache keeps the last one it could read, and the LIST and watch go on",
            self.kind,
            refusal.key(),
            refusal.error
        );
        let hook = self.on_refused.lock().clone();
        if let Some(hook) = hook {
            hook(&self.api_version, &self.kind, refusal);
        }
    }

    fn len(&self) -> usize {
        self.store.len()
    }

    fn contains(&self, key: &str) -> bool {
        self.store.get(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    #[test]
    fn bookkeeping_is_dropped_and_other_annotations_kept() {
        let annotations = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![Default::default()]),
            annotations: annotations(&[(LAST_APPLIED, "{}"), ("hossted.com/approve", "abc")]),
            ..Default::default()
        };
        strip_bookkeeping(&mut meta);
        assert!(meta.managed_fields.is_none());
        assert_eq!(
            meta.annotations,
            annotations(&[("hossted.com/approve", "abc")])
        );
        let mut only_kubectl = ObjectMeta {
            annotations: annotations(&[(LAST_APPLIED, "{}")]),
            ..Default::default()
        };
        strip_bookkeeping(&mut only_kubectl);
        assert!(only_kubectl.annotations.is_none());
    }
}
