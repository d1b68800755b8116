//! Builds one app per Helm release from the informers' caches.
//!
//! A pure function of its inputs: no API calls, no clock, no randomness
//! (new app UUIDs come from the caller), so it is tested on in-memory stores.
//! Unlike the Go operator it builds an app per *release* — each with its own
//! pods, services, volumes and ingresses — not one per namespace.

use std::collections::HashMap;

use apis::{DeliveredApp, HelmInfo as StatusHelmInfo};

pub use caches::{
    Caches, Context, Known, RELEASE_INDEX, WORKLOAD_INDEX, derived_app_uuid, release_index,
    workload_index,
};

use super::payload::{AccessInfo, AppInfo, AppPayload, HelmInfo, HelmValueInfo};
use crate::lean::storage::HelmRelease;

/// One release as the caches show it: its `helm_info` (with the app UUID),
/// which is what decides whether it is sent. Its payload is built by
/// [`App::payload`] only when it is sent: a round that sends one app of
/// 10,000 reads the members of that one (collection stays a pass over the
/// releases, not over every pod of the cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// The release's `helm_info` and app UUID, as the status and a later
    /// removal need them.
    pub status: StatusHelmInfo,
}

impl App {
    /// What `status.apps` records once this app is delivered.
    pub fn delivered(&self) -> DeliveredApp {
        let s = &self.status;
        DeliveredApp {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            revision: s.revision,
            status: s.status.clone(),
            app_uuid: s.app_uuid.clone(),
            hossted_helm: s.hossted_helm,
        }
    }

    /// The `POST /apps` payload: the release with its members as the caches
    /// hold them now.
    pub fn payload(&self, c: &Caches, ctx: &Context<'_>) -> AppPayload {
        app::payload(c, ctx, &self.status)
    }
}

/// A release whose latest revision could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRelease {
    pub namespace: String,
    /// The release (from Helm's `name` label).
    pub release: String,
    /// The storage Secret (or ConfigMap) that could not be decoded.
    pub secret: String,
    /// `ConfigMap` when Helm's configmap driver stored it, else `Secret`.
    pub kind: &'static str,
    /// Its UID (for the Warning on it), when the cache has it.
    pub uid: Option<String>,
    /// Its `resourceVersion`: it is warned about once per version.
    pub resource_version: String,
    pub error: String,
}

/// What [`collect`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collection {
    /// Sorted by namespace, then name.
    pub apps: Vec<App>,
    pub invalid: Vec<InvalidRelease>,
}

/// Builds one [`App`] per Helm release in a namespace that exists and is not
/// denied, from the release's latest revision.
pub fn collect(c: &Caches, ctx: &Context<'_>) -> Collection {
    let secrets = c.releases.list();
    let configmaps = c
        .release_configmaps
        .as_ref()
        .map(|s| s.list())
        .unwrap_or_default();
    let stored = secrets
        .iter()
        .map(|r| (r.as_ref(), false))
        .chain(configmaps.iter().map(|cm| (&cm.0, true)));
    let mut out = Collection::default();
    for ((namespace, name), (storage, in_configmap)) in latest_revisions(c, ctx, stored) {
        match &storage.release {
            Ok(release) => out.apps.push(App {
                status: app::helm_info(c, ctx, namespace, release),
            }),
            Err(error) => out.invalid.push(InvalidRelease {
                namespace: namespace.to_string(),
                secret: storage
                    .metadata
                    .name
                    .clone()
                    .unwrap_or_else(|| name.to_string()),
                kind: if in_configmap { "ConfigMap" } else { "Secret" },
                uid: storage.metadata.uid.clone(),
                resource_version: storage
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default(),
                release: name.to_string(),
                error: error.clone(),
            }),
        }
    }
    out
}

/// A release: `(namespace, name)`.
type ReleaseKey<'a> = (&'a str, &'a str);
/// A revision's storage, and whether Helm's configmap driver stored it.
type Stored<'a> = (&'a HelmRelease, bool);

/// The latest revision of each release in a namespace that exists and is
/// not denied, `(namespace, name) → (storage, stored by the configmap
/// driver)`, sorted: the same caches give the same result (new UUIDs
/// included). Borrowed, not copied: this runs over every stored revision.
fn latest_revisions<'a>(
    c: &Caches,
    ctx: &Context<'_>,
    stored: impl Iterator<Item = (&'a HelmRelease, bool)>,
) -> Vec<(ReleaseKey<'a>, Stored<'a>)> {
    let mut reported_namespace: HashMap<&str, bool> = HashMap::new();
    let mut latest: HashMap<ReleaseKey<'a>, Stored<'a>> = HashMap::new();
    for (r, in_configmap) in stored {
        let ns = r.metadata.namespace.as_deref().unwrap_or_default();
        let reported = *reported_namespace.entry(ns).or_insert_with(|| {
            !ctx.deny_namespaces.iter().any(|d| d == ns) && c.namespaces.get(ns).is_some()
        });
        let name = r.release_name();
        if !reported || name.is_empty() {
            continue;
        }
        match latest.get(&(ns, name)) {
            Some((seen, _)) if seen.version() >= r.version() => {}
            _ => {
                latest.insert((ns, name), (r, in_configmap));
            }
        }
    }
    let mut latest: Vec<_> = latest.into_iter().collect();
    latest.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    latest
}

/// The payload that tells the API a delivered release is gone: what the
/// status recorded of it, with status `uninstalled` and empty lists (its
/// objects went with it).
pub fn uninstalled(
    known: &DeliveredApp,
    last_seen: Option<&StatusHelmInfo>,
    ctx: &Context<'_>,
) -> AppPayload {
    // The chart, app version and time come from memory when this process
    // saw that revision; the compact status does not keep them.
    let seen = last_seen.filter(|s| s.revision == known.revision);
    let detail = |f: fn(&StatusHelmInfo) -> &String| seen.map(f).cloned().unwrap_or_default();
    AppPayload {
        app_api_info: app::app_api_info(ctx, &known.app_uuid, &known.name, known.hossted_helm),
        app_info: AppInfo {
            helm_info: HelmInfo {
                name: known.name.clone(),
                namespace: known.namespace.clone(),
                revision: known.revision,
                updated: detail(|s| &s.updated),
                status: "uninstalled".into(),
                chart: detail(|s| &s.chart),
                app_version: detail(|s| &s.app_version),
                app_uuid: known.app_uuid.clone(),
                hossted_helm: known.hossted_helm,
            },
            pod_info: Vec::new(),
            service_info: Vec::new(),
            volume_info: Vec::new(),
            ingress_info: Vec::new(),
            deployment_info: Vec::new(),
            statefulset_info: Vec::new(),
            configmap_info: Vec::new(),
            secret_info: Vec::new(),
            helmvalue_info: HelmValueInfo {
                chart_name: detail(|s| &s.chart),
                chart_values: Default::default(),
            },
            access_info: AccessInfo::default(),
            security_info: Vec::new(),
        },
    }
}

/// Whether `app` must be POSTed: it is new, or its revision or status
/// differs from what was delivered.
pub fn needs_report(app: &App, known: Option<&DeliveredApp>) -> bool {
    !known.is_some_and(|k| k.revision == app.status.revision && k.status == app.status.status)
}

mod app;
mod caches;
#[cfg(test)]
mod tests;
