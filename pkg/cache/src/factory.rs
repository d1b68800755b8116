//! Client-go's SharedInformerFactory: one informer — one LIST+WATCH — per
//! (type, namespace, label selector, field selector), shared by every caller.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use kube::{Api, Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use crate::reflector::ListWatchConfig;
use crate::{Event, HandlerFn, Object, SharedInformer, Transform};

/// Which objects an informer mirrors and how.
///
/// Two requests for the same (type, namespace, selectors) share one
/// informer, so they must agree on everything else here too: a second
/// request with a different transform, resync or paging is recorded as a
/// conflict and makes [`SharedInformerFactory::start`] fail, rather than
/// silently getting the first caller's options.
pub struct InformerOptions<K> {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Applied before storing, with a name that tells two transforms apart
    /// (closures cannot be compared).
    pub transform: Option<(&'static str, Transform<K>)>,
    /// Overrides the factory's resync period for this informer.
    pub resync: Option<Duration>,
    /// Paging and watch timing (selectors and namespace above take precedence).
    pub list_watch: ListWatchConfig,
}

impl<K> Default for InformerOptions<K> {
    fn default() -> Self {
        InformerOptions {
            label_selector: None,
            field_selector: None,
            transform: None,
            resync: None,
            list_watch: ListWatchConfig::default(),
        }
    }
}

impl<K> InformerOptions<K> {
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_string());
        self
    }

    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_string());
        self
    }

    /// Applies `f` to every object before it is stored; `name` identifies
    /// the transform when another caller asks for the same informer.
    pub fn transform(
        mut self,
        name: &'static str,
        f: impl Fn(K) -> K + Send + Sync + 'static,
    ) -> Self {
        self.transform = Some((name, Arc::new(f)));
        self
    }

    /// What must be equal for two requests to share one informer.
    fn fingerprint(&self) -> String {
        let lw = &self.list_watch;
        format!(
            "transform={:?} resync={:?} page_size={} watch_timeout={:?} initial_backoff={:?} progress_timeout={:?} max_objects={:?}",
            self.transform.as_ref().map(|(name, _)| *name),
            self.resync,
            lw.page_size,
            lw.watch_timeout,
            lw.initial_backoff,
            lw.progress_timeout,
            lw.max_objects,
        )
    }
}

#[derive(Hash, PartialEq, Eq, Clone, Debug)]
struct InformerKey {
    type_id: TypeId,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
}

/// Why the factory refused to start.
#[derive(Debug, thiserror::Error)]
pub enum FactoryError {
    /// Two callers asked for one informer with different options.
    #[error(
        "two callers asked for the {kind} informer {key} with different options: first {first}, then {second}; make them agree or use different selectors"
    )]
    ConflictingOptions {
        kind: String,
        key: String,
        first: String,
        second: String,
    },
}

/// The sync state of one informer, for readiness and metrics.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InformerSync {
    /// The object kind it mirrors.
    pub kind: String,
    /// Whether its cache holds a complete LIST.
    pub synced: bool,
    /// An optional informer (its CRD may be absent) does not gate readiness.
    pub optional: bool,
    /// How many objects its cache holds now.
    pub objects: usize,
    /// Object versions it could not decode and skipped, so far.
    pub refused: u64,
}

/// What the factory needs of an informer whatever its type.
trait AnyInformer: Send + Sync {
    fn run(&self);
    fn is_running(&self) -> bool;
    fn stop_and_forget(&self);
    fn stop(&self);
    fn has_synced(&self) -> bool;
    fn objects(&self) -> usize;
    fn refused(&self) -> u64;
    fn on_refused(&self, hook: crate::informer::RefusalHook);
    fn kind(&self) -> String;
    fn as_any(&self) -> &dyn Any;
}

struct Erased<K: Resource>(Arc<SharedInformer<K>>);

impl<K> AnyInformer for Erased<K>
where
    K: Object,
{
    fn run(&self) {
        self.0.run();
    }
    fn is_running(&self) -> bool {
        self.0.is_running()
    }
    fn stop_and_forget(&self) {
        self.0.stop();
        self.0.forget_all();
    }
    fn stop(&self) {
        self.0.stop();
    }
    fn has_synced(&self) -> bool {
        self.0.has_synced()
    }
    fn objects(&self) -> usize {
        self.0.store().len()
    }
    fn refused(&self) -> u64 {
        self.0
            .stats()
            .refused
            .load(std::sync::atomic::Ordering::Relaxed)
    }
    fn on_refused(&self, hook: crate::informer::RefusalHook) {
        self.0.on_refused(hook);
    }
    fn kind(&self) -> String {
        K::kind(&()).into_owned()
    }
    fn as_any(&self) -> &dyn Any {
        &self.0
    }
}

/// When an informer runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    /// From `start` on; gates `wait_for_cache_sync`.
    Required,
    /// While the CRD of this name exists and is established.
    OnCrd(String),
    /// The factory's own watch on the CRD of this name (never gates).
    CrdWatch(String),
}

/// One informer the factory handed out.
struct Entry {
    informer: Arc<dyn AnyInformer>,
    /// What a second request must match (see [`InformerOptions`]).
    fingerprint: String,
    role: Role,
}

type Entries = Arc<Mutex<HashMap<InformerKey, Entry>>>;

/// Hands out shared informers and starts them together.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use std::time::Duration;
/// use cache::{InformerOptions, SharedInformerFactory};
/// use k8s_openapi::api::core::v1::{Pod, Secret};
///
/// let factory = SharedInformerFactory::new(client, Some(Duration::from_secs(600)));
/// let pods = factory.informer::<Pod>(InformerOptions::default());
/// let helm = factory.informer::<Secret>(InformerOptions::default().labels("owner=helm"));
/// factory.start().expect("no conflicting informer options");
/// assert!(factory.wait_for_cache_sync(Duration::from_secs(60)).await);
/// let pod_lister = pods.lister();
/// # }
/// ```
///
/// An *optional* informer ([`optional_informer`](Self::optional_informer))
/// mirrors a kind whose CustomResourceDefinition may not exist: it runs only
/// while its CRD exists (one watch on that CRD by name tells; no polling),
/// stops and empties its cache when the CRD goes away, and never holds up
/// [`wait_for_cache_sync`](Self::wait_for_cache_sync).
pub struct SharedInformerFactory {
    client: Client,
    default_resync: Option<Duration>,
    informers: Entries,
    /// Conflicting requests seen so far; `start` refuses while any exist.
    conflicts: Mutex<Vec<FactoryError>>,
    /// The runtime `start` was called on (`None` before): optional
    /// informers are started from a handler's thread, outside it.
    runtime: Arc<Mutex<Option<tokio::runtime::Handle>>>,
    /// Given to every informer, present and future (see
    /// [`Self::on_refused`]).
    on_refused: Mutex<Option<crate::informer::RefusalHook>>,
    /// The [`ListWatchConfig::max_objects`] of every informer created
    /// since [`Self::bound_objects`] whose options set none; `None`
    /// before (unbounded).
    max_objects: Mutex<Option<usize>>,
    /// The [`ListWatchConfig::list_slots`] of every informer created since
    /// [`Self::bound_objects`] whose options set none.
    list_slots: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

mod optional;

impl SharedInformerFactory {
    /// `default_resync`: how often informers re-deliver their cache as updates.
    pub fn new(client: Client, default_resync: Option<Duration>) -> Self {
        SharedInformerFactory {
            client,
            default_resync,
            informers: Arc::default(),
            conflicts: Mutex::new(Vec::new()),
            runtime: Arc::default(),
            on_refused: Mutex::new(None),
            max_objects: Mutex::new(None),
            list_slots: Mutex::new(None),
        }
    }

    /// Bounds every informer this factory creates from now on to `max`
    /// objects (those whose options set no
    /// [`ListWatchConfig::max_objects`]; see there what the bound does).
    /// For the factory of a remote cluster: its API server is the
    /// tenant's (the tenant's kubeconfig names it), and one that answers a
    /// LIST with pages without end, or a watch with additions without end,
    /// must not grow the operator's memory until it dies, taking every
    /// other tenant's work with it (docs/remote-clusters.md). The
    /// operator's own cluster stays unbounded.
    ///
    /// Their LISTs run one at a time, too: a LIST under way holds its pages
    /// in memory until it completes (or is refused), so a lying server
    /// costs one LIST's worth of memory, not one per informer.
    ///
    /// Call it before requesting informers: those already created keep
    /// the bound they were created with.
    pub fn bound_objects(&self, max: usize) {
        let existing = self.informers.lock().len();
        if existing > 0 {
            log::warn!(
                "informers bounded to {max} objects after {existing} were requested: those keep the bound they were created with"
            );
        }
        *self.max_objects.lock() = Some(max);
        *self.list_slots.lock() = Some(Arc::new(tokio::sync::Semaphore::new(1)));
    }

    /// `opts` with the factory's bound ([`Self::bound_objects`]) unless
    /// they set one.
    fn bounded<K>(&self, mut opts: InformerOptions<K>) -> InformerOptions<K> {
        if opts.list_watch.max_objects.is_none() {
            opts.list_watch.max_objects = *self.max_objects.lock();
        }
        if opts.list_watch.list_slots.is_none() {
            opts.list_watch.list_slots = self.list_slots.lock().clone();
        }
        opts
    }

    /// Calls `hook` for each object version any informer of this factory
    /// cannot decode and skips (the manager records a Warning Event on the
    /// object with it).
    pub fn on_refused(&self, hook: crate::informer::RefusalHook) {
        for e in self.informers.lock().values() {
            e.informer.on_refused(hook.clone());
        }
        *self.on_refused.lock() = Some(hook);
    }

    /// The informer for `K` in all namespaces (or of a cluster-scoped type)
    /// with these selectors, created on first request. When the factory is
    /// already started, a new informer starts at once.
    pub fn informer<K>(&self, opts: InformerOptions<K>) -> Arc<SharedInformer<K>>
    where
        K: Object,
    {
        self.get_or_create(None, opts, Role::Required, || Api::all(self.client.clone()))
    }

    /// The informer for `K` in one namespace (needs only namespace-scoped
    /// RBAC), with these selectors.
    pub fn namespaced_informer<K>(
        &self,
        namespace: &str,
        opts: InformerOptions<K>,
    ) -> Arc<SharedInformer<K>>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        self.get_or_create(Some(namespace), opts, Role::Required, || {
            Api::namespaced(self.client.clone(), namespace)
        })
    }

    /// The informer already requested for `K` with `opts`' selectors in
    /// all namespaces, whatever its role: for a controller that can share
    /// a required informer when another controller asked for one, and
    /// asks for an optional one otherwise.
    pub fn existing<K: Object>(&self, opts: &InformerOptions<K>) -> Option<Arc<SharedInformer<K>>> {
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            namespace: None,
            label_selector: opts.label_selector.clone(),
            field_selector: opts.field_selector.clone(),
        };
        self.informers
            .lock()
            .get(&key)?
            .informer
            .as_any()
            .downcast_ref::<Arc<SharedInformer<K>>>()
            .cloned()
    }

    fn get_or_create<K>(
        &self,
        namespace: Option<&str>,
        opts: InformerOptions<K>,
        role: Role,
        api: impl FnOnce() -> Api<K>,
    ) -> Arc<SharedInformer<K>>
    where
        K: Object,
    {
        let opts = self.bounded(opts);
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            namespace: namespace.map(str::to_string),
            label_selector: opts.label_selector.clone(),
            field_selector: opts.field_selector.clone(),
        };
        let fingerprint = format!("{} role={role:?}", opts.fingerprint());
        let mut informers = self.informers.lock();
        if let Some(entry) = informers.get(&key) {
            if entry.fingerprint != fingerprint {
                self.conflicts
                    .lock()
                    .push(FactoryError::ConflictingOptions {
                        kind: K::kind(&()).into_owned(),
                        key: format!(
                            "(namespace {:?}, labels {:?}, fields {:?})",
                            key.namespace, key.label_selector, key.field_selector
                        ),
                        first: entry.fingerprint.clone(),
                        second: fingerprint.clone(),
                    });
            }
            if let Some(informer) = entry
                .informer
                .as_any()
                .downcast_ref::<Arc<SharedInformer<K>>>()
            {
                return informer.clone();
            }
        }
        let config = ListWatchConfig {
            namespace: key.namespace.clone(),
            label_selector: opts.label_selector,
            field_selector: opts.field_selector,
            ..opts.list_watch
        };
        let informer = Arc::new(SharedInformer::new(
            api(),
            config,
            opts.transform.map(|(_, t)| t),
            opts.resync.or(self.default_resync),
        ));
        if let Some(hook) = self.on_refused.lock().clone() {
            informer.on_refused(hook);
        }
        if !matches!(role, Role::OnCrd(_)) && self.runtime.lock().is_some() {
            informer.run();
        }
        informers.insert(
            key,
            Entry {
                informer: Arc::new(Erased(informer.clone())),
                fingerprint,
                role,
            },
        );
        informer
    }

    /// Starts every required informer requested so far (and later ones as
    /// they are requested), and the watches that start optional ones. Must
    /// be called within a Tokio runtime. Idempotent. Fails, starting
    /// nothing, when two callers asked for one informer with different
    /// options.
    pub fn start(&self) -> Result<(), FactoryError> {
        if let Some(conflict) = self.conflicts.lock().drain(..).next() {
            return Err(conflict);
        }
        *self.runtime.lock() = Some(tokio::runtime::Handle::current());
        for e in self.informers.lock().values() {
            if !matches!(e.role, Role::OnCrd(_)) {
                e.informer.run();
            }
        }
        Ok(())
    }

    /// Waits until every required informer has synced; `false` on timeout,
    /// naming the ones that have not in a log line.
    pub async fn wait_for_cache_sync(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let pending: Vec<String> = self
                .synced()
                .into_iter()
                .filter(|i| !i.synced && !i.optional)
                .map(|i| i.kind)
                .collect();
            if pending.is_empty() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                log::warn!(
                    "caches not synced after {timeout:?}: {}",
                    pending.join(", ")
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The sync state and size of every informer, sorted by kind.
    pub fn synced(&self) -> Vec<InformerSync> {
        let mut v: Vec<InformerSync> = self
            .informers
            .lock()
            .values()
            .map(|e| InformerSync {
                kind: e.informer.kind(),
                synced: e.informer.has_synced(),
                optional: e.role != Role::Required,
                objects: e.informer.objects(),
                refused: e.informer.refused(),
            })
            .collect();
        v.sort();
        v
    }

    /// Whether every required informer has synced.
    pub fn required_synced(&self) -> bool {
        self.synced().iter().all(|i| i.synced || i.optional)
    }

    /// Stops every informer.
    pub fn shutdown(&self) {
        for e in self.informers.lock().values() {
            e.informer.stop();
        }
    }

    /// How many distinct informers (LIST+WATCH streams) exist, counting the
    /// factory's own CRD watches.
    pub fn len(&self) -> usize {
        self.informers.lock().len()
    }

    /// Whether no informer was requested yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for SharedInformerFactory {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// A client of a server never reached: no informer here is started.
    fn client() -> Client {
        Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap()
    }

    fn bounded_to(max_objects: Option<usize>) -> InformerOptions<ConfigMap> {
        InformerOptions {
            list_watch: ListWatchConfig {
                max_objects,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn conflicts(factory: &SharedInformerFactory) -> usize {
        factory.conflicts.lock().len()
    }

    #[tokio::test]
    async fn a_bounded_factory_bounds_the_informers_it_creates_unless_their_options_say() {
        let unbounded = SharedInformerFactory::new(client(), None);
        unbounded.informer::<ConfigMap>(InformerOptions::default());
        unbounded.informer::<ConfigMap>(bounded_to(None));
        assert_eq!(conflicts(&unbounded), 0, "no bound unless asked for");
        unbounded.informer::<ConfigMap>(bounded_to(Some(20)));
        assert_eq!(conflicts(&unbounded), 1, "the bound is one of the options");

        let bounded = SharedInformerFactory::new(client(), None);
        bounded.bound_objects(20);
        bounded.informer::<ConfigMap>(InformerOptions::default());
        bounded.informer::<ConfigMap>(bounded_to(Some(20)));
        assert_eq!(conflicts(&bounded), 0, "the factory's bound was applied");
        bounded.informer::<ConfigMap>(bounded_to(Some(30)));
        assert_eq!(conflicts(&bounded), 1);

        // Options that set a bound keep it: a request without one (the
        // factory's 20) then differs.
        bounded.informer::<ConfigMap>(bounded_to(Some(30)).labels("a=b"));
        bounded.informer::<ConfigMap>(bounded_to(Some(30)).labels("a=b"));
        assert_eq!(conflicts(&bounded), 1);
        bounded.informer::<ConfigMap>(InformerOptions::default().labels("a=b"));
        assert_eq!(conflicts(&bounded), 2);
    }
}
