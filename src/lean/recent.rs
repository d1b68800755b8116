//! The objects the caches decoded while a helm run of ours was in flight,
//! kept whole for a short while — what the record after the run proves
//! the run's objects from instead of a GET of each (docs/delivery.md,
//! "What the record reads").
//!
//! The caches keep a [`Fingerprint`](super::fingerprint::Fingerprint) of
//! each object, never its content; proving that a live object holds what
//! its manifest sets needs the content. An object decoded while at least
//! one [`Capturing`] guard is alive is kept here, and its fingerprint
//! carries the number it is kept under ([`Fingerprint::kept`]): the
//! record looks the number up from the object the cache holds now, so the
//! content it proves is the content of that very cached version — never
//! another cluster's object, never an older version of it.
//!
//! Who controls it: whoever may write the object (a tenant, its chart, a
//! remote cluster's owner). Its bound: [`MAX_BYTES`] in all (estimated by
//! [`weight`]), [`MAX_ONE`] for one object (a larger one is not kept: the
//! record reads it by GET), [`MAX_AGE`]; nothing is kept while no run is
//! in flight (a restart's LIST keeps nothing). It is only ever read by the
//! record, in this process; nothing here is written anywhere.
//!
//! [`Fingerprint::kept`]: super::fingerprint::Fingerprint::kept

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

/// At most this many bytes (as [`weight`] counts them) are kept.
pub const MAX_BYTES: usize = 4 << 20;
/// An object heavier than this is not kept.
pub const MAX_ONE: usize = 256 << 10;
/// An object kept longer than this is dropped.
pub const MAX_AGE: Duration = Duration::from_secs(120);

/// Guards alive now: objects are kept only while this is above zero.
static CAPTURING: AtomicUsize = AtomicUsize::new(0);
/// The number the next object is kept under (0 is "not kept").
static NEXT: AtomicU64 = AtomicU64::new(1);
static KEPT: Mutex<Kept> = Mutex::new(Kept {
    order: VecDeque::new(),
    objects: None,
    bytes: 0,
});

/// Invariants: `order` holds the number of every object in `objects`,
/// oldest first; `bytes` is the sum of their weights and at most
/// [`MAX_BYTES`] once [`Kept::insert`] returns.
struct Kept {
    order: VecDeque<(u64, Instant, usize)>,
    /// `None` until the first object is kept (a `static` cannot build a
    /// `HashMap`).
    objects: Option<HashMap<u64, Arc<Value>>>,
    bytes: usize,
}

impl Kept {
    fn insert(&mut self, number: u64, value: Value, weight: usize, now: Instant) {
        self.objects
            .get_or_insert_with(HashMap::new)
            .insert(number, Arc::new(value));
        self.order.push_back((number, now, weight));
        self.bytes += weight;
        self.expire(now);
    }

    /// Drops the oldest objects while over [`MAX_BYTES`] or older than
    /// [`MAX_AGE`].
    fn expire(&mut self, now: Instant) {
        while let Some(&(number, at, weight)) = self.order.front() {
            if self.bytes <= MAX_BYTES && now.duration_since(at) <= MAX_AGE {
                break;
            }
            self.order.pop_front();
            self.bytes -= weight;
            if let Some(objects) = &mut self.objects {
                objects.remove(&number);
            }
        }
    }
}

/// While alive, the caches keep what they decode (see the module docs).
/// Held by a reconcile from before its helm run starts until the run is
/// recorded.
#[must_use]
#[derive(Debug)]
pub struct Capturing(());

impl Capturing {
    pub fn start() -> Self {
        CAPTURING.fetch_add(1, Relaxed);
        Capturing(())
    }
}

impl Drop for Capturing {
    fn drop(&mut self) {
        if CAPTURING.fetch_sub(1, Relaxed) == 1 {
            // The last run recorded: what is kept serves no one now.
            let mut kept = KEPT.lock();
            kept.order.clear();
            kept.objects = None;
            kept.bytes = 0;
        }
    }
}

/// Whether a decoded object would be kept now.
pub fn capturing() -> bool {
    CAPTURING.load(Relaxed) > 0
}

/// Keeps `value` if a run is in flight and it is light enough: the number
/// it is kept under, or 0.
pub fn keep(value: Value) -> u64 {
    if !capturing() {
        return 0;
    }
    let weight = weight(&value, MAX_ONE);
    if weight > MAX_ONE {
        return 0;
    }
    let number = NEXT.fetch_add(1, Relaxed);
    KEPT.lock().insert(number, value, weight, Instant::now());
    number
}

/// The object kept under `number`, if it still is.
pub fn get(number: u64) -> Option<Arc<Value>> {
    if number == 0 {
        return None;
    }
    let mut kept = KEPT.lock();
    kept.expire(Instant::now());
    kept.objects.as_ref()?.get(&number).cloned()
}

/// About the bytes `value` takes as JSON text (each string's length, 8 for
/// any other node), counted no further than past `limit`.
pub fn weight(value: &Value, limit: usize) -> usize {
    let mut total = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        total += 8;
        match v {
            Value::String(s) => total += s.len(),
            Value::Array(items) => stack.extend(items),
            Value::Object(fields) => {
                for (k, v) in fields {
                    total += k.len();
                    stack.push(v);
                }
            }
            _ => {}
        }
        if total > limit {
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_oldest_go_first_once_over_the_byte_bound() {
        let mut kept = Kept {
            order: VecDeque::new(),
            objects: None,
            bytes: 0,
        };
        let now = Instant::now();
        let each = MAX_BYTES / 4;
        for number in 1..=5 {
            kept.insert(number, json!(number), each, now);
        }
        assert!(kept.bytes <= MAX_BYTES);
        let objects = kept.objects.as_ref().unwrap();
        assert!(!objects.contains_key(&1), "the oldest is dropped");
        assert!((2..=5).all(|n| objects.contains_key(&n)));
        assert_eq!(kept.order.len(), objects.len());
    }

    #[test]
    fn an_object_older_than_the_age_bound_is_dropped() {
        let mut kept = Kept {
            order: VecDeque::new(),
            objects: None,
            bytes: 0,
        };
        let then = Instant::now();
        kept.insert(1, json!(1), 10, then);
        kept.expire(then + MAX_AGE + Duration::from_secs(1));
        assert!(kept.objects.as_ref().unwrap().is_empty());
        assert_eq!(kept.bytes, 0);
    }

    #[test]
    fn an_object_heavier_than_its_bound_is_not_kept_a_light_one_is_as_decoded() {
        let _run = Capturing::start();
        let heavy = json!({ "metadata": { "annotations": { "a": "x".repeat(MAX_ONE) } } });
        assert_eq!(keep(heavy), 0, "read by GET instead");
        let light = json!({ "metadata": { "name": "web" }, "spec": { "replicas": 2 } });
        let number = keep(light.clone());
        assert_ne!(number, 0);
        assert_eq!(get(number).as_deref(), Some(&light));
        assert_eq!(get(0), None, "0 is never a kept object");
    }

    #[test]
    fn weight_stops_counting_past_its_limit() {
        let huge = json!({ "a": "x".repeat(1 << 20), "b": vec!["y"; 1000] });
        let w = weight(&huge, 1024);
        assert!(w > 1024 && w < (1 << 20) + 64, "{w}");
        assert!(weight(&json!({"k": "vv"}), usize::MAX) >= 3);
    }
}
