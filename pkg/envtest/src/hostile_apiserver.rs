//! A Kubernetes API server that attacks its client: HTTPS on 127.0.0.1
//! with a serving certificate for `127.0.0.1` signed by a CA made for it
//! ([`HostileApiServer::ca_pem`], for a kubeconfig's
//! `certificate-authority-data`), standing for a tenant's cluster named in
//! a HelmApp's `spec.kubeConfig` (docs/remote-clusters.md). For the
//! hostile-input tests of remote clusters.
//!
//! It answers `GET /version` and discovery (`/api`, `/apis`, `/api/v1`,
//! `/apis/<group>/<version>`) with small valid documents, and every LIST —
//! a GET on a collection (`/api/v1/secrets?…`,
//! `/apis/apps/v1/namespaces/x/deployments?…`) — as its [`Mode`] says:
//! a body without end, or pages without end. A WATCH (`watch=1` or
//! `watch=true`) gets a 200 head and then nothing, held open until the
//! client goes away, in either mode. Anything else: a 404 `Status`.
//!
//! Objects are of the collection's kind (`Secret` for `/secrets`,
//! `Deployment` for `/deployments`, …), named `x-<n>` with `n` never
//! repeated, in the namespace of the path (`default` for an all-namespaces
//! LIST), and carry the equality labels of the request's `labelSelector`
//! (`owner=helm` → `owner: helm`; `owner!=helm` → no `owner`), so that a
//! client filtering them keeps them all. The server never buffers an
//! endless answer: it writes one 64 KiB chunk at a time, as the client
//! reads. It records every request.
//!
//! ```no_run
//! # async fn demo() {
//! use envtest::HostileApiServer;
//! use envtest::hostile_apiserver::Mode;
//! let server = HostileApiServer::start(Mode::EndlessPages).await.unwrap();
//! let kubeconfig = server.kubeconfig("any-token");
//! // ... a HelmApp's kubeConfig Secret holds `kubeconfig` ...
//! assert!(server.seen().iter().all(|r| !r.is_list()));
//! # }
//! ```

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::{AbortHandle, JoinHandle};

use crate::kubeconfig::{self, Credentials};

/// What the server answers every LIST with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 200, `Content-Type: application/json`, chunked: a list of the
    /// collection's kind (`{"kind":"SecretList",…,"items":[`) whose items
    /// never end — objects of about 1 KiB each, separated by commas —
    /// written as fast as the client reads, until it goes away. The
    /// connection is not used again.
    EndlessBody,
    /// Each page a complete, valid list of `limit` small objects (500 when
    /// the request names no `limit`; at most 10,000) whose
    /// `metadata.continue` is a fresh token: a LIST that never ends, page
    /// after page. The token is `<list>-<objects served so far>`; a
    /// request without one starts a new list.
    EndlessPages,
    /// A server that looks healthy to the operator — every LIST an empty
    /// page, discovery and `/version` as always — and answers every
    /// request of helm's (a `User-Agent` starting with `helm`, any case)
    /// with `307 Temporary Redirect` to `to` followed by the request's path
    /// and query: where a tenant's API server would send helm, and the
    /// credentials it carries, past every check of the server's own
    /// address.
    RedirectHelm { to: &'static str },
}

/// One request the server saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    pub method: String,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// The request's target as sent: path and query.
    raw_target: String,
    /// Without the query.
    pub path: String,
    /// The query's parameters, percent-decoded, in order.
    pub query: Vec<(String, String)>,
}

impl ApiRequest {
    fn parse(method: &str, target: &str, user_agent: Option<String>) -> Self {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let query = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (percent_decoded(k), percent_decoded(v))
            })
            .collect();
        ApiRequest {
            method: method.to_string(),
            user_agent,
            raw_target: target.to_string(),
            path: path.to_string(),
            query,
        }
    }

    /// The request's target as sent: path and query.
    pub fn target(&self) -> &str {
        &self.raw_target
    }

    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A WATCH: a GET on a collection with `watch=1` or `watch=true`.
    pub fn is_watch(&self) -> bool {
        self.method == "GET"
            && collection(&self.path).is_some()
            && matches!(self.param("watch"), Some("1" | "true"))
    }

    /// A LIST (one page of it): a GET on a collection that is no WATCH.
    pub fn is_list(&self) -> bool {
        self.method == "GET" && collection(&self.path).is_some() && !self.is_watch()
    }

    /// Made by helm: its `User-Agent` starts with `helm` (`Helm/4.0.1`,
    /// or client-go's default from the binary's name).
    pub fn is_helms(&self) -> bool {
        self.user_agent
            .as_deref()
            .is_some_and(|ua| ua.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("helm")))
    }
}

struct Shared {
    mode: Mode,
    /// `127.0.0.1:<port>`, for `/api`'s `serverAddress`.
    address: String,
    seen: Mutex<Vec<ApiRequest>>,
    /// The `n` of the next object's name `x-<n>`.
    next_object: AtomicU64,
    /// The number of the next list [`Mode::EndlessPages`] starts.
    next_list: AtomicU64,
    /// The most objects served to one list, across its pages.
    deepest: AtomicUsize,
    /// Bytes of LIST bodies written so far.
    sent: AtomicU64,
    /// For each endless body the client went away from: its bytes written.
    cut: Mutex<Vec<u64>>,
    /// The connections' tasks, aborted when the server is dropped.
    connections: Mutex<Vec<AbortHandle>>,
    stopped: AtomicBool,
}

/// The server (see the module docs); stops when dropped, every connection
/// with it.
pub struct HostileApiServer {
    url: String,
    ca_pem: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl HostileApiServer {
    /// Listens with TLS on a free port of 127.0.0.1, answering every LIST
    /// as `mode` says.
    pub async fn start(mode: Mode) -> Result<Self, crate::Error> {
        let ca = crate::pki::Ca::generate()?;
        let acceptor = tls_acceptor(&ca.serving_cert()?)?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?.to_string();
        let url = format!("https://{address}");
        let shared = Arc::new(Shared {
            mode,
            address,
            seen: Mutex::default(),
            next_object: AtomicU64::new(0),
            next_list: AtomicU64::new(0),
            deepest: AtomicUsize::new(0),
            sent: AtomicU64::new(0),
            cut: Mutex::default(),
            connections: Mutex::default(),
            stopped: AtomicBool::new(false),
        });
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (acceptor, serving) = (acceptor.clone(), shared.clone());
                    let connection = tokio::spawn(async move {
                        // A client that does not trust the CA fails the
                        // handshake: nothing is recorded.
                        if let Ok(tls) = acceptor.accept(stream).await {
                            serve(tls, serving).await;
                        }
                    });
                    // Registered, unless the server was dropped meanwhile.
                    {
                        let mut connections = shared.connections.lock();
                        if shared.stopped.load(Relaxed) {
                            connection.abort();
                        } else {
                            connections.retain(|c| !c.is_finished());
                            connections.push(connection.abort_handle());
                        }
                    }
                }
            }
        });
        Ok(HostileApiServer {
            url,
            ca_pem: ca.cert_pem(),
            shared,
            task,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA that signed the serving certificate, in PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A kubeconfig naming this server (its URL, its CA inline) with one
    /// user authenticating with bearer `token` (the server takes any).
    pub fn kubeconfig(&self, token: &str) -> String {
        kubeconfig::render(&self.url, &self.ca_pem, "tenant", Credentials::Token(token))
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<ApiRequest> {
        self.shared.seen.lock().clone()
    }

    /// Bytes of LIST bodies written so far (pages, and endless bodies as
    /// far as the client read them).
    pub fn sent_bytes(&self) -> u64 {
        self.shared.sent.load(Relaxed)
    }

    /// [`Mode::EndlessBody`]: the bytes of each endless body the client
    /// went away from (closed or reset the connection), in the order it
    /// did. An answer still being read is not here.
    pub fn cut_answers(&self) -> Vec<u64> {
        self.shared.cut.lock().clone()
    }

    /// [`Mode::EndlessPages`]: the most objects served to one list, its
    /// pages summed (the pages a client asked for with that list's
    /// `continue` tokens).
    pub fn deepest_list(&self) -> usize {
        self.shared.deepest.load(Relaxed)
    }
}

impl Drop for HostileApiServer {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Relaxed);
        self.task.abort();
        for connection in self.shared.connections.lock().drain(..) {
            connection.abort();
        }
    }
}

/// The API groups discovery lists: (group, version).
const GROUPS: &[(&str, &str)] = &[
    ("apps", "v1"),
    ("batch", "v1"),
    ("networking.k8s.io", "v1"),
    ("autoscaling", "v2"),
    ("policy", "v1"),
    ("rbac.authorization.k8s.io", "v1"),
];

/// The kinds the server knows by their plural: (group, plural, kind,
/// namespaced). Another plural's kind is made up from it
/// (`widgets` → `Widget`, namespaced).
const KINDS: &[(&str, &str, &str, bool)] = &[
    ("", "secrets", "Secret", true),
    ("", "configmaps", "ConfigMap", true),
    ("", "services", "Service", true),
    ("", "serviceaccounts", "ServiceAccount", true),
    ("", "pods", "Pod", true),
    ("", "persistentvolumeclaims", "PersistentVolumeClaim", true),
    ("", "events", "Event", true),
    ("", "namespaces", "Namespace", false),
    ("apps", "deployments", "Deployment", true),
    ("apps", "statefulsets", "StatefulSet", true),
    ("apps", "daemonsets", "DaemonSet", true),
    ("apps", "replicasets", "ReplicaSet", true),
    ("batch", "jobs", "Job", true),
    ("batch", "cronjobs", "CronJob", true),
    ("networking.k8s.io", "ingresses", "Ingress", true),
    (
        "networking.k8s.io",
        "networkpolicies",
        "NetworkPolicy",
        true,
    ),
    (
        "autoscaling",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
    ),
    (
        "policy",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
    ),
    ("rbac.authorization.k8s.io", "roles", "Role", true),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "RoleBinding",
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterroles",
        "ClusterRole",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
];

/// About how many bytes of filler each object of an endless body carries
/// (in an annotation): ~1 KiB an object.
const FILLER: usize = 900;
/// How much of an endless body is written at once (one HTTP chunk).
const CHUNK: usize = 64 * 1024;
/// The largest page the server writes, whatever `limit` says.
const MAX_PAGE: usize = 10_000;

/// A collection a request names.
struct Collection {
    api_version: String,
    kind: String,
    /// Its objects' namespace: `None` for a cluster-scoped kind.
    namespace: Option<String>,
}

/// The collection `path` names (`/api/v1/secrets`,
/// `/apis/apps/v1/namespaces/x/deployments`), if it names one.
fn collection(path: &str) -> Option<Collection> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest): (String, &[&str]) = match segments.as_slice() {
        ["api", version, rest @ ..] => (version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (plural, namespace) = match rest {
        [plural] => (*plural, None),
        ["namespaces", ns, plural] => (*plural, Some(*ns)),
        _ => return None,
    };
    if plural.is_empty() {
        return None;
    }
    let (kind, namespaced) = kind_of(plural);
    Some(Collection {
        api_version,
        kind,
        namespace: namespaced.then(|| namespace.unwrap_or("default").to_string()),
    })
}

/// The kind of `plural`, and whether it is namespaced.
fn kind_of(plural: &str) -> (String, bool) {
    if let Some((_, _, kind, namespaced)) = KINDS.iter().find(|k| k.1 == plural) {
        return (kind.to_string(), *namespaced);
    }
    let singular = plural.strip_suffix('s').unwrap_or(plural);
    let mut chars = singular.chars();
    let mut kind = String::new();
    if let Some(first) = chars.next() {
        kind.push(first.to_ascii_uppercase());
        kind.push_str(chars.as_str());
    }
    (kind, true)
}

/// The labels an object needs to match `selector`: its equality terms
/// (`k=v`, `k==v`), the first value of each `k in (…)`, `x` for each
/// existence term (`k`); negative terms (`k!=v`, `!k`, `notin`) add
/// nothing.
fn selector_labels(selector: &str) -> Map<String, Value> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    let mut labels = Map::new();
    for term in terms.into_iter().map(str::trim) {
        if term.is_empty()
            || term.starts_with('!')
            || term.contains("!=")
            || term.contains(" notin ")
        {
            continue;
        }
        let (key, value) = if let Some((key, set)) = term.split_once(" in ") {
            let set = set.trim().trim_start_matches('(').trim_end_matches(')');
            (key, set.split(',').next().unwrap_or(""))
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (key, value)
        } else {
            (term, "x")
        };
        labels.insert(key.trim().to_string(), Value::from(value.trim()));
    }
    labels
}

/// How one object of a collection is written: `prefix`, its number,
/// `suffix`.
struct Template {
    prefix: Vec<u8>,
    suffix: Vec<u8>,
}

impl Template {
    /// Objects of `c` matching `selector`, with `filler` bytes of
    /// annotation (none when 0).
    fn new(c: &Collection, selector: Option<&str>, filler: usize) -> Self {
        let namespace = c
            .namespace
            .as_ref()
            .map(|ns| format!(",\"namespace\":{}", Value::from(ns.as_str())))
            .unwrap_or_default();
        let annotations = if filler == 0 {
            String::new()
        } else {
            format!(
                ",\"annotations\":{{\"hossted.test/filler\":\"{}\"}}",
                "A".repeat(filler)
            )
        };
        let labels = Value::Object(selector_labels(selector.unwrap_or("")));
        Template {
            prefix: format!(
                "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{{\"name\":\"x-",
                Value::from(c.api_version.as_str()),
                Value::from(c.kind.as_str())
            )
            .into_bytes(),
            suffix: format!(
                "\"{namespace},\"resourceVersion\":\"1\",\"labels\":{labels}{annotations}}}}}"
            )
            .into_bytes(),
        }
    }

    /// Appends object `x-<n>` to `out`.
    fn write(&self, n: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(n.to_string().as_bytes());
        out.extend_from_slice(&self.suffix);
    }
}

/// A list of `c` up to the `[` of its items.
fn list_head(c: &Collection, continue_token: Option<&str>) -> String {
    let mut metadata = json!({ "resourceVersion": "1" });
    if let Some(token) = continue_token {
        metadata["continue"] = Value::from(token);
    }
    format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{metadata},\"items\":[",
        Value::from(format!("{}List", c.kind)),
        Value::from(c.api_version.as_str())
    )
}

/// The discovery document (or `/version`) at `path`, if there is one.
fn document(path: &str, address: &str) -> Option<Value> {
    let resources = |group: &str, group_version: &str| {
        let resources: Vec<Value> = KINDS
            .iter()
            .filter(|k| k.0 == group)
            .map(|(_, plural, kind, namespaced)| {
                json!({ "name": plural, "singularName": kind.to_lowercase(), "namespaced": namespaced,
                        "kind": kind, "verbs": ["get", "list", "watch"] })
            })
            .collect();
        json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": resources })
    };
    match path.trim_end_matches('/') {
        "/version" => Some(json!({
            "major": "1", "minor": "35", "gitVersion": "v1.35.0",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2025-12-17T00:00:00Z", "goVersion": "go1.25.5", "compiler": "gc",
            "platform": "linux/amd64"
        })),
        "/api" => Some(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": address }]
        })),
        "/apis" => {
            let groups: Vec<Value> = GROUPS
                .iter()
                .map(|(group, version)| {
                    let gv =
                        json!({ "groupVersion": format!("{group}/{version}"), "version": version });
                    json!({ "name": group, "versions": [gv.clone()], "preferredVersion": gv })
                })
                .collect();
            Some(json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups }))
        }
        "/api/v1" => Some(resources("", "v1")),
        other => {
            let (group, version) = other.strip_prefix("/apis/")?.split_once('/')?;
            GROUPS
                .iter()
                .any(|(g, v)| *g == group && *v == version)
                .then(|| resources(group, format!("{group}/{version}").as_str()))
        }
    }
}

/// A `Status` of `code`.
fn status(code: u16, reason: &str, message: &str) -> Vec<u8> {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code })
    .to_string()
    .into_bytes()
}

/// A connection the server speaks HTTP/1.1 on (TLS; any stream in unit
/// tests).
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

/// What a connection does after an answer.
enum After {
    KeepAlive,
    Close,
}

/// Serves requests on one connection (kept alive between finite answers).
async fn serve(mut stream: impl Conn, shared: Arc<Shared>) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = read_head(&mut stream, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or_default().split(' ');
        let method = request_line.next().unwrap_or_default().to_string();
        let target = request_line.next().unwrap_or_default().to_string();
        let headers: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once(':')).collect();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_string())
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let user_agent = header("user-agent");
        // A request body (none is expected) is read and dropped.
        if length > 1 << 20 {
            return;
        }
        let body_end = end + 4 + length;
        while buf.len() < body_end {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..body_end);
        let request = ApiRequest::parse(&method, &target, user_agent);
        shared.seen.lock().push(request.clone());
        match answer(&mut stream, &shared, &request).await {
            Ok(After::KeepAlive) => continue,
            Ok(After::Close) | Err(_) => return,
        }
    }
}

/// Reads until `buf` holds a whole request head; returns where it ends.
async fn read_head(stream: &mut impl Conn, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i);
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn answer(
    stream: &mut impl Conn,
    shared: &Shared,
    request: &ApiRequest,
) -> io::Result<After> {
    if let Mode::RedirectHelm { to } = shared.mode
        && request.is_helms()
    {
        let location = format!("{to}{}", request.target());
        let head = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await?;
        stream.flush().await?;
        return Ok(After::KeepAlive);
    }
    if request.method != "GET" {
        let body = status(
            405,
            "MethodNotAllowed",
            "the hostile API server answers GET only",
        );
        reply(stream, 405, &body).await?;
        return Ok(After::KeepAlive);
    }
    if let Some(collection) = collection(&request.path) {
        if request.is_watch() {
            hold_open(stream).await?;
            return Ok(After::Close);
        }
        return match shared.mode {
            Mode::EndlessBody => {
                endless_body(stream, shared, &collection, request).await?;
                Ok(After::Close)
            }
            Mode::EndlessPages => {
                page(stream, shared, &collection, request).await?;
                Ok(After::KeepAlive)
            }
            Mode::RedirectHelm { .. } => {
                let mut body = list_head(&collection, None).into_bytes();
                body.extend_from_slice(b"]}");
                reply(stream, 200, &body).await?;
                Ok(After::KeepAlive)
            }
        };
    }
    match document(&request.path, &shared.address) {
        Some(document) => reply(stream, 200, document.to_string().as_bytes()).await?,
        None => {
            let body = status(404, "NotFound", "the hostile API server has no such thing");
            reply(stream, 404, &body).await?
        }
    }
    Ok(After::KeepAlive)
}

/// `status` with a JSON `body` and its length.
async fn reply(stream: &mut impl Conn, status: u16, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        if status < 400 { "OK" } else { "Error" },
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

/// A WATCH: 200 and a chunked body that never brings anything, until the
/// client goes away.
async fn hold_open(stream: &mut impl Conn) -> io::Result<()> {
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .await?;
    stream.flush().await?;
    let mut sink = [0u8; 1024];
    while stream.read(&mut sink).await? > 0 {}
    Ok(())
}

/// [`Mode::EndlessBody`]: returns (with the error) only when the client
/// went away; records how much it had been sent.
async fn endless_body(
    stream: &mut impl Conn,
    shared: &Shared,
    c: &Collection,
    request: &ApiRequest,
) -> io::Result<()> {
    let mut sent = 0;
    let result = write_endless(stream, shared, c, request, &mut sent).await;
    shared.cut.lock().push(sent);
    result
}

async fn write_endless(
    stream: &mut impl Conn,
    shared: &Shared,
    c: &Collection,
    request: &ApiRequest,
    sent: &mut u64,
) -> io::Result<()> {
    let template = Template::new(c, request.param("labelSelector"), FILLER);
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .await?;
    let mut chunk = Vec::with_capacity(CHUNK + 2 * FILLER + 1024);
    chunk.extend_from_slice(list_head(c, None).as_bytes());
    let mut first = true;
    loop {
        while chunk.len() < CHUNK {
            if !first {
                chunk.push(b',');
            }
            first = false;
            template.write(shared.next_object.fetch_add(1, Relaxed), &mut chunk);
        }
        stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await?;
        stream.write_all(&chunk).await?;
        stream.write_all(b"\r\n").await?;
        stream.flush().await?;
        *sent += chunk.len() as u64;
        shared.sent.fetch_add(chunk.len() as u64, Relaxed);
        chunk.clear();
    }
}

/// [`Mode::EndlessPages`]: one page of `limit` objects and a fresh
/// `continue` token.
async fn page(
    stream: &mut impl Conn,
    shared: &Shared,
    c: &Collection,
    request: &ApiRequest,
) -> io::Result<()> {
    let limit = request
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(500)
        .min(MAX_PAGE);
    let (list, before) = request
        .param("continue")
        .and_then(|token| {
            let (list, served) = token.split_once('-')?;
            Some((list.parse::<u64>().ok()?, served.parse::<usize>().ok()?))
        })
        .unwrap_or_else(|| (shared.next_list.fetch_add(1, Relaxed), 0));
    let served = before.saturating_add(limit);
    shared.deepest.fetch_max(served, Relaxed);
    let template = Template::new(c, request.param("labelSelector"), 0);
    let token = format!("{list}-{served}");
    let mut body = list_head(c, Some(token.as_str())).into_bytes();
    for i in 0..limit {
        if i > 0 {
            body.push(b',');
        }
        template.write(shared.next_object.fetch_add(1, Relaxed), &mut body);
    }
    body.extend_from_slice(b"]}");
    shared.sent.fetch_add(body.len() as u64, Relaxed);
    reply(stream, 200, &body).await
}

/// `s` with `%XX` decoded and `+` as a space (a query's form encoding).
fn percent_decoded(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high << 4) | low);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn tls_acceptor(
    serving: &crate::pki::PemPair,
) -> Result<tokio_rustls::TlsAcceptor, crate::Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |e: &dyn std::fmt::Display| io::Error::other(format!("hostile API server TLS: {e}"));
    let certs = CertificateDer::pem_slice_iter(serving.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes()).map_err(|e| bad(&e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(&e))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| bad(&e))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_and_their_kinds() {
        let c = collection("/api/v1/secrets").unwrap();
        assert_eq!((c.api_version.as_str(), c.kind.as_str()), ("v1", "Secret"));
        assert_eq!(c.namespace.as_deref(), Some("default"));
        let c = collection("/apis/apps/v1/namespaces/x/deployments").unwrap();
        assert_eq!(
            (c.api_version.as_str(), c.kind.as_str()),
            ("apps/v1", "Deployment")
        );
        assert_eq!(c.namespace.as_deref(), Some("x"));
        let c = collection("/apis/rbac.authorization.k8s.io/v1/clusterroles").unwrap();
        assert_eq!(c.namespace, None);
        assert!(collection("/api/v1").is_none());
        assert!(collection("/apis/apps/v1").is_none());
        assert!(collection("/api/v1/namespaces/default").is_none());
        assert!(collection("/version").is_none());
    }

    #[test]
    fn requests_are_told_apart() {
        let list = ApiRequest::parse(
            "GET",
            "/api/v1/secrets?labelSelector=owner%3Dhelm&limit=50",
            None,
        );
        assert!(list.is_list() && !list.is_watch());
        assert_eq!(list.param("labelSelector"), Some("owner=helm"));
        let watch = ApiRequest::parse("GET", "/api/v1/secrets?&watch=true&resourceVersion=1", None);
        assert!(watch.is_watch() && !watch.is_list());
        assert!(!ApiRequest::parse("GET", "/version", None).is_list());
    }

    #[test]
    fn objects_match_the_selector_and_parse() {
        assert_eq!(
            Value::Object(selector_labels(
                "owner=helm,app.kubernetes.io/managed-by==Helm,k in (a,b),!gone,x!=y,there"
            )),
            json!({ "owner": "helm", "app.kubernetes.io/managed-by": "Helm", "k": "a", "there": "x" })
        );
        assert!(selector_labels("owner!=helm").is_empty());
        let c = collection("/api/v1/secrets").unwrap();
        let mut page = list_head(&c, Some("0-2")).into_bytes();
        let template = Template::new(&c, Some("owner=helm"), FILLER);
        template.write(7, &mut page);
        page.push(b',');
        template.write(8, &mut page);
        page.extend_from_slice(b"]}");
        let page: Value = serde_json::from_slice(&page).unwrap();
        assert_eq!(page["kind"], "SecretList");
        assert_eq!(page["metadata"]["continue"], "0-2");
        assert_eq!(page["items"][1]["metadata"]["name"], "x-8");
        assert_eq!(page["items"][0]["metadata"]["labels"]["owner"], "helm");
        assert_eq!(page["items"][0]["metadata"]["namespace"], "default");
        assert_eq!(page["items"][0]["kind"], "Secret");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decoded("owner%21%3Dhelm"), "owner!=helm");
        assert_eq!(percent_decoded("a+b%2"), "a b%2");
        assert_eq!(percent_decoded("%zz"), "%zz");
    }
}
