//! The work queue proper, in client-go's shape (`util/workqueue/queue.go`):
//! one lock over a FIFO line, a dirty set and a processing set, and a
//! notifier that wakes waiting workers. One lock is enough for a few workers
//! on a few threads (`hack/bench-machinery.sh` measures it against client-go).

use std::collections::VecDeque;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::delays::Delays;
use crate::fast_map::HashMap;
use crate::metrics::{QueueMetrics, Registry};

/// A work queue with client-go's semantics.
///
/// - **FIFO and dedupe**: items are handed out in the order they were
///   first added; an item added while it waits keeps its place.
/// - **One worker per item**: an item added while a worker processes it
///   (between [`get`](Self::get) and [`done`](Self::done)) is not handed out
///   again until `done`, and then it goes to the back of the line.
/// - **Delays**: [`add_after`](Self::add_after); of two, the earlier wins.
/// - **Shutdown**: [`shutdown`](Self::shutdown) ignores adds, drops delays;
///   `get` hands out what is queued, then `None`; `shutdown_with_drain`
///   also waits for every handed-out item's `done`.
///
/// A call that finds delayed items due lines them up (a waiting `get` sleeps
/// until the earliest): no timer task. `tests/queue.rs` holds each promise.
pub struct Queue<T> {
    state: Arc<Mutex<State<T>>>,
    /// Wakes a waiting `get`: an item lined up, an earlier delay, shutdown.
    item_ready: Notify,
    /// Wakes `shutdown_with_drain` when the last item in processing is done.
    drained: Notify,
    metrics: Option<Arc<QueueMetrics>>,
}

/// client-go's delaying queue is this queue.
pub type DelayingQueue<T> = Queue<T>;

/// Everything under the one lock.
struct State<T> {
    /// Items to hand out, oldest first. Invariant: each appears once, is in
    /// `dirty` and not in `processing`.
    line: VecDeque<T>,
    /// Items that need processing, since when (metrics). Invariant: each is
    /// in `line`, or in `processing` (then `done` lines it up).
    dirty: HashMap<T, Option<Instant>>,
    /// Items handed out and not yet done, with when they were handed out.
    processing: HashMap<T, Option<Instant>>,
    /// Items that wait for a deadline (lined up by `promote_due`).
    delayed: Delays<T>,
    /// `get`s waiting for an item: only then does lining one up notify.
    waiters: usize,
    shutting_down: bool,
}

impl<T: Eq + Hash + Clone> State<T> {
    /// Marks `item` dirty and lines it up unless it waits or is processed;
    /// `true` when it joined the line.
    fn mark(&mut self, item: T, now: Option<Instant>, metrics: Option<&QueueMetrics>) -> bool {
        if self.shutting_down {
            return false;
        }
        let std::collections::hash_map::Entry::Vacant(slot) = self.dirty.entry(item) else {
            return false;
        };
        if let Some(m) = metrics {
            m.added();
        }
        let item = slot.key().clone();
        slot.insert(now);
        if self.processing.contains_key(&item) {
            return false;
        }
        self.line.push_back(item);
        true
    }

    /// Moves every delayed item whose deadline has passed into the line;
    /// `true` when one joined it.
    fn promote_due(&mut self, stamp: Option<Instant>, m: Option<&QueueMetrics>) -> bool {
        if self.delayed.is_empty() {
            return false;
        }
        let mut lined = false;
        for item in self.delayed.take_due(Instant::now()) {
            lined |= self.mark(item, stamp, m);
        }
        lined
    }
}

impl<T: Eq + Hash + Clone> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Eq + Hash + Clone> Queue<T> {
    /// An unnamed queue without metrics.
    pub fn new() -> Self {
        Queue {
            state: Arc::new(Mutex::new(State {
                line: VecDeque::new(),
                dirty: HashMap::default(),
                processing: HashMap::default(),
                delayed: Delays::new(),
                waiters: 0,
                shutting_down: false,
            })),
            item_ready: Notify::new(),
            drained: Notify::new(),
            metrics: None,
        }
    }

    /// A queue whose `workqueue_*` metrics are labelled `name="<name>"` in `registry`.
    pub fn with_metrics(name: &str, registry: &Registry) -> Self
    where
        T: Send + 'static,
    {
        let mut q = Self::new();
        let metrics = registry.queue(name);
        let state: Weak<Mutex<State<T>>> = Arc::downgrade(&q.state);
        metrics.set_unfinished_probe(Box::new(move || {
            state.upgrade().map_or((0.0, 0.0), |s| {
                crate::metrics::unfinished_work(s.lock().processing.values().flatten())
            })
        }));
        q.metrics = Some(metrics);
        q
    }

    pub(crate) fn metrics(&self) -> Option<&QueueMetrics> {
        self.metrics.as_deref()
    }

    /// The time to stamp items with: the clock only when metrics read it.
    fn stamp(&self) -> Option<Instant> {
        self.metrics.is_some().then(Instant::now)
    }

    /// Marks `item` as needing processing (no-op after shutdown or while it
    /// waits; while it is processed, it is handed out again after `done`).
    pub fn add(&self, item: T) {
        let stamp = self.stamp();
        let wake = {
            let mut s = self.state.lock();
            let lined = s.promote_due(stamp, self.metrics()) | s.mark(item, stamp, self.metrics());
            lined && s.waiters > 0
        };
        if wake {
            self.item_ready.notify_one();
        }
    }

    /// [`add`](Self::add)s `item` once `delay` has passed (at once when it
    /// is zero). An item already delayed keeps the earlier deadline.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        // A delay past what the clock can hold waits as long as it can.
        let now = Instant::now();
        let deadline = now
            .checked_add(delay)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        {
            let mut s = self.state.lock();
            if s.shutting_down {
                return;
            }
            s.delayed.insert(item, deadline);
        }
        // A waiting `get` may sleep until a later deadline: it looks again.
        self.item_ready.notify_waiters();
    }

    /// The next item to process, waiting for one; `None` once the queue is
    /// shut down and empty. Call [`done`](Self::done) with it afterwards.
    pub async fn get(&self) -> Option<T> {
        // The common case takes the lock once and nothing else.
        if let Some(item) = self.take(false) {
            return item;
        }
        loop {
            let mut notified = pin!(self.item_ready.notified());
            notified.as_mut().enable();
            if let Some(item) = self.take(true) {
                return item;
            }
            let deadline = self.state.lock().delayed.next_deadline();
            let sleep = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now));
            tokio::select! {
                _ = notified => {}
                _ = sleep, if deadline.is_some() => {}
            }
            self.state.lock().waiters -= 1;
        }
    }

    /// The next item (`Some(Some)`), the end (`Some(None)`: shut down and
    /// empty), or nothing yet (`None`; with `wait`, counted as a waiter).
    fn take(&self, wait: bool) -> Option<Option<T>> {
        let stamp = self.stamp();
        let mut s = self.state.lock();
        s.promote_due(stamp, self.metrics());
        let Some(item) = s.line.pop_front() else {
            if s.shutting_down {
                return Some(None);
            }
            s.waiters += usize::from(wait);
            return None;
        };
        let added = s.dirty.remove(&item).flatten();
        s.processing.insert(item.clone(), stamp);
        // Pass a wake-up on: another waiting worker can take the next one.
        let pass_on = !s.line.is_empty() && s.waiters > 0;
        drop(s);
        if let (Some(m), Some(now)) = (self.metrics(), stamp) {
            m.got(now.saturating_duration_since(added.unwrap_or(now)));
        }
        if pass_on {
            self.item_ready.notify_one();
        }
        Some(Some(item))
    }

    /// Marks `item` processed: added again meanwhile, it joins the line.
    pub fn done(&self, item: &T) {
        let stamp = self.stamp();
        let (lined, drained) = {
            let mut s = self.state.lock();
            let Some(started) = s.processing.remove(item) else {
                return;
            };
            if let (Some(m), Some(now), Some(started)) = (self.metrics(), stamp, started) {
                m.done(now.saturating_duration_since(started));
            }
            let lined = s.dirty.contains_key(item);
            if lined {
                s.line.push_back(item.clone());
            }
            (lined && s.waiters > 0, s.processing.is_empty())
        };
        if lined {
            self.item_ready.notify_one();
        }
        if drained {
            self.drained.notify_waiters();
        }
    }

    /// Items waiting in line (not delayed ones, not those in processing).
    pub fn len(&self) -> usize {
        let mut s = self.state.lock();
        s.promote_due(self.stamp(), self.metrics());
        s.line.len()
    }

    /// Whether no item waits in line.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting items; `get` returns what is queued, then `None`.
    /// Delayed items that are not yet due are dropped.
    pub fn shutdown(&self) {
        {
            let mut s = self.state.lock();
            s.shutting_down = true;
            s.delayed.clear();
        }
        self.item_ready.notify_waiters();
    }

    /// [`shutdown`](Self::shutdown), then waits until every item handed out
    /// by `get` has been marked [`done`](Self::done).
    pub async fn shutdown_with_drain(&self) {
        self.shutdown();
        loop {
            let mut drained = pin!(self.drained.notified());
            drained.as_mut().enable();
            if self.state.lock().processing.is_empty() {
                return;
            }
            drained.await;
        }
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.state.lock().shutting_down
    }
}
