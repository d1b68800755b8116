//! The work queue proper, in client-go's shape (`util/workqueue/queue.go`
//! and `delaying_queue.go`): one lock over a FIFO line, a dirty set and a
//! processing set, and a notifier that wakes waiting workers.
//!
//! One lock is enough: a controller has a few workers and a few runtime
//! threads, and every operation holds the lock for a hash lookup and a
//! push or pop (`hack/bench-machinery.sh` measures it against client-go's).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{QueueMetrics, Registry};

/// A work queue with client-go's semantics.
///
/// - **FIFO and dedupe**: items are handed out in the order they were
///   first added; an item added while it waits keeps its place.
/// - **One worker per item**: an item added while a worker processes it
///   (between [`get`](Self::get) and [`done`](Self::done)) is not handed out
///   again until `done`, and then it goes to the back of the line.
/// - **Delays**: [`add_after`](Self::add_after) makes an item ready later; of
///   two delays for one item the earlier deadline wins.
/// - **Shutdown**: [`shutdown`](Self::shutdown) ignores further adds and
///   drops delayed items; `get` hands out what is queued, then `None`.
///   [`shutdown_with_drain`](Self::shutdown_with_drain) also waits until
///   every item handed out has been marked done.
///
/// Delayed items become ready when a call notices their deadline has
/// passed (a waiting `get` sleeps until the earliest one): there is no
/// timer task.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let q = workqueue::Queue::new();
/// q.add("a");
/// q.add("b");
/// q.add("a"); // already waiting: still one "a", still first
/// let item = q.get().await.unwrap();
/// assert_eq!(item, "a");
/// q.add("a"); // being processed: handed out again only after done
/// assert_eq!(q.get().await, Some("b"));
/// q.done(&item);
/// assert_eq!(q.get().await, Some("a"));
/// # }
/// ```
pub struct Queue<T> {
    state: Arc<Mutex<State<T>>>,
    /// Wakes a `get` when an item is lined up, a delay may have fallen due
    /// sooner, or the queue shuts down.
    item_ready: Notify,
    /// Wakes `shutdown_with_drain` when the last item in processing is done.
    drained: Notify,
    metrics: Option<Arc<QueueMetrics>>,
}

/// client-go's delaying queue is a queue too.
pub type DelayingQueue<T> = Queue<T>;

/// Everything under the one lock.
struct State<T> {
    /// Items ready to be handed out, oldest first.
    /// Invariant: each is in `dirty` and not in `processing`, and appears once.
    line: VecDeque<T>,
    /// Items that need processing, with when they were marked (metrics only).
    /// Invariant: each is in `line`, or in `processing` (then `done` lines it up).
    dirty: HashMap<T, Option<Instant>>,
    /// Items handed out and not yet done, with when they were handed out.
    processing: HashMap<T, Option<Instant>>,
    /// Delayed items, earliest deadline first. An entry whose deadline is not
    /// the item's in `until` was superseded by an earlier one and is skipped.
    delayed: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The item of each `delayed` entry, by its sequence number.
    entries: HashMap<u64, T>,
    /// Each delayed item's earliest deadline.
    until: HashMap<T, Instant>,
    /// Sequence of `delayed` entries (ties keep the order of `add_after`).
    seq: u64,
    shutting_down: bool,
}

impl<T: Eq + Hash + Clone> State<T> {
    /// Marks `item` dirty and lines it up unless it waits or is processed;
    /// `true` when it joined the line.
    fn mark(&mut self, item: T, now: Option<Instant>, metrics: Option<&QueueMetrics>) -> bool {
        if self.shutting_down || self.dirty.contains_key(&item) {
            return false;
        }
        if let Some(m) = metrics {
            m.added();
        }
        self.dirty.insert(item.clone(), now);
        if self.processing.contains_key(&item) {
            return false;
        }
        self.line.push_back(item);
        true
    }

    /// Moves every delayed item whose deadline has passed into the line;
    /// `true` when one joined it.
    fn promote_due(
        &mut self,
        now: Instant,
        stamp: Option<Instant>,
        m: Option<&QueueMetrics>,
    ) -> bool {
        let mut lined = false;
        while let Some(Reverse((deadline, seq))) = self.delayed.peek().copied() {
            if deadline > now {
                break;
            }
            self.delayed.pop();
            let Some(item) = self.entries.remove(&seq) else {
                continue;
            };
            if self.until.get(&item) == Some(&deadline) {
                self.until.remove(&item);
                lined |= self.mark(item, stamp, m);
            }
        }
        lined
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.delayed.peek().map(|Reverse((deadline, _))| *deadline)
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
                dirty: HashMap::new(),
                processing: HashMap::new(),
                delayed: BinaryHeap::new(),
                entries: HashMap::new(),
                until: HashMap::new(),
                seq: 0,
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
            let Some(state) = state.upgrade() else {
                return (0.0, 0.0);
            };
            let now = Instant::now();
            let state = state.lock();
            state
                .processing
                .values()
                .flatten()
                .fold((0.0, 0.0), |(sum, longest), t| {
                    let secs = now.saturating_duration_since(*t).as_secs_f64();
                    (sum + secs, f64::max(longest, secs))
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

    /// Marks `item` as needing processing. No-op after shutdown, or when the
    /// item is already waiting; if it is being processed it will be handed
    /// out again after [`done`](Self::done).
    pub fn add(&self, item: T) {
        let stamp = self.stamp();
        let lined = {
            let mut s = self.state.lock();
            s.promote_due(Instant::now(), stamp, self.metrics())
                | s.mark(item, stamp, self.metrics())
        };
        if lined {
            self.item_ready.notify_one();
        }
    }

    /// [`add`](Self::add)s `item` once `delay` has passed (at once when it
    /// is zero). An item already delayed keeps the earlier deadline.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        let deadline = Instant::now() + delay;
        {
            let mut s = self.state.lock();
            if s.shutting_down || s.until.get(&item).is_some_and(|d| *d <= deadline) {
                return;
            }
            s.seq += 1;
            let seq = s.seq;
            s.until.insert(item.clone(), deadline);
            s.entries.insert(seq, item);
            s.delayed.push(Reverse((deadline, seq)));
        }
        // A waiting `get` may sleep until a later deadline: it looks again.
        self.item_ready.notify_waiters();
    }

    /// The next item to process, waiting for one; `None` once the queue is
    /// shut down and empty. Call [`done`](Self::done) with it afterwards.
    pub async fn get(&self) -> Option<T> {
        loop {
            let mut notified = pin!(self.item_ready.notified());
            notified.as_mut().enable();
            let deadline = {
                let stamp = self.stamp();
                let mut s = self.state.lock();
                s.promote_due(Instant::now(), stamp, self.metrics());
                if let Some(item) = s.line.pop_front() {
                    let added = s.dirty.remove(&item).flatten();
                    s.processing.insert(item.clone(), stamp);
                    let more = !s.line.is_empty();
                    drop(s);
                    if let (Some(m), Some(now)) = (self.metrics(), stamp) {
                        m.got(now.saturating_duration_since(added.unwrap_or(now)));
                    }
                    if more {
                        // Pass the wake-up on: another worker can take the next.
                        self.item_ready.notify_one();
                    }
                    return Some(item);
                }
                if s.shutting_down {
                    return None;
                }
                s.next_deadline()
            };
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `item` as processed: if it was added again meanwhile, it goes
    /// to the back of the line.
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
            (lined, s.processing.is_empty())
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
        let stamp = self.stamp();
        let mut s = self.state.lock();
        s.promote_due(Instant::now(), stamp, self.metrics());
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
            s.entries.clear();
            s.until.clear();
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

    /// Items in processing (for tests of the invariants).
    #[cfg(test)]
    fn processing(&self) -> std::collections::HashSet<T> {
        self.state.lock().processing.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn items_come_out_in_the_order_they_were_first_added() {
        let q = Queue::new();
        for i in [5, 3, 9, 3, 1, 5] {
            q.add(i);
        }
        let mut out = Vec::new();
        while !q.is_empty() {
            out.push(q.get().await.unwrap());
        }
        assert_eq!(out, vec![5, 3, 9, 1]);
        assert_eq!(
            q.processing(),
            std::collections::HashSet::from([5, 3, 9, 1])
        );
    }

    #[tokio::test]
    async fn a_superseded_delay_is_skipped_and_the_item_comes_out_once() {
        tokio::time::pause();
        let q = Queue::new();
        q.add_after(1, Duration::from_secs(10));
        q.add_after(1, Duration::from_secs(1));
        q.add_after(1, Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some(1));
        assert!(q.is_empty());
    }
}
