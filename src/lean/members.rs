//! Which release an object belongs to: the index both jobs read the
//! members of a release through, registered once per informer whoever
//! asks first.

use std::sync::Arc;

use cache::{IndexFn, Object, SharedInformer, SharedInformerFactory};
use kube::Resource;

use crate::lean::objects::{INSTANCE_LABEL, Labelled, label, managed_by_helm_options};

/// Index of a release's objects by `namespace/<instance label>`.
pub const MEMBER_INDEX: &str = "release";

/// The [`MEMBER_INDEX`] function: an object belongs to the release named
/// by its `app.kubernetes.io/instance` label, in its own namespace.
pub fn member_index<K: Resource + Labelled>() -> IndexFn<K> {
    Arc::new(|obj: &K| {
        let meta = obj.lean_meta();
        let instance = label(meta, INSTANCE_LABEL);
        match (&meta.namespace, instance.is_empty()) {
            (Some(ns), false) => vec![format!("{ns}/{instance}")],
            _ => Vec::new(),
        }
    })
}

/// The shared informer of `K` objects managed by Helm, its store indexed
/// by [`MEMBER_INDEX`] (added once, by whichever job asks first).
pub fn member_informer<K: Object + Labelled>(
    factory: &SharedInformerFactory,
) -> Arc<SharedInformer<K>> {
    let informer = factory.informer::<K>(managed_by_helm_options());
    indexed(&informer);
    informer
}

/// Adds [`MEMBER_INDEX`] to `informer`'s store unless it has it.
pub fn indexed<K: Object + Labelled>(informer: &SharedInformer<K>) {
    informer.store().ensure_index(MEMBER_INDEX, member_index());
}
