//! A port of client-go's `tools/record`: Kubernetes Events that
//! `kubectl describe` shows, written without ever blocking the caller.
//!
//! - [`EventBroadcaster`] owns one writer task and a bounded buffer.
//! - [`EventRecorder`] (cheap to clone) stamps events with a source.
//!   [`EventRecorder::event`] only tries to enqueue: when the buffer is full
//!   the event is dropped, logged once, and counted in
//!   [`EventBroadcaster::dropped`].
//! - The writer correlates: an event identical to one already written (same
//!   object, type, reason, message, source) PATCHes that Event's `count` and
//!   `lastTimestamp`; a per-object token bucket (burst 25, one more every
//!   5 minutes — client-go's defaults) drops floods.
//!
//! ```no_run
//! # async fn demo(client: kube::Client, pod: k8s_openapi::api::core::v1::Pod) {
//! use record::{EventBroadcaster, EventType};
//! let broadcaster = EventBroadcaster::new(client);
//! let recorder = broadcaster.recorder("hossted-operator", "hossted-operator-7d9f");
//! recorder.event(&pod, EventType::Normal, "Reported", "3 apps reported");
//! broadcaster.shutdown().await; // writes what is buffered
//! # }
//! ```

mod correlator;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use correlator::{Correlator, Decision};
pub use correlator::{SPAM_BURST, SPAM_REFILL};

/// Events buffered between recorders and the writer (client-go: 1000).
pub const BUFFER: usize = 1000;
/// Write attempts per event before it is given up (with a log line).
const WRITE_ATTEMPTS: u32 = 3;

/// `Normal` or `Warning`, as `kubectl describe` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// An event on its way to the writer.
#[derive(Debug, Clone)]
pub(crate) struct PendingEvent {
    involved_object: ObjectReference,
    type_: EventType,
    reason: String,
    message: String,
    component: String,
    instance: String,
}

struct Shared {
    dropped: AtomicU64,
    warned_full: AtomicBool,
}

/// Owns the writer task; hands out [`EventRecorder`]s.
pub struct EventBroadcaster {
    tx: mpsc::Sender<PendingEvent>,
    shared: Arc<Shared>,
    writer: JoinHandle<()>,
}

impl EventBroadcaster {
    /// Starts the writer on the current Tokio runtime.
    pub fn new(client: Client) -> Self {
        let (tx, rx) = mpsc::channel(BUFFER);
        let shared = Arc::new(Shared {
            dropped: AtomicU64::new(0),
            warned_full: AtomicBool::new(false),
        });
        let writer = tokio::spawn(write_events(client, rx));
        EventBroadcaster { tx, shared, writer }
    }

    /// A recorder whose events carry `source.component = component` and
    /// `reportingController`/`reportingInstance`.
    pub fn recorder(&self, component: &str, instance: &str) -> EventRecorder {
        EventRecorder {
            tx: self.tx.clone(),
            shared: self.shared.clone(),
            component: component.to_string(),
            instance: instance.to_string(),
        }
    }

    /// Events dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Relaxed)
    }

    /// Stops accepting events, writes those buffered, and ends the writer.
    /// Recorders still alive keep the buffer open, so drop them first; the
    /// wait is bounded by `timeout`.
    pub async fn shutdown_within(self, timeout: Duration) {
        drop(self.tx);
        let mut writer = self.writer;
        if tokio::time::timeout(timeout, &mut writer).await.is_err() {
            log::warn!("events: writer did not finish within {timeout:?}; stopping it");
            writer.abort();
        }
    }

    /// [`shutdown_within`](Self::shutdown_within) 10 s.
    pub async fn shutdown(self) {
        self.shutdown_within(Duration::from_secs(10)).await;
    }
}

/// Records events about objects; never blocks (see the crate docs).
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<PendingEvent>,
    shared: Arc<Shared>,
    component: String,
    instance: String,
}

impl EventRecorder {
    /// Records an event about `obj`. Returns at once.
    pub fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        self.event_about(reference(obj), type_, reason, message);
    }

    /// Records an event about the object `involved` refers to (one whose
    /// type is not known here, e.g. an object that did not decode).
    /// Returns at once.
    pub fn event_about(
        &self,
        involved: ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let event = PendingEvent {
            involved_object: involved,
            type_,
            reason: reason.to_string(),
            message: cut_message(message),
            component: self.component.clone(),
            instance: self.instance.clone(),
        };
        match self.tx.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(e)) => {
                self.shared.dropped.fetch_add(1, Relaxed);
                if !self.shared.warned_full.swap(true, Relaxed) {
                    log::warn!(
                        "events: buffer of {BUFFER} is full, dropping events (first dropped: {} {} on {}); further drops are only counted",
                        e.type_.as_str(),
                        e.reason,
                        e.involved_object.name.as_deref().unwrap_or_default()
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                log::debug!("events: broadcaster is shut down; dropping {reason}");
            }
        }
    }
}

/// The longest message an Event (or a condition) carries, in bytes.
pub const MAX_MESSAGE: usize = 1024;

/// `message` cut to [`MAX_MESSAGE`] bytes on a character boundary, `…`
/// saying so. Whatever is redacted must be redacted before: a cut can
/// leave part of a secret no redactor recognises.
pub fn cut_message(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// An ObjectReference to `obj` (without resourceVersion, so that events
/// about successive versions of an object correlate, as in client-go).
fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(obj.name_any()),
        namespace: obj.namespace(),
        uid: obj.uid(),
        ..Default::default()
    }
}

async fn write_events(client: Client, mut rx: mpsc::Receiver<PendingEvent>) {
    let mut correlator = Correlator::new();
    let mut seq: u64 = 0;
    while let Some(event) = rx.recv().await {
        let decision = correlator.decide(&event);
        let key = event.identical_key();
        // A cluster-scoped object's events live in `default`, as in client-go.
        let namespace = event
            .involved_object
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        let now = Time(Timestamp::now());
        match decision {
            Decision::Drop => {
                log::debug!(
                    "events: spam filter dropped {} on {}",
                    event.reason,
                    event.involved_object.name.as_deref().unwrap_or_default()
                );
            }
            Decision::Bump { name, count } => {
                let patch =
                    Patch::Merge(serde_json::json!({ "count": count, "lastTimestamp": now }));
                let pp = PatchParams::default();
                match with_retries(|| api.patch(&name, &pp, &patch)).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        // The Event expired or was deleted: start a new one.
                        correlator.forget(&key);
                        seq += 1;
                        if let Some(name) = create(&api, &event, &namespace, now, seq).await {
                            correlator.written(key, name, 1);
                        }
                    }
                    Err(e) => log::warn!("events: could not update {namespace}/{name}: {e}"),
                }
            }
            Decision::Create => {
                seq += 1;
                if let Some(name) = create(&api, &event, &namespace, now, seq).await {
                    correlator.written(key, name, 1);
                }
            }
        }
    }
}

async fn create(
    api: &Api<Event>,
    e: &PendingEvent,
    namespace: &str,
    now: Time,
    seq: u64,
) -> Option<String> {
    // client-go names events `<object>.<unix nanos in hex>`; the sequence
    // number keeps two events of one nanosecond apart.
    let nanos = now.0.as_nanosecond();
    let name = format!(
        "{}.{:x}{:x}",
        e.involved_object.name.as_deref().unwrap_or("unknown"),
        nanos,
        seq
    );
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        involved_object: e.involved_object.clone(),
        reason: Some(e.reason.clone()),
        message: Some(e.message.clone()),
        type_: Some(e.type_.as_str().to_string()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(EventSource {
            component: Some(e.component.clone()),
            host: None,
        }),
        reporting_component: Some(e.component.clone()),
        reporting_instance: Some(e.instance.clone()),
        ..Default::default()
    };
    let pp = PostParams::default();
    match with_retries(|| api.create(&pp, &event)).await {
        Ok(_) => Some(name),
        Err(err) => {
            log::warn!(
                "events: could not write {} {} to {namespace}: {err}",
                e.type_.as_str(),
                e.reason
            );
            None
        }
    }
}

/// Retries transient failures (connection errors, 429, 5xx) a few times.
async fn with_retries<T, F, Fut>(mut f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match f().await {
            Err(kube::Error::Api(s)) if s.code != 429 && s.code < 500 => {
                return Err(kube::Error::Api(s));
            }
            Err(e) if attempt < WRITE_ATTEMPTS => {
                log::debug!("events: write failed (attempt {attempt}), retrying: {e}");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_cut_at_one_kib_on_a_character_boundary() {
        assert_eq!(cut_message("short"), "short");
        let exact = "x".repeat(MAX_MESSAGE);
        assert_eq!(cut_message(&exact), exact);
        // Multi-byte characters straddling the bound are never split.
        let long = "é".repeat(MAX_MESSAGE);
        let cut = cut_message(&long);
        assert!(cut.len() <= MAX_MESSAGE, "{}", cut.len());
        assert!(cut.ends_with('…') && cut.trim_end_matches('…').chars().all(|c| c == 'é'));
    }
}
