//! Client-go's Reflector: keeps a sink in step with the API server by LIST
//! then WATCH, as an explicit state machine.
//!
//! ```text
//!        ┌────────── 410 Gone / expired continue ──────────┐
//!        ▼                                                  │
//!   ┌─────────┐  ok: Replace(all), rv   ┌───────────────┐   │
//!   │  List   │────────────────────────►│  Watch { rv } │───┘
//!   └─────────┘                          └───────────────┘
//!     │ error ▲                            │ server closed: re-watch from the last rv
//!     ▼       │                            │ (no relist); bookmarks advance rv
//!   ┌─────────────┐◄───────────────────────┘ error: back off, re-watch from the last rv
//!   │  Backoff    │
//!   └─────────────┘  800 ms doubling to 30 s, jittered; reset by a success
//! ```
//!
//! With [`ListWatchConfig::max_objects`], a LIST that brings more objects
//! and a watch that would store one more end in the backoff too (the watch
//! then relists), on a backoff of their own that no success in between
//! resets: an API server that keeps lying is asked less and less often.

use std::fmt::{self, Debug};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::Request;
use kube::{Api, Resource};
use serde::Deserialize;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess,
    Visitor,
};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::decoded::{Decoded, Refusal};
use crate::object_key;

/// What a reflector reports, before any transform.
pub(crate) trait Sink<K>: Send + Sync {
    /// The complete current state (after each LIST). `refused`: keys
    /// (`namespace/name`) of objects listed that did not decode — the
    /// cache keeps the version it last could read of each.
    fn replace(&self, objs: Vec<K>, refused: &[String]);
    /// An object was added or modified.
    fn upsert(&self, obj: K);
    /// An object was deleted; `obj` is its final state.
    fn delete(&self, obj: K);
    /// An object was deleted whose final state did not decode.
    fn delete_key(&self, key: &str);
    /// An object (a version of it) did not decode and was skipped.
    fn refused(&self, refusal: &Refusal);
    /// How many objects the sink holds. O(1): read for every object a
    /// watch adds while [`ListWatchConfig::max_objects`] is set.
    fn len(&self) -> usize;
    /// Whether the sink holds an object under `key` (`namespace/name`).
    fn contains(&self, key: &str) -> bool;
}

/// One LIST page, each object decoded on its own ([`Decoded`]), and at
/// most `room` of them ([`Page::read`]): a server that ignores `limit`
/// cannot make one page decode into more objects than the informer's
/// bound. Not kube's `ObjectList`: its flattened fields make serde buffer
/// the whole page, recursively, before any item is read.
struct Page<K> {
    metadata: ListMeta,
    /// Invariant: at most the `room` the page was read with.
    items: Vec<Decoded<K>>,
    /// The page had more than `room` items; those past it were skipped
    /// without being decoded.
    overflowed: bool,
}

impl<K: DeserializeOwned> Page<K> {
    /// `text` (a LIST response) as a page of at most `room` objects.
    fn read(text: &str, room: usize) -> Result<Self, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        let page = PageSeed::<K>::new(room).deserialize(&mut de)?;
        de.end()?;
        Ok(page)
    }
}

/// The fields of a LIST page the reflector reads.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum PageField {
    Metadata,
    Items,
    #[serde(other)]
    Other,
}

/// Reads a [`Page`] (a JSON object) of at most `room` objects.
struct PageSeed<K> {
    room: usize,
    kind: PhantomData<fn() -> K>,
}

impl<K> PageSeed<K> {
    fn new(room: usize) -> Self {
        PageSeed {
            room,
            kind: PhantomData,
        }
    }
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for PageSeed<K> {
    type Value = Page<K>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Page<K>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for PageSeed<K> {
    type Value = Page<K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a LIST page")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Page<K>, A::Error> {
        let mut page = Page {
            metadata: ListMeta::default(),
            items: Vec::new(),
            overflowed: false,
        };
        while let Some(field) = map.next_key::<PageField>()? {
            match field {
                PageField::Metadata => {
                    page.metadata = map.next_value::<Option<ListMeta>>()?.unwrap_or_default();
                }
                PageField::Items => {
                    (page.items, page.overflowed) =
                        map.next_value_seed(ItemsSeed::<K>::new(self.room))?;
                }
                PageField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(page)
    }
}

/// Reads a page's `items` (`null`: none): at most `room` decoded, the
/// rest skipped; whether there was a rest.
struct ItemsSeed<K> {
    room: usize,
    kind: PhantomData<fn() -> K>,
}

impl<K> ItemsSeed<K> {
    fn new(room: usize) -> Self {
        ItemsSeed {
            room,
            kind: PhantomData,
        }
    }
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<K> {
    type Value = (Vec<Decoded<K>>, bool);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ItemsSeed<K> {
    type Value = (Vec<Decoded<K>>, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((Vec::new(), false))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((Vec::new(), false))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Not the size the server announces: it may lie.
        let mut items = Vec::new();
        while items.len() < self.room {
            match seq.next_element::<Decoded<K>>()? {
                Some(item) => items.push(item),
                None => return Ok((items, false)),
            }
        }
        let mut overflowed = false;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            overflowed = true;
        }
        Ok((items, overflowed))
    }
}

/// Marks the requests of a reflector's watches (an `http` request
/// extension), for a client layer that treats a watch apart — one that
/// bounds every other answer's time, say. A mark the reflector sets, not
/// the request's query: a name in a path can carry `?watch=1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchRequest;

/// Which objects a reflector mirrors, and how it pages and watches.
#[derive(Debug, Clone)]
pub struct ListWatchConfig {
    /// `None`: all namespaces (or a cluster-scoped type).
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Objects per LIST page (client-go: 500).
    pub page_size: u32,
    /// The server ends each watch after this long, randomized to 1–2× half of
    /// it (client-go: 5–10 min; kube caps a watch at 295 s).
    pub watch_timeout: Duration,
    /// First retry delay after an error (doubles to 30 s).
    pub initial_backoff: Duration,
    /// A watch that brings no event and no bookmark for this long is
    /// restarted from its last resourceVersion, and a LIST page that takes
    /// this long is retried: on a half-open connection (the apiserver stopped
    /// answering, the TCP connection stayed up) nothing else would ever end
    /// them, and the cache would go stale without a sign. The apiserver sends
    /// a bookmark about once a minute on an idle watch.
    pub progress_timeout: Duration,
    /// At most this many objects in the cache (`None`: no bound). A LIST
    /// that brings more (counting those that do not decode) is refused
    /// whole — the cache keeps what it held — and a watch event that would
    /// store one more ends the watch; both back off, then list again. For
    /// a cluster whose API server is not ours to trust
    /// (docs/remote-clusters.md): it could answer a LIST with pages
    /// without end, or a watch with additions without end, and grow the
    /// operator's memory until it dies.
    pub max_objects: Option<usize>,
    /// LISTs of the reflectors sharing these slots run at most as many at
    /// once as it has permits (`None`: no such bound). With
    /// [`Self::max_objects`], the memory a lying API server can make the
    /// informers of one factory hold in LISTs under way is one LIST's
    /// worth per permit, not one per informer.
    pub list_slots: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

impl Default for ListWatchConfig {
    fn default() -> Self {
        ListWatchConfig {
            namespace: None,
            label_selector: None,
            field_selector: None,
            page_size: 500,
            watch_timeout: Duration::from_secs(290),
            initial_backoff: Duration::from_millis(800),
            progress_timeout: Duration::from_secs(180),
            max_objects: None,
            list_slots: None,
        }
    }
}

/// Counters of what a reflector asked the API server for.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Complete LISTs (each possibly several pages).
    pub lists: AtomicU64,
    /// LIST page requests.
    pub list_pages: AtomicU64,
    /// WATCH requests.
    pub watches: AtomicU64,
    /// Relists forced by `410 Gone`.
    pub relists_after_gone: AtomicU64,
    /// Errors met (each followed by a backoff).
    pub errors: AtomicU64,
    /// Watches and LIST pages given up for making no progress within
    /// [`ListWatchConfig::progress_timeout`] (also counted in `errors`).
    pub stalls: AtomicU64,
    /// Object versions that did not decode and were skipped (each
    /// reported to the sink; the LIST or watch went on).
    pub refused: AtomicU64,
    /// LISTs and watches given up for bringing more objects than
    /// [`ListWatchConfig::max_objects`] (also counted in `errors`).
    pub too_many: AtomicU64,
}

enum State {
    List,
    Watch {
        rv: String,
    },
    /// Waits `delay`, then watches from `then_rv`, or lists when `None`.
    Backoff {
        then_rv: Option<String>,
        delay: Duration,
    },
}

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// After this long without a refusal for [`ListWatchConfig::max_objects`],
/// the refusals' backoff starts over.
const REFUSALS_FORGOTTEN_AFTER: Duration = Duration::from_secs(300);

/// The backoff after refusals for [`ListWatchConfig::max_objects`]. Apart
/// from the error backoff, which the honest LIST before a lying watch (and
/// the watch's own events) would reset at every round: a server that keeps
/// lying is asked less and less often, up to [`MAX_BACKOFF`] apart.
struct Refusals {
    backoff: Backoff,
    /// When the last refusal was met. Invariant: `None` until the first.
    last: Option<Instant>,
}

impl Refusals {
    fn new(initial: Duration) -> Self {
        Refusals {
            backoff: Backoff::new(initial, MAX_BACKOFF),
            last: None,
        }
    }

    /// The wait after a refusal met now.
    fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) > REFUSALS_FORGOTTEN_AFTER)
        {
            self.backoff.reset();
        }
        self.last = Some(now);
        self.backoff.next_delay()
    }
}

/// Why a LIST did not complete.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {0:?}: the connection looks dead")]
    Stalled(Duration),
    /// More objects (decoded or refused) than [`ListWatchConfig::max_objects`].
    #[error("more than {0} objects: refused (this cluster's informers are bounded)")]
    TooMany(usize),
}

enum WatchEnd {
    /// The server ended the watch; resume from this rv.
    Closed(String),
    /// The rv is too old (410): relist.
    Gone,
    /// A failure; resume from this rv after a backoff.
    Failed(String, String),
    /// An event would have made the sink hold more than this many objects
    /// ([`ListWatchConfig::max_objects`]): relist after a backoff.
    TooMany(usize),
}

pub(crate) struct Reflector<K: Resource> {
    pub api: Api<K>,
    pub config: ListWatchConfig,
    pub kind: String,
}

impl<K> Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Runs until the task is aborted.
    pub async fn run(self, sink: &dyn Sink<K>, stats: &ReflectorStats) {
        let mut backoff = Backoff::new(self.config.initial_backoff, MAX_BACKOFF);
        let mut refusals = Refusals::new(self.config.initial_backoff);
        let mut state = State::List;
        loop {
            state = match state {
                State::List => match self.list(sink, stats).await {
                    Ok((objs, refused, rv)) => {
                        log::debug!("{}: listed {} objects at rv {rv}", self.kind, objs.len());
                        sink.replace(objs, &refused);
                        backoff.reset();
                        State::Watch { rv }
                    }
                    Err(e) => {
                        stats.errors.fetch_add(1, Relaxed);
                        log::warn!("{}: list failed, will retry: {e}", self.kind);
                        let delay = match e {
                            ListError::TooMany(_) => refusals.next_delay(),
                            ListError::Api(_) | ListError::Stalled(_) => backoff.next_delay(),
                        };
                        State::Backoff {
                            then_rv: None,
                            delay,
                        }
                    }
                },
                State::Watch { rv } => {
                    let timeout = self
                        .config
                        .watch_timeout
                        .mul_f64(0.5 + 0.5 * backoff.unit());
                    match self.watch(&rv, timeout, sink, stats, &mut backoff).await {
                        WatchEnd::Closed(rv) => State::Watch { rv },
                        WatchEnd::Gone => {
                            stats.relists_after_gone.fetch_add(1, Relaxed);
                            log::info!(
                                "{}: resourceVersion {rv} is too old (410 Gone), relisting",
                                self.kind
                            );
                            State::List
                        }
                        WatchEnd::Failed(rv, e) => {
                            stats.errors.fetch_add(1, Relaxed);
                            log::warn!(
                                "{}: watch failed, will resume from rv {rv}: {e}",
                                self.kind
                            );
                            State::Backoff {
                                then_rv: Some(rv),
                                delay: backoff.next_delay(),
                            }
                        }
                        WatchEnd::TooMany(max) => {
                            stats.errors.fetch_add(1, Relaxed);
                            log::warn!(
                                "{}: the watch would make the cache hold more than {max} objects: refused (this cluster's informers are bounded); listing again after a backoff",
                                self.kind
                            );
                            State::Backoff {
                                then_rv: None,
                                delay: refusals.next_delay(),
                            }
                        }
                    }
                }
                State::Backoff { then_rv, delay } => {
                    tokio::time::sleep(delay).await;
                    match then_rv {
                        Some(rv) => State::Watch { rv },
                        None => State::List,
                    }
                }
            };
        }
    }

    /// The request path of the objects this reflector mirrors.
    fn request(&self) -> Request {
        Request::new(self.api.resource_url())
    }

    /// One LIST page, its objects decoded one by one, at most `room` of
    /// them (see [`Page`]).
    async fn list_page(&self, params: &ListParams, room: usize) -> Result<Page<K>, kube::Error> {
        let req = self
            .request()
            .list(params)
            .map_err(kube::Error::BuildRequest)?;
        let text = self.api.clone().into_client().request_text(req).await?;
        Page::read(&text, room).map_err(kube::Error::SerdeError)
    }

    /// An object that did not decode: counted, and reported to the sink.
    fn refuse(&self, sink: &dyn Sink<K>, stats: &ReflectorStats, refusal: &Refusal) {
        stats.refused.fetch_add(1, Relaxed);
        sink.refused(refusal);
    }

    /// A complete, paginated LIST: the objects, the keys of those that did
    /// not decode (reported to the sink), and the list's resourceVersion.
    ///
    /// An expired continue token (410) restarts the list from the first
    /// page, once: a second is an error (a backoff, then a new LIST) — a
    /// server that expires every token would otherwise be asked again and
    /// again without a pause. More objects than
    /// [`ListWatchConfig::max_objects`] end the list with
    /// [`ListError::TooMany`], before any object past the bound is decoded;
    /// what was listed so far is dropped.
    async fn list(
        &self,
        sink: &dyn Sink<K>,
        stats: &ReflectorStats,
    ) -> Result<(Vec<K>, Vec<String>, String), ListError> {
        // Held until the LIST is done (or given up): its pages are in memory.
        let _slot = match &self.config.list_slots {
            Some(slots) => slots.clone().acquire_owned().await.ok(),
            None => None,
        };
        stats.lists.fetch_add(1, Relaxed);
        let max = self.config.max_objects.unwrap_or(usize::MAX);
        let mut objs = Vec::new();
        let mut refused = Vec::new();
        let mut restarted = false;
        let mut params = ListParams::default().limit(self.config.page_size);
        params.label_selector = self.config.label_selector.clone();
        params.field_selector = self.config.field_selector.clone();
        loop {
            stats.list_pages.fetch_add(1, Relaxed);
            let room = max.saturating_sub(objs.len() + refused.len());
            let page = match self
                .within_progress_timeout(self.list_page(&params, room))
                .await
            {
                None => {
                    stats.stalls.fetch_add(1, Relaxed);
                    return Err(ListError::Stalled(self.config.progress_timeout));
                }
                Some(Ok(page)) => page,
                Some(Err(kube::Error::Api(s)))
                    if s.code == 410 && params.continue_token.is_some() && !restarted =>
                {
                    log::info!("{}: list continue token expired, listing again", self.kind);
                    restarted = true;
                    objs.clear();
                    refused.clear();
                    params.continue_token = None;
                    continue;
                }
                Some(Err(e)) => return Err(ListError::Api(e)),
            };
            if page.overflowed {
                stats.too_many.fetch_add(1, Relaxed);
                return Err(ListError::TooMany(max));
            }
            for item in page.items {
                match item.within_api_limits() {
                    Decoded::Object(o) => objs.push(o),
                    Decoded::Refused(r) => {
                        self.refuse(sink, stats, &r);
                        refused.push(r.key());
                    }
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => {
                    let rv = page.metadata.resource_version.unwrap_or_default();
                    return Ok((objs, refused, rv));
                }
            }
        }
    }

    /// `Some(max)` when storing `obj` would make the sink hold more than
    /// [`ListWatchConfig::max_objects`]: a new key while the sink is full.
    fn over_bound(&self, sink: &dyn Sink<K>, obj: &K) -> Option<usize> {
        let max = self.config.max_objects?;
        (sink.len() >= max && !sink.contains(&object_key(obj))).then_some(max)
    }

    /// `None` when `f` made no progress within the progress timeout.
    async fn within_progress_timeout<T>(
        &self,
        f: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        tokio::time::timeout(self.config.progress_timeout, f)
            .await
            .ok()
    }

    /// A WATCH from `rv`, each object decoded on its own.
    async fn watch_stream(
        &self,
        params: &WatchParams,
        rv: &str,
    ) -> Result<
        impl futures::Stream<Item = Result<WatchEvent<Decoded<K>>, kube::Error>> + use<K>,
        kube::Error,
    > {
        let mut req = self
            .request()
            .watch(params, rv)
            .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert(WatchRequest);
        self.api.clone().into_client().request_events(req).await
    }

    /// Each watch event's type and resourceVersion, at trace level (what a
    /// lost event is hunted with; never an object's content).
    fn trace(&self, event: &WatchEvent<Decoded<K>>) {
        if !log::log_enabled!(log::Level::Trace) {
            return;
        }
        let (what, rv) = match event {
            WatchEvent::Added(o) => ("added", o.resource_version()),
            WatchEvent::Modified(o) => ("modified", o.resource_version()),
            WatchEvent::Deleted(o) => ("deleted", o.resource_version()),
            WatchEvent::Bookmark(b) => ("bookmark", Some(b.metadata.resource_version.clone())),
            WatchEvent::Error(_) => ("error", None),
        };
        log::trace!("{}: watch event {what} at rv {rv:?}", self.kind);
    }

    async fn watch(
        &self,
        rv: &str,
        timeout: Duration,
        sink: &dyn Sink<K>,
        stats: &ReflectorStats,
        backoff: &mut Backoff,
    ) -> WatchEnd {
        stats.watches.fetch_add(1, Relaxed);
        let mut params = WatchParams::default().timeout(timeout.as_secs().clamp(1, 295) as u32);
        params.bookmarks = true;
        params.label_selector = self.config.label_selector.clone();
        params.field_selector = self.config.field_selector.clone();
        let mut last_rv = rv.to_string();
        let stalled = |stats: &ReflectorStats, last_rv: String| {
            stats.stalls.fetch_add(1, Relaxed);
            WatchEnd::Failed(
                last_rv,
                format!(
                    "no event and no bookmark for {:?}: the connection looks dead, restarting the watch",
                    self.config.progress_timeout
                ),
            )
        };
        let stream = match self
            .within_progress_timeout(self.watch_stream(&params, rv))
            .await
        {
            None => return stalled(stats, last_rv),
            Some(Ok(s)) => {
                log::trace!("{}: watching from rv {rv}", self.kind);
                s
            }
            Some(Err(kube::Error::Api(s))) if s.code == 410 => return WatchEnd::Gone,
            Some(Err(e)) => return WatchEnd::Failed(last_rv, e.to_string()),
        };
        let mut stream = std::pin::pin!(stream);
        loop {
            let Some(next) = self.within_progress_timeout(stream.try_next()).await else {
                return stalled(stats, last_rv);
            };
            match next {
                Ok(Some(event)) => {
                    backoff.reset();
                    self.trace(&event);
                    match event {
                        WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                            let obj = obj.within_api_limits();
                            last_rv = obj.resource_version().unwrap_or(last_rv);
                            match obj {
                                Decoded::Object(obj) => {
                                    if let Some(max) = self.over_bound(sink, &obj) {
                                        stats.too_many.fetch_add(1, Relaxed);
                                        return WatchEnd::TooMany(max);
                                    }
                                    sink.upsert(obj)
                                }
                                // The cache keeps the version it last read.
                                Decoded::Refused(r) => self.refuse(sink, stats, &r),
                            }
                        }
                        WatchEvent::Deleted(obj) => {
                            last_rv = obj.resource_version().unwrap_or(last_rv);
                            match obj {
                                Decoded::Object(obj) => sink.delete(obj),
                                Decoded::Refused(r) => {
                                    self.refuse(sink, stats, &r);
                                    sink.delete_key(&r.key());
                                }
                            }
                        }
                        WatchEvent::Bookmark(b) => last_rv = b.metadata.resource_version,
                        WatchEvent::Error(e) if e.code == 410 => return WatchEnd::Gone,
                        WatchEvent::Error(e) => {
                            return WatchEnd::Failed(
                                last_rv,
                                format!("{} ({})", e.message, e.code),
                            );
                        }
                    }
                }
                Ok(None) => return WatchEnd::Closed(last_rv),
                Err(e) => return WatchEnd::Failed(last_rv, e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests;
