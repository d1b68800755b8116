//! A port of client-go's `tools/cache`, generic over any `kube::Resource`
//! (built-in types and our CRD alike — no code generation).
//!
//! - [`Store`]: the thread-safe, indexed cache of `Arc<K>`.
//! - [`reflector`]: LIST then WATCH into a store, resuming, relisting on
//!   410 Gone, backing off on errors.
//! - [`SharedInformer`]: a reflector + store + any number of event handlers,
//!   each buffered on its own, with periodic resync.
//! - [`SharedInformerFactory`]: one informer per (type, namespace, selectors).
//! - [`Lister`]: read access for controllers, by namespace and label selector.

mod backoff;
mod decoded;
mod factory;
mod informer;
mod lister;
pub mod reflector;
mod selector;
mod store;

pub use decoded::{Refusal, decode_object};
pub use factory::{FactoryError, InformerOptions, InformerSync, SharedInformerFactory};
pub use informer::{
    Event, EventHandler, HandlerFn, LAST_APPLIED, Mirrored, Object, RefusalHook, SharedInformer,
    Transform, strip_bookkeeping,
};
pub use lister::{Lister, NamespaceLister};
pub use reflector::{ListWatchConfig, ReflectorStats, WatchRequest};
pub use selector::{Selector, SelectorError};
pub use store::{IndexFn, NAMESPACE_INDEX, Store, object_key};
