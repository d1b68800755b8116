//! A HelmApp: actions, conditions with what to do about each, history,
//! inventory with each object's kstatus, drift, Events and the values
//! helm received (Secret-sourced values masked).

use apis::helmapp::{HelmApp, HelmAppStatus};
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use maud::{Markup, html};

use super::{app_href, badge, csrf_field};
use crate::ui::details::{DriftRow, ObjectHealth};
use crate::ui::remedies::remedy;
use crate::ui::state::{state_of, update_of};

/// What the page shows beside the HelmApp itself, read per request.
pub struct Details {
    pub events: Result<Vec<Event>, String>,
    pub inventory: Vec<ObjectHealth>,
    pub drift: Vec<DriftRow>,
    /// The values of the deployed revision as YAML, masked.
    pub values: Result<String, String>,
    /// The workloads, their ReplicaSets and Pods (`Ok(empty)`: none, or
    /// not shown).
    pub tree: Result<Vec<crate::ui::tree::Node>, String>,
}

/// The time pages are rendered at.
type Now = chrono::DateTime<chrono::Utc>;

pub fn main(app: &HelmApp, d: &Details, csrf: &str, now: Now) -> Markup {
    let (ns, name) = (app.namespace().unwrap_or_default(), app.name_any());
    let href = app_href(&ns, &name);
    let none = HelmAppStatus::default();
    let status = app.status.as_ref().unwrap_or(&none);
    let state = state_of(app);
    // The kubeconfig Secret's name (the tenant's text: printable, bounded,
    // escaped as every value), or `in-cluster`; as `kubectl hossted get`.
    let cluster = crate::plugin::get::cluster_label(app);
    html! {
        h1 { "HelmApp " (ns) "/" (name) " " (badge(state)) }
        p.summary {
            "Chart " strong { (crate::ui::state::chart_label(app)) } " " (status.chart_version)
            " · revision " (status.revision)
            " · release " code { (status.target_namespace) "/" (status.release_name) }
            " · cluster " code data-cluster=(cluster) { (cluster) }
            @if let Some(v) = update_of(app) { " · " span data-update=(v) { "update available: " strong { (v) } } }
        }
        div.actions role="group" aria-label="Actions" {
            @if let Some(p) = &status.pending_change {
                a.button.primary href={ (href) "/pending" } data-action="review" { "Review pending change " code { (short(&p.config_hash)) } }
            }
            (action(&href, "reconcile", "Reconcile", csrf, "Run now; helm runs only if something changed"))
            (action(&href, "force", "Force", csrf, "One upgrade with --force, even when nothing changed"))
            @if app.spec.suspend {
                (action(&href, "resume", "Resume", csrf, "spec.suspend: false"))
            } @else {
                (action(&href, "suspend", "Suspend", csrf, "spec.suspend: true"))
            }
        }
        (conditions(status, now))
        (history(status, d, now))
        (inventory(d))
        (resources(d))
        (drift(d))
        (events(d, now))
        (values(d))
    }
}

/// Each condition, with what to do about its reason.
fn conditions(status: &HelmAppStatus, now: Now) -> Markup {
    html! {
    section aria-labelledby="conditions-h" {
        h2 #conditions-h { "Conditions" }
        div.scroll { table {
            thead { tr { th scope="col" { "Type" } th scope="col" { "Status" } th scope="col" { "Reason" } th scope="col" { "Message" } th scope="col" { "What to do" } th scope="col" { "Since" } } }
            tbody {
                @for c in &status.conditions {
                    tr data-condition=(c.type_) data-status=(c.status) data-reason=(c.reason) {
                        td { (c.type_) } td { (c.status) } td { code { (c.reason) } }
                        td.message { (c.message) }
                        td.remedy { (remedy(&c.reason).unwrap_or("")) }
                        td { (super::age(&c.last_transition_time.0.to_string(), now)) }
                    }
                }
            }
        } }
    }
    }
}

/// The last operations, newest first, with how long helm ran.
/// Who approved configuration `hash`: the user an `ApprovedBy` Event of
/// the served view names for it (a record, not proof: whoever may create
/// Events in the namespace could write one too — the audit log is proof).
fn approved_by<'e>(events: &'e [Event], hash: &str) -> Option<&'e str> {
    events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ApprovedBy"))
        .find_map(|e| {
            let a = e.metadata.annotations.as_ref()?;
            (a.get(crate::ui::named::EVENT_CONFIG_HASH)?.as_str() == hash)
                .then(|| a.get(crate::ui::named::EVENT_USER).map(String::as_str))
                .flatten()
        })
}

fn history(status: &HelmAppStatus, d: &Details, now: Now) -> Markup {
    let events = d.events.as_deref().unwrap_or_default();
    html! {
    section aria-labelledby="history-h" {
        h2 #history-h { "History" }
        div.scroll { table {
            thead { tr { th scope="col" { "Revision" } th scope="col" { "Action" } th scope="col" { "Result" } th scope="col" { "Chart" } th scope="col" { "Config hash" } th scope="col" { "Digest" } th scope="col" { "Duration" } th scope="col" { "Approved by" } th scope="col" { "When" } } }
            tbody {
                @for h in &status.history {
                    tr data-history=(h.revision) data-result=(h.result) data-duration=(h.duration) {
                        td { (h.revision) } td { (h.action) } td { (h.result) } td { (h.chart_version) }
                        td { code title=(h.config_hash) { (short(&h.config_hash)) } }
                        td { code title=(h.release_digest) { (short(h.release_digest.trim_start_matches("sha256:"))) } }
                        td { @if h.duration.is_empty() { "-" } @else { (h.duration) } }
                        td { @match approved_by(events, &h.config_hash) {
                            Some(user) => span data-approved-by=(user) { (user) },
                            None => "-",
                        } }
                        td { (super::age(&h.time, now)) }
                    }
                }
            }
        } }
    }
    }
}

/// The release's objects and their kstatus.
fn inventory(d: &Details) -> Markup {
    html! {
    section aria-labelledby="inventory-h" {
        h2 #inventory-h { "Inventory (" (d.inventory.len()) ")" }
        div.scroll { table {
            thead { tr { th scope="col" { "Kind" } th scope="col" { "Namespace" } th scope="col" { "Name" } th scope="col" { "Status" } th scope="col" { "Detail" } } }
            tbody {
                @for o in &d.inventory {
                    tr data-object=(format!("{}/{}/{}", o.kind, o.namespace, o.name)) data-kstatus=(o.status) {
                        td { (o.kind) } td { (o.namespace) } td { (o.name) }
                        td { span.kstatus.(o.status) { (o.status) } } td { (o.detail) }
                    }
                }
            }
        } }
    }
    }
}

/// The release's workloads as a tree down to their Pods, each with its
/// kstatus, a Pod with a link to each container's logs.
fn resources(d: &Details) -> Markup {
    html! {
    @match &d.tree {
        Ok(nodes) if nodes.is_empty() => {}
        Ok(nodes) => section aria-labelledby="tree-h" {
            h2 #tree-h { "Resources" }
            ul.tree { @for n in nodes { (node(n)) } }
        },
        Err(why) => section aria-labelledby="tree-h" {
            h2 #tree-h { "Resources" }
            p.error data-tree-error="" { (why) }
        },
    }
    }
}

fn node(n: &crate::ui::tree::Node) -> Markup {
    html! {
        li data-node=(format!("{}/{}/{}", n.kind, n.namespace, n.name)) data-kstatus=(n.status) {
            (n.kind) " " strong { (n.name) } " " span.kstatus.(n.status) { (n.status) }
            @if !n.detail.is_empty() { " " span.detail { (n.detail) } }
            @for c in &n.containers {
                " " a href=(super::logs_href(&n.namespace, &n.name, c)) data-logs=(c) { "logs " (c) }
            }
            @if !n.children.is_empty() {
                ul { @for child in &n.children { (node(child)) } }
            }
        }
    }
}

/// Each drifted field: expected and live (masked).
fn drift(d: &Details) -> Markup {
    html! {
    @if !d.drift.is_empty() {
        section aria-labelledby="drift-h" {
            h2 #drift-h { "Drift" }
            div.scroll { table {
                thead { tr { th scope="col" { "Object" } th scope="col" { "Field" } th scope="col" { "Expected" } th scope="col" { "Live" } } }
                tbody {
                    @for r in &d.drift {
                        tr data-drift=(r.field) {
                            td { (r.object) } td { code { (r.field) } }
                            td { code { (r.expected) } } td { code { (r.live) } }
                        }
                    }
                }
            } }
        }
    }
    }
}

/// The HelmApp's Events, newest first.
fn events(d: &Details, now: Now) -> Markup {
    html! {
    section aria-labelledby="events-h" {
        h2 #events-h { "Events" }
        @match &d.events {
            Err(e) => p.error { (e) }
            Ok(events) if events.is_empty() => p { "None." }
            Ok(events) => div.scroll { table {
                thead { tr { th scope="col" { "Type" } th scope="col" { "Reason" } th scope="col" { "Message" } th scope="col" { "Count" } th scope="col" { "Last" } } }
                tbody {
                    @for e in events {
                        tr data-event=(e.reason.as_deref().unwrap_or("")) data-type=(e.type_.as_deref().unwrap_or("")) {
                            td { (e.type_.as_deref().unwrap_or("")) } td { code { (e.reason.as_deref().unwrap_or("")) } }
                            td.message { (e.message.as_deref().unwrap_or("")) } td { (e.count.unwrap_or(1)) }
                            td { (event_age(e, now)) }
                        }
                    }
                }
            } }
        }
    }
    }
}

/// The values helm received, Secret values masked.
fn values(d: &Details) -> Markup {
    html! {
    section aria-labelledby="values-h" {
        h2 #values-h { "Values helm received" }
        @match &d.values {
            Ok(v) => pre.values data-masked="true" { (v) }
            Err(e) => p.error { (e) }
        }
    }
    }
}

fn action(href: &str, what: &str, label: &str, csrf: &str, title: &str) -> Markup {
    html! {
        form.inline method="post" action={ (href) "/" (what) } {
            (csrf_field(csrf))
            button type="submit" data-action=(what) title=(title) { (label) }
        }
    }
}

/// The first 12 characters of a hash.
fn short(s: &str) -> &str {
    s.get(..12).unwrap_or(s)
}

fn event_age(e: &Event, now: chrono::DateTime<chrono::Utc>) -> String {
    let t = e
        .last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .unwrap_or_default();
    super::age(&t, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::{HelmAppSpec, KubeConfigReference, KubeConfigSecretRef};

    fn page(app: &HelmApp) -> String {
        let d = Details {
            events: Ok(Vec::new()),
            inventory: Vec::new(),
            drift: Vec::new(),
            values: Ok(String::new()),
            tree: Ok(Vec::new()),
        };
        main(app, &d, "csrf", chrono::Utc::now()).into_string()
    }

    #[test]
    fn the_cluster_a_release_goes_to_is_shown_escaped() {
        let mut app = HelmApp::new("web", HelmAppSpec::default());
        assert!(
            page(&app).contains(" · cluster <code data-cluster=\"in-cluster\">in-cluster</code>"),
            "{}",
            page(&app)
        );
        app.spec.kube_config = Some(KubeConfigReference {
            secret_ref: KubeConfigSecretRef {
                name: "<b>prod</b>\u{202E}".into(),
                key: String::new(),
            },
        });
        let html = page(&app);
        assert!(
            html.contains(
                " · cluster <code data-cluster=\"&lt;b&gt;prod&lt;/b&gt;?\">&lt;b&gt;prod&lt;/b&gt;?</code>"
            ),
            "{html}"
        );
        assert!(!html.contains("<b>prod"), "{html}");
    }
}
