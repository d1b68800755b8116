//! Client-go's EventCorrelator, minus the I/O: decides for each event whether
//! to drop it (spam filter), create it, or bump the count of an identical one.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::PendingEvent;

/// client-go: at most this many keys are remembered by each cache.
const MAX_ENTRIES: usize = 4096;
/// client-go's spam filter: a burst of 25 events per object...
pub const SPAM_BURST: u32 = 25;
/// ... then one more every 5 minutes.
pub const SPAM_REFILL: Duration = Duration::from_secs(300);

/// What to do with an event.
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    /// The object's token bucket is empty.
    Drop,
    /// A new Event; `count` is 1.
    Create,
    /// Identical to the Event `name`: set its count and lastTimestamp.
    Bump { name: String, count: i32 },
}

/// The key of identical events: source, object, type, reason and message —
/// kept as a digest of them, not their text (4,096 keys of long messages
/// were megabytes; a digest is 16 bytes, and SHA-256 leaves no one a way
/// to make two events' keys collide).
#[derive(Hash, PartialEq, Eq, Clone, Copy, Debug)]
pub(crate) struct IdenticalKey([u8; 16]);

/// The key of the spam filter: source and object (a digest, as above).
#[derive(Hash, PartialEq, Eq, Clone, Copy, Debug)]
pub(crate) struct ObjectKey([u8; 16]);

/// The first 16 bytes of SHA-256 over `parts`, each length-prefixed (no
/// two different lists of parts read the same).
fn digest(parts: &[&str]) -> [u8; 16] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    let mut out = [0; 16];
    out.copy_from_slice(&h.finalize()[..16]);
    out
}

impl PendingEvent {
    fn object_parts(&self) -> [&str; 6] {
        let o = &self.involved_object;
        [
            self.component.as_str(),
            o.api_version.as_deref().unwrap_or_default(),
            o.kind.as_deref().unwrap_or_default(),
            o.namespace.as_deref().unwrap_or_default(),
            o.name.as_deref().unwrap_or_default(),
            o.uid.as_deref().unwrap_or_default(),
        ]
    }

    fn object_key(&self) -> ObjectKey {
        ObjectKey(digest(&self.object_parts()))
    }

    pub(crate) fn identical_key(&self) -> IdenticalKey {
        let [a, b, c, d, e, f] = self.object_parts();
        IdenticalKey(digest(&[
            a,
            b,
            c,
            d,
            e,
            f,
            self.type_.as_str(),
            &self.reason,
            &self.message,
        ]))
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The correlator's memory: spam buckets per object and the last Event
/// written per identical key.
pub(crate) struct Correlator {
    buckets: BoundedMap<ObjectKey, Bucket>,
    seen: BoundedMap<IdenticalKey, (String, i32)>,
}

impl Correlator {
    pub fn new() -> Self {
        Correlator {
            buckets: BoundedMap::new(MAX_ENTRIES),
            seen: BoundedMap::new(MAX_ENTRIES),
        }
    }

    /// Decides what to do with `event` and updates the memory as if it is done.
    pub fn decide(&mut self, event: &PendingEvent) -> Decision {
        let now = Instant::now();
        let bucket = self
            .buckets
            .get_or_insert_with(event.object_key(), || Bucket {
                tokens: f64::from(SPAM_BURST),
                at: now,
            });
        let refill =
            now.saturating_duration_since(bucket.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refill).min(f64::from(SPAM_BURST));
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return Decision::Drop;
        }
        bucket.tokens -= 1.0;
        match self.seen.get_mut(&event.identical_key()) {
            Some((name, count)) => {
                *count = count.saturating_add(1);
                Decision::Bump {
                    name: name.clone(),
                    count: *count,
                }
            }
            None => Decision::Create,
        }
    }

    /// Records that `key` was written as the Event `name` with `count`.
    pub fn written(&mut self, key: IdenticalKey, name: String, count: i32) {
        *self.seen.get_or_insert_with(key, || (String::new(), 0)) = (name, count);
    }

    /// Forgets the Event written for `key` (it vanished: create anew).
    pub fn forget(&mut self, key: &IdenticalKey) {
        self.seen.remove(key);
    }
}

/// A map that forgets its oldest keys beyond `cap` entries.
struct BoundedMap<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: Hash + Eq + Clone, V> BoundedMap<K, V> {
    fn new(cap: usize) -> Self {
        BoundedMap {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k)
    }

    fn remove(&mut self, k: &K) {
        if self.map.remove(k).is_some() {
            self.order.retain(|o| o != k);
        }
    }

    fn get_or_insert_with(&mut self, k: K, f: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(&k) {
            if self.map.len() >= self.cap
                && let Some(oldest) = self.order.pop_front()
            {
                self.map.remove(&oldest);
            }
            self.order.push_back(k.clone());
        }
        self.map.entry(k).or_insert_with(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventType;
    use k8s_openapi::api::core::v1::ObjectReference;

    fn event(name: &str, message: &str) -> PendingEvent {
        PendingEvent {
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            type_: EventType::Normal,
            reason: "Test".into(),
            message: message.into(),
            component: "test".into(),
            instance: "test-1".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn identical_events_bump_the_count() {
        let mut c = Correlator::new();
        let e = event("p", "same");
        assert_eq!(c.decide(&e), Decision::Create);
        c.written(e.identical_key(), "p.1".into(), 1);
        assert_eq!(
            c.decide(&e),
            Decision::Bump {
                name: "p.1".into(),
                count: 2
            }
        );
        assert_eq!(
            c.decide(&e),
            Decision::Bump {
                name: "p.1".into(),
                count: 3
            }
        );
        // Another message is another event.
        assert_eq!(c.decide(&event("p", "other")), Decision::Create);
    }

    #[tokio::test(start_paused = true)]
    async fn the_spam_filter_allows_a_burst_then_one_per_refill_period() {
        let mut c = Correlator::new();
        for i in 0..SPAM_BURST {
            assert_eq!(
                c.decide(&event("p", &i.to_string())),
                Decision::Create,
                "event {i}"
            );
        }
        assert_eq!(c.decide(&event("p", "one too many")), Decision::Drop);
        // Other objects have their own bucket.
        assert_eq!(c.decide(&event("q", "x")), Decision::Create);
        tokio::time::advance(SPAM_REFILL).await;
        assert_eq!(c.decide(&event("p", "after refill")), Decision::Create);
        assert_eq!(c.decide(&event("p", "again")), Decision::Drop);
    }

    #[test]
    fn bounded_map_forgets_the_oldest() {
        let mut m = BoundedMap::new(2);
        *m.get_or_insert_with("a", || 0) += 1;
        *m.get_or_insert_with("b", || 0) += 1;
        *m.get_or_insert_with("c", || 0) += 1;
        assert!(m.get_mut(&"a").is_none());
        assert_eq!(m.get_mut(&"c").copied(), Some(1));
    }
}
