//! Slots for chart fetches: so many at once in all, and at most
//! [`PER_NAMESPACE`] for one namespace — a tenant whose repository drips
//! bytes slowly holds its own slots, never the helm slots nor another
//! tenant's.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Fetches one namespace may run at once.
pub const PER_NAMESPACE: usize = 2;

/// The fetch slots (see the module docs).
#[derive(Debug)]
pub struct FetchPool {
    all: Arc<Semaphore>,
    /// One semaphore per namespace with a fetch waiting or running; a
    /// namespace's entry is dropped when no one holds it (the map does not
    /// grow with every namespace ever seen).
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Held while a fetch runs; frees both slots when dropped.
#[derive(Debug)]
pub struct FetchSlot {
    _namespace: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

impl FetchPool {
    /// A pool of `max` fetches at once (at least one).
    pub fn new(max: usize) -> Self {
        FetchPool {
            all: Arc::new(Semaphore::new(max.max(1))),
            namespaces: Mutex::default(),
        }
    }

    /// Waits for a slot of `namespace` first, then one of the pool: a
    /// namespace already at its cap waits without taking a pool slot.
    pub async fn slot(&self, namespace: &str) -> FetchSlot {
        let ns = {
            let mut map = self.namespaces.lock();
            // Forget namespaces no one is using any more.
            map.retain(|_, s| Arc::strong_count(s) > 1);
            map.entry(namespace.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(PER_NAMESPACE)))
                .clone()
        };
        // The semaphores are never closed: acquiring cannot fail.
        let Ok(namespace) = ns.acquire_owned().await else {
            unreachable!("fetch semaphores are never closed")
        };
        let Ok(all) = self.all.clone().acquire_owned().await else {
            unreachable!("fetch semaphores are never closed")
        };
        FetchSlot {
            _namespace: namespace,
            _all: all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_namespace_takes_at_most_two_slots_and_others_still_get_theirs() {
        let pool = Arc::new(FetchPool::new(4));
        let a1 = pool.slot("a").await;
        let _a2 = pool.slot("a").await;
        let third = tokio::spawn({
            let pool = pool.clone();
            async move { pool.slot("a").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!third.is_finished(), "a third fetch of `a` waits");
        // Another namespace is served at once, while `a` waits.
        let _b = tokio::time::timeout(Duration::from_secs(1), pool.slot("b"))
            .await
            .expect("b gets a slot");
        drop(a1);
        tokio::time::timeout(Duration::from_secs(1), third)
            .await
            .expect("a's third fetch runs once one of its slots is free")
            .unwrap();
    }

    #[tokio::test]
    async fn the_pool_bounds_all_namespaces_together() {
        let pool = Arc::new(FetchPool::new(2));
        let _a = pool.slot("a").await;
        let _b = pool.slot("b").await;
        let c = tokio::spawn({
            let pool = pool.clone();
            async move { pool.slot("c").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!c.is_finished());
        drop(_a);
        tokio::time::timeout(Duration::from_secs(1), c)
            .await
            .unwrap()
            .unwrap();
        assert!(pool.namespaces.lock().len() <= 3);
    }
}
