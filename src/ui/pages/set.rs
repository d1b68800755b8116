//! A HelmAppSet: its apps in the set's order, drawn as a chain when the
//! set is sequenced (each waits for the one before it), else as a row.

use std::sync::Arc;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use kube::ResourceExt;
use maud::{Markup, html};

use super::{app_href, badge};
use crate::ui::state::{ready, state_of};

/// The apps `set` owns, in the order of its `spec.apps` (a missing one:
/// `None`, shown as not created yet).
pub fn members<'a>(
    set: &HelmAppSet,
    apps: &'a [Arc<HelmApp>],
) -> Vec<(String, Option<&'a HelmApp>)> {
    let uid = set.uid();
    set.spec
        .apps
        .iter()
        .map(|member| {
            let name = format!("{}-{}", set.name_any(), member.name);
            let app = apps.iter().map(|a| a.as_ref()).find(|a| {
                a.name_any() == name
                    && a.namespace() == set.namespace()
                    && a.owner_references()
                        .iter()
                        .any(|o| Some(&o.uid) == uid.as_ref())
            });
            (name, app)
        })
        .collect()
}

pub fn main(set: &HelmAppSet, apps: &[Arc<HelmApp>]) -> Markup {
    let ns = set.namespace().unwrap_or_default();
    let status = set.status.as_ref();
    let ready_cond = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    let members = members(set, apps);
    html! {
        h1 { "HelmAppSet " (ns) "/" (set.name_any()) }
        p {
            "Ready: " strong { (status.map_or("-", |s| s.ready.as_str())) }
            @if let Some(c) = ready_cond { " — " code { (c.reason) } " " (c.message) }
            @if set.spec.sequenced { " · sequenced: each app waits for the one before it" }
            @if set.spec.suspend { " · suspended" }
        }
        ol.chain.sequenced[set.spec.sequenced] aria-label="Apps in order" {
            @for (name, app) in &members {
                li data-member=(name) data-state=[app.map(|a| state_of(a).as_str())] {
                    @match app {
                        Some(app) => {
                            @let (_, reason, _) = ready(app);
                            a href=(app_href(&ns, name)) { strong { (name) } }
                            br;
                            (badge(state_of(app))) " " code { (reason) }
                        }
                        None => { strong { (name) } br; span.badge.progressing { "not created yet" } }
                    }
                }
            }
        }
    }
}
