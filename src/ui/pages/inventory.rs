//! The inventory: the Hosstedproject that reports for the cluster — its
//! cluster UUID, each release reported (from `status.apps`), when the
//! report last changed, and the keys of what is sent per release (never
//! the values).

use apis::Hosstedproject;
use apis::delivered::decode_apps;
use kube::ResourceExt;
use maud::{Markup, html};

/// The keys of `POST {api}/apps` (src/inventory/payload.rs), two levels.
pub const APP_PAYLOAD_KEYS: &[(&str, &[&str])] = &[
    (
        "app_api_info",
        &[
            "cluster_uuid",
            "app_uuid",
            "app_name",
            "email_id",
            "type",
            "hossted_helm",
            "org_id",
            "options_state",
        ],
    ),
    (
        "app_info",
        &[
            "helm_info",
            "pod_info",
            "service_info",
            "volume_info",
            "ingress_info",
            "deployment_info",
            "statefulset_info",
            "configmap_info",
            "secret_info",
            "helmvalue_info",
            "access_info",
            "security_info",
        ],
    ),
];

pub fn main(
    projects: &Result<Vec<Hosstedproject>, String>,
    now: chrono::DateTime<chrono::Utc>,
) -> Markup {
    html! {
        h1 { "Inventory" }
        @match projects {
            Err(e) => p.error role="alert" data-error="projects" { (e) }
            Ok(list) if list.is_empty() => p { "No Hosstedproject: the inventory reports nothing until one exists." }
            Ok(list) => {
                @let reporting = apis::reporting_project(list.iter());
                @for project in list {
                    (one(project, reporting.is_some_and(|r| r.uid() == project.uid()), now))
                }
            }
        }
        section aria-labelledby="keys-h" {
            h2 #keys-h { "What is sent for each release" }
            p { "One " code { "POST /apps" } " per release with these keys (values not shown):" }
            dl.keys {
                @for (top, keys) in APP_PAYLOAD_KEYS {
                    dt { code { (top) } }
                    dd { @for (i, k) in keys.iter().enumerate() { @if i > 0 { ", " } code { (k) } } }
                }
            }
        }
    }
}

fn one(project: &Hosstedproject, reporting: bool, now: chrono::DateTime<chrono::Utc>) -> Markup {
    let status = project.status.clone().unwrap_or_default();
    let (apps, errors) = decode_apps(&status.apps);
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    html! {
        section.project data-project=(project.name_any()) aria-label={ "Hosstedproject " (project.name_any()) } {
            h2 { "Hosstedproject " (project.name_any()) @if reporting { " (reporting)" } }
            dl {
                dt { "Cluster UUID" } dd data-cluster-uuid=(status.cluster_uuid) { code { (status.cluster_uuid) } }
                dt { "Registered" } dd { (status.cluster_registered) }
                dt { "Last change reported" } dd { (status.last_reconcile_timestamp) " (" (super::age(&status.last_reconcile_timestamp, now)) " ago)" }
                @if let Some(c) = ready { dt { "Ready" } dd { (c.status) " " code { (c.reason) } " " (c.message) } }
            }
            h3 { "Releases reported (" (apps.len()) ")" }
            div.scroll { table {
                thead { tr { th scope="col" { "Namespace" } th scope="col" { "Release" } th scope="col" { "Revision" } th scope="col" { "Status" } th scope="col" { "App UUID" } th scope="col" { "Delivered by hossted" } } }
                tbody {
                    @for a in &apps {
                        tr data-release=(format!("{}/{}", a.namespace, a.name)) {
                            td { (a.namespace) } td { (a.name) } td { (a.revision) } td { (a.status) }
                            td { code { (a.app_uuid) } } td { (a.hossted_helm) }
                        }
                    }
                }
            } }
            @if !errors.is_empty() { p.error { (errors.len()) " entries of status.apps could not be read." } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_keys_shown_are_the_contracts() {
        let doc = include_str!("../../../docs/inventory.md");
        for (top, keys) in APP_PAYLOAD_KEYS {
            assert!(doc.contains(top), "docs/inventory.md does not name {top}");
            for k in *keys {
                assert!(doc.contains(k), "docs/inventory.md does not name {top}.{k}");
            }
        }
    }
}
