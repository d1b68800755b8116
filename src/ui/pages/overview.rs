//! The overview: every HelmApp the user may list, grouped by state
//! (failing first) with counts, then pending approvals, update notices and
//! the HelmAppSets.

use std::collections::BTreeMap;
use std::sync::Arc;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use kube::ResourceExt;
use maud::{Markup, html};

use super::{app_href, badge, set_href};
use crate::ui::state::{State, ready, state_of, update_of, urgency};

/// `?ns=…&q=…`.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub namespace: String,
    /// Matched against namespace, name, chart and reason, case-insensitive.
    pub text: String,
}

impl Filter {
    pub fn matches(&self, app: &HelmApp) -> bool {
        let ns = app.namespace().unwrap_or_default();
        if !self.namespace.is_empty() && ns != self.namespace {
            return false;
        }
        if self.text.is_empty() {
            return true;
        }
        let needle = self.text.to_lowercase();
        let (_, reason, _) = ready(app);
        [
            ns.as_str(),
            &app.name_any(),
            crate::ui::state::chart_label(app),
            reason,
        ]
        .iter()
        .any(|h| h.to_lowercase().contains(&needle))
    }
}

/// The filter form (above `<main>`, kept across live updates).
pub fn filters(filter: &Filter, namespaces: &[String]) -> Markup {
    html! {
        form.filters method="get" action="/" role="search" {
            label for="ns" { "Namespace" }
            select #ns name="ns" {
                option value="" selected[filter.namespace.is_empty()] { "all" }
                @for ns in namespaces {
                    option value=(ns) selected[*ns == filter.namespace] { (ns) }
                }
            }
            label for="q" { "Filter" }
            input #q type="search" name="q" value=(filter.text) placeholder="name, chart or reason";
            button type="submit" { "Apply" }
        }
    }
}

pub fn main(
    apps: &[Arc<HelmApp>],
    sets: &[Arc<HelmAppSet>],
    filter: &Filter,
    now: chrono::DateTime<chrono::Utc>,
) -> Markup {
    let shown: Vec<&HelmApp> = apps
        .iter()
        .map(|a| a.as_ref())
        .filter(|a| filter.matches(a))
        .collect();
    let mut groups: BTreeMap<State, Vec<&HelmApp>> = BTreeMap::new();
    for app in &shown {
        groups.entry(state_of(app)).or_default().push(app);
    }
    for apps in groups.values_mut() {
        apps.sort_by_key(|a| (urgency(a), a.namespace(), a.name_any()));
    }
    let pending: Vec<&&HelmApp> = shown
        .iter()
        .filter(|a| {
            a.status
                .as_ref()
                .is_some_and(|s| s.pending_change.is_some())
        })
        .collect();
    let updates: Vec<(&&HelmApp, &str)> = shown
        .iter()
        .filter_map(|a| update_of(a).map(|v| (a, v)))
        .collect();
    html! {
        h1 { "HelmApps" }
        ul.counts aria-label="Apps by state" {
            @for state in State::ALL {
                @let n = groups.get(&state).map_or(0, Vec::len);
                li data-state=(state.as_str()) data-count=(n) {
                    a href={ "#" (state.as_str()) } { (badge(state)) " " strong { (n) } }
                }
            }
        }
        @if !pending.is_empty() { (approvals(&pending)) }
        @if !updates.is_empty() { (updates_section(&updates)) }
        @for state in State::ALL {
            @if let Some(apps) = groups.get(&state) { (group(state, apps)) }
        }
        @if shown.is_empty() {
            p.empty { "No HelmApps here" @if !filter.text.is_empty() || !filter.namespace.is_empty() { " match the filter" } "." }
        }
        @if !sets.is_empty() { (sets_section(sets)) }
        p.now { "As of " time datetime=(now.to_rfc3339()) { (now.format("%H:%M:%S UTC")) } }
    }
}

/// The changes waiting for approval.
fn approvals(pending: &[&&HelmApp]) -> Markup {
    html! {
    section #approvals aria-labelledby="approvals-h" {
        h2 #approvals-h { "Pending approvals (" (pending.len()) ")" }
        (more(pending.len()))
        ul {
            @for app in pending.iter().take(MAX_ROWS) {
                @let (ns, name) = (app.namespace().unwrap_or_default(), app.name_any());
                @let p = app.status.as_ref().and_then(|s| s.pending_change.as_ref());
                li data-pending=(format!("{ns}/{name}")) {
                    a href={ (app_href(&ns, &name)) "/pending" } { (ns) "/" (name) }
                    @if let Some(p) = p {
                        " — chart " (p.chart_version) ": "
                        (p.objects.added.len()) " added, " (p.objects.changed.len()) " changed, "
                        (p.objects.removed.len()) " removed"
                    }
                }
            }
        }
    }
    }
}

/// Charts with a newer version than the one installed.
fn updates_section(updates: &[(&&HelmApp, &str)]) -> Markup {
    html! {
    section #updates aria-labelledby="updates-h" {
        h2 #updates-h { "Updates available (" (updates.len()) ")" }
        (more(updates.len()))
        ul {
            @for (app, version) in updates.iter().take(MAX_ROWS) {
                @let (ns, name) = (app.namespace().unwrap_or_default(), app.name_any());
                li data-update=(format!("{ns}/{name}")) {
                    a href=(app_href(&ns, &name)) { (ns) "/" (name) }
                    " " (app.status.as_ref().map_or("", |s| s.chart_version.as_str())) " → " strong { (version) }
                }
            }
        }
    }
    }
}

/// The most rows a list of the overview shows (its most urgent first):
/// the page stays bounded however many apps one may see.
pub const MAX_ROWS: usize = 200;

/// What a list left out past [`MAX_ROWS`], and how to see it.
fn more(total: usize) -> Markup {
    let left = total.saturating_sub(MAX_ROWS);
    html! {
        @if left > 0 {
            p.more data-more=(left) { "And " (left) " more: narrow the list by namespace or filter." }
        }
    }
}

/// One state's apps, most urgent first.
fn group(state: State, apps: &[&HelmApp]) -> Markup {
    html! {
    section.group id=(state.as_str()) data-state=(state.as_str()) aria-labelledby={ (state.as_str()) "-h" } {
        h2 id={ (state.as_str()) "-h" } { (state.title()) " (" (apps.len()) ")" }
        div.scroll {
            table {
                thead { tr { th scope="col" { "Namespace" } th scope="col" { "Name" } th scope="col" { "Reason" } th.wide scope="col" { "Message" } th scope="col" { "Chart" } th scope="col" { "Rev" } } }
                tbody {
                    @for app in apps.iter().take(MAX_ROWS) { (row(app)) }
                }
            }
        }
        (more(apps.len()))
    }
    }
}

/// The HelmAppSets, each linking to its chain.
fn sets_section(sets: &[Arc<HelmAppSet>]) -> Markup {
    html! {
    section #sets aria-labelledby="sets-h" {
        h2 #sets-h { "HelmAppSets (" (sets.len()) ")" }
        table {
            thead { tr { th scope="col" { "Namespace" } th scope="col" { "Name" } th scope="col" { "Ready" } th scope="col" { "Apps" } } }
            tbody {
                @for set in sets.iter().take(MAX_ROWS) {
                    @let (ns, name) = (set.namespace().unwrap_or_default(), set.name_any());
                    tr data-set=(format!("{ns}/{name}")) {
                        td { (ns) }
                        td { a href=(set_href(&ns, &name)) { (name) } }
                        td { (set.status.as_ref().map_or("-", |s| s.ready.as_str())) }
                        td { (set.spec.apps.len()) }
                    }
                }
            }
        }
    }
    }
}

fn row(app: &HelmApp) -> Markup {
    let (ns, name) = (app.namespace().unwrap_or_default(), app.name_any());
    let (_, reason, message) = ready(app);
    let status = app.status.as_ref();
    let version = status.map_or("", |s| s.chart_version.as_str());
    html! {
        tr data-app=(format!("{ns}/{name}")) data-reason=(reason) data-state=(state_of(app).as_str()) {
            td { (ns) }
            td { a href=(app_href(&ns, &name)) { (name) } }
            td { code { (reason) } }
            td.message.wide title=(message) { (truncate(message, 160)) }
            td { (crate::ui::state::chart_label(app)) @if !version.is_empty() { "@" (version) } }
            td { (status.map_or(0, |s| s.revision)) }
        }
    }
}

/// At most `n` characters, with `…` when cut.
pub fn truncate(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::HelmAppSpec;

    /// However many apps one may see, each list shows at most MAX_ROWS
    /// rows and says how many more there are.
    #[test]
    fn a_list_is_cut_at_its_bound_and_says_how_many_more() {
        let apps: Vec<Arc<HelmApp>> = (0..MAX_ROWS + 37)
            .map(|i| {
                let mut a = HelmApp::new(&format!("app-{i:04}"), HelmAppSpec::default());
                a.metadata.namespace = Some("team".into());
                Arc::new(a)
            })
            .collect();
        let html = main(&apps, &[], &Filter::default(), chrono::Utc::now()).into_string();
        assert_eq!(html.matches("<tr data-app=").count(), MAX_ROWS);
        assert!(html.contains(r#"data-more="37""#), "{html}");
        // The count says them all.
        assert!(html.contains(&format!(r#"data-count="{}""#, MAX_ROWS + 37)));
    }
}
