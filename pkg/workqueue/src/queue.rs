//! The work queue proper: FIFO, deduplicating, never handing one item to two
//! workers, with optional delays.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{QueueMetrics, Registry};

/// A work queue with client-go's semantics.
///
/// - **Dedupe**: an item added while it waits is queued once.
/// - **One worker per item**: an item added while a worker processes it (between
///   [`get`](Self::get) and [`done`](Self::done)) is not handed out again
///   until `done`, and then it is.
/// - **FIFO** among distinct waiting items.
/// - **Delays**: [`add_after`](Self::add_after) makes an item ready later; of
///   two delays for one waiting item the earlier deadline wins.
/// - **Shutdown**: [`shutdown`](Self::shutdown) ignores further adds; `get`
///   still hands out what is queued, then returns `None`.
///   [`shutdown_with_drain`](Self::shutdown_with_drain) also waits until every
///   item handed out has been marked done.
///
/// Delayed items become ready when a waiting `get` (or any other call)
/// notices their deadline has passed; there is no timer task, so a queue
/// needs no runtime until `get` is awaited.
pub struct Queue<T> {
    /// Shared only with the metrics' scrape-time probe (weakly).
    state: Arc<Mutex<State<T>>>,
    /// Signalled when an item becomes ready, a delay is added or shutdown starts.
    item_ready: Notify,
    /// Signalled when the last item being processed is marked done while draining.
    drained: Notify,
    metrics: Option<Arc<QueueMetrics>>,
}

/// client-go's name for a queue that supports `add_after`: the same type here.
pub type DelayingQueue<T> = Queue<T>;

struct State<T> {
    /// Items ready to be handed out, oldest first.
    /// Invariant: each is in `dirty` and not in `processing`, and appears once.
    queue: VecDeque<T>,
    /// Items that need processing, with when they were added: everything in
    /// `queue`, plus items re-added while being processed (those go to the
    /// back of `queue` on `done`).
    dirty: HashMap<T, Instant>,
    /// Items handed out by `get` and not yet `done`, with when processing
    /// started. An item here is never in `queue`.
    processing: HashMap<T, Instant>,
    /// Delayed items by deadline; `seq` keeps equal deadlines FIFO. May hold
    /// stale entries: an entry counts only if it matches `waiting_until`.
    waiting: BinaryHeap<Reverse<Delayed<T>>>,
    /// The deadline of each delayed item (the earliest one asked for).
    waiting_until: HashMap<T, Instant>,
    seq: u64,
    shutting_down: bool,
    draining: bool,
}

/// A delayed item, ordered by deadline then insertion (never by the item).
struct Delayed<T> {
    deadline: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Delayed<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}

impl<T> Eq for Delayed<T> {}

impl<T> PartialOrd for Delayed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Delayed<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

impl<T: Eq + Hash + Clone> State<T> {
    /// Client-go's `Add`: returns whether the item became ready.
    fn add(&mut self, item: T, now: Instant, metrics: Option<&QueueMetrics>) -> bool {
        if self.shutting_down {
            return false;
        }
        match self.dirty.entry(item) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                if let Some(m) = metrics {
                    m.added();
                }
                let item = v.key().clone();
                v.insert(now);
                if self.processing.contains_key(&item) {
                    false // handed out again after `done`
                } else {
                    self.queue.push_back(item);
                    true
                }
            }
        }
    }

    /// Moves delayed items whose deadline has passed into the queue; returns
    /// how many became ready.
    fn promote_due(&mut self, now: Instant, metrics: Option<&QueueMetrics>) -> usize {
        let mut ready = 0;
        while let Some(Reverse(top)) = self.waiting.peek() {
            if top.deadline > now {
                break;
            }
            let Some(Reverse(Delayed { deadline, item, .. })) = self.waiting.pop() else {
                break;
            };
            // Skip stale heap entries superseded by an earlier deadline.
            if self.waiting_until.get(&item) == Some(&deadline) {
                self.waiting_until.remove(&item);
                ready += usize::from(self.add(item, now, metrics));
            }
        }
        ready
    }

    /// `(sum of seconds, longest seconds)` the items handed out have been in
    /// processing so far — client-go's unfinished-work gauges.
    fn unfinished_work(&self, now: Instant) -> (f64, f64) {
        self.processing
            .values()
            .fold((0.0, 0.0), |(sum, longest), started| {
                let secs = now.saturating_duration_since(*started).as_secs_f64();
                (sum + secs, f64::max(longest, secs))
            })
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.waiting.peek().map(|Reverse(d)| d.deadline)
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
                queue: VecDeque::new(),
                dirty: HashMap::new(),
                processing: HashMap::new(),
                waiting: BinaryHeap::new(),
                waiting_until: HashMap::new(),
                seq: 0,
                shutting_down: false,
                draining: false,
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
        let state = Arc::downgrade(&q.state);
        metrics.set_unfinished_probe(Box::new(move || {
            state
                .upgrade()
                .map(|s| s.lock().unfinished_work(Instant::now()))
                .unwrap_or((0.0, 0.0))
        }));
        q.metrics = Some(metrics);
        q
    }

    pub(crate) fn metrics(&self) -> Option<&QueueMetrics> {
        self.metrics.as_deref()
    }

    /// Marks `item` as needing processing. No-op after shutdown, or when the
    /// item is already waiting; if it is being processed it will be handed out
    /// again after [`done`](Self::done).
    pub fn add(&self, item: T) {
        let now = Instant::now();
        let ready = {
            let mut s = self.state.lock();
            s.promote_due(now, self.metrics()) + usize::from(s.add(item, now, self.metrics()))
        };
        self.wake(ready);
    }

    /// Adds `item` once `delay` has passed (at once for a zero delay). If the
    /// item is already waiting for a later deadline, the earlier one wins.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        let now = Instant::now();
        let deadline = now + delay;
        {
            let mut s = self.state.lock();
            if s.shutting_down {
                return;
            }
            match s.waiting_until.get(&item) {
                Some(existing) if *existing <= deadline => return,
                _ => {}
            }
            s.waiting_until.insert(item.clone(), deadline);
            s.seq += 1;
            let seq = s.seq;
            s.waiting.push(Reverse(Delayed {
                deadline,
                seq,
                item,
            }));
        }
        // Waiting workers re-arm their timers for the new deadline.
        self.item_ready.notify_waiters();
    }

    fn wake(&self, ready: usize) {
        for _ in 0..ready {
            self.item_ready.notify_one();
        }
    }

    /// Waits for the next item, marks it as being processed and returns it;
    /// `None` once the queue is shut down and empty. Every item returned must
    /// be passed to [`done`](Self::done). Cancel-safe: an item is taken only
    /// when the future completes.
    pub async fn get(&self) -> Option<T> {
        loop {
            let mut notified = pin!(self.item_ready.notified());
            // Register before looking, so a wake-up between look and wait is kept.
            notified.as_mut().enable();
            let next_deadline = {
                let now = Instant::now();
                let mut s = self.state.lock();
                let promoted = s.promote_due(now, self.metrics());
                if let Some(item) = s.queue.pop_front() {
                    let added = s.dirty.remove(&item).unwrap_or(now);
                    s.processing.insert(item.clone(), now);
                    drop(s);
                    if let Some(m) = self.metrics() {
                        m.got(now.saturating_duration_since(added));
                    }
                    // Each `add` already woke one worker per ready item; only
                    // the items this call promoted (less the one it takes)
                    // still need workers.
                    self.wake(promoted.saturating_sub(1));
                    return Some(item);
                }
                if s.shutting_down {
                    return None;
                }
                s.next_deadline()
            };
            match next_deadline {
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

    /// Marks `item` as processed. If it was added again meanwhile it is
    /// queued again now.
    pub fn done(&self, item: &T) {
        let now = Instant::now();
        let mut ready = false;
        let mut drained = false;
        {
            let mut s = self.state.lock();
            if let (Some(started), Some(m)) = (s.processing.remove(item), self.metrics()) {
                m.done(now.saturating_duration_since(started));
            }
            if s.dirty.contains_key(item) {
                s.queue.push_back(item.clone());
                ready = true;
            }
            if s.draining && s.processing.is_empty() {
                drained = true;
            }
        }
        if ready {
            self.item_ready.notify_one();
        }
        if drained {
            self.drained.notify_waiters();
        }
    }

    /// The number of items ready to be handed out (not counting items being
    /// processed or still delayed).
    pub fn len(&self) -> usize {
        let mut s = self.state.lock();
        let promoted = s.promote_due(Instant::now(), self.metrics());
        let len = s.queue.len();
        drop(s);
        self.wake(promoted);
        len
    }

    /// Whether no item is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting items; `get` returns what is queued, then `None`.
    /// Delayed items that are not yet due are dropped.
    pub fn shutdown(&self) {
        {
            let mut s = self.state.lock();
            s.shutting_down = true;
            s.waiting.clear();
            s.waiting_until.clear();
        }
        self.item_ready.notify_waiters();
    }

    /// [`shutdown`](Self::shutdown), then waits until every item handed out
    /// by `get` has been marked [`done`](Self::done).
    pub async fn shutdown_with_drain(&self) {
        self.state.lock().draining = true;
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
