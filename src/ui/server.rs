//! The HTTP side: one hyper connection task per browser connection, each
//! request routed to a page or an action. Handlers read from [`Live`] (the
//! watched HelmApps and HelmAppSets) or, for a page's details and every
//! write, from the apiserver with the user's client — so RBAC decides, and
//! the apiserver's refusal is what the page shows.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apis::Hosstedproject;
use apis::helmapp::HelmApp;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use maud::Markup;
use parking_lot::Mutex;
use serde_json::json;

use super::details::{self, Kinds};
use super::live::Live;
use super::named::{EVENT_CONFIG_HASH, EVENT_USER, SUSPENDED_BY};
use super::pages::{self, Nav, Shell, overview::Filter};
use super::served::{self, Served, Session};
use super::session::{Gate, Refusal};
use crate::plugin::approve::{Refused, approve};
use crate::plugin::ask::{Ask, ask_now};

type Body = BoxBody<Bytes, Infallible>;

/// Largest form body accepted.
const MAX_FORM: usize = 16 * 1024;

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");

/// Everything a request handler needs.
pub struct Ui {
    pub access: Access,
    pub live: Arc<Live>,
    pub kinds: Kinds,
    pub helm_binary: PathBuf,
    /// Diffs of pending changes by (viewer, HelmApp UID, configuration
    /// hash): one helm render per change and user, not one per live
    /// update — and none rendered with one user's rights shown to another.
    pub diffs: Mutex<HashMap<(String, String, String), String>>,
    /// Renders of pending diffs at once (each runs helm three times).
    pub renders: tokio::sync::Semaphore,
}

/// Who may use the UI, and how their requests reach the apiserver.
// One value per process: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Access {
    /// `kubectl hossted ui`: one browser, the user's kubeconfig.
    Local { client: kube::Client, gate: Gate },
    /// `hossted-operator ui --serve`: signed-in users, each impersonated.
    Served(Served),
}

/// Who is asking: the client their reads and writes go through, the
/// CSRF token their forms carry, and who they are.
pub struct Viewer {
    pub client: kube::Client,
    pub csrf: String,
    pub who: Who,
    session: Option<Arc<Session>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// The local UI's user (their kubeconfig).
    Local,
    /// A signed-in user of the served UI.
    User(String),
    /// A visitor of the served UI with `--anonymous read-only`.
    Anonymous,
}

impl Viewer {
    fn name(&self) -> &str {
        match &self.who {
            Who::Local => "",
            Who::User(u) => u,
            Who::Anonymous => "anonymous",
        }
    }

    fn signed_in(&self) -> Option<&str> {
        match &self.who {
            Who::User(u) => Some(u),
            _ => None,
        }
    }
}

/// Serves `listener` until the process ends.
/// Connections served at once, at most (more wait to be accepted).
const MAX_CONNECTIONS: usize = 1024;
/// How long a request head may take to arrive.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(ui: Arc<Ui>, listener: tokio::net::TcpListener) {
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = connections.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ui = ui.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let ui = ui.clone();
                async move { Ok::<_, Infallible>(handle(&ui, req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            // A client that sends no complete head in time is closed (a
            // served UI is reachable by anyone on its network).
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(io, service)
                .await;
        });
    }
}

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

/// A response with the headers every answer carries.
fn respond(status: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    let set = |h: &mut http::HeaderMap, k: header::HeaderName, v: &str| {
        if let Ok(v) = v.parse() {
            h.insert(k, v);
        }
    };
    set(h, header::CONTENT_TYPE, content_type);
    set(h, header::CACHE_CONTROL, "no-store");
    // same-origin, not no-referrer: with no-referrer a browser sends
    // `Origin: null` on form posts, which the origin check refuses.
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    );
    r
}

fn redirect(to: &str) -> Response<Body> {
    let mut r = respond(StatusCode::SEE_OTHER, "text/plain", full(""));
    if let Ok(v) = to.parse() {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn refused(why: Refusal) -> Response<Body> {
    let mut r = respond(
        StatusCode::FORBIDDEN,
        "text/plain; charset=utf-8",
        full(format!("403 Forbidden: {}\n", why.explain())),
    );
    if let Ok(v) = why.as_str().parse() {
        r.headers_mut().insert("x-refusal", v);
    }
    r
}

/// `?a=b&c=d`, percent- and plus-decoded.
pub fn query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(ui: &Arc<Ui>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let params = query(req.uri().query().unwrap_or(""));
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    let viewer = match &ui.access {
        Access::Local { client, gate } => {
            if method == Method::GET && segs == ["login"] {
                return login(
                    gate,
                    req.headers(),
                    params.get("token").map_or("", String::as_str),
                );
            }
            if let Err(why) = gate.admit(req.headers()) {
                return refused(why);
            }
            Viewer {
                client: client.clone(),
                csrf: gate.csrf().to_string(),
                who: Who::Local,
                session: None,
            }
        }
        Access::Served(served) => {
            match served_entry(served, &method, &segs, &params, req.uri(), req.headers()).await {
                Entry::Answer(r) => return r,
                Entry::Viewer(v) => v,
            }
        }
    };
    let fragment = req.headers().contains_key("x-fragment");
    match (method, segs.as_slice()) {
        (Method::GET, ["static", "ui.css"]) => {
            respond(StatusCode::OK, "text/css; charset=utf-8", full(CSS))
        }
        (Method::GET, ["static", "ui.js"]) => {
            respond(StatusCode::OK, "text/javascript; charset=utf-8", full(JS))
        }
        (Method::GET, ["events"]) => events(ui, &viewer, params.get("watch").cloned()),
        (Method::GET, [""]) => {
            let filter = Filter {
                namespace: params.get("ns").cloned().unwrap_or_default(),
                text: params.get("q").cloned().unwrap_or_default(),
            };
            overview(ui, &viewer, &filter, fragment).await
        }
        (Method::GET, ["inventory"]) => inventory_page(ui, &viewer, fragment).await,
        (Method::GET, ["set", ns, name]) => set_page(ui, &viewer, ns, name, fragment).await,
        (Method::GET, ["app", ns, name]) => match visible_app(ui, &viewer, ns, name).await {
            Some(app) => app_page(ui, &viewer, &app, fragment).await,
            None => not_found(ui, &viewer, &format!("HelmApp {ns}/{name}"), fragment),
        },
        (Method::GET, ["app", ns, name, "pending"]) => {
            match visible_app(ui, &viewer, ns, name).await {
                Some(app) => pending_page(ui, &viewer, &app, fragment).await,
                None => not_found(ui, &viewer, &format!("HelmApp {ns}/{name}"), fragment),
            }
        }
        (Method::GET, ["logs", ns, pod]) => {
            let container = params.get("container").cloned().unwrap_or_default();
            let lines = params.get("lines").and_then(|l| l.parse().ok());
            logs_page(ui, &viewer, ns, pod, &container, lines, fragment).await
        }
        (Method::GET, ["logs", ns, pod, "stream"]) => {
            let container = params.get("container").cloned().unwrap_or_default();
            logs_stream(ui, &viewer, ns, pod, &container)
        }
        (Method::POST, ["logout"]) => logout(ui, &viewer, req).await,
        (Method::POST, ["app", ns, name, action]) => {
            posted(ui, &viewer, req, ns, name, action).await
        }
        _ => not_found(ui, &viewer, &path, fragment),
    }
}

/// What the served UI does with a request before its page: answers it
/// (sign-in, health, a refusal) or says who asks.
enum Entry {
    Answer(Response<Body>),
    Viewer(Viewer),
}

async fn served_entry(
    served: &Served,
    method: &Method,
    segs: &[&str],
    params: &HashMap<String, String>,
    uri: &http::Uri,
    headers: &http::HeaderMap,
) -> Entry {
    let get = method == Method::GET;
    match (get, segs) {
        (true, ["healthz"]) => {
            return Entry::Answer(respond(StatusCode::OK, "text/plain", full("ok\n")));
        }
        (true, ["login"]) if served.provider.is_some() => {
            let back = params.get("return").map_or("/", String::as_str);
            return Entry::Answer(match served.begin(back) {
                Ok((url, state)) => {
                    let mut r = redirect(&url);
                    let cookie = served::set_cookie(
                        served::SIGN_IN_COOKIE,
                        &state,
                        served::SIGN_IN_TIMEOUT.as_secs(),
                    );
                    if let Ok(v) = cookie.parse() {
                        r.headers_mut().insert(header::SET_COOKIE, v);
                    }
                    r
                }
                Err(e) => signed_out_page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            });
        }
        (true, ["callback"]) if served.provider.is_some() => {
            return Entry::Answer(callback(served, params, headers).await);
        }
        (true, ["signed-out"]) => {
            return Entry::Answer(signed_out_page(StatusCode::OK, "You are signed out."));
        }
        _ => {}
    }
    if let Some(session) = served.session(headers) {
        return Entry::Viewer(Viewer {
            client: session.client.clone(),
            csrf: session.csrf.clone(),
            who: Who::User(session.identity.username.clone()),
            session: Some(session),
        });
    }
    if served.provider.is_none() {
        return Entry::Viewer(Viewer {
            client: served.reader.clone(),
            csrf: String::new(),
            who: Who::Anonymous,
            session: None,
        });
    }
    // Not signed in: a page is sent to sign in and back; anything else
    // (a live stream, a fragment, a form) is refused.
    let page = get && !headers.contains_key("x-fragment") && segs.first() != Some(&"events");
    if page {
        let back = uri.path_and_query().map_or("/", |p| p.as_str());
        return Entry::Answer(redirect(&format!("/login?return={}", form_encode(back))));
    }
    Entry::Answer(refused(Refusal::NoSession))
}

/// The provider sent the browser back: the session made, the sign-in
/// cookie removed, back where the user was.
async fn callback(
    served: &Served,
    params: &HashMap<String, String>,
    headers: &http::HeaderMap,
) -> Response<Body> {
    if let Some(error) = params.get("error") {
        // The provider's error code only, bounded (it is a URL's text).
        let code: String = error
            .chars()
            .filter(|c| c.is_ascii_graphic())
            .take(64)
            .collect();
        return signed_out_page(
            StatusCode::FORBIDDEN,
            &format!("The sign-in was not completed: the provider said {code}."),
        );
    }
    let (state, code) = (
        params.get("state").map_or("", String::as_str),
        params.get("code").map_or("", String::as_str),
    );
    match served
        .finish(served::cookie(headers, served::SIGN_IN_COOKIE), state, code)
        .await
    {
        Ok((session, back)) => {
            let max_age = session
                .identity
                .expires
                .duration_since(std::time::SystemTime::now())
                .map_or(0, |d| d.as_secs());
            log::info!(
                "ui: {} signed in ({} groups)",
                session.identity.username,
                session.identity.groups.len()
            );
            let mut r = redirect(served::local_path(&back));
            for cookie in [
                served::set_cookie(served::SESSION_COOKIE, &session.id, max_age),
                served::set_cookie(served::SIGN_IN_COOKIE, "", 0),
            ] {
                if let Ok(v) = cookie.parse() {
                    r.headers_mut().append(header::SET_COOKIE, v);
                }
            }
            r
        }
        Err(e) => {
            log::warn!("ui: a sign-in was refused: {e}");
            signed_out_page(StatusCode::FORBIDDEN, &format!("Sign-in refused: {e}"))
        }
    }
}

/// A page for a browser without a session: a message and a link to sign
/// in.
fn signed_out_page(status: StatusCode, message: &str) -> Response<Body> {
    let body = maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "hossted" }
                link rel="stylesheet" href="/static/ui.css";
            }
            body {
                main #main {
                    h1 { "hossted" }
                    p data-signed-out=(status.as_u16()) { (message) }
                    p { a href="/login" data-action="sign-in" { "Sign in" } }
                }
            }
        }
    };
    respond(status, "text/html; charset=utf-8", full(body.into_string()))
}

/// `application/x-www-form-urlencoded` of one value.
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether `viewer` may see HelmApps in `namespace`: the served UI asks
/// the apiserver as the user; the local UI's watches are the user's own.
async fn may_see(ui: &Ui, viewer: &Viewer, namespace: &str) -> bool {
    match (&ui.access, &viewer.session) {
        (Access::Served(served), Some(session)) => served.may_list(session, namespace).await,
        _ => true,
    }
}

/// HelmApp `ns/name` from the watches, if `viewer` may see it.
async fn visible_app(ui: &Ui, viewer: &Viewer, ns: &str, name: &str) -> Option<Arc<HelmApp>> {
    let app = ui.live.app(ns, name)?;
    may_see(ui, viewer, ns).await.then_some(app)
}

/// The namespaces of `namespaces` `viewer` may see.
async fn visible_namespaces(
    ui: &Ui,
    viewer: &Viewer,
    namespaces: impl IntoIterator<Item = String>,
) -> std::collections::BTreeSet<String> {
    use futures::StreamExt;
    let distinct: std::collections::BTreeSet<String> = namespaces.into_iter().collect();
    futures::stream::iter(distinct)
        .map(|ns| async move { may_see(ui, viewer, &ns).await.then_some(ns) })
        .buffer_unordered(16)
        .filter_map(|ns| async move { ns })
        .collect()
        .await
}

/// A shell with no filters that any change updates.
fn plain(title: &str, nav: Nav) -> Shell<'_> {
    Shell {
        title,
        nav,
        filters: maud::html! {},
        watch: None,
    }
}

async fn inventory_page(ui: &Ui, viewer: &Viewer, fragment: bool) -> Response<Body> {
    let projects = Api::<Hosstedproject>::all(viewer.client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| format!("cannot list Hosstedprojects: {e}"));
    let main = pages::inventory::main(&projects, chrono::Utc::now());
    html(
        ui,
        viewer,
        StatusCode::OK,
        plain("Inventory", Nav::Inventory),
        main,
        fragment,
    )
}

async fn set_page(
    ui: &Ui,
    viewer: &Viewer,
    ns: &str,
    name: &str,
    fragment: bool,
) -> Response<Body> {
    let title = format!("HelmAppSet {ns}/{name}");
    let set = match ui.live.set(ns, name) {
        Some(set) if may_see(ui, viewer, ns).await => set,
        _ => return not_found(ui, viewer, &title, fragment),
    };
    let main = pages::set::main(&set, &ui.live.apps());
    html(
        ui,
        viewer,
        StatusCode::OK,
        plain(&title, Nav::Other),
        main,
        fragment,
    )
}

/// A form posted to `/app/<ns>/<name>/<action>`: bounded, checked for
/// the session and CSRF token, then acted on.
async fn posted(
    ui: &Ui,
    viewer: &Viewer,
    req: Request<Incoming>,
    ns: &str,
    name: &str,
    action: &str,
) -> Response<Body> {
    let form = match admitted_form(ui, viewer, req).await {
        Ok(form) => form,
        Err(r) => return r,
    };
    if !may_see(ui, viewer, ns).await {
        return not_found(ui, viewer, &format!("HelmApp {ns}/{name}"), false);
    }
    act(ui, viewer, ns, name, action, &form).await
}

/// A posted form, bounded, once the request may change state: the local
/// UI's gate, or the served UI's session, origin and CSRF token.
async fn admitted_form(
    ui: &Ui,
    viewer: &Viewer,
    req: Request<Incoming>,
) -> Result<HashMap<String, String>, Response<Body>> {
    let headers = req.headers().clone();
    let form = match Limited::new(req.into_body(), MAX_FORM).collect().await {
        Ok(b) => query(&String::from_utf8_lossy(&b.to_bytes())),
        Err(_) => {
            return Err(respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                "text/plain",
                full("form too large\n"),
            ));
        }
    };
    let csrf = form.get("csrf").map(String::as_str);
    let admitted = match &ui.access {
        Access::Local { gate, .. } => gate.admit_change(&headers, csrf),
        Access::Served(served) => served_change(served, viewer, &headers, csrf),
    };
    admitted.map(|()| form).map_err(refused)
}

/// Whether a signed-in user's request may change state: an `Origin`, when
/// sent, of the public URL; the session's CSRF token.
fn served_change(
    served: &Served,
    viewer: &Viewer,
    headers: &http::HeaderMap,
    form_csrf: Option<&str>,
) -> Result<(), Refusal> {
    if viewer.session.is_none() {
        return Err(Refusal::ReadOnly);
    }
    if let Some(origin) = headers.get(header::ORIGIN)
        && origin.to_str().ok() != Some(served.public_origin.as_str())
    {
        return Err(Refusal::ForeignOrigin);
    }
    let header = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
    match form_csrf.or(header) {
        Some(t) if served::same(t, &viewer.csrf) => Ok(()),
        _ => Err(Refusal::NoCsrf),
    }
}

/// `POST /logout`: the session ended here (its cookie no longer admits
/// anyone), the cookie removed.
async fn logout(ui: &Ui, viewer: &Viewer, req: Request<Incoming>) -> Response<Body> {
    let Access::Served(served) = &ui.access else {
        return not_found(ui, viewer, "/logout", false);
    };
    if let Err(r) = admitted_form(ui, viewer, req).await {
        return r;
    }
    if let Some(session) = &viewer.session {
        served.end(session);
        log::info!("ui: {} signed out", session.identity.username);
    }
    let mut r = redirect("/signed-out");
    if let Ok(v) = served::set_cookie(served::SESSION_COOKIE, "", 0).parse() {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn login(gate: &Gate, headers: &http::HeaderMap, token: &str) -> Response<Body> {
    if let Err(why) = gate.check_host(headers) {
        return refused(why);
    }
    match gate.redeem(token) {
        Ok(cookie) => {
            let mut r = redirect("/");
            if let Ok(v) = cookie.parse() {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(why) => refused(why),
    }
}

/// A page (or, for a live update, only its `<main>`).
fn html(
    ui: &Ui,
    viewer: &Viewer,
    status: StatusCode,
    frame: Shell<'_>,
    main: Markup,
    fragment: bool,
) -> Response<Body> {
    let generation = ui.live.generation();
    let body = if fragment {
        main.into_string()
    } else {
        pages::page(frame, &viewer.csrf, viewer.signed_in(), generation, main).into_string()
    };
    let mut r = respond(status, "text/html; charset=utf-8", full(body));
    if let Ok(v) = generation.to_string().parse() {
        r.headers_mut().insert("x-generation", v);
    }
    r
}

fn not_found(ui: &Ui, viewer: &Viewer, what: &str, fragment: bool) -> Response<Body> {
    let main = pages::error(
        404,
        &format!("{what}: not found"),
        "It does not exist, or you may not list it.",
    );
    html(
        ui,
        viewer,
        StatusCode::NOT_FOUND,
        plain("Not found", Nav::Other),
        main,
        fragment,
    )
}

async fn overview(ui: &Ui, viewer: &Viewer, filter: &Filter, fragment: bool) -> Response<Body> {
    let mut apps = ui.live.apps();
    let mut sets = ui.live.sets();
    if viewer.session.is_some() {
        let seen = apps
            .iter()
            .filter_map(|a| a.namespace())
            .chain(sets.iter().filter_map(|s| s.namespace()));
        let visible = visible_namespaces(ui, viewer, seen).await;
        let shown = |ns: Option<String>| ns.is_some_and(|ns| visible.contains(&ns));
        apps.retain(|a| shown(a.namespace()));
        sets.retain(|s| shown(s.namespace()));
    }
    let mut namespaces: Vec<String> = apps.iter().filter_map(|a| a.namespace()).collect();
    // The namespaces the UI was started with, as choices — not to a
    // signed-in user, who is shown those they may list only.
    if let super::live::Scope::Namespaces(ns) = &ui.live.scope
        && viewer.session.is_none()
    {
        namespaces.extend(ns.iter().cloned());
    }
    namespaces.sort();
    namespaces.dedup();
    let main = pages::overview::main(&apps, &sets, filter, chrono::Utc::now());
    let filters = pages::overview::filters(filter, &namespaces);
    html(
        ui,
        viewer,
        StatusCode::OK,
        Shell {
            title: "Overview",
            nav: Nav::Overview,
            filters,
            watch: None,
        },
        main,
        fragment,
    )
}

async fn app_page(ui: &Ui, viewer: &Viewer, app: &HelmApp, fragment: bool) -> Response<Body> {
    let client = &viewer.client;
    let d = if viewer.who == Who::Anonymous {
        // Read-only to anyone: the HelmApp and its Events, nothing read
        // from the release (its values and objects are the tenant's).
        let hidden = || Err("not shown to anonymous visitors: sign in".to_string());
        pages::app::Details {
            events: details::events(client, app).await,
            inventory: Vec::new(),
            drift: Vec::new(),
            values: hidden(),
            tree: Ok(Vec::new()),
        }
    } else {
        let (events, inventory, drift, values, tree) = tokio::join!(
            details::events(client, app),
            details::inventory(client, &ui.kinds, app),
            details::drift(client, &ui.kinds, app),
            details::values(client, app),
            super::tree::tree(client, &ui.kinds, app),
        );
        pages::app::Details {
            events,
            inventory,
            drift,
            values,
            tree,
        }
    };
    let main = pages::app::main(app, &d, &viewer.csrf, chrono::Utc::now());
    app_html(ui, viewer, app, "HelmApp", main, fragment)
}

/// A page about one HelmApp: titled `<what> <ns>/<name>`, updated by that
/// HelmApp's changes only.
fn app_html(
    ui: &Ui,
    viewer: &Viewer,
    app: &HelmApp,
    what: &str,
    main: Markup,
    fragment: bool,
) -> Response<Body> {
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let title = format!("{what} {key}");
    let shell = Shell {
        title: &title,
        nav: Nav::Other,
        filters: maud::html! {},
        watch: Some(format!("HelmApp/{key}")),
    };
    html(ui, viewer, StatusCode::OK, shell, main, fragment)
}

async fn pending_page(ui: &Ui, viewer: &Viewer, app: &HelmApp, fragment: bool) -> Response<Body> {
    let pending = app.status.as_ref().and_then(|s| s.pending_change.as_ref());
    let diff = match pending {
        None => Ok(String::new()),
        Some(_) if viewer.who == Who::Anonymous => {
            Err("not shown to anonymous visitors: sign in".to_string())
        }
        Some(p) => pending_diff(ui, viewer, app, &p.config_hash).await,
    };
    let main = pages::pending::main(app, &diff, &viewer.csrf);
    app_html(ui, viewer, app, "Pending change of", main, fragment)
}

/// The masked diff of the change `hash` pending on `app`, rendered once
/// per change (a failure is tried again on the next look).
async fn pending_diff(
    ui: &Ui,
    viewer: &Viewer,
    app: &HelmApp,
    hash: &str,
) -> Result<String, String> {
    let key = (
        viewer.name().to_string(),
        app.uid().unwrap_or_default(),
        hash.to_string(),
    );
    if let Some(d) = ui.diffs.lock().get(&key) {
        return Ok(d.clone());
    }
    // Afresh: the cached copy has no inline values.
    let ns = app.namespace().unwrap_or_default();
    let fresh = Api::<HelmApp>::namespaced(viewer.client.clone(), &ns)
        .get(&app.name_any())
        .await
        .map_err(|e| e.to_string())?;
    // helm runs as the signed-in user (the UI's own identity may only
    // impersonate), one render at a time, off the runtime's workers (helm
    // is waited for by blocking calls).
    let _render = ui.renders.acquire().await.map_err(|e| e.to_string())?;
    let identity = viewer
        .session
        .as_ref()
        .map(|s| (s.identity.username.clone(), s.identity.groups.clone()));
    let (client, binary) = (viewer.client.clone(), ui.helm_binary.clone());
    let runtime = tokio::runtime::Handle::current();
    let diff = tokio::task::spawn_blocking(move || {
        let as_user = identity.as_ref().map(|(u, g)| (u.as_str(), g.as_slice()));
        runtime.block_on(crate::plugin::diff::masked_diff(
            &client, &fresh, &binary, as_user,
        ))
    })
    .await
    .map_err(|e| e.to_string())??;
    let mut diffs = ui.diffs.lock();
    // Bounded: the oldest renders are simply made again when asked.
    if diffs.len() >= MAX_DIFFS {
        diffs.clear();
    }
    diffs.insert(key, diff.clone());
    Ok(diff)
}

/// Pending diffs kept at most (per viewer, app and change).
const MAX_DIFFS: usize = 256;

/// A state-changing request, with the user's rights; on success back to
/// the HelmApp's page, else the refusal (the apiserver's status code and
/// words).
async fn act(
    ui: &Ui,
    viewer: &Viewer,
    ns: &str,
    name: &str,
    action: &str,
    form: &HashMap<String, String>,
) -> Response<Body> {
    let api: Api<HelmApp> = Api::namespaced(viewer.client.clone(), ns);
    let done: Result<(), (StatusCode, String)> = match action {
        "approve" => {
            let Some(hash) = form.get("hash").filter(|h| !h.is_empty()) else {
                return error_page(
                    ui,
                    viewer,
                    StatusCode::BAD_REQUEST,
                    "Approve",
                    "the form names no configuration hash",
                );
            };
            match approve(&api, name, Some(hash)).await {
                Ok(_) => Ok(()),
                Err(Refused::NothingPending) => Err((
                    StatusCode::CONFLICT,
                    "nothing waits for approval any more".into(),
                )),
                Err(Refused::Replaced { pending, asked }) => Err((
                    StatusCode::CONFLICT,
                    format!(
                        "the pending change is now configuration {pending}, not {asked}: look at it again before approving"
                    ),
                )),
                Err(Refused::Api(e)) => Err(api_error(e)),
            }
        }
        "reconcile" => ask_now(&api, name, Ask::Reconcile)
            .await
            .map(|_| ())
            .map_err(api_error),
        "force" => ask_now(&api, name, Ask::Force)
            .await
            .map(|_| ())
            .map_err(api_error),
        "suspend" | "resume" => {
            let suspend = action == "suspend";
            // Who suspended it, on the object, when the served UI knows
            // (removed on resume).
            let by = viewer.signed_in().filter(|_| suspend);
            let patch = json!({ "metadata": { "annotations": { SUSPENDED_BY: by } },
                                "spec": { "suspend": suspend } });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(api_error)
        }
        _ => return not_found(ui, viewer, action, false),
    };
    match done {
        Ok(()) => {
            if let (Access::Served(served), Some(user)) = (&ui.access, viewer.signed_in()) {
                let hash = form.get("hash").filter(|_| action == "approve");
                named_event(served, ns, name, action, user, hash.map(String::as_str)).await;
            }
            redirect(&pages::app_href(ns, name))
        }
        Err((status, message)) => error_page(
            ui,
            viewer,
            status,
            &format!("{action} {ns}/{name}: refused"),
            &message,
        ),
    }
}

fn api_error(e: kube::Error) -> (StatusCode, String) {
    match e {
        kube::Error::Api(s) => (
            StatusCode::from_u16(s.code).unwrap_or(StatusCode::BAD_GATEWAY),
            format!(
                "the apiserver said {} ({}): {}",
                s.code, s.reason, s.message
            ),
        ),
        e => (
            StatusCode::BAD_GATEWAY,
            format!("the apiserver could not be asked: {e}"),
        ),
    }
}

fn error_page(
    ui: &Ui,
    viewer: &Viewer,
    status: StatusCode,
    what: &str,
    detail: &str,
) -> Response<Body> {
    let main = pages::error(status.as_u16(), what, detail);
    html(ui, viewer, status, plain(what, Nav::Other), main, false)
}

/// A Normal Event on HelmApp `ns/name` naming `user`, who did `action`
/// (written as the reader: users may not create Events). A failure is
/// logged: the action itself is done.
async fn named_event(
    served: &Served,
    ns: &str,
    name: &str,
    action: &str,
    user: &str,
    approved_hash: Option<&str>,
) {
    use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let uid = Api::<HelmApp>::namespaced(served.reader.clone(), ns)
        .get_metadata(name)
        .await
        .ok()
        .and_then(|m| m.metadata.uid);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let reason = super::named::reason_of(action);
    let event = Event {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(ns.to_string()),
            // Who, as a field a reader can match (the message is prose).
            annotations: Some(
                [(EVENT_USER.to_string(), user.to_string())]
                    .into_iter()
                    .chain(approved_hash.map(|h| (EVENT_CONFIG_HASH.to_string(), h.to_string())))
                    .collect(),
            ),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(<HelmApp as kube::Resource>::api_version(&()).into_owned()),
            kind: Some("HelmApp".into()),
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            uid,
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(format!("{user}: {action}, in the web view")),
        type_: Some("Normal".into()),
        source: Some(EventSource {
            component: Some("hossted-ui".into()),
            ..Default::default()
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    if let Err(e) = Api::<Event>::namespaced(served.reader.clone(), ns)
        .create(&kube::api::PostParams::default(), &event)
        .await
    {
        log::warn!("ui: the {reason} Event of {ns}/{name} was not written: {e}");
    }
}

/// `text/event-stream`: the generation now, then each new one (changes
/// coalesce: a browser behind sees only the newest), and a comment every
/// 15 s so a closed browser is noticed. With `watch` (`HelmApp/ns/name`,
/// what a page about one object asks for), only generations that touched
/// that object are sent.
fn events(ui: &Arc<Ui>, viewer: &Viewer, watch: Option<String>) -> Response<Body> {
    let guard = match stream_guard(ui, viewer) {
        Ok(guard) => guard,
        Err(r) => return *r,
    };
    let mut rx = ui.live.subscribe();
    let first = *rx.borrow_and_update();
    // The stream's frames are made by a task of their own (the checks of a
    // signed-in user's access are requests) and handed over one at a
    // time: when the browser goes away, the next hand-over fails and the
    // task ends, with it the guard counting the session's streams.
    let (tx, frames) = tokio::sync::mpsc::channel::<Frame<Bytes>>(1);
    let (live, session, ui) = (ui.live.clone(), viewer.session.clone(), ui.clone());
    tokio::spawn(async move {
        let _guard = guard;
        let mut sent = first;
        // A page about one object of a namespace the user may not see gets
        // nothing: no frame may tell when another team's app changed.
        if let (Access::Served(served), Some(session), Some(ns)) = (
            &ui.access,
            &session,
            watch.as_deref().and_then(|k| k.split('/').nth(1)),
        ) && !served.may_list(session, ns).await
        {
            return;
        }
        if tx.send(sse(first)).await.is_err() {
            return;
        }
        // The stream ends with its session (logout, expiry).
        let ended = session_ended(session.clone());
        tokio::pin!(ended);
        loop {
            let frame = tokio::select! {
                () = &mut ended => return,
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let g = *rx.borrow_and_update();
                    if watch.as_deref().is_some_and(|key| !live.touched(key, sent, g)) {
                        continue;
                    }
                    // A signed-in user hears of changes in namespaces they
                    // may see only: not even when another team's app
                    // changed.
                    if let (Access::Served(served), Some(session)) = (&ui.access, &session)
                        && !touched_visible(&live, served, session, sent, g).await
                    {
                        continue;
                    }
                    sent = g;
                    sse(g)
                }
                () = tokio::time::sleep(Duration::from_secs(15)) => {
                    Frame::data(Bytes::from_static(b": keep-alive\n\n"))
                }
            };
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    event_stream(frames)
}

/// The most log lines a page shows, and its default.
const MAX_LOG_LINES: i64 = 1000;
const LOG_LINES: i64 = 200;
/// The most bytes of logs a page reads, and a stream sends.
const MAX_LOG_BYTES: i64 = 1 << 20;
const MAX_STREAM_BYTES: usize = 16 << 20;
/// The longest log line a stream sends whole (longer ones are cut).
const MAX_LOG_LINE: usize = 64 << 10;

/// The last lines of a container's logs, read as the viewer (never to an
/// anonymous visitor).
async fn logs_page(
    ui: &Ui,
    viewer: &Viewer,
    ns: &str,
    pod: &str,
    container: &str,
    lines: Option<i64>,
    fragment: bool,
) -> Response<Body> {
    if viewer.who == Who::Anonymous {
        return error_page(
            ui,
            viewer,
            StatusCode::FORBIDDEN,
            "Logs",
            "not shown to anonymous visitors: sign in",
        );
    }
    let params = kube::api::LogParams {
        container: (!container.is_empty()).then(|| container.to_string()),
        tail_lines: Some(lines.unwrap_or(LOG_LINES).clamp(1, MAX_LOG_LINES)),
        limit_bytes: Some(MAX_LOG_BYTES),
        ..Default::default()
    };
    let text = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(viewer.client.clone(), ns)
        .logs(pod, &params)
        .await
        .map_err(|e| api_error(e).1);
    let main = pages::logs::main(ns, pod, container, &text);
    let title = format!("Logs of {ns}/{pod}");
    // Followed by its own stream: no HelmApp change replaces the page
    // (no HelmApp is ever noted under a Pod's key).
    let shell = Shell {
        title: &title,
        nav: Nav::Other,
        filters: maud::html! {},
        watch: Some(format!("Pod/{ns}/{pod}")),
    };
    html(ui, viewer, StatusCode::OK, shell, main, fragment)
}

/// New lines of a container's logs as server-sent events, read as the
/// viewer, each line one event (a carriage return dropped), at most
/// [`MAX_STREAM_BYTES`]; counted among the session's streams.
fn logs_stream(ui: &Ui, viewer: &Viewer, ns: &str, pod: &str, container: &str) -> Response<Body> {
    if viewer.who == Who::Anonymous {
        return refused(Refusal::ReadOnly);
    }
    let guard = match stream_guard(ui, viewer) {
        Ok(guard) => guard,
        Err(r) => return *r,
    };
    let params = kube::api::LogParams {
        container: (!container.is_empty()).then(|| container.to_string()),
        follow: true,
        tail_lines: Some(0),
        ..Default::default()
    };
    let api = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(viewer.client.clone(), ns);
    let pod = pod.to_string();
    let session = viewer.session.clone();
    let (tx, frames) = tokio::sync::mpsc::channel::<Frame<Bytes>>(16);
    tokio::spawn(async move {
        use futures::AsyncReadExt;
        let _guard = guard;
        let Ok(reader) = api.log_stream(&pod, &params).await else {
            return;
        };
        let mut reader = Box::pin(reader);
        // The stream ends with its session, or as soon as the browser goes
        // away — not at the next line of a quiet container.
        let ended = session_ended(session);
        tokio::pin!(ended);
        // Lines split by hand: a line is cut at MAX_LOG_LINE bytes (a
        // container may write one without end).
        let (mut line, mut chunk, mut sent) = (Vec::new(), vec![0u8; 8192], 0usize);
        loop {
            let read = tokio::select! {
                () = &mut ended => return,
                () = tx.closed() => return,
                read = reader.read(&mut chunk) => read,
            };
            let n = match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            sent += n;
            if sent > MAX_STREAM_BYTES {
                return;
            }
            for &b in &chunk[..n] {
                if b != b'\n' && line.len() < MAX_LOG_LINE {
                    if b != b'\r' {
                        line.push(b);
                    }
                    continue;
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                line.clear();
                if b != b'\n' && b != b'\r' {
                    line.push(b);
                }
                let frame = Frame::data(Bytes::from(format!("data: {text}\n\n")));
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
        }
    });
    event_stream(frames)
}

/// A live stream's slot: none is counted for the local UI; the served
/// one's refusal (429) when the session, or the anonymous visitors, hold
/// as many as allowed.
fn stream_guard(
    ui: &Ui,
    viewer: &Viewer,
) -> Result<Option<served::StreamGuard>, Box<Response<Body>>> {
    match &ui.access {
        Access::Served(served) => match served.open_stream(viewer.session.as_ref()) {
            Some(guard) => Ok(Some(guard)),
            None => {
                let mut r = refused(Refusal::TooManyStreams);
                *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                Err(Box::new(r))
            }
        },
        Access::Local { .. } => Ok(None),
    }
}

/// `text/event-stream` of the frames a task hands over on `frames`.
fn event_stream(frames: tokio::sync::mpsc::Receiver<Frame<Bytes>>) -> Response<Body> {
    let stream = futures::stream::unfold(frames, |mut frames| async move {
        let frame = frames.recv().await?;
        Some((Ok::<_, Infallible>(frame), frames))
    });
    respond(
        StatusCode::OK,
        "text/event-stream",
        BodyExt::boxed(StreamBody::new(stream)),
    )
}

/// Resolves when `session` ends (never for the local UI or an anonymous
/// visitor).
async fn session_ended(session: Option<Arc<Session>>) {
    match session {
        Some(s) => s.ended().await,
        None => std::future::pending().await,
    }
}

/// Whether a change after generation `since`, up to `now`, touched an
/// object in a namespace `session`'s user may see (`true` also when the
/// changes since are no longer all remembered).
async fn touched_visible(
    live: &Live,
    served: &Served,
    session: &Session,
    since: u64,
    now: u64,
) -> bool {
    let Some(keys) = live.touched_keys(since, now) else {
        return true;
    };
    let namespaces: std::collections::BTreeSet<&str> =
        keys.iter().filter_map(|k| k.split('/').nth(1)).collect();
    for ns in namespaces {
        if served.may_list(session, ns).await {
            return true;
        }
    }
    false
}

/// One server-sent event: the generation.
fn sse(generation: u64) -> Frame<Bytes> {
    Frame::data(Bytes::from(format!("data: {generation}\n\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_and_plus_decoded() {
        let q = query("ns=team-a&q=hello+world%21&empty=&bad=%zz&tail=%4");
        assert_eq!(q["ns"], "team-a");
        assert_eq!(q["q"], "hello world!");
        assert_eq!(q["empty"], "");
        assert_eq!(q["bad"], "%zz");
        assert_eq!(q["tail"], "%4");
    }
}
