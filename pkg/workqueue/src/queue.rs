//! The work queue proper: FIFO, deduplicating, never handing one item to two
//! workers, with optional delays.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque, hash_map};
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
    /// Stands in for "now" where only metrics would read the clock.
    epoch: Instant,
}

/// client-go's name for a queue that supports `add_after`: the same type here.
pub type DelayingQueue<T> = Queue<T>;

struct State<T> {
    /// Items ready to be handed out, oldest first.
    /// Invariant: exactly the items whose entry is dirty and not processing,
    /// each once.
    queue: VecDeque<T>,
    /// Every item that is dirty (needs processing), processing (handed out
    /// by `get`, not yet `done`), or both (re-added while processing: it goes
    /// to the back of `queue` on `done`). An entry with neither is removed.
    /// One map, so each operation hashes its item once.
    items: HashMap<T, Entry, foldhash::fast::RandomState>,
    /// Delayed items by deadline; `seq` keeps equal deadlines FIFO. May hold
    /// stale entries: an entry counts only if it matches `waiting_until`.
    waiting: BinaryHeap<Reverse<Delayed<T>>>,
    /// The deadline of each delayed item (the earliest one asked for).
    waiting_until: HashMap<T, Instant, foldhash::fast::RandomState>,
    seq: u64,
    /// `get` calls asleep on `item_ready`. Adds notify only when this is
    /// non-zero: with work always queued, workers never touch the `Notify`.
    waiters: usize,
    shutting_down: bool,
    draining: bool,
}

/// What the queue knows of one item.
struct Entry {
    /// When it was added, if it needs processing.
    dirty_since: Option<Instant>,
    /// When a worker got it, if it is being processed.
    processing_since: Option<Instant>,
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
        let ready = match self.items.entry(item) {
            hash_map::Entry::Occupied(mut o) => {
                let e = o.get_mut();
                if e.dirty_since.is_some() {
                    return false;
                }
                e.dirty_since = Some(now);
                // Being processed: handed out again after `done`.
                None
            }
            hash_map::Entry::Vacant(v) => {
                let item = v.key().clone();
                v.insert(Entry {
                    dirty_since: Some(now),
                    processing_since: None,
                });
                Some(item)
            }
        };
        if let Some(m) = metrics {
            m.added();
        }
        match ready {
            Some(item) => {
                self.queue.push_back(item);
                true
            }
            None => false,
        }
    }

    /// Moves delayed items whose deadline has passed into the queue; returns
    /// how many became ready.
    fn promote_due(&mut self, now: Instant, metrics: Option<&QueueMetrics>) -> usize {
        if self.waiting.is_empty() {
            return 0;
        }
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
        self.items.values().filter_map(|e| e.processing_since).fold(
            (0.0, 0.0),
            |(sum, longest), started| {
                let secs = now.saturating_duration_since(started).as_secs_f64();
                (sum + secs, f64::max(longest, secs))
            },
        )
    }

    /// Whether a worker holds an item. Linear, but only asked while draining.
    fn any_processing(&self) -> bool {
        self.items.values().any(|e| e.processing_since.is_some())
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
                items: HashMap::default(),
                waiting: BinaryHeap::new(),
                waiting_until: HashMap::default(),
                seq: 0,
                waiters: 0,
                shutting_down: false,
                draining: false,
            })),
            item_ready: Notify::new(),
            drained: Notify::new(),
            metrics: None,
            epoch: Instant::now(),
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

    /// The time to stamp items with: the clock only when metrics read it.
    fn stamp(&self) -> Instant {
        if self.metrics.is_some() {
            Instant::now()
        } else {
            self.epoch
        }
    }

    /// The real time, read only when something is delayed.
    fn now_if_waiting(s: &State<T>, stamp: Instant) -> Instant {
        if s.waiting.is_empty() {
            stamp
        } else {
            Instant::now()
        }
    }

    /// Marks `item` as needing processing. No-op after shutdown, or when the
    /// item is already waiting; if it is being processed it will be handed out
    /// again after [`done`](Self::done).
    pub fn add(&self, item: T) {
        let stamp = self.stamp();
        let mut s = self.state.lock();
        let now = Self::now_if_waiting(&s, stamp);
        let ready =
            s.promote_due(now, self.metrics()) + usize::from(s.add(item, stamp, self.metrics()));
        let waiters = s.waiters;
        drop(s);
        self.wake(ready.min(waiters));
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
        // Fast path: an item is ready; the Notify is never touched.
        match self.try_take(None) {
            Taken::Item(item) => return Some(item),
            Taken::ShutDown => return None,
            Taken::Empty(_) => {}
        }
        let mut asleep = Asleep {
            queue: self,
            counted: false,
        };
        loop {
            let mut notified = pin!(self.item_ready.notified());
            // Register before looking again, so a wake-up in between is kept.
            notified.as_mut().enable();
            let next_deadline = match self.try_take(Some(&mut asleep.counted)) {
                Taken::Item(item) => return Some(item),
                Taken::ShutDown => return None,
                Taken::Empty(deadline) => deadline,
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

    /// Takes the next ready item, if any, marking it as being processed.
    /// When there is none and `asleep` is given, the caller is counted in
    /// `waiters` — in the same critical section as the look, so an `add`
    /// right after it is sure to notify.
    fn try_take(&self, asleep: Option<&mut bool>) -> Taken<T> {
        let stamp = self.stamp();
        let mut s = self.state.lock();
        let now = Self::now_if_waiting(&s, stamp);
        let promoted = s.promote_due(now, self.metrics());
        let Some(item) = s.queue.pop_front() else {
            if s.shutting_down {
                return Taken::ShutDown;
            }
            if let Some(counted) = asleep.filter(|c| !**c) {
                s.waiters += 1;
                *counted = true;
            }
            return Taken::Empty(s.next_deadline());
        };
        let mut added = stamp;
        if let Some(e) = s.items.get_mut(&item) {
            added = e.dirty_since.take().unwrap_or(stamp);
            e.processing_since = Some(stamp);
        }
        let waiters = s.waiters;
        drop(s);
        if let Some(m) = self.metrics() {
            m.got(stamp.saturating_duration_since(added));
        }
        // Each `add` already woke a sleeping worker per ready item; only the
        // items this call promoted (less the one it takes) still need one.
        self.wake(promoted.saturating_sub(1).min(waiters));
        Taken::Item(item)
    }

    /// Marks `item` as processed. If it was added again meanwhile it is
    /// queued again now.
    pub fn done(&self, item: &T) {
        let now = self.stamp();
        let mut ready = false;
        let mut drained = false;
        {
            let mut s = self.state.lock();
            // One lookup: the entry is updated, or removed when nothing is left.
            // (The key clone is a reference-count bump for Arc keys, cheaper
            // than hashing twice.)
            if let hash_map::Entry::Occupied(mut e) = s.items.entry(item.clone()) {
                let started = e.get_mut().processing_since.take();
                if let (Some(started), Some(m)) = (started, self.metrics()) {
                    m.done(now.saturating_duration_since(started));
                }
                if e.get().dirty_since.is_some() {
                    ready = s.waiters > 0;
                    s.queue.push_back(item.clone());
                } else {
                    e.remove();
                }
            }
            if s.draining && !s.any_processing() {
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
        let now = Self::now_if_waiting(&s, self.epoch);
        let promoted = s.promote_due(now, self.metrics());
        let (len, waiters) = (s.queue.len(), s.waiters);
        drop(s);
        self.wake(promoted.min(waiters));
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
            if !self.state.lock().any_processing() {
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

enum Taken<T> {
    Item(T),
    ShutDown,
    /// Nothing ready; the earliest deadline of a delayed item.
    Empty(Option<Instant>),
}

/// Keeps a `get` counted in `State::waiters` from its first wait until it
/// returns or is cancelled.
struct Asleep<'a, T> {
    queue: &'a Queue<T>,
    counted: bool,
}

impl<T> Drop for Asleep<'_, T> {
    fn drop(&mut self) {
        if self.counted {
            self.queue.state.lock().waiters -= 1;
        }
    }
}
