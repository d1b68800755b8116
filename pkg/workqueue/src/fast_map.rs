//! The map every part of the queue keys by item.

/// Keys are hashed on every operation: a fast hasher (the keys are ours).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
