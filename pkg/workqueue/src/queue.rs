//! The work queue proper: deduplicating, never handing one item to two
//! workers, fair, with optional delays.
//!
//! # Why it is built this way
//!
//! client-go keeps everything under one mutex and one FIFO. On a multi-core
//! machine every worker then fights over that lock, and over the cache lines
//! of the FIFO's head and tail, on each `get`, `done` and `add`; a contended
//! OS mutex also puts threads to sleep in the kernel (Go parks goroutines
//! cheaply in user space; we cannot). So the queue is split into [`SHARDS`]
//! shards by the item's hash. A shard holds its items' state *and* their
//! place in line, under its own lock on its own cache lines, so `get`,
//! `done` and `add` of one item touch exactly one shard. Workers on
//! different threads work in different shards: `get` keeps taking from the
//! shard it took from last (up to [`TURN`] items), then moves on to the next
//! shard that has work.
//!
//! The price is strict first-in first-out order over the whole queue, which
//! client-go's docs call "fair": here items are first-in first-out within a
//! shard, and the shards with work take turns. That is fair in the sense a
//! controller needs — no item starves, however hard others are churned: its
//! shard gets a turn in every round, and each turn takes the shard's oldest
//! items. (client-go itself has made the ordering pluggable since v0.31,
//! `TypedQueueConfig::Queue`.)

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::num::NonZeroU64;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry as Slot;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{QueueMetrics, Registry};

/// How many shards a queue is split into: 64, one bit each in
/// `Queue::nonempty`.
pub const SHARDS: usize = 64;

/// How many items in a row a thread's `get` takes from one shard before
/// the next shard with work gets its turn. Longer turns keep a shard in one
/// core's cache longer; shorter ones are fairer.
pub const TURN: u32 = 8;

/// How many entries of items that are neither waiting nor being processed a
/// shard keeps, so that the common done-then-add-again cycle neither frees
/// nor clones anything. Beyond this they are removed at once.
const IDLE_ENTRIES_PER_SHARD: usize = 64;

/// `Queue::lifecycle` values. `Closing` rejects adds; `Closed` also promises
/// that every add accepted before the shutdown is in its shard's line.
const RUNNING: u8 = 0;
const CLOSING: u8 = 1;
const CLOSED: u8 = 2;

/// `Delays::next` when nothing is delayed.
const NO_DEADLINE: u64 = u64::MAX;

thread_local! {
    /// This thread's turn: the shard its last `get` took from and how many
    /// more items it may take from it. Shared by every queue (it is a hint).
    static TURN_STATE: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
}

/// A work queue with client-go's semantics.
///
/// - **Dedupe**: an item added while it waits is queued once.
/// - **One worker per item**: an item added while a worker processes it (between
///   [`get`](Self::get) and [`done`](Self::done)) is not handed out again
///   until `done`, and then it is.
/// - **Fair**: items hashed to the same shard are handed out first-in
///   first-out; shards with work take turns (see the [module](self) docs).
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
    /// The items, split by hash; shared (weakly) only with the metrics'
    /// scrape-time probe.
    shards: Arc<Shards<T>>,
    /// Bit `s` is set exactly when shard `s` has an item in line. Changed
    /// only under that shard's lock; read without it to find work.
    nonempty: AtomicU64,
    /// `get` calls that found no work and may be asleep on `item_ready`. A
    /// call that lines an item up notifies only when this is non-zero, so
    /// while work is queued, workers never touch the `Notify`.
    waiters: AtomicUsize,
    /// Signalled when an item is lined up, a delay is added or shutdown ends.
    item_ready: Notify,
    delays: Delays<T>,
    /// `RUNNING`, `CLOSING` or `CLOSED`; adds read it under their shard lock.
    lifecycle: AtomicU8,
    /// Set by `shutdown_with_drain`; from then on `done` checks for the end.
    draining: AtomicBool,
    /// Signalled when the last item being processed is marked done while draining.
    drained: Notify,
    metrics: Option<Arc<QueueMetrics>>,
    /// Time zero for deadlines, and "now" where only metrics would read the clock.
    epoch: Instant,
}

/// client-go's name for a queue that supports `add_after`: the same type here.
pub type DelayingQueue<T> = Queue<T>;

struct Shards<T> {
    shards: Box<[Shard<T>]>,
    hasher: foldhash::fast::RandomState,
}

/// One shard, alone on its cache lines so that workers in different shards
/// never invalidate each other's.
#[repr(align(128))]
struct Shard<T>(Mutex<ShardState<T>>);

/// The items whose hash picks this shard. Invariants, whenever the lock is
/// free:
/// - `line` holds exactly the items whose entry is dirty and not processing,
///   each once, oldest first;
/// - `idle` counts the entries that are neither, and is at most
///   `IDLE_ENTRIES_PER_SHARD`.
struct ShardState<T> {
    line: VecDeque<(u64, T)>,
    items: HashTable<(T, Entry)>,
    idle: usize,
}

/// What the queue knows of one item: whether it is dirty (needs
/// processing), processing (handed out by `get`, not yet `done`), or both
/// (re-added while processing: it is lined up again on `done`).
struct Entry {
    /// When it was added, if it needs processing.
    dirty_since: Option<Stamp>,
    /// When a worker got it, if it is being processed.
    processing_since: Option<Stamp>,
}

/// An instant as nanoseconds since the queue's epoch, plus one: an
/// `Option<Stamp>` takes 8 bytes where an `Option<Instant>` takes 16, and
/// the entries are what a cycle through the queue mostly waits for.
/// Without metrics every stamp is `Stamp::EPOCH` and the clock is not read.
#[derive(Clone, Copy)]
struct Stamp(NonZeroU64);

impl Stamp {
    const EPOCH: Stamp = Stamp(NonZeroU64::MIN);

    fn at(now: Instant, epoch: Instant) -> Stamp {
        let ns = u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX);
        Stamp(NonZeroU64::MIN.saturating_add(ns))
    }

    /// The time from `self` to `later` (zero if `later` is earlier).
    fn until(self, later: Stamp) -> Duration {
        Duration::from_nanos(later.0.get().saturating_sub(self.0.get()))
    }
}

impl<T: Eq + Hash> Shards<T> {
    fn new() -> Self {
        Shards {
            shards: (0..SHARDS)
                .map(|_| {
                    Shard(Mutex::new(ShardState {
                        line: VecDeque::new(),
                        items: HashTable::new(),
                        idle: 0,
                    }))
                })
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    fn hash(&self, item: &T) -> u64 {
        self.hasher.hash_one(item)
    }

    /// The shard of an item with hash `hash`. Bits 32.. are used because the
    /// table inside uses the low bits (bucket) and the top 7 (tag): reusing
    /// either would crowd every shard's items into a few buckets or tags.
    fn index(hash: u64) -> usize {
        (hash >> 32) as usize % SHARDS
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, ShardState<T>> {
        self.shards[index].0.lock()
    }

    /// `(sum of seconds, longest seconds)` the items handed out have been in
    /// processing so far — client-go's unfinished-work gauges.
    fn unfinished_work(&self, now: Stamp) -> (f64, f64) {
        let mut started = Vec::new();
        for shard in self.shards.iter() {
            let state = shard.0.lock();
            started.extend(state.items.iter().filter_map(|(_, e)| e.processing_since));
        }
        started
            .into_iter()
            .fold((0.0, 0.0), |(sum, longest), started| {
                let secs = started.until(now).as_secs_f64();
                (sum + secs, f64::max(longest, secs))
            })
    }

    /// Whether a worker holds an item. Visits every shard, but is only asked
    /// while draining.
    fn any_processing(&self) -> bool {
        self.shards.iter().any(|s| {
            s.0.lock()
                .items
                .iter()
                .any(|(_, e)| e.processing_since.is_some())
        })
    }

    /// Items in line, over all shards.
    fn lined_up(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().line.len()).sum()
    }
}

/// Items that become ready at a deadline.
struct Delays<T> {
    /// The earliest deadline in `heap`, in nanoseconds since the queue's
    /// epoch, or `NO_DEADLINE`. Written under the `heap` lock, read without
    /// it: calls skip the clock and the lock while nothing is delayed. A
    /// stale read only delays a promotion to the next call.
    next: AtomicU64,
    heap: Mutex<DelayHeap<T>>,
}

struct DelayHeap<T> {
    /// Delayed items by deadline; `seq` keeps equal deadlines FIFO. May hold
    /// stale entries: an entry counts only if it matches `until`.
    heap: BinaryHeap<Reverse<Delayed<T>>>,
    /// The deadline of each delayed item (the earliest one asked for).
    until: HashMap<T, Instant, foldhash::fast::RandomState>,
    seq: u64,
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

impl<T: Eq + Hash + Clone> DelayHeap<T> {
    /// Records `item` for `deadline` unless it already waits for an earlier
    /// one; returns whether it did.
    fn insert(&mut self, item: T, deadline: Instant) -> bool {
        if self.until.get(&item).is_some_and(|d| *d <= deadline) {
            return false;
        }
        self.until.insert(item.clone(), deadline);
        self.seq += 1;
        self.heap.push(Reverse(Delayed {
            deadline,
            seq: self.seq,
            item,
        }));
        true
    }

    /// Removes and returns the items whose deadline is `now` or earlier,
    /// earliest first.
    fn take_due(&mut self, now: Instant) -> Vec<T> {
        let mut due = Vec::new();
        while self
            .heap
            .peek()
            .is_some_and(|Reverse(top)| top.deadline <= now)
        {
            let Some(Reverse(Delayed { deadline, item, .. })) = self.heap.pop() else {
                break;
            };
            // Skip stale entries superseded by an earlier deadline.
            if self.until.get(&item) == Some(&deadline) {
                self.until.remove(&item);
                due.push(item);
            }
        }
        due
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(d)| d.deadline)
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
            shards: Arc::new(Shards::new()),
            nonempty: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            item_ready: Notify::new(),
            delays: Delays {
                next: AtomicU64::new(NO_DEADLINE),
                heap: Mutex::new(DelayHeap {
                    heap: BinaryHeap::new(),
                    until: HashMap::default(),
                    seq: 0,
                }),
            },
            lifecycle: AtomicU8::new(RUNNING),
            draining: AtomicBool::new(false),
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
        let shards: Weak<Shards<T>> = Arc::downgrade(&q.shards);
        let epoch = q.epoch;
        metrics.set_unfinished_probe(Box::new(move || {
            shards.upgrade().map_or((0.0, 0.0), |s| {
                s.unfinished_work(Stamp::at(Instant::now(), epoch))
            })
        }));
        q.metrics = Some(metrics);
        q
    }

    pub(crate) fn metrics(&self) -> Option<&QueueMetrics> {
        self.metrics.as_deref()
    }

    /// The time to stamp items with: the clock only when metrics read it.
    fn stamp(&self) -> Stamp {
        if self.metrics.is_some() {
            Stamp::at(Instant::now(), self.epoch)
        } else {
            Stamp::EPOCH
        }
    }

    /// Marks `item` as needing processing. No-op after shutdown, or when the
    /// item is already waiting; if it is being processed it will be handed out
    /// again after [`done`](Self::done).
    pub fn add(&self, item: T) {
        self.promote_due();
        self.mark_dirty(item);
    }

    /// `add` without looking at the delays.
    fn mark_dirty(&self, item: T) {
        let stamp = self.stamp();
        let hash = self.shards.hash(&item);
        let index = Shards::<T>::index(hash);
        let first = {
            let mut shard = self.shards.lock(index);
            // Read under the shard lock: `shutdown` passes through every
            // shard lock before it declares the queue closed.
            if self.lifecycle.load(Ordering::Relaxed) != RUNNING {
                return;
            }
            let ShardState { line, items, idle } = &mut *shard;
            match items.entry(hash, |(k, _)| *k == item, |(k, _)| self.shards.hash(k)) {
                Slot::Occupied(mut slot) => {
                    let entry = &mut slot.get_mut().1;
                    if entry.dirty_since.is_some() {
                        return; // Already waiting.
                    }
                    entry.dirty_since = Some(stamp);
                    if entry.processing_since.is_some() {
                        // Being processed: `done` lines it up.
                        if let Some(m) = self.metrics() {
                            m.added();
                        }
                        return;
                    }
                    *idle -= 1;
                }
                Slot::Vacant(slot) => {
                    let entry = Entry {
                        dirty_since: Some(stamp),
                        processing_since: None,
                    };
                    slot.insert((item.clone(), entry));
                }
            }
            self.line_up(index, line, hash, item)
        };
        if let Some(m) = self.metrics() {
            m.added();
        }
        if first {
            self.wake_for_first();
        }
    }

    /// Puts `item` at the end of shard `index`'s `line`, whose lock the
    /// caller holds. Returns whether the shard had no work before.
    fn line_up(&self, index: usize, line: &mut VecDeque<(u64, T)>, hash: u64, item: T) -> bool {
        let first = line.is_empty();
        if first {
            // SeqCst: see `wake_for_first`.
            self.nonempty.fetch_or(1 << index, Ordering::SeqCst);
        }
        line.push_back((hash, item));
        first
    }

    /// After an item was lined up in a shard that had no work: wakes a
    /// sleeping `get`, if there is one.
    ///
    /// Why only then: a `get` sleeps only after it counted itself in
    /// `waiters` and then saw `nonempty == 0` (both SeqCst, like the
    /// `fetch_or` in `line_up`), so the next item lined up anywhere sets a
    /// bit and sees it counted here. An item lined up behind others wakes
    /// nobody; instead whoever takes an item passes the wake-up on
    /// ([`pass_on_wakeup`](Self::pass_on_wakeup)) while work and sleepers
    /// remain. So a busy queue never touches the `Notify`, nor pays a fence.
    fn wake_for_first(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.item_ready.notify_one();
        }
    }

    /// After taking an item: if more work is lined up and another `get` may
    /// be asleep (`waiters` beyond the `counting_me` of the caller), wake one.
    fn pass_on_wakeup(&self, counting_me: usize) {
        if self.waiters.load(Ordering::Relaxed) > counting_me
            && self.nonempty.load(Ordering::Relaxed) != 0
        {
            self.item_ready.notify_one();
        }
    }

    /// Adds `item` once `delay` has passed (at once for a zero delay). If the
    /// item is already waiting for a later deadline, the earlier one wins.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        if self.lifecycle.load(Ordering::Acquire) != RUNNING {
            return;
        }
        let deadline = Instant::now() + delay;
        {
            let mut delays = self.delays.heap.lock();
            if !delays.insert(item, deadline) {
                return;
            }
            self.set_next_deadline(&delays);
        }
        // Waiting workers re-arm their timers for the new deadline.
        self.item_ready.notify_waiters();
    }

    /// Publishes the earliest deadline of `delays` (whose lock the caller holds).
    fn set_next_deadline(&self, delays: &DelayHeap<T>) {
        let next = delays.next_deadline().map_or(NO_DEADLINE, |d| {
            u64::try_from(d.saturating_duration_since(self.epoch).as_nanos())
                .unwrap_or(NO_DEADLINE - 1)
        });
        self.delays.next.store(next, Ordering::Release);
    }

    /// The earliest deadline of a delayed item, if any.
    fn next_deadline(&self) -> Option<Instant> {
        match self.delays.next.load(Ordering::Acquire) {
            NO_DEADLINE => None,
            ns => Some(self.epoch + Duration::from_nanos(ns)),
        }
    }

    /// Adds the delayed items whose deadline has passed. While nothing is
    /// delayed this is one load.
    #[inline]
    fn promote_due(&self) {
        if self.delays.next.load(Ordering::Relaxed) != NO_DEADLINE {
            self.promote_due_slow();
        }
    }

    #[cold]
    fn promote_due_slow(&self) {
        let Some(next) = self.next_deadline() else {
            return;
        };
        let now = Instant::now();
        if now < next {
            return;
        }
        let due = {
            let mut delays = self.delays.heap.lock();
            let due = delays.take_due(now);
            self.set_next_deadline(&delays);
            due
        };
        for item in due {
            self.mark_dirty(item);
        }
    }

    /// Waits for the next item, marks it as being processed and returns it;
    /// `None` once the queue is shut down and empty. Every item returned must
    /// be passed to [`done`](Self::done). Cancel-safe: an item is taken only
    /// when the future completes.
    pub async fn get(&self) -> Option<T> {
        // Fast path: an item is ready; the Notify is never touched.
        match self.try_take() {
            Some(item) => {
                self.pass_on_wakeup(0);
                Some(item)
            }
            None => self.wait_for_item().await,
        }
    }

    /// `get`'s slow path: sleeps until an item is lined up, a delay is due or
    /// the queue is closed.
    async fn wait_for_item(&self) -> Option<T> {
        let _counted = Waiting::new(&self.waiters);
        loop {
            let mut notified = pin!(self.item_ready.notified());
            // Register before looking again, so a wake-up in between is kept.
            notified.as_mut().enable();
            if let Some(item) = self.try_take() {
                self.pass_on_wakeup(1);
                return Some(item);
            }
            if self.lifecycle.load(Ordering::Acquire) == CLOSED {
                // Every add accepted before the shutdown is lined up by now.
                return self.try_take();
            }
            match self.next_deadline() {
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

    /// Takes the next item in line, if any, and marks it as being processed:
    /// from the shard this thread's turn is in, or the next one with work.
    fn try_take(&self) -> Option<T> {
        self.promote_due();
        let (mut index, mut turn) = TURN_STATE.get();
        loop {
            // SeqCst: see `wake_for_first`.
            let nonempty = self.nonempty.load(Ordering::SeqCst);
            if nonempty == 0 {
                return None;
            }
            if turn == 0 || nonempty & (1 << index) == 0 {
                index = next_with_work(nonempty, index + 1);
                turn = TURN;
            }
            let mut shard = self.shards.lock(index);
            let Some((hash, item)) = shard.line.pop_front() else {
                // Emptied since the look; its bit is clear now.
                turn = 0;
                continue;
            };
            if shard.line.is_empty() {
                self.nonempty.fetch_and(!(1 << index), Ordering::Release);
            }
            let stamp = self.stamp();
            let added = shard
                .items
                .find_mut(hash, |(k, _)| *k == item)
                .and_then(|(_, entry)| {
                    entry.processing_since = Some(stamp);
                    entry.dirty_since.take()
                });
            drop(shard);
            TURN_STATE.set((index, turn - 1));
            if let Some(m) = self.metrics() {
                m.got(added.unwrap_or(stamp).until(stamp));
            }
            return Some(item);
        }
    }

    /// Marks `item` as processed. If it was added again meanwhile it is
    /// lined up again now. No-op for an item that is not being processed.
    pub fn done(&self, item: &T) {
        let stamp = self.stamp();
        let hash = self.shards.hash(item);
        let index = Shards::<T>::index(hash);
        let (started, first) = {
            let mut shard = self.shards.lock(index);
            let ShardState { line, items, idle } = &mut *shard;
            let Ok(mut slot) = items.find_entry(hash, |(k, _)| k == item) else {
                return;
            };
            let entry = &mut slot.get_mut().1;
            let Some(started) = entry.processing_since.take() else {
                return;
            };
            if entry.dirty_since.is_some() {
                (started, self.line_up(index, line, hash, item.clone()))
            } else {
                // Kept (up to a bound) for the add that usually follows.
                if *idle < IDLE_ENTRIES_PER_SHARD {
                    *idle += 1;
                } else {
                    slot.remove();
                }
                (started, false)
            }
        };
        if let Some(m) = self.metrics() {
            m.done(started.until(stamp));
        }
        if first {
            self.wake_for_first();
        }
        // Read after the shard lock: a drain that started before this `done`
        // took the lock is seen here; one that started later scans after it.
        if self.draining.load(Ordering::Relaxed) && !self.shards.any_processing() {
            self.drained.notify_waiters();
        }
    }

    /// The number of items ready to be handed out (not counting items being
    /// processed or still delayed). Visits every shard.
    pub fn len(&self) -> usize {
        self.promote_due();
        self.shards.lined_up()
    }

    /// Whether no item is ready.
    pub fn is_empty(&self) -> bool {
        self.promote_due();
        self.nonempty.load(Ordering::Acquire) == 0
    }

    /// Stops accepting items; `get` returns what is queued, then `None`.
    /// Delayed items that are not yet due are dropped.
    pub fn shutdown(&self) {
        self.lifecycle.fetch_max(CLOSING, Ordering::SeqCst);
        // An add that saw RUNNING did so under its shard lock, so once each
        // lock has been taken here, every accepted add has lined its item up.
        for shard in self.shards.shards.iter() {
            drop(shard.0.lock());
        }
        {
            let mut delays = self.delays.heap.lock();
            delays.heap.clear();
            delays.until.clear();
            self.set_next_deadline(&delays);
        }
        self.lifecycle.store(CLOSED, Ordering::Release);
        self.item_ready.notify_waiters();
    }

    /// [`shutdown`](Self::shutdown), then waits until every item handed out
    /// by `get` has been marked [`done`](Self::done).
    pub async fn shutdown_with_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.shutdown();
        loop {
            let mut drained = pin!(self.drained.notified());
            drained.as_mut().enable();
            if !self.shards.any_processing() {
                return;
            }
            drained.await;
        }
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lifecycle.load(Ordering::Acquire) != RUNNING
    }
}

/// The first shard at or after `from` (wrapping) whose bit is set in
/// `nonempty`, which must not be zero.
fn next_with_work(nonempty: u64, from: usize) -> usize {
    let from = from % SHARDS;
    (from + nonempty.rotate_right(from as u32).trailing_zeros() as usize) % SHARDS
}

/// Counts a `get` in `Queue::waiters` from its first wait until it returns
/// or is cancelled.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(waiters: &'a AtomicUsize) -> Self {
        waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(waiters)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard_of(q: &Queue<u32>, item: u32) -> usize {
        Shards::<u32>::index(q.shards.hash(&item))
    }

    #[test]
    fn next_with_work_wraps_around_to_the_first_shard_with_work() {
        let bits = (1 << 3) | (1 << 40);
        assert_eq!(next_with_work(bits, 0), 3);
        assert_eq!(next_with_work(bits, 3), 3);
        assert_eq!(next_with_work(bits, 4), 40);
        assert_eq!(next_with_work(bits, 41), 3);
        assert_eq!(next_with_work(bits, SHARDS), 3);
        assert_eq!(next_with_work(1 << 63, 63), 63);
    }

    /// Within a shard items keep their order, and a shard's turn ends after
    /// `TURN` items when another shard has work.
    #[test]
    fn a_shard_hands_out_in_order_and_takes_turns() {
        let q = Queue::new();
        for i in 0..2_000u32 {
            q.add(i);
        }
        let mut last_in_shard = [None::<u32>; SHARDS];
        let (mut run_shard, mut run) = (usize::MAX, 0);
        while let Some(i) = q.try_take() {
            let shard = shard_of(&q, i);
            assert!(
                last_in_shard[shard] < Some(i),
                "shard {shard}: {i} overtook"
            );
            last_in_shard[shard] = Some(i);
            run = if shard == run_shard { run + 1 } else { 1 };
            run_shard = shard;
            let others_waiting = q.nonempty.load(Ordering::Relaxed) & !(1 << shard) != 0;
            assert!(
                run <= TURN as usize || !others_waiting,
                "shard {shard} handed out {run} in a row while others waited"
            );
            q.done(&i);
        }
        assert_eq!(q.shards.lined_up(), 0);
    }

    /// Items lined up behind others wake nobody themselves; the wake-up is
    /// passed on by whoever takes an item, so every sleeping `get` wakes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sleeping_gets_all_wake_for_items_lined_up_in_one_shard() {
        let q = Arc::new(Queue::new());
        let same_shard: Vec<u32> = (0..)
            .filter(|i| shard_of(&q, *i) == shard_of(&q, 0))
            .take(4)
            .collect();
        let getters: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        while q.waiters.load(Ordering::SeqCst) < 4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for i in &same_shard {
            q.add(*i);
        }
        let mut got = Vec::new();
        for getter in getters {
            let item = tokio::time::timeout(Duration::from_secs(5), getter)
                .await
                .expect("every sleeping get wakes")
                .expect("the getter task does not panic");
            got.extend(item);
        }
        got.sort();
        assert_eq!(got, same_shard);
    }

    /// Entries of finished items are kept for a quick re-add, but only a few
    /// per shard.
    #[test]
    fn finished_items_leave_at_most_a_bounded_number_of_entries() {
        let q = Queue::new();
        for i in 0..10_000u32 {
            q.add(i);
        }
        while let Some(i) = q.try_take() {
            q.done(&i);
        }
        for shard in q.shards.shards.iter() {
            let state = shard.0.lock();
            assert!(state.items.len() <= IDLE_ENTRIES_PER_SHARD);
            assert_eq!(state.items.len(), state.idle);
        }
        // A kept entry is reused: the item is lined up again, once.
        q.add(7);
        q.add(7);
        assert_eq!(q.len(), 1);
        assert_eq!(q.try_take(), Some(7));
    }
}
