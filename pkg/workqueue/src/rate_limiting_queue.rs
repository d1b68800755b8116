//! [`Queue`] with per-item retry backoff.

use std::hash::Hash;
use std::ops::Deref;

use crate::metrics::Registry;
use crate::{Queue, RateLimiter};

/// A [`Queue`] (all of whose methods it offers through `Deref`) plus a
/// [`RateLimiter`]: a failed item is re-added with
/// [`add_rate_limited`](Self::add_rate_limited) after the limiter's delay, and
/// [`forget`](Self::forget) resets its backoff once it succeeds.
pub struct RateLimitingQueue<T> {
    queue: Queue<T>,
    limiter: Box<dyn RateLimiter<T>>,
}

impl<T: Eq + Hash + Clone> RateLimitingQueue<T> {
    pub fn new(limiter: Box<dyn RateLimiter<T>>) -> Self {
        RateLimitingQueue {
            queue: Queue::new(),
            limiter,
        }
    }

    /// A queue whose `workqueue_*` metrics are labelled `name="<name>"`.
    pub fn with_metrics(limiter: Box<dyn RateLimiter<T>>, name: &str, registry: &Registry) -> Self
    where
        T: Send + 'static,
    {
        RateLimitingQueue {
            queue: Queue::with_metrics(name, registry),
            limiter,
        }
    }

    /// Re-adds `item` after the delay the rate limiter gives it (counted in
    /// `workqueue_retries_total`).
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.limiter.when(&item);
        if let Some(m) = self.queue.metrics() {
            m.retried();
        }
        self.queue.add_after(item, delay);
    }

    /// Resets `item`'s backoff; call when it was processed successfully.
    /// It does not remove the item from the queue.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` was re-added since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

impl<T> Deref for RateLimitingQueue<T> {
    type Target = Queue<T>;

    fn deref(&self) -> &Queue<T> {
        &self.queue
    }
}
