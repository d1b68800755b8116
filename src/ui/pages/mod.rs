//! The pages, as maud templates: each a function from what was read to
//! markup. Nothing here reads the cluster; `server.rs` reads and calls.
//!
//! Every element a test or the live script looks for carries a `data-`
//! attribute with a value from a field (a state, a reason, a name), never
//! only free text.

pub mod app;
pub mod inventory;
pub mod logs;
pub mod overview;
pub mod pending;
pub mod set;

use maud::{DOCTYPE, Markup, html};

/// Which top-level page is current (for `aria-current`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Inventory,
    Other,
}

/// What a page is, beside its `<main>`.
pub struct Shell<'a> {
    pub title: &'a str,
    pub nav: Nav,
    /// Above `<main>`, kept while `<main>` is replaced by live updates.
    pub filters: Markup,
    /// `HelmApp/<ns>/<name>`: the one object whose changes update the
    /// page (`None`: any change does).
    pub watch: Option<String>,
}

/// Who the served UI shows as signed in (`None`: the local UI, or an
/// anonymous visitor).
pub type SignedIn<'a> = Option<&'a str>;

/// A whole page: the shell around `main`.
pub fn page(
    shell: Shell<'_>,
    csrf: &str,
    signed_in: SignedIn<'_>,
    generation: u64,
    main: Markup,
) -> Markup {
    let Shell {
        title,
        nav,
        filters,
        watch,
    } = shell;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                meta name="csrf-token" content=(csrf);
                title { (title) " · hossted" }
                link rel="stylesheet" href="/static/ui.css";
                script src="/static/ui.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    nav aria-label="Main" {
                        a href="/" aria-current=[(nav == Nav::Overview).then_some("page")] { "Overview" }
                        a href="/inventory" aria-current=[(nav == Nav::Inventory).then_some("page")] { "Inventory" }
                    }
                    @if let Some(user) = signed_in {
                        span.user data-user=(user) { (user) }
                        form.logout method="post" action="/logout" {
                            (csrf_field(csrf))
                            button type="submit" data-action="logout" { "Sign out" }
                        }
                    }
                    span #live role="status" aria-live="polite" data-live="connecting" { "connecting…" }
                }
                (filters)
                main #main data-generation=(generation) data-watch=[watch] tabindex="-1" {
                    (main)
                }
            }
        }
    }
}

/// An error page's `<main>`: what failed, in the apiserver's words.
pub fn error(status: u16, what: &str, detail: &str) -> Markup {
    html! {
        h1 { (what) }
        p.error role="alert" data-error-status=(status) { (detail) }
        p { a href="/" { "Back to the overview" } }
    }
}

/// `2m`, `3h`, `5d` since an RFC 3339 time (empty: `-`).
pub fn age(rfc3339: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(rfc3339) else {
        return "-".into();
    };
    crate::duration::short((now - t.with_timezone(&chrono::Utc)).num_seconds())
}

/// The state badge.
pub fn badge(state: crate::ui::state::State) -> Markup {
    html! { span.badge.(state.as_str()) data-state=(state.as_str()) { (state.title()) } }
}

/// Hidden CSRF field of every form that changes something.
pub fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// `/app/<ns>/<name>`.
pub fn app_href(ns: &str, name: &str) -> String {
    format!("/app/{}/{}", enc(ns), enc(name))
}

/// `/logs/<ns>/<pod>?container=<c>`.
pub fn logs_href(ns: &str, pod: &str, container: &str) -> String {
    format!(
        "/logs/{}/{}?container={}",
        enc(ns),
        enc(pod),
        enc(container)
    )
}

/// `/set/<ns>/<name>`.
pub fn set_href(ns: &str, name: &str) -> String {
    format!("/set/{}/{}", enc(ns), enc(name))
}

/// Kubernetes names are DNS labels, but escape anyway: a path segment.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
