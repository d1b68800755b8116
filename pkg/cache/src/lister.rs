//! Read-only views of a [`Store`], as controllers use them.

use std::sync::Arc;

use kube::Resource;

use crate::{NAMESPACE_INDEX, Selector, Store};

/// Lists and gets objects from an informer's cache; never calls the API.
pub struct Lister<K> {
    store: Store<K>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Lister {
            store: self.store.clone(),
        }
    }
}

impl<K: Resource + 'static> Lister<K> {
    pub fn new(store: Store<K>) -> Self {
        Lister { store }
    }

    /// Every cached object whose labels match `selector`, in all namespaces.
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        let mut all = self.store.list();
        all.retain(|o| selector.matches(o.meta().labels.as_ref()));
        all
    }

    /// A cluster-scoped object by name.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(name)
    }

    /// The objects of one namespace.
    pub fn namespaced(&self, namespace: &str) -> NamespaceLister<K> {
        NamespaceLister {
            store: self.store.clone(),
            namespace: namespace.to_string(),
        }
    }
}

/// A [`Lister`] restricted to one namespace.
pub struct NamespaceLister<K> {
    store: Store<K>,
    namespace: String,
}

impl<K: Resource + 'static> NamespaceLister<K> {
    /// Cached objects of this namespace whose labels match `selector`.
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        let mut objs = self.store.by_index(NAMESPACE_INDEX, &self.namespace);
        objs.retain(|o| selector.matches(o.meta().labels.as_ref()));
        objs
    }

    /// The object `name` of this namespace.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(&format!("{}/{name}", self.namespace))
    }
}
