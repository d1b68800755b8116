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
use super::pages::{self, Nav, Shell, overview::Filter};
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
    pub client: kube::Client,
    pub live: Arc<Live>,
    pub gate: Gate,
    pub kinds: Kinds,
    pub helm_binary: PathBuf,
    /// Diffs of pending changes by (HelmApp UID, configuration hash): one
    /// helm render per change, not one per live update.
    pub diffs: Mutex<HashMap<(String, String), String>>,
}

/// Serves `listener` until the process ends.
pub async fn serve(ui: Arc<Ui>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ui = ui.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let ui = ui.clone();
                async move { Ok::<_, Infallible>(handle(&ui, req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
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

async fn handle(ui: &Ui, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let params = query(req.uri().query().unwrap_or(""));
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    if method == Method::GET && segs == ["login"] {
        return login(
            ui,
            req.headers(),
            params.get("token").map_or("", String::as_str),
        );
    }
    if let Err(why) = ui.gate.admit(req.headers()) {
        return refused(why);
    }
    let fragment = req.headers().contains_key("x-fragment");
    match (method, segs.as_slice()) {
        (Method::GET, ["static", "ui.css"]) => {
            respond(StatusCode::OK, "text/css; charset=utf-8", full(CSS))
        }
        (Method::GET, ["static", "ui.js"]) => {
            respond(StatusCode::OK, "text/javascript; charset=utf-8", full(JS))
        }
        (Method::GET, ["events"]) => events(ui, params.get("watch").cloned()),
        (Method::GET, [""]) => {
            let filter = Filter {
                namespace: params.get("ns").cloned().unwrap_or_default(),
                text: params.get("q").cloned().unwrap_or_default(),
            };
            overview(ui, &filter, fragment)
        }
        (Method::GET, ["inventory"]) => inventory_page(ui, fragment).await,
        (Method::GET, ["set", ns, name]) => set_page(ui, ns, name, fragment),
        (Method::GET, ["app", ns, name]) => match ui.live.app(ns, name) {
            Some(app) => app_page(ui, &app, fragment).await,
            None => not_found(ui, &format!("HelmApp {ns}/{name}"), fragment),
        },
        (Method::GET, ["app", ns, name, "pending"]) => match ui.live.app(ns, name) {
            Some(app) => pending_page(ui, &app, fragment).await,
            None => not_found(ui, &format!("HelmApp {ns}/{name}"), fragment),
        },
        (Method::POST, ["app", ns, name, action]) => posted(ui, req, ns, name, action).await,
        _ => not_found(ui, &path, fragment),
    }
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

async fn inventory_page(ui: &Ui, fragment: bool) -> Response<Body> {
    let projects = Api::<Hosstedproject>::all(ui.client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| format!("cannot list Hosstedprojects: {e}"));
    let main = pages::inventory::main(&projects, chrono::Utc::now());
    html(
        ui,
        StatusCode::OK,
        plain("Inventory", Nav::Inventory),
        main,
        fragment,
    )
}

fn set_page(ui: &Ui, ns: &str, name: &str, fragment: bool) -> Response<Body> {
    let title = format!("HelmAppSet {ns}/{name}");
    match ui.live.set(ns, name) {
        Some(set) => {
            let main = pages::set::main(&set, &ui.live.apps());
            html(
                ui,
                StatusCode::OK,
                plain(&title, Nav::Other),
                main,
                fragment,
            )
        }
        None => not_found(ui, &title, fragment),
    }
}

/// A form posted to `/app/<ns>/<name>/<action>`: bounded, checked for
/// the session and CSRF token, then acted on.
async fn posted(
    ui: &Ui,
    req: Request<Incoming>,
    ns: &str,
    name: &str,
    action: &str,
) -> Response<Body> {
    let headers = req.headers().clone();
    let form = match Limited::new(req.into_body(), MAX_FORM).collect().await {
        Ok(b) => query(&String::from_utf8_lossy(&b.to_bytes())),
        Err(_) => {
            return respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                "text/plain",
                full("form too large\n"),
            );
        }
    };
    if let Err(why) = ui
        .gate
        .admit_change(&headers, form.get("csrf").map(String::as_str))
    {
        return refused(why);
    }
    act(ui, ns, name, action, &form).await
}

fn login(ui: &Ui, headers: &http::HeaderMap, token: &str) -> Response<Body> {
    if let Err(why) = ui.gate.check_host(headers) {
        return refused(why);
    }
    match ui.gate.redeem(token) {
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
    status: StatusCode,
    frame: Shell<'_>,
    main: Markup,
    fragment: bool,
) -> Response<Body> {
    let generation = ui.live.generation();
    let body = if fragment {
        main.into_string()
    } else {
        pages::page(frame, ui.gate.csrf(), generation, main).into_string()
    };
    let mut r = respond(status, "text/html; charset=utf-8", full(body));
    if let Ok(v) = generation.to_string().parse() {
        r.headers_mut().insert("x-generation", v);
    }
    r
}

fn not_found(ui: &Ui, what: &str, fragment: bool) -> Response<Body> {
    let main = pages::error(
        404,
        &format!("{what}: not found"),
        "It does not exist, or you may not list it.",
    );
    html(
        ui,
        StatusCode::NOT_FOUND,
        plain("Not found", Nav::Other),
        main,
        fragment,
    )
}

fn overview(ui: &Ui, filter: &Filter, fragment: bool) -> Response<Body> {
    let apps = ui.live.apps();
    let sets = ui.live.sets();
    let mut namespaces: Vec<String> = apps.iter().filter_map(|a| a.namespace()).collect();
    if let super::live::Scope::Namespaces(ns) = &ui.live.scope {
        namespaces.extend(ns.iter().cloned());
    }
    namespaces.sort();
    namespaces.dedup();
    let main = pages::overview::main(&apps, &sets, filter, chrono::Utc::now());
    let filters = pages::overview::filters(filter, &namespaces);
    html(
        ui,
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

async fn app_page(ui: &Ui, app: &HelmApp, fragment: bool) -> Response<Body> {
    let (events, inventory, drift, values) = tokio::join!(
        details::events(&ui.client, app),
        details::inventory(&ui.client, &ui.kinds, app),
        details::drift(&ui.client, &ui.kinds, app),
        details::values(&ui.client, app),
    );
    let d = pages::app::Details {
        events,
        inventory,
        drift,
        values,
    };
    let main = pages::app::main(app, &d, ui.gate.csrf(), chrono::Utc::now());
    app_html(ui, app, "HelmApp", main, fragment)
}

/// A page about one HelmApp: titled `<what> <ns>/<name>`, updated by that
/// HelmApp's changes only.
fn app_html(ui: &Ui, app: &HelmApp, what: &str, main: Markup, fragment: bool) -> Response<Body> {
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let title = format!("{what} {key}");
    let shell = Shell {
        title: &title,
        nav: Nav::Other,
        filters: maud::html! {},
        watch: Some(format!("HelmApp/{key}")),
    };
    html(ui, StatusCode::OK, shell, main, fragment)
}

async fn pending_page(ui: &Ui, app: &HelmApp, fragment: bool) -> Response<Body> {
    let pending = app.status.as_ref().and_then(|s| s.pending_change.as_ref());
    let diff = match pending {
        None => Ok(String::new()),
        Some(p) => pending_diff(ui, app, &p.config_hash).await,
    };
    let main = pages::pending::main(app, &diff, ui.gate.csrf());
    app_html(ui, app, "Pending change of", main, fragment)
}

/// The masked diff of the change `hash` pending on `app`, rendered once
/// per change (a failure is tried again on the next look).
async fn pending_diff(ui: &Ui, app: &HelmApp, hash: &str) -> Result<String, String> {
    let key = (app.uid().unwrap_or_default(), hash.to_string());
    if let Some(d) = ui.diffs.lock().get(&key) {
        return Ok(d.clone());
    }
    // Afresh: the cached copy has no inline values.
    let ns = app.namespace().unwrap_or_default();
    let fresh = Api::<HelmApp>::namespaced(ui.client.clone(), &ns)
        .get(&app.name_any())
        .await
        .map_err(|e| e.to_string())?;
    let diff = crate::plugin::diff::masked_diff(&ui.client, &fresh, &ui.helm_binary).await?;
    ui.diffs.lock().insert(key, diff.clone());
    Ok(diff)
}

/// A state-changing request, with the user's rights; on success back to
/// the HelmApp's page, else the refusal (the apiserver's status code and
/// words).
async fn act(
    ui: &Ui,
    ns: &str,
    name: &str,
    action: &str,
    form: &HashMap<String, String>,
) -> Response<Body> {
    let api: Api<HelmApp> = Api::namespaced(ui.client.clone(), ns);
    let done: Result<(), (StatusCode, String)> = match action {
        "approve" => {
            let Some(hash) = form.get("hash").filter(|h| !h.is_empty()) else {
                return error_page(
                    ui,
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
            let patch = json!({ "spec": { "suspend": action == "suspend" } });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(api_error)
        }
        _ => return not_found(ui, action, false),
    };
    match done {
        Ok(()) => redirect(&pages::app_href(ns, name)),
        Err((status, message)) => error_page(
            ui,
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

fn error_page(ui: &Ui, status: StatusCode, what: &str, detail: &str) -> Response<Body> {
    let main = pages::error(status.as_u16(), what, detail);
    html(ui, status, plain(what, Nav::Other), main, false)
}

/// `text/event-stream`: the generation now, then each new one (changes
/// coalesce: a browser behind sees only the newest), and a comment every
/// 15 s so a closed browser is noticed. With `watch` (`HelmApp/ns/name`,
/// what a page about one object asks for), only generations that touched
/// that object are sent.
fn events(ui: &Ui, watch: Option<String>) -> Response<Body> {
    let mut rx = ui.live.subscribe();
    let first = *rx.borrow_and_update();
    let initial = futures::stream::once(async move { Ok::<_, Infallible>(sse(first)) });
    let live = ui.live.clone();
    let updates = futures::stream::unfold((rx, first), move |(mut rx, mut sent)| {
        let (live, watch) = (live.clone(), watch.clone());
        async move {
            loop {
                tokio::select! {
                    changed = rx.changed() => {
                        changed.ok()?;
                        let g = *rx.borrow_and_update();
                        if watch.as_deref().is_some_and(|key| !live.touched(key, sent, g)) {
                            continue;
                        }
                        sent = g;
                        return Some((Ok(sse(g)), (rx, sent)));
                    }
                    () = tokio::time::sleep(Duration::from_secs(15)) => {
                        let keep_alive = Frame::data(Bytes::from_static(b": keep-alive\n\n"));
                        return Some((Ok(keep_alive), (rx, sent)));
                    }
                }
            }
        }
    });
    use futures::StreamExt;
    let body = BodyExt::boxed(StreamBody::new(initial.chain(updates)));
    respond(StatusCode::OK, "text/event-stream", body)
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
