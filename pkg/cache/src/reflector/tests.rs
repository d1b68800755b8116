//! The reflector against a fake API server on loopback whose answers are
//! scripted per request — honest, or lying the way a tenant's server could
//! ([`ListWatchConfig::max_objects`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::*;

/// What the fake API server answers one request with (always a 200).
enum Answer {
    /// This body (a LIST page), with its length.
    Page(String),
    /// Watch events, one JSON line from each call, until the client goes
    /// away.
    Events(Box<dyn FnMut() -> String + Send>),
    /// Nothing until the client goes away (an idle watch).
    Idle,
}

/// Answers a request, given its query string.
type Script = Arc<dyn Fn(&str) -> Answer + Send + Sync>;

/// A request the fake server saw: its query string, and when.
struct Seen {
    query: String,
    at: Instant,
}

/// An HTTP/1.1 server on 127.0.0.1 answering every request with its
/// script; stops when dropped.
struct FakeApi {
    client: kube::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl FakeApi {
    async fn start(script: impl Fn(&str) -> Answer + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::new(script);
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, script.clone(), seen.clone()));
                }
            }
        });
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        FakeApi { client, seen, task }
    }

    /// When each LIST began (its first page: no continue token).
    fn list_starts(&self) -> Vec<Instant> {
        self.seen
            .lock()
            .iter()
            .filter(|s| param(&s.query, "watch").is_none() && param(&s.query, "continue").is_none())
            .map(|s| s.at)
            .collect()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, script: Script, seen: Arc<Mutex<Vec<Seen>>>) {
    let Some(query) = read_query(&mut stream).await else {
        return;
    };
    seen.lock().push(Seen {
        query: query.clone(),
        at: Instant::now(),
    });
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n";
    let _ = match script(&query) {
        Answer::Page(body) => {
            let response = format!("{head}Content-Length: {}\r\n\r\n{body}", body.len());
            stream.write_all(response.as_bytes()).await
        }
        Answer::Events(mut next) => {
            // No length: the body ends when the connection does.
            let mut sent = stream.write_all(format!("{head}\r\n").as_bytes()).await;
            while sent.is_ok() {
                sent = stream.write_all(next().as_bytes()).await;
            }
            sent
        }
        Answer::Idle => {
            let sent = stream.write_all(format!("{head}\r\n").as_bytes()).await;
            let mut buf = [0u8; 256];
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            sent
        }
    };
}

/// The query string of the request on `stream` (`""` without one), once
/// its head is read.
async fn read_query(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    // GET /api/v1/configmaps?limit=10 HTTP/1.1
    let target = head.split(' ').nth(1)?;
    Some(
        target
            .split_once('?')
            .map(|(_, q)| q.to_string())
            .unwrap_or_default(),
    )
}

/// The value of `name` in `query`.
fn param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

fn configmap(name: &str, rv: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
    )
}

/// A LIST page of ConfigMaps `names`, at resourceVersion 100.
fn page(names: impl Iterator<Item = String>, continue_token: Option<&str>) -> String {
    let items: Vec<String> = names.map(|n| configmap(&n, 1)).collect();
    let continue_token = continue_token
        .map(|c| format!(r#","continue":"{c}""#))
        .unwrap_or_default();
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMapList","metadata":{{"resourceVersion":"100"{continue_token}}},"items":[{}]}}"#,
        items.join(",")
    )
}

/// One ADDED watch event line.
fn added(name: &str, rv: usize) -> String {
    format!(
        "{{\"type\":\"ADDED\",\"object\":{}}}\n",
        configmap(name, rv)
    )
}

/// A sink keeping only keys, and the most it ever held.
#[derive(Default)]
struct Recorder {
    keys: Mutex<HashSet<String>>,
    /// The most keys held at any time.
    most: AtomicUsize,
    replaces: AtomicUsize,
}

impl Recorder {
    fn held(&self, keys: &HashSet<String>) {
        self.most.fetch_max(keys.len(), SeqCst);
    }
}

impl Sink<ConfigMap> for Recorder {
    fn replace(&self, objs: Vec<ConfigMap>, refused: &[String]) {
        let mut keys = self.keys.lock();
        keys.retain(|k| refused.contains(k));
        keys.extend(objs.iter().map(object_key));
        self.held(&keys);
        self.replaces.fetch_add(1, SeqCst);
    }
    fn upsert(&self, obj: ConfigMap) {
        let mut keys = self.keys.lock();
        keys.insert(object_key(&obj));
        self.held(&keys);
    }
    fn delete(&self, obj: ConfigMap) {
        self.keys.lock().remove(&object_key(&obj));
    }
    fn delete_key(&self, key: &str) {
        self.keys.lock().remove(key);
    }
    fn refused(&self, _: &Refusal) {}
    fn len(&self) -> usize {
        self.keys.lock().len()
    }
    fn contains(&self, key: &str) -> bool {
        self.keys.lock().contains(key)
    }
}

fn reflector(api: &FakeApi, config: ListWatchConfig) -> Reflector<ConfigMap> {
    Reflector {
        api: Api::all(api.client.clone()),
        config,
        kind: "ConfigMap".into(),
    }
}

/// Runs `reflector` into `sink` until `done` (checked every 5 ms); fails
/// after a minute.
async fn run_until(
    reflector: Reflector<ConfigMap>,
    sink: &Recorder,
    stats: &ReflectorStats,
    done: impl Fn(&ReflectorStats) -> bool,
) {
    let wait = async {
        while !done(stats) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        _ = reflector.run(sink, stats) => unreachable!("a reflector runs until aborted"),
        waited = tokio::time::timeout(Duration::from_secs(60), wait) => {
            waited.expect("the reflector got there within a minute")
        }
    }
}

#[tokio::test]
async fn a_list_of_endless_pages_is_refused_whole_with_a_growing_backoff() {
    let sent = Arc::new(AtomicUsize::new(0));
    let api = FakeApi::start({
        let sent = sent.clone();
        // 10 objects and a continue token, for ever.
        move |_: &str| {
            let n = sent.fetch_add(10, SeqCst);
            Answer::Page(page((n..n + 10).map(|i| format!("cm-{i}")), Some("more")))
        }
    })
    .await;
    let config = ListWatchConfig {
        page_size: 10,
        max_objects: Some(35),
        initial_backoff: Duration::from_millis(50),
        ..Default::default()
    };
    let (sink, stats) = (Recorder::default(), ReflectorStats::default());
    run_until(reflector(&api, config), &sink, &stats, |s| {
        s.too_many.load(SeqCst) >= 4
    })
    .await;

    // Each LIST: three pages kept (30), then the fourth has room for 5 and
    // brings a sixth — refused before decoding it.
    let (pages, lists) = (stats.list_pages.load(SeqCst), stats.lists.load(SeqCst));
    assert!(lists >= 4, "{lists} lists");
    assert!(pages <= 4 * lists, "{pages} pages for {lists} lists");
    assert_eq!(
        sink.replaces.load(SeqCst),
        0,
        "a partial list is never kept"
    );
    assert_eq!(sink.most.load(SeqCst), 0);
    assert!(stats.errors.load(SeqCst) >= stats.too_many.load(SeqCst));
    // Backoffs of 50–100, 100–200, then 200–400 ms.
    let starts = api.list_starts();
    let third = starts[3] - starts[2];
    assert!(
        third >= Duration::from_millis(200),
        "the backoff grows: {third:?} before the fourth LIST"
    );
}

#[tokio::test]
async fn a_watch_of_endless_additions_is_ended_at_the_bound_and_relisted_with_a_growing_backoff() {
    let next = Arc::new(AtomicUsize::new(0));
    let api = FakeApi::start(move |query: &str| {
        if param(query, "watch") != Some("true") {
            return Answer::Page(page((0..5).map(|i| format!("listed-{i}")), None));
        }
        let next = next.clone();
        Answer::Events(Box::new(move || {
            let i = next.fetch_add(1, SeqCst);
            added(&format!("added-{i}"), 101 + i)
        }))
    })
    .await;
    let config = ListWatchConfig {
        max_objects: Some(20),
        initial_backoff: Duration::from_millis(50),
        ..Default::default()
    };
    let (sink, stats) = (Recorder::default(), ReflectorStats::default());
    run_until(reflector(&api, config), &sink, &stats, |s| {
        s.too_many.load(SeqCst) >= 4
    })
    .await;

    assert_eq!(
        sink.most.load(SeqCst),
        20,
        "5 listed and 15 added fill the store to its bound, never past it"
    );
    let too_many = stats.too_many.load(SeqCst);
    assert!(stats.errors.load(SeqCst) >= too_many);
    assert!(
        stats.watches.load(SeqCst) >= too_many,
        "each refusal ended a watch"
    );
    assert!(
        stats.lists.load(SeqCst) >= too_many,
        "and was followed by a LIST"
    );
    // The honest LIST between two refusals does not reset their backoff:
    // 50–100, 100–200, then 200–400 ms.
    let starts = api.list_starts();
    let third = starts[3] - starts[2];
    assert!(
        third >= Duration::from_millis(200),
        "the backoff grows: {third:?} before the fourth LIST"
    );
}

#[tokio::test]
async fn a_paged_list_without_a_bound_or_within_it_is_kept_whole() {
    for max_objects in [None, Some(1200)] {
        // 1,200 objects in pages of 500.
        let api = FakeApi::start(|query: &str| {
            if param(query, "watch") == Some("true") {
                return Answer::Idle;
            }
            let (from, next) = match param(query, "continue") {
                None => (0, Some("p1")),
                Some("p1") => (500, Some("p2")),
                Some(_) => (1000, None),
            };
            let to = (from + 500).min(1200);
            Answer::Page(page((from..to).map(|i| format!("cm-{i}")), next))
        })
        .await;
        let config = ListWatchConfig {
            max_objects,
            ..Default::default()
        };
        let (sink, stats) = (Recorder::default(), ReflectorStats::default());
        run_until(reflector(&api, config), &sink, &stats, |s| {
            s.watches.load(SeqCst) >= 1
        })
        .await;

        assert_eq!(sink.len(), 1200, "max_objects {max_objects:?}");
        assert_eq!(sink.replaces.load(SeqCst), 1);
        assert_eq!(stats.list_pages.load(SeqCst), 3);
        assert_eq!(stats.too_many.load(SeqCst), 0);
        assert_eq!(stats.errors.load(SeqCst), 0);
    }
}

#[test]
fn a_page_decodes_at_most_its_room_and_says_when_there_was_more() {
    let five = page((0..5).map(|i| format!("cm-{i}")), Some("c"));
    let p = Page::<ConfigMap>::read(&five, 5).unwrap();
    assert_eq!((p.items.len(), p.overflowed), (5, false));
    assert_eq!(p.metadata.continue_.as_deref(), Some("c"));
    assert_eq!(p.metadata.resource_version.as_deref(), Some("100"));

    let p = Page::<ConfigMap>::read(&five, 3).unwrap();
    assert_eq!((p.items.len(), p.overflowed), (3, true));
    let p = Page::<ConfigMap>::read(&five, 0).unwrap();
    assert_eq!((p.items.len(), p.overflowed), (0, true));

    let empty = page(std::iter::empty(), None);
    let p = Page::<ConfigMap>::read(&empty, 0).unwrap();
    assert_eq!((p.items.len(), p.overflowed), (0, false));
    let p = Page::<ConfigMap>::read(r#"{"metadata":null,"items":null}"#, 5).unwrap();
    assert_eq!((p.items.len(), p.overflowed), (0, false));
    assert!(Page::<ConfigMap>::read(r#"{"items":[]} trailing"#, 5).is_err());
}
