//! A controller in the shape of `k8s.io/sample-controller`, generic over its
//! business logic: a [`Reconciler`] says what one key means; the
//! [`Controller`] owns the named rate-limiting queue, the workers, the
//! safety resync, retries through the rate limiter and the drain on
//! shutdown.
//!
//! ```text
//!  informer handlers ──add(key)──► queue ──get──► worker ──reconcile(key)──► Ok(Action)
//!                                    ▲                                        │  done:      forget
//!                                    │                                        │  requeue:   forget + add_after
//!                                    └─────────── add_rate_limited ◄── Err ───┘
//! ```
//!
//! A controller is built against a [`Manager`](crate::Manager) (for its
//! queue's metrics and the shared informers), its handlers enqueue into
//! [`Controller::queue`], and `manager.add(controller)` runs it:
//!
//! ```no_run
//! # use std::time::Duration;
//! # use runtime::{Action, Controller, Manager, Reconciler};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! struct Mirror;
//! impl Reconciler for Mirror {
//!     type Error = kube::Error;
//!     async fn reconcile(&self, key: &str) -> Result<Action, kube::Error> {
//!         Ok(Action::done(format!("looked at {key}")))
//!     }
//! }
//! # fn wire(manager: &mut Manager) {
//! let configmaps = manager.factory().informer::<ConfigMap>(Default::default());
//! let controller = Controller::new(manager, "mirror", Mirror).resync_all_of(&configmaps);
//! configmaps.add_event_handler(controller.enqueue_handler());
//! manager.add(controller);
//! # }
//! ```

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use cache::{Event, HandlerFn, Object, SharedInformer, object_key};
use futures::future::BoxFuture;
use kube::Resource;
use workqueue::{RateLimitingQueue, controller_rate_limiter, default_controller_rate_limiter};

use crate::metrics::Metrics;

/// What one reconcile concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Run again after this long, even if nothing changes.
    pub requeue_after: Option<Duration>,
    /// One line for the log ("3 apps, 1 posted").
    pub summary: String,
}

impl Action {
    /// Nothing more to do until something changes.
    pub fn done(summary: impl Into<String>) -> Self {
        Action {
            requeue_after: None,
            summary: summary.into(),
        }
    }

    /// Look again after `after` (a poll of something that sends no events).
    pub fn requeue_after(after: Duration, summary: impl Into<String>) -> Self {
        Action {
            requeue_after: Some(after),
            summary: summary.into(),
        }
    }
}

/// The business logic of a controller: bring the world in line with the
/// object named by `key` (`namespace/name`, or `name` when cluster-scoped).
///
/// Called for one key by at most one worker at a time. An `Err` is retried
/// with the queue's per-item exponential backoff; it must never panic.
pub trait Reconciler: Send + Sync + 'static {
    /// Why a reconcile failed (logged, then retried).
    type Error: Display + Send;

    /// Reconciles one key.
    fn reconcile(&self, key: &str) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Whether [`Reconciler::drained`] writes something: then a fifth of
    /// the drain timeout (at most 5 s) is kept for it, and the workers
    /// drain for the rest.
    const LAST_WRITES: bool = false;

    /// Called on a clean shutdown once the workers are gone (the queue
    /// drained, or their share of the drain timeout passed and they were
    /// aborted), within what is left of the drain timeout: what the
    /// reconciler keeps in memory for a later write is written now. Never
    /// called when the leader lease is lost (another leader may be
    /// writing). Default: nothing.
    fn drained(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Counters a test (or a benchmark) can watch to know that a reconcile which
/// began after some moment has finished.
#[derive(Debug, Default)]
pub struct ControllerStats {
    started: AtomicU64,
    finished: AtomicU64,
}

impl ControllerStats {
    /// Reconciles begun so far.
    pub fn started(&self) -> u64 {
        self.started.load(Relaxed)
    }

    /// Reconciles finished so far (with any outcome).
    pub fn finished(&self) -> u64 {
        self.finished.load(Relaxed)
    }

    /// Waits until a reconcile that began after `mark` (a [`started`](Self::started)
    /// reading) has finished — one that saw everything that happened before
    /// the mark was taken. `false` on timeout.
    ///
    /// (At most `mark` reconciles began before the mark; so once more than
    /// `mark` have finished, one of them began after it.)
    pub async fn wait_for_reconcile_since(&self, mark: u64, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            while self.finished() <= mark {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok()
    }

    /// [`wait_for_reconcile_since`](Self::wait_for_reconcile_since) now: for
    /// a controller that reconciles without a new event (a resync).
    pub async fn wait_for_a_fresh_reconcile(&self, timeout: Duration) -> bool {
        self.wait_for_reconcile_since(self.started(), timeout).await
    }
}

type Keys = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// See the module docs.
pub struct Controller<R: Reconciler> {
    name: String,
    reconciler: Arc<R>,
    queue: Arc<RateLimitingQueue<String>>,
    workers: usize,
    /// Every key of the primary kind: enqueued at start and every `resync`.
    keys: Option<(Keys, Duration)>,
    stats: Arc<ControllerStats>,
    metrics: Arc<Metrics>,
    /// The manager's [`crate::ManagerOptions::after_each_item`].
    after_each_item: Option<fn()>,
}

/// The default safety resync: a reconcile of every object this often, not
/// the mechanism (events are), but the net under it.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(600);

/// What a controller takes from the manager that runs it: the metrics its
/// queue reports to and the hook run after each item.
/// [`Manager`](crate::Manager) is one; a trait, so that the controller does
/// not depend on the manager that depends on it.
pub trait ControllerHost {
    /// The registry its queue's metrics go to.
    fn metrics_handle(&self) -> Arc<Metrics>;
    /// Run after each item a worker finishes (`None`: nothing).
    fn after_each_item(&self) -> Option<fn()>;
}

impl<R: Reconciler> Controller<R> {
    /// A controller named `name` (its queue's `name` label and its log
    /// prefix) with 2 workers and no resync.
    pub fn new(manager: &impl ControllerHost, name: &str, reconciler: R) -> Self {
        let metrics = manager.metrics_handle();
        Controller {
            name: name.to_string(),
            reconciler: Arc::new(reconciler),
            queue: Arc::new(RateLimitingQueue::with_metrics(
                default_controller_rate_limiter(),
                name,
                &metrics.queues,
            )),
            workers: 2,
            keys: None,
            stats: Arc::default(),
            metrics,
            after_each_item: manager.after_each_item(),
        }
    }

    /// A controller as [`new`](Self::new) makes, around `queue` — made first
    /// with [`new_queue`](Self::new_queue), so that what the reconciler holds
    /// (a background fetch, a probe) can enqueue into it from the start.
    pub fn with_queue(
        manager: &impl ControllerHost,
        name: &str,
        reconciler: R,
        queue: Arc<RateLimitingQueue<String>>,
    ) -> Self {
        Controller {
            queue,
            ..Self::new(manager, name, reconciler)
        }
    }

    /// The queue of the controller `name`, with per-key retry backoff
    /// capped at `max_backoff`, for [`with_queue`](Self::with_queue).
    pub fn new_queue(
        manager: &impl ControllerHost,
        name: &str,
        max_backoff: Duration,
    ) -> Arc<RateLimitingQueue<String>> {
        Arc::new(RateLimitingQueue::with_metrics(
            controller_rate_limiter(max_backoff),
            name,
            &manager.metrics_handle().queues,
        ))
    }

    /// Caps the per-key retry backoff (5 ms doubling; client-go's default cap
    /// is 1000 s). Call before handing [`queue`](Self::queue) to handlers:
    /// it replaces the queue.
    pub fn max_backoff(mut self, max: Duration) -> Self {
        self.queue = Arc::new(RateLimitingQueue::with_metrics(
            controller_rate_limiter(max),
            &self.name,
            &self.metrics.queues,
        ));
        self
    }

    /// Concurrent reconciles (of different keys).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Enqueues every object of `primary` at start, and again every
    /// `period` (use [`DEFAULT_RESYNC`] unless configured).
    pub fn resync_all_of<K>(self, primary: &SharedInformer<K>) -> Self
    where
        K: Object,
    {
        self.resync_every(DEFAULT_RESYNC, primary)
    }

    /// [`resync_all_of`](Self::resync_all_of) with another period.
    pub fn resync_every<K>(mut self, period: Duration, primary: &SharedInformer<K>) -> Self
    where
        K: Object,
    {
        let store = primary.store();
        self.keys = Some((Arc::new(move || store.list_keys()), period));
        self
    }

    /// The queue handlers enqueue keys into.
    pub fn queue(&self) -> Arc<RateLimitingQueue<String>> {
        self.queue.clone()
    }

    /// The reconcile counters of this controller.
    pub fn stats(&self) -> Arc<ControllerStats> {
        self.stats.clone()
    }

    /// The reconciler (e.g. to read its state in a test).
    pub fn reconciler(&self) -> Arc<R> {
        self.reconciler.clone()
    }

    /// A handler that enqueues the key of every added, changed (new
    /// resourceVersion) or deleted object — the usual primary-kind handler.
    pub fn enqueue_handler<K>(&self) -> HandlerFn<impl FnMut(&Event<K>) + Send + 'static>
    where
        K: Resource + Send + Sync + 'static,
    {
        let queue = self.queue.clone();
        HandlerFn(move |e: &Event<K>| {
            if let Some(o) = e.changed() {
                queue.add(object_key(o.as_ref()))
            }
        })
    }

    /// Takes one key and reconciles it; `false` once the queue shut down.
    pub async fn process_next_work_item(&self) -> bool {
        let Some(key) = self.queue.get().await else {
            return false;
        };
        self.stats.started.fetch_add(1, Relaxed);
        let started = Instant::now();
        let result = self.reconciler.reconcile(&key).await;
        let took = started.elapsed();
        self.metrics.reconciled(&self.name, result.is_ok(), took);
        match result {
            Ok(action) => {
                self.queue.forget(&key);
                log::info!(
                    "{}: reconciled {key} in {} ms: {}",
                    self.name,
                    took.as_millis(),
                    action.summary
                );
                if let Some(after) = action.requeue_after {
                    self.queue.add_after(key.clone(), after);
                }
            }
            Err(e) => {
                log::warn!(
                    "{}: reconcile of {key} failed after {} ms (retry {}): {e}",
                    self.name,
                    took.as_millis(),
                    self.queue.num_requeues(&key) + 1
                );
                self.queue.add_rate_limited(key.clone());
            }
        }
        self.queue.done(&key);
        self.stats.finished.fetch_add(1, Relaxed);
        // A reconcile's transient buffers go back to the kernel rather than
        // stay in the allocator's arenas.
        if let Some(hook) = self.after_each_item {
            hook();
        }
        // A queue full of keys whose reconciles never wait (a restart: a
        // thousand settled apps) would otherwise run them all back to back
        // on the runtime's threads before the watches, the probes or a
        // chart fetch they wait for get a turn.
        tokio::task::yield_now().await;
        true
    }
}

/// What the manager runs, whatever the reconciler.
pub(crate) trait Runnable: Send + Sync {
    fn name(&self) -> &str;
    /// Runs the workers (and the resync) until `shutdown`, then drains for
    /// at most `drain`. Dropping the future stops all work at once.
    fn run(
        self: Arc<Self>,
        shutdown: BoxFuture<'static, ()>,
        drain: Duration,
    ) -> BoxFuture<'static, ()>;
}

impl<R: Reconciler> Runnable for Controller<R> {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(
        self: Arc<Self>,
        shutdown: BoxFuture<'static, ()>,
        drain: Duration,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            log::info!("{}: starting {} workers", self.name, self.workers);
            // Owned by this future: dropping it aborts every task.
            let mut tasks = tokio::task::JoinSet::new();
            if let Some((keys, period)) = self.keys.clone() {
                for key in keys() {
                    self.queue.add(key);
                }
                let queue = self.queue.clone();
                tasks.spawn(async move {
                    let mut tick = tokio::time::interval(period);
                    tick.tick().await;
                    loop {
                        tick.tick().await;
                        for key in keys() {
                            queue.add(key);
                        }
                    }
                });
            }
            for _ in 0..self.workers {
                let me = self.clone();
                tasks.spawn(async move { while me.process_next_work_item().await {} });
            }
            shutdown.await;
            log::info!(
                "{}: shutting down, finishing in-flight reconciles",
                self.name
            );
            // A fifth of the drain (at most 5 s) is kept for the
            // reconciler's last writes, if it has any, after the workers.
            let last_writes = match R::LAST_WRITES {
                true => (drain / 5).min(Duration::from_secs(5)),
                false => Duration::ZERO,
            };
            let workers = drain - last_writes;
            let draining = tokio::time::Instant::now();
            if tokio::time::timeout(workers, self.queue.shutdown_with_drain())
                .await
                .is_err()
            {
                log::warn!(
                    "{}: reconciles still running after {workers:?}; stopping anyway",
                    self.name
                );
            }
            tasks.abort_all();
            // Every worker is gone before the last writes: none of its
            // requests is still on its way behind them. (An aborted task
            // ends at its next await; the bound is for one that would not.)
            let joined = async { while tasks.join_next().await.is_some() {} };
            let _ = tokio::time::timeout(drain.saturating_sub(draining.elapsed()), joined).await;
            let left = drain.saturating_sub(draining.elapsed());
            if tokio::time::timeout(left, self.reconciler.drained())
                .await
                .is_err()
            {
                log::warn!("{}: the drain timeout ended its last writes", self.name);
            }
        })
    }
}
