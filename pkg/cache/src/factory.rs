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
use crate::{SharedInformer, Transform};

/// Which objects an informer mirrors and how.
pub struct InformerOptions<K> {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Applied before storing; the first caller's transform is the one used
    /// by a shared informer.
    pub transform: Option<Transform<K>>,
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

    pub fn transform(mut self, f: impl Fn(K) -> K + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(f));
        self
    }
}

#[derive(Hash, PartialEq, Eq, Clone, Debug)]
struct InformerKey {
    type_id: TypeId,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
}

/// What the factory needs of an informer whatever its type.
trait AnyInformer: Send + Sync {
    fn run(&self);
    fn stop(&self);
    fn has_synced(&self) -> bool;
    fn kind(&self) -> String;
    fn as_any(&self) -> &dyn Any;
}

struct Erased<K: Resource>(Arc<SharedInformer<K>>);

impl<K> AnyInformer for Erased<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn run(&self) {
        self.0.run();
    }
    fn stop(&self) {
        self.0.stop();
    }
    fn has_synced(&self) -> bool {
        self.0.has_synced()
    }
    fn kind(&self) -> String {
        K::kind(&()).into_owned()
    }
    fn as_any(&self) -> &dyn Any {
        &self.0
    }
}

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
/// factory.start();
/// assert!(factory.wait_for_cache_sync(Duration::from_secs(60)).await);
/// let pod_lister = pods.lister();
/// # }
/// ```
pub struct SharedInformerFactory {
    client: Client,
    default_resync: Option<Duration>,
    informers: Mutex<HashMap<InformerKey, Box<dyn AnyInformer>>>,
    started: Mutex<bool>,
}

impl SharedInformerFactory {
    /// `default_resync`: how often informers re-deliver their cache as updates.
    pub fn new(client: Client, default_resync: Option<Duration>) -> Self {
        SharedInformerFactory {
            client,
            default_resync,
            informers: Mutex::new(HashMap::new()),
            started: Mutex::new(false),
        }
    }

    /// The informer for `K` in all namespaces (or of a cluster-scoped type)
    /// with these selectors, created on first request. When the factory is
    /// already started, a new informer starts at once.
    pub fn informer<K>(&self, opts: InformerOptions<K>) -> Arc<SharedInformer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.get_or_create(None, opts, || Api::all(self.client.clone()))
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
        self.get_or_create(Some(namespace), opts, || {
            Api::namespaced(self.client.clone(), namespace)
        })
    }

    fn get_or_create<K>(
        &self,
        namespace: Option<&str>,
        opts: InformerOptions<K>,
        api: impl FnOnce() -> Api<K>,
    ) -> Arc<SharedInformer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            namespace: namespace.map(str::to_string),
            label_selector: opts.label_selector.clone(),
            field_selector: opts.field_selector.clone(),
        };
        let mut informers = self.informers.lock();
        let existing = informers
            .get(&key)
            .and_then(|i| i.as_any().downcast_ref::<Arc<SharedInformer<K>>>());
        if let Some(informer) = existing {
            return informer.clone();
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
            opts.transform,
            opts.resync.or(self.default_resync),
        ));
        if *self.started.lock() {
            informer.run();
        }
        informers.insert(key, Box::new(Erased(informer.clone())));
        informer
    }

    /// Starts every informer requested so far (and later ones as they are
    /// requested). Must be called within a Tokio runtime. Idempotent.
    pub fn start(&self) {
        *self.started.lock() = true;
        for i in self.informers.lock().values() {
            i.run();
        }
    }

    /// Waits until every informer has synced; `false` on timeout, naming
    /// the ones that have not in a log line.
    pub async fn wait_for_cache_sync(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let pending: Vec<String> = self
                .informers
                .lock()
                .values()
                .filter(|i| !i.has_synced())
                .map(|i| i.kind())
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

    /// `(kind, has_synced)` of every informer, sorted by kind.
    pub fn synced(&self) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = self
            .informers
            .lock()
            .values()
            .map(|i| (i.kind(), i.has_synced()))
            .collect();
        v.sort();
        v
    }

    /// Stops every informer.
    pub fn shutdown(&self) {
        for i in self.informers.lock().values() {
            i.stop();
        }
    }

    /// How many distinct informers (LIST+WATCH streams) exist.
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
