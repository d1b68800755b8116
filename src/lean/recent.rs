//! The objects of releases whose helm run of ours is in flight, kept whole
//! for a short while as the caches decode them — what the record after the
//! run proves the run's objects and reads Helm's storage from, instead of
//! a GET of each object and a LIST of the storage (docs/delivery.md, "What
//! the record reads").
//!
//! The caches keep a [`Fingerprint`](super::fingerprint::Fingerprint) of
//! each object, never its content; proving that a live object holds what
//! its manifest sets needs the content. While a [`Capturing`] guard names
//! a release, an object the caches decode that helm's annotations
//! (`meta.helm.sh/release-name`, `-namespace`) put in it — or a revision of
//! its storage (label `name`, its namespace) — is kept here, and the cached
//! version carries the number it is kept under ([`Fingerprint::kept`],
//! `HelmRelease::kept`). The record looks the number up from the version
//! the cache holds now, so the content it reads is that very version's —
//! never another cluster's object, never another version of it — and
//! [`Capturing::decoded_since`] tells a version decoded during the run
//! from one decoded before it.
//!
//! Who controls it: whoever may write the object (a tenant, its chart, a
//! remote cluster's owner). Its bound: [`MAX_BYTES`] in all (as [`weight`]
//! estimates the memory an object takes), [`MAX_RELEASE_BYTES`] of one
//! release (one whose objects churn pushes out its own oldest), [`MAX_ONE`]
//! for one object (a heavier one is not kept: the record reads it),
//! [`MAX_AGE`]; nothing of a release no run is in flight for and nothing
//! outside the release's namespace (no other Secret is kept, and writers
//! elsewhere fill no release's share); nothing at all while no run is (a
//! restart's LIST keeps nothing). The guard is taken before the run waits
//! for its helm slot, so "decoded during the run" may mean before helm
//! applied anything: the record checks what it reads against the
//! manifest, and reads a workload of an upgrade. It is only ever read by
//! the record, in this process; nothing here is written anywhere.
//!
//! [`Fingerprint::kept`]: super::fingerprint::Fingerprint::kept

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

/// At most this many bytes (as [`weight`] estimates them) are kept.
pub const MAX_BYTES: usize = 8 << 20;
/// At most this many of one release: a release whose objects churn while
/// its run is in flight pushes out its own, not the others' beyond this.
pub const MAX_RELEASE_BYTES: usize = 2 << 20;
/// An object heavier than this is not kept.
pub const MAX_ONE: usize = 512 << 10;
/// An object kept longer than this is dropped.
pub const MAX_AGE: Duration = Duration::from_secs(120);

/// Guards alive now — a hint read without the lock, so that a decode
/// while no run is in flight costs one atomic load. [`STATE`] decides.
static CAPTURING: AtomicUsize = AtomicUsize::new(0);
/// The number the next object is kept under (0 is "not kept").
static NEXT: AtomicU64 = AtomicU64::new(1);
static STATE: Mutex<State> = Mutex::new(State {
    releases: None,
    order: VecDeque::new(),
    objects: None,
    bytes: 0,
});

/// What is kept of one decoded object.
#[derive(Clone)]
enum Whole {
    /// An object as the API served it.
    Object(Arc<Value>),
    /// A revision of Helm's storage: its payload as stored (compressed).
    Payload(Arc<[u8]>),
}

/// Invariants: `releases` counts the live guards of each release
/// (`namespace/name`) and the bytes kept of it, none at zero guards;
/// nothing is in `objects` while it is empty; `order` holds the number of
/// every object in `objects`, oldest first, with its release and weight;
/// `bytes` is the sum of their weights and at most [`MAX_BYTES`], and a
/// release's at most [`MAX_RELEASE_BYTES`], once [`State::insert`]
/// returns. (`Option`s: a `static` cannot build a `HashMap`.)
struct State {
    releases: Option<HashMap<String, Release>>,
    order: VecDeque<Entry>,
    objects: Option<HashMap<u64, Whole>>,
    bytes: usize,
}

/// A release with a run in flight.
#[derive(Default)]
struct Release {
    guards: usize,
    bytes: usize,
}

/// One kept object, in [`State::order`].
struct Entry {
    number: u64,
    at: Instant,
    weight: usize,
    release: Arc<str>,
}

impl State {
    fn in_flight(&self, release: &str) -> bool {
        self.releases
            .as_ref()
            .is_some_and(|r| r.contains_key(release))
    }

    fn insert(&mut self, release: &str, number: u64, whole: Whole, weight: usize, now: Instant) {
        self.objects
            .get_or_insert_with(HashMap::new)
            .insert(number, whole);
        let release: Arc<str> = release.into();
        if let Some(r) = self.releases.as_mut().and_then(|r| r.get_mut(&*release)) {
            r.bytes += weight;
        }
        self.order.push_back(Entry {
            number,
            at: now,
            weight,
            release: release.clone(),
        });
        self.bytes += weight;
        self.expire(now);
        while self.release_bytes(&release) > MAX_RELEASE_BYTES {
            let Some(at) = self.order.iter().position(|e| e.release == release) else {
                break;
            };
            self.drop_at(at);
        }
    }

    fn release_bytes(&self, release: &str) -> usize {
        self.releases
            .as_ref()
            .and_then(|r| r.get(release))
            .map_or(0, |r| r.bytes)
    }

    /// Drops the oldest objects while over [`MAX_BYTES`] or older than
    /// [`MAX_AGE`].
    fn expire(&mut self, now: Instant) {
        while let Some(front) = self.order.front() {
            if self.bytes <= MAX_BYTES && now.duration_since(front.at) <= MAX_AGE {
                break;
            }
            self.drop_at(0);
        }
    }

    fn drop_at(&mut self, at: usize) {
        let Some(e) = self.order.remove(at) else {
            return;
        };
        self.bytes -= e.weight;
        if let Some(r) = self.releases.as_mut().and_then(|r| r.get_mut(&*e.release)) {
            r.bytes = r.bytes.saturating_sub(e.weight);
        }
        if let Some(objects) = &mut self.objects {
            objects.remove(&e.number);
        }
    }
}

/// While alive, the caches keep whole what they decode of one release
/// (see the module docs). Held by a reconcile from before its helm run
/// starts until the run is recorded.
#[must_use]
#[derive(Debug)]
pub struct Capturing {
    /// `namespace/name` of the release.
    release: String,
    /// Every object kept from now on is kept under a number at least
    /// this: what was decoded after the guard was taken.
    since: u64,
}

impl Capturing {
    /// Starts keeping what the caches decode of release `name` in
    /// `namespace`.
    pub fn start(namespace: &str, name: &str) -> Self {
        let release = format!("{namespace}/{name}");
        let mut state = STATE.lock();
        state
            .releases
            .get_or_insert_with(HashMap::new)
            .entry(release.clone())
            .or_default()
            .guards += 1;
        CAPTURING.fetch_add(1, Relaxed);
        Capturing {
            release,
            since: NEXT.load(Relaxed),
        }
    }

    /// Whether the object kept under `number` was decoded after this
    /// guard was taken.
    pub fn decoded_since(&self, number: u64) -> bool {
        number >= self.since
    }
}

impl Drop for Capturing {
    fn drop(&mut self) {
        let mut state = STATE.lock();
        if let Some(releases) = &mut state.releases
            && let Some(r) = releases.get_mut(&self.release)
        {
            r.guards -= 1;
            if r.guards == 0 {
                releases.remove(&self.release);
            }
        }
        CAPTURING.fetch_sub(1, Relaxed);
        if state.releases.as_ref().is_none_or(HashMap::is_empty) {
            // The last run recorded: what is kept serves no one now.
            state.order.clear();
            state.objects = None;
            state.bytes = 0;
        }
    }
}

/// Whether a decoded object might be kept now (a hint: [`keep`] decides).
pub fn capturing() -> bool {
    CAPTURING.load(Relaxed) > 0
}

/// The release (`namespace/name`) helm's annotations put `object` in —
/// only an object in the release's own namespace: the record proves no
/// other from the cache, and another namespace's writer cannot fill a
/// release's share.
fn release_of(object: &Value) -> Option<String> {
    let annotations = object.pointer("/metadata/annotations")?;
    let name = annotations.get("meta.helm.sh/release-name")?.as_str()?;
    let namespace = annotations
        .get("meta.helm.sh/release-namespace")?
        .as_str()?;
    let own = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        == Some(namespace);
    own.then(|| format!("{namespace}/{name}"))
}

/// Whether [`keep`] would keep `object` now: of a release a run is in
/// flight for, and light enough. Asked before the decode, which then
/// reads the object without consuming it.
pub fn wanted(object: &Value) -> bool {
    if !capturing() {
        return false;
    }
    release_of(object).is_some_and(|r| STATE.lock().in_flight(&r))
        && weight(object, MAX_ONE) <= MAX_ONE
}

/// Keeps `object` if [`wanted`]: the number it is kept under, or 0.
pub fn keep(object: Value) -> u64 {
    if !capturing() {
        return 0;
    }
    let (Some(release), weight) = (release_of(&object), weight(&object, MAX_ONE)) else {
        return 0;
    };
    insert(&release, Whole::Object(Arc::new(object)), weight)
}

/// Keeps the payload of a revision of release `name` in `namespace`'s
/// storage, as [`keep`] does an object.
pub fn keep_payload(namespace: &str, name: &str, payload: &[u8]) -> u64 {
    if !capturing() || payload.len() > MAX_ONE {
        return 0;
    }
    let release = format!("{namespace}/{name}");
    insert(&release, Whole::Payload(payload.into()), payload.len())
}

fn insert(release: &str, whole: Whole, weight: usize) -> u64 {
    if weight > MAX_ONE {
        return 0;
    }
    let mut state = STATE.lock();
    // Decided under the lock the last guard's drop clears under: nothing
    // is kept once no run is in flight.
    if !state.in_flight(release) {
        return 0;
    }
    let number = NEXT.fetch_add(1, Relaxed);
    state.insert(release, number, whole, weight, Instant::now());
    number
}

fn whole(number: u64) -> Option<Whole> {
    if number == 0 {
        return None;
    }
    let mut state = STATE.lock();
    state.expire(Instant::now());
    state.objects.as_ref()?.get(&number).cloned()
}

/// The object kept under `number`, if it still is.
pub fn get(number: u64) -> Option<Arc<Value>> {
    match whole(number)? {
        Whole::Object(o) => Some(o),
        Whole::Payload(_) => None,
    }
}

/// The payload kept under `number`, if it still is.
pub fn payload(number: u64) -> Option<Arc<[u8]>> {
    match whole(number)? {
        Whole::Payload(p) => Some(p),
        Whole::Object(_) => None,
    }
}

/// About the memory `value` takes once parsed, in bytes: 32 a node (a
/// `Value`), a string's bytes, 64 and the key's bytes a member of an
/// object (its map entry) — counted no further than past `limit`.
pub fn weight(value: &Value, limit: usize) -> usize {
    let mut total = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        total += 32;
        match v {
            Value::String(s) => total += s.len(),
            Value::Array(items) => stack.extend(items),
            Value::Object(fields) => {
                for (k, v) in fields {
                    total += 64 + k.len();
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

    fn empty() -> State {
        State {
            releases: None,
            order: VecDeque::new(),
            objects: None,
            bytes: 0,
        }
    }

    fn of(release: &str, name: &str) -> Value {
        let (ns, rel) = release.split_once('/').unwrap();
        json!({ "metadata": { "name": name, "namespace": ns, "annotations": {
            "meta.helm.sh/release-name": rel, "meta.helm.sh/release-namespace": ns } } })
    }

    #[test]
    fn the_oldest_go_first_once_over_the_byte_bound() {
        let mut state = empty();
        let now = Instant::now();
        let each = MAX_BYTES / 4;
        for number in 1..=5 {
            let whole = Whole::Object(Arc::new(json!(number)));
            state.insert(&format!("ns/r{number}"), number, whole, each, now);
        }
        assert!(state.bytes <= MAX_BYTES);
        let objects = state.objects.as_ref().unwrap();
        assert!(!objects.contains_key(&1), "the oldest is dropped");
        assert!((2..=5).all(|n| objects.contains_key(&n)));
        assert_eq!(state.order.len(), objects.len());
    }

    #[test]
    fn a_release_over_its_share_pushes_out_its_own_oldest_not_the_others() {
        let mut state = empty();
        let releases = state.releases.get_or_insert_with(HashMap::new);
        for r in ["ns/churn", "ns/quiet"] {
            releases.insert(
                r.into(),
                Release {
                    guards: 1,
                    bytes: 0,
                },
            );
        }
        let now = Instant::now();
        let quiet = Whole::Object(Arc::new(json!("quiet")));
        state.insert("ns/quiet", 1, quiet, 1000, now);
        for number in 2..40 {
            let churn = Whole::Payload(b"churn"[..].into());
            state.insert("ns/churn", number, churn, MAX_RELEASE_BYTES / 8, now);
        }
        let objects = state.objects.as_ref().unwrap();
        assert!(objects.contains_key(&1), "the other release's object stays");
        assert!(!objects.contains_key(&2), "its own oldest went");
        assert!(state.release_bytes("ns/churn") <= MAX_RELEASE_BYTES);
        assert_eq!(
            state.bytes,
            state.order.iter().map(|e| e.weight).sum::<usize>()
        );
    }

    #[test]
    fn an_object_older_than_the_age_bound_is_dropped() {
        let mut state = empty();
        let then = Instant::now();
        state.insert("ns/r", 1, Whole::Payload(b"x"[..].into()), 10, then);
        state.expire(then + MAX_AGE + Duration::from_secs(1));
        assert!(state.objects.as_ref().unwrap().is_empty());
        assert_eq!(state.bytes, 0);
    }

    #[test]
    fn only_objects_of_a_release_in_flight_and_light_enough_are_kept() {
        let _run = Capturing::start("recent-a", "web");
        let heavy = json!({ "metadata": { "annotations": {
            "meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "recent-a",
            "a": "x".repeat(MAX_ONE) } } });
        assert!(!wanted(&heavy));
        assert_eq!(keep(heavy), 0, "read by GET instead");
        let other = of("recent-a/db", "db-0");
        assert!(!wanted(&other), "another release: not in flight");
        assert_eq!(keep(other), 0);
        let mut elsewhere = of("recent-a/web", "planted");
        elsewhere["metadata"]["namespace"] = json!("tenant-b");
        assert!(!wanted(&elsewhere), "outside the release's namespace");
        assert_eq!(keep(elsewhere), 0);
        assert_eq!(keep(json!({ "metadata": { "name": "unlabelled" } })), 0);
        let light = of("recent-a/web", "web-0");
        assert!(wanted(&light));
        let number = keep(light.clone());
        assert_ne!(number, 0);
        assert_eq!(get(number).as_deref(), Some(&light));
        assert_eq!(get(0), None, "0 is never a kept object");
        assert_eq!(payload(number), None, "an object is no payload");
    }

    #[test]
    fn a_release_is_kept_while_a_guard_names_it_and_no_longer() {
        let first = Capturing::start("recent-b", "web");
        let second = Capturing::start("recent-b", "web");
        drop(first);
        assert_ne!(keep(of("recent-b/web", "still")), 0, "one guard left");
        drop(second);
        assert_eq!(keep(of("recent-b/web", "after")), 0, "no guard left");
        assert_eq!(keep_payload("recent-b", "web", b"after"), 0);
    }

    #[test]
    fn a_guard_tells_what_was_decoded_after_it_was_taken() {
        let _other = Capturing::start("recent-c", "web");
        let before = keep_payload("recent-c", "web", b"before");
        let run = Capturing::start("recent-c", "web");
        let after = keep_payload("recent-c", "web", b"after");
        assert_ne!(before, 0);
        assert!(!run.decoded_since(before));
        assert!(run.decoded_since(after));
        assert_eq!(payload(after).as_deref(), Some(&b"after"[..]));
        assert_eq!(keep_payload("recent-c", "web", &vec![0; MAX_ONE + 1]), 0);
    }

    #[test]
    fn weight_counts_what_a_parsed_object_takes_and_stops_past_its_limit() {
        let huge = json!({ "a": "x".repeat(1 << 20), "b": vec!["y"; 1000] });
        let w = weight(&huge, 1024);
        assert!(w > 1024 && w < (1 << 20) + 256, "{w}");
        // 24,000 three-byte keys with empty values: ~72 KB of key text,
        // about 2.6 MB parsed — weighed as at least 100 bytes a member.
        let keys: serde_json::Map<String, Value> = (0..24_000)
            .map(|i| (format!("{i:03}"), json!("")))
            .collect();
        assert!(weight(&Value::Object(keys), usize::MAX) >= 24_000 * 100);
    }
}
