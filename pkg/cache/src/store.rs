//! The thread-safe object cache an informer fills: client-go's
//! `ThreadSafeStore` + `Indexer`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::Resource;
use parking_lot::RwLock;

/// Computes the index values of an object (e.g. its namespace, or a label).
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// The name of the built-in index by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// The cache key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn object_key<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// A thread-safe map from [`object_key`] to `Arc<K>`, with indices.
///
/// Cloning a `Store` gives another handle to the same cache. Objects are
/// shared as `Arc<K>`: readers never copy them and must not expect them to
/// change (an update stores a new `Arc`).
///
/// Every store has the [`NAMESPACE_INDEX`]; more index functions can be added
/// with [`add_index`](Self::add_index) at any time (existing objects are indexed).
///
/// ```
/// use std::sync::Arc;
/// use cache::Store;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::api::ObjectMeta;
///
/// let store: Store<Pod> = Store::new();
/// let pod = |ns: &str, name: &str| Pod {
///     metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
///     ..Default::default()
/// };
/// store.upsert(Arc::new(pod("a", "web")));
/// store.upsert(Arc::new(pod("b", "db")));
/// assert!(store.get("a/web").is_some());
/// assert_eq!(store.by_index(cache::NAMESPACE_INDEX, "b").len(), 1);
/// ```
pub struct Store<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<K> {
    items: HashMap<String, Arc<K>>,
    index_fns: HashMap<String, IndexFn<K>>,
    /// index name → index value → keys. Invariant: for every index and every
    /// stored object, the object's key is under exactly the values its index
    /// function returns for the stored version; empty sets are removed.
    indices: HashMap<String, HashMap<String, HashSet<String>>>,
}

impl<K: Resource + 'static> Default for Store<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Resource + 'static> Store<K> {
    /// An empty store with the namespace index.
    pub fn new() -> Self {
        let store = Store {
            inner: Arc::new(RwLock::new(Inner {
                items: HashMap::new(),
                index_fns: HashMap::new(),
                indices: HashMap::new(),
            })),
        };
        store.add_index(
            NAMESPACE_INDEX,
            Arc::new(|obj: &K| obj.meta().namespace.iter().cloned().collect()),
        );
        store
    }

    /// Adds (or replaces) an index and indexes every stored object with it.
    pub fn add_index(&self, name: &str, f: IndexFn<K>) {
        let mut inner = self.inner.write();
        let mut index: HashMap<String, HashSet<String>> = HashMap::new();
        for (key, obj) in &inner.items {
            for value in f(obj) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        inner.indices.insert(name.to_string(), index);
        inner.index_fns.insert(name.to_string(), f);
    }

    /// [`Store::add_index`] unless an index called `name` exists: for an
    /// index several controllers need on one shared informer, computed
    /// once whoever asks first.
    pub fn ensure_index(&self, name: &str, f: IndexFn<K>) {
        if !self.inner.read().index_fns.contains_key(name) {
            self.add_index(name, f);
        }
    }

    /// Stores `obj` under its key; returns the version it replaced.
    pub fn upsert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = object_key(obj.as_ref());
        let mut inner = self.inner.write();
        let old = inner.items.insert(key.clone(), obj.clone());
        inner.reindex(&key, old.as_deref(), Some(&obj));
        old
    }

    /// Removes the object stored under `key`; returns it.
    pub fn remove(&self, key: &str) -> Option<Arc<K>> {
        let mut inner = self.inner.write();
        let old = inner.items.remove(key);
        if let Some(old) = &old {
            inner.reindex(key, Some(old), None);
        }
        old
    }

    /// Replaces the whole content with `objs` (a relist). Returns, for each
    /// object, what it replaced (`None` for a new one), and the objects that
    /// are gone, with their last known state.
    #[allow(clippy::type_complexity)]
    pub fn replace(&self, objs: Vec<Arc<K>>) -> (Vec<(Option<Arc<K>>, Arc<K>)>, Vec<Arc<K>>) {
        let mut inner = self.inner.write();
        let mut old_items = std::mem::take(&mut inner.items);
        for index in inner.indices.values_mut() {
            index.clear();
        }
        let mut changes = Vec::with_capacity(objs.len());
        for obj in objs {
            let key = object_key(obj.as_ref());
            let old = old_items.remove(&key);
            inner.reindex(&key, None, Some(&obj));
            inner.items.insert(key, obj.clone());
            changes.push((old, obj));
        }
        (changes, old_items.into_values().collect())
    }

    /// The object stored under `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().items.get(key).cloned()
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().items.values().cloned().collect()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<String> {
        self.inner.read().items.keys().cloned().collect()
    }

    /// The number of stored objects.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects whose index `index` contains `value`; empty for an unknown index.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let inner = self.inner.read();
        let Some(keys) = inner.indices.get(index).and_then(|i| i.get(value)) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|k| inner.items.get(k).cloned())
            .collect()
    }

    /// The values present in index `index` (e.g. every namespace with objects).
    pub fn index_values(&self, index: &str) -> Vec<String> {
        self.inner
            .read()
            .indices
            .get(index)
            .map(|i| i.keys().cloned().collect())
            .unwrap_or_default()
    }
}

impl<K> Inner<K> {
    /// Moves `key` from the index values of `old` to those of `new`.
    fn reindex(&mut self, key: &str, old: Option<&K>, new: Option<&K>) {
        for (name, f) in &self.index_fns {
            let Some(index) = self.indices.get_mut(name) else {
                continue;
            };
            let old_values = old.map(|o| f(o)).unwrap_or_default();
            let new_values = new.map(|n| f(n)).unwrap_or_default();
            for v in old_values.iter().filter(|v| !new_values.contains(v)) {
                if let Some(keys) = index.get_mut(v) {
                    keys.remove(key);
                    if keys.is_empty() {
                        index.remove(v);
                    }
                }
            }
            for v in new_values {
                index.entry(v).or_default().insert(key.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn pod(ns: &str, name: &str, app: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn names(mut pods: Vec<Arc<Pod>>) -> Vec<String> {
        pods.sort_by_key(|p| object_key(p.as_ref()));
        pods.iter().map(|p| object_key(p.as_ref())).collect()
    }

    fn by_app() -> IndexFn<Pod> {
        Arc::new(|p: &Pod| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app").cloned())
                .into_iter()
                .collect()
        })
    }

    #[test]
    fn keys_are_namespace_slash_name() {
        assert_eq!(object_key(pod("ns", "p", "x").as_ref()), "ns/p");
        let cluster_scoped = k8s_openapi::api::core::v1::Namespace {
            metadata: ObjectMeta {
                name: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(object_key(&cluster_scoped), "ns");
    }

    #[test]
    fn upsert_get_remove() {
        let s = Store::new();
        assert!(s.upsert(pod("a", "p", "x")).is_none());
        let old = s.upsert(pod("a", "p", "y")).expect("replaced");
        assert_eq!(old.metadata.labels.as_ref().unwrap()["app"], "x");
        assert_eq!(s.len(), 1);
        assert_eq!(
            s.get("a/p").unwrap().metadata.labels.as_ref().unwrap()["app"],
            "y"
        );
        assert!(s.remove("a/p").is_some());
        assert!(s.remove("a/p").is_none());
        assert!(s.is_empty());
    }

    #[test]
    fn indices_follow_updates_and_removals() {
        let s = Store::new();
        s.add_index("app", by_app());
        s.upsert(pod("a", "p1", "web"));
        s.upsert(pod("b", "p2", "web"));
        s.upsert(pod("b", "p3", "db"));
        assert_eq!(names(s.by_index("app", "web")), ["a/p1", "b/p2"]);
        assert_eq!(names(s.by_index(NAMESPACE_INDEX, "b")), ["b/p2", "b/p3"]);
        s.upsert(pod("b", "p2", "db"));
        assert_eq!(names(s.by_index("app", "web")), ["a/p1"]);
        assert_eq!(names(s.by_index("app", "db")), ["b/p2", "b/p3"]);
        s.remove("a/p1");
        assert!(s.by_index("app", "web").is_empty());
        let mut values = s.index_values("app");
        values.sort();
        assert_eq!(values, ["db"], "empty index values are dropped");
        assert!(s.by_index("no-such-index", "x").is_empty());
    }

    #[test]
    fn an_index_added_late_covers_existing_objects() {
        let s = Store::new();
        s.upsert(pod("a", "p1", "web"));
        s.add_index("app", by_app());
        assert_eq!(names(s.by_index("app", "web")), ["a/p1"]);
    }

    #[test]
    fn replace_reports_changes_and_what_vanished() {
        let s = Store::new();
        s.add_index("app", by_app());
        s.upsert(pod("a", "stays", "web"));
        s.upsert(pod("a", "goes", "web"));
        let (changes, gone) = s.replace(vec![pod("a", "stays", "db"), pod("a", "new", "web")]);
        let mut summary: Vec<(String, bool)> = changes
            .iter()
            .map(|(old, new)| (object_key(new.as_ref()), old.is_some()))
            .collect();
        summary.sort();
        assert_eq!(
            summary,
            [("a/new".to_string(), false), ("a/stays".to_string(), true)]
        );
        assert_eq!(names(gone), ["a/goes"]);
        assert_eq!(names(s.by_index("app", "web")), ["a/new"]);
        assert_eq!(names(s.by_index("app", "db")), ["a/stays"]);
        assert_eq!(s.len(), 2);
    }
}
