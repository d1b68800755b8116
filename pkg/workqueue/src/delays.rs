//! The items of a queue that wait for a deadline (client-go's
//! `delaying_queue.go`): earliest deadline first; of two delays for one
//! item the earlier wins.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::Hash;

use tokio::time::Instant;

use crate::fast_map::HashMap;

/// See the module docs.
pub(crate) struct Delays<T> {
    /// Deadlines, earliest first, with the sequence number of their entry.
    /// An entry whose deadline is not its item's in `until` was superseded
    /// by an earlier one and is skipped.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The item of each `heap` entry, by its sequence number.
    entries: HashMap<u64, T>,
    /// Each delayed item's earliest deadline.
    until: HashMap<T, Instant>,
    /// Sequence of entries (ties keep the order of `insert`).
    seq: u64,
}

impl<T: Eq + Hash + Clone> Delays<T> {
    pub(crate) fn new() -> Self {
        Delays {
            heap: BinaryHeap::new(),
            entries: HashMap::default(),
            until: HashMap::default(),
            seq: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Delays `item` until `deadline`, unless it is delayed until earlier.
    pub(crate) fn insert(&mut self, item: T, deadline: Instant) {
        if self.until.get(&item).is_some_and(|d| *d <= deadline) {
            return;
        }
        self.seq += 1;
        self.until.insert(item.clone(), deadline);
        self.entries.insert(self.seq, item);
        self.heap.push(Reverse((deadline, self.seq)));
    }

    /// The items whose deadline is at or before `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<T> {
        let mut due = Vec::new();
        while let Some(Reverse((deadline, seq))) = self.heap.peek().copied() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            let Some(item) = self.entries.remove(&seq) else {
                continue;
            };
            if self.until.get(&item) == Some(&deadline) {
                self.until.remove(&item);
                due.push(item);
            }
        }
        due
    }

    /// The earliest deadline (possibly of a superseded entry: waking early
    /// costs a look, never a lost item).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((deadline, _))| *deadline)
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::new();
    }
}
