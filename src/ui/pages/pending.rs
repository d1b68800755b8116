//! The change waiting for approval: what it adds, changes and removes,
//! its masked diff (what `kubectl hossted diff` prints), and Approve —
//! which names the configuration hash shown, so a change replaced since
//! is refused, not approved unseen.

use apis::helmapp::HelmApp;
use kube::ResourceExt;
use maud::{Markup, html};

use super::{app_href, csrf_field};

pub fn main(app: &HelmApp, diff: &Result<String, String>, csrf: &str) -> Markup {
    let (ns, name) = (app.namespace().unwrap_or_default(), app.name_any());
    let href = app_href(&ns, &name);
    let pending = app.status.as_ref().and_then(|s| s.pending_change.as_ref());
    html! {
        h1 { "Pending change of " a href=(href) { (ns) "/" (name) } }
        @match pending {
            None => p data-pending="none" { "Nothing waits for approval." }
            Some(p) => {
                p.summary data-pending-hash=(p.config_hash) {
                    "Chart " strong { (p.chart_version) } " · configuration " code { (p.config_hash) }
                    " · " (p.diff_lines) " lines of diff"
                }
                div.objects {
                    (names("Added", "added", &p.objects.added))
                    (names("Changed", "changed", &p.objects.changed))
                    (names("Removed", "removed", &p.objects.removed))
                }
                form method="post" action={ (href) "/approve" } {
                    (csrf_field(csrf))
                    input type="hidden" name="hash" value=(p.config_hash);
                    button.primary type="submit" data-action="approve" { "Approve configuration " code { (p.config_hash.get(..12).unwrap_or(&p.config_hash)) } }
                }
                h2 { "Diff (Secret values masked)" }
                @match diff {
                    Ok(text) if text.is_empty() => p { "helm renders no difference." }
                    Ok(text) => pre.diff aria-label="Unified diff" {
                        @for line in text.lines() {
                            @let class = match line.chars().next() { Some('+') => "add", Some('-') => "del", Some('@') => "hunk", _ => "ctx" };
                            span class=(class) { (line) } "\n"
                        }
                    }
                    Err(e) => p.error role="alert" { "The diff could not be rendered here: " (e) }
                }
            }
        }
    }
}

fn names(title: &str, key: &str, list: &[String]) -> Markup {
    html! {
        section data-objects=(key) {
            h2 { (title) " (" (list.len()) ")" }
            @if list.is_empty() { p { "None." } } @else {
                ul { @for n in list { li { code { (n) } } } }
            }
        }
    }
}
