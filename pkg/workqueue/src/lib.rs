//! A port of client-go's `util/workqueue`: the queue between informer event
//! handlers and a controller's workers.
//!
//! - [`Queue`]: an item added twice while waiting is queued once; an item
//!   added while a worker processes it is handed out again after
//!   [`Queue::done`], never to two workers at once; [`Queue::add_after`]
//!   delays an item (client-go's *delaying queue* is this same type, see
//!   [`DelayingQueue`]). Strictly first-in first-out, one lock over the
//!   line and the dirty and processing sets, as client-go's.
//! - [`RateLimitingQueue`]: [`Queue`] plus a [`RateLimiter`] deciding how long
//!   a failed item waits before its retry.
//! - [`metrics`]: client-go's `workqueue_*` metrics in Prometheus text format.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use workqueue::{RateLimitingQueue, default_controller_rate_limiter};
//!
//! let queue = RateLimitingQueue::new(default_controller_rate_limiter());
//! queue.add("default/web".to_string());
//! queue.add("default/web".to_string()); // deduplicated
//! assert_eq!(queue.len(), 1);
//!
//! let key = queue.get().await.expect("not shut down");
//! // ... reconcile `key`; on failure: queue.add_rate_limited(key.clone())
//! queue.forget(&key); // success: reset its backoff
//! queue.done(&key);
//! # }
//! ```

mod delays;
mod fast_map;
pub mod metrics;
mod queue;
mod rate_limiter;
mod rate_limiting_queue;

pub use queue::{DelayingQueue, Queue};
pub use rate_limiter::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, controller_rate_limiter, default_controller_rate_limiter,
};
pub use rate_limiting_queue::RateLimitingQueue;
