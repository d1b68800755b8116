//! The Go operator's delivery, drop-in: `Hosstedproject.spec.helm[]` and
//! the platform toggles (`spec.monitoring.enable`, `spec.ingress.enable`)
//! kept as HelmApps, which the HelmApp controller installs, upgrades and
//! uninstalls.
//!
//! - Only the reporting Hosstedproject (the oldest) delivers; `stop` pauses
//!   reporting only.
//! - A `spec.helm` entry is the HelmApp `<releaseName>` in `<namespace>`
//!   (the namespace is created first) with `adopt: true` — the Go operator
//!   installed such releases without our labels. Its chart version is
//!   pinned once, when the HelmApp is created: the adopted release's
//!   version, else the repository's latest; a Go-era app is never upgraded
//!   by surprise.
//! - An enabled toggle delivers the apps its key of the ConfigMap
//!   `hossted-platform-charts` (operator namespace) lists: a YAML list of
//!   `{name, namespace, spec}`, `spec` a HelmApp spec.
//! - What leaves the spec (an entry removed, a toggle turned off) is
//!   deleted, and its release uninstalled. Deleting the Hosstedproject
//!   removes its HelmApps *without* uninstalling.
//!
//! Every HelmApp made here carries `hossted.com/project: <project>` and
//! `hossted.com/delivered-for: helm | monitoring | ingress`.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apis::Hosstedproject;
use apis::helmapp::{HelmApp, HelmAppSpec};
use cache::{Event, HandlerFn, InformerOptions, Store};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use record::{EventRecorder, EventType};
use runtime::{Action, Controller, Manager, Reconciler};
use serde_json::json;

use super::names::RELEASE_INDEX;
use super::source::{self, RepoCache};
use crate::cached::objects::HelmRelease;
use crate::cached::storage::helm_storage_options;

/// On a HelmApp made for a Hosstedproject: the project's name.
pub const PROJECT_LABEL: &str = "hossted.com/project";
/// On a HelmApp made for a Hosstedproject: `helm`, `monitoring` or `ingress`.
pub const SOURCE_LABEL: &str = "hossted.com/delivered-for";
/// The ConfigMap (operator namespace) listing each toggle's apps.
pub const PLATFORM_CONFIGMAP: &str = "hossted-platform-charts";
/// Index of HelmApps by [`PROJECT_LABEL`].
const PROJECT_INDEX: &str = "project";
/// The toggles that deliver, with their ConfigMap key.
const TOGGLES: [&str; 2] = ["monitoring", "ingress"];

/// Why a project's delivery must be retried.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error("writing to the API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Failed(String),
}

/// The project-delivery controller's [`Reconciler`].
pub struct ProjectDelivery {
    client: Client,
    projects: Store<Hosstedproject>,
    apps: Store<HelmApp>,
    platform: Store<ConfigMap>,
    releases: Store<HelmRelease>,
    recorder: EventRecorder,
    work_dir: PathBuf,
    repo_cache: Arc<RepoCache>,
}

/// One HelmApp a project asks for.
struct Wanted {
    namespace: String,
    name: String,
    source: &'static str,
    spec: HelmAppSpec,
}

/// The controller; `operator_namespace` holds [`PLATFORM_CONFIGMAP`].
pub fn controller(
    manager: &Manager,
    operator_namespace: &str,
    work_dir: PathBuf,
    resync: Duration,
) -> Controller<ProjectDelivery> {
    let factory = manager.factory();
    // The inventory's informer (same options: one watch).
    let projects = factory.informer::<Hosstedproject>(InformerOptions::default());
    let apps = factory.informer::<HelmApp>(InformerOptions::default());
    apps.store().add_index(
        PROJECT_INDEX,
        Arc::new(|a: &HelmApp| a.labels().get(PROJECT_LABEL).cloned().into_iter().collect()),
    );
    let platform = factory.namespaced_informer::<ConfigMap>(
        operator_namespace,
        InformerOptions::default().fields(&format!("metadata.name={PLATFORM_CONFIGMAP}")),
    );
    let releases = factory.informer::<HelmRelease>(helm_storage_options());
    let reconciler = ProjectDelivery {
        client: manager.client(),
        projects: projects.store(),
        apps: apps.store(),
        platform: platform.store(),
        releases: releases.store(),
        recorder: manager.recorder(),
        work_dir,
        repo_cache: Arc::default(),
    };
    let controller = Controller::new(manager, "project-delivery", reconciler)
        .max_backoff(Duration::from_secs(300))
        .workers(1)
        .resync_every(resync, &projects);

    // A project: new or gone changes which one delivers — all look again;
    // a spec change or a deletion begun, that one.
    let (queue, store) = (controller.queue(), projects.store());
    projects.add_event_handler(HandlerFn(move |e: &Event<Hosstedproject>| match e {
        Event::Add(p) | Event::Delete(p) => {
            queue.add(p.name_any());
            for other in store.list() {
                queue.add(other.name_any());
            }
        }
        Event::Update { old, new } => {
            if old.metadata.generation != new.metadata.generation
                || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
            {
                queue.add(new.name_any());
            }
        }
    }));
    // One of its HelmApps deleted or edited by someone: put it back. A
    // HelmApp that appears — on start, those of a project deleted while the
    // operator was down — has its project look again (and let it go).
    let queue = controller.queue();
    apps.add_event_handler(HandlerFn(move |e: &Event<HelmApp>| {
        let app = match e {
            Event::Add(a) | Event::Delete(a) => a,
            Event::Update { old, new } => {
                if old.metadata.generation == new.metadata.generation
                    && old.metadata.deletion_timestamp == new.metadata.deletion_timestamp
                {
                    return;
                }
                new
            }
        };
        if let Some(project) = app.labels().get(PROJECT_LABEL) {
            queue.add(project.clone());
        }
    }));
    // The platform charts changed: every project looks again.
    let (queue, store) = (controller.queue(), projects.store());
    platform.add_event_handler(HandlerFn(move |e: &Event<ConfigMap>| {
        if e.changed().is_some() || matches!(e, Event::Delete(_)) {
            for p in store.list() {
                queue.add(p.name_any());
            }
        }
    }));
    controller
}

impl Reconciler for ProjectDelivery {
    type Error = ProjectError;

    async fn reconcile(&self, key: &str) -> Result<Action, ProjectError> {
        let owned = self.apps.by_index(PROJECT_INDEX, key);
        let hp = self.projects.get(key);
        let Some(hp) = hp.filter(|h| h.metadata.deletion_timestamp.is_none()) else {
            return self.let_go(&owned).await;
        };
        let projects = self.projects.list();
        let reporting =
            apis::reporting_project(projects.iter().map(|p| p.as_ref())).map(|p| p.name_any());
        if reporting.as_deref() != Some(key) {
            return Ok(Action::done(
                "not the reporting Hosstedproject: delivers nothing",
            ));
        }

        let (wanted, unreadable) = self.wanted(&hp);
        let mut created = 0;
        for w in &wanted {
            if self.ensure(&hp, w).await? {
                created += 1;
            }
        }
        // What left the spec goes (and is uninstalled) — but never the
        // apps of a toggle whose list could not be read: that loses nothing.
        let keep: HashSet<(String, String)> = wanted
            .iter()
            .map(|w| (w.namespace.clone(), w.name.clone()))
            .collect();
        let mut removed = 0;
        for app in &owned {
            let source = app.labels().get(SOURCE_LABEL).cloned().unwrap_or_default();
            let id = (app.namespace().unwrap_or_default(), app.name_any());
            if keep.contains(&id)
                || unreadable.contains(source.as_str())
                || app.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            self.recorder.event(
                hp.as_ref(),
                EventType::Normal,
                "DeliveryRemoved",
                &format!(
                    "HelmApp {}/{} ({source}) is no longer asked for: deleted, its release uninstalled",
                    id.0, id.1
                ),
            );
            let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &id.0);
            ignore_missing(api.delete(&id.1, &DeleteParams::default()).await)?;
            removed += 1;
        }
        Ok(Action::done(format!(
            "{} HelmApp(s) asked for, {created} created, {removed} removed",
            wanted.len()
        )))
    }
}

impl ProjectDelivery {
    /// The HelmApps `hp` asks for, and the toggles whose app list could
    /// not be read (their apps are kept as they are).
    fn wanted(&self, hp: &Hosstedproject) -> (Vec<Wanted>, HashSet<&'static str>) {
        let mut wanted = Vec::new();
        let mut unreadable = HashSet::new();
        for entry in &hp.spec.helm {
            if entry.release_name.is_empty()
                || entry.namespace.is_empty()
                || entry.chart_name.is_empty()
                || entry.repo_url.is_empty()
            {
                self.recorder.event(
                    hp,
                    EventType::Warning,
                    "InvalidHelmEntry",
                    &format!(
                        "spec.helm entry {:?} in {:?} needs releaseName, namespace, chartName and repoUrl; skipped",
                        entry.release_name, entry.namespace
                    ),
                );
                continue;
            }
            let spec: HelmAppSpec = match serde_json::from_value(json!({
                "releaseName": entry.release_name,
                "targetNamespace": entry.namespace,
                "chart": { "repo": entry.repo_url, "name": entry.chart_name },
                "set": entry.values,
                "adopt": true,
            })) {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("spec.helm entry {}: {e}", entry.release_name);
                    continue;
                }
            };
            wanted.push(Wanted {
                namespace: entry.namespace.clone(),
                name: entry.release_name.clone(),
                source: "helm",
                spec,
            });
        }
        let toggles = [hp.spec.monitoring.enable, hp.spec.ingress.enable];
        for (toggle, _) in TOGGLES.iter().zip(toggles).filter(|(_, on)| *on) {
            match self.platform_apps(toggle) {
                Ok(apps) => wanted.extend(apps),
                Err(message) => {
                    unreadable.insert(*toggle);
                    self.recorder
                        .event(hp, EventType::Warning, "PlatformChartsInvalid", &message);
                }
            }
        }
        (wanted, unreadable)
    }

    /// The apps the platform ConfigMap lists for `toggle`.
    fn platform_apps(&self, toggle: &'static str) -> Result<Vec<Wanted>, String> {
        let cm = self
            .platform
            .list()
            .into_iter()
            .next()
            .ok_or_else(|| {
                format!("{toggle} is enabled but the ConfigMap {PLATFORM_CONFIGMAP} does not exist in the operator's namespace")
            })?;
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(toggle))
            .ok_or_else(|| {
                format!("{toggle} is enabled but {PLATFORM_CONFIGMAP} has no key {toggle:?}")
            })?;
        let listed = parse_platform_list(text).map_err(|e| {
            format!("{PLATFORM_CONFIGMAP} key {toggle:?} is not a list of {{name, namespace, spec}}: {e}; its apps are left as they are")
        })?;
        Ok(listed
            .into_iter()
            .map(|l| Wanted {
                namespace: l.namespace,
                name: l.name,
                source: toggle,
                spec: l.spec,
            })
            .collect())
    }

    /// Creates or updates the HelmApp `w`; `true` when created.
    async fn ensure(&self, hp: &Hosstedproject, w: &Wanted) -> Result<bool, ProjectError> {
        let project = hp.name_any();
        let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &w.namespace);
        let mut spec = w.spec.clone();
        match self.apps.get(&format!("{}/{}", w.namespace, w.name)) {
            Some(existing) => {
                if existing.labels().get(PROJECT_LABEL) != Some(&project) {
                    self.recorder.event(
                        hp,
                        EventType::Warning,
                        "NameTaken",
                        &format!(
                            "HelmApp {}/{} exists and was not made for this project; {} is not delivered",
                            w.namespace, w.name, w.name
                        ),
                    );
                    return Ok(false);
                }
                // The version pinned at creation is kept while the chart is
                // the same one.
                let same_chart = existing.spec.chart.repo == spec.chart.repo
                    && existing.spec.chart.name == spec.chart.name;
                if w.source == "helm" && same_chart {
                    spec.chart.version = existing.spec.chart.version.clone();
                } else if w.source == "helm" {
                    spec.chart.version = self.pin(hp, w).await?;
                }
                if existing.spec != spec && existing.metadata.deletion_timestamp.is_none() {
                    let mut updated = (*existing).clone();
                    updated.spec = spec;
                    api.replace(&w.name, &PostParams::default(), &updated)
                        .await?;
                }
                Ok(false)
            }
            None => {
                self.namespace(&w.namespace).await?;
                if w.source == "helm" {
                    spec.chart.version = self.pin(hp, w).await?;
                }
                let app = HelmApp {
                    metadata: ObjectMeta {
                        name: Some(w.name.clone()),
                        namespace: Some(w.namespace.clone()),
                        labels: Some(BTreeMap::from([
                            (PROJECT_LABEL.to_string(), project.clone()),
                            (SOURCE_LABEL.to_string(), w.source.to_string()),
                        ])),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                };
                match api.create(&PostParams::default(), &app).await {
                    Ok(_) => {
                        self.recorder.event(
                            hp,
                            EventType::Normal,
                            "DeliveryCreated",
                            &format!(
                                "HelmApp {}/{} created for {} (chart {} {})",
                                w.namespace,
                                w.name,
                                w.source,
                                app.spec.chart.name,
                                app.spec.chart.version
                            ),
                        );
                        Ok(true)
                    }
                    // Not yet in the cache: the next pass sees it.
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// The version a `spec.helm` entry is pinned to: that of the release
    /// already installed under its name (adoption changes nothing), else
    /// the repository's latest.
    async fn pin(&self, hp: &Hosstedproject, w: &Wanted) -> Result<String, ProjectError> {
        let installed = self
            .releases
            .by_index(RELEASE_INDEX, &format!("{}/{}", w.namespace, w.name))
            .into_iter()
            .max_by_key(|r| r.version())
            .and_then(|r| {
                r.release
                    .as_ref()
                    .ok()
                    .map(|s| (s.chart.clone(), s.chart_version.clone()))
            });
        if let Some((chart, version)) = installed
            && chart == w.spec.chart.name
            && !version.is_empty()
        {
            return Ok(version);
        }
        let (chart, work_dir, cache) = (
            w.spec.chart.clone(),
            self.work_dir.clone(),
            self.repo_cache.clone(),
        );
        let fetched = tokio::task::spawn_blocking(move || {
            source::fetch_from_repo(&chart, &source::Credentials::default(), &work_dir, &cache)
        })
        .await
        .map_err(|e| ProjectError::Failed(e.to_string()))?;
        fetched.map(|c| c.version).map_err(|e| {
            let message = format!("spec.helm {}: cannot pin a chart version: {e}", w.name);
            self.recorder
                .event(hp, EventType::Warning, "ChartUnavailable", &message);
            ProjectError::Failed(message)
        })
    }

    /// Creates `name` if it does not exist.
    async fn namespace(&self, name: &str) -> Result<(), ProjectError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The project is gone: its HelmApps are removed, their releases left
    /// installed.
    async fn let_go(&self, owned: &[Arc<HelmApp>]) -> Result<Action, ProjectError> {
        for app in owned {
            let api: Api<HelmApp> =
                Api::namespaced(self.client.clone(), &app.namespace().unwrap_or_default());
            if app.spec.uninstall_on_delete {
                ignore_missing(
                    api.patch(
                        &app.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "spec": { "uninstallOnDelete": false } })),
                    )
                    .await
                    .map(|_| ()),
                )?;
            }
            if app.metadata.deletion_timestamp.is_none() {
                ignore_missing(
                    api.delete(&app.name_any(), &DeleteParams::default())
                        .await
                        .map(|_| ()),
                )?;
            }
        }
        Ok(Action::done(format!(
            "project gone: {} HelmApp(s) removed, releases left installed",
            owned.len()
        )))
    }
}

/// One app of a toggle's list in [`PLATFORM_CONFIGMAP`].
#[derive(Debug, serde::Deserialize)]
struct Listed {
    name: String,
    namespace: String,
    spec: HelmAppSpec,
}

fn parse_platform_list(text: &str) -> Result<Vec<Listed>, String> {
    let listed: Vec<Listed> = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if let Some(bad) = listed
        .iter()
        .find(|l| l.name.is_empty() || l.namespace.is_empty())
    {
        return Err(format!("an entry has no name or namespace: {bad:?}"));
    }
    Ok(listed)
}

fn ignore_missing<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_platform_charts_parse_into_pinned_helmapp_specs() {
        let manifest = include_str!("../../manifests/delivery/platform-charts.yaml");
        let cm: ConfigMap = serde_yaml_ng::from_str(manifest).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some(PLATFORM_CONFIGMAP));
        let data = cm.data.unwrap();
        let names = |toggle: &str| -> Vec<String> {
            let listed = parse_platform_list(&data[toggle]).unwrap();
            for l in &listed {
                assert_eq!(l.namespace, "hossted-platform");
                assert!(!l.spec.chart.version.is_empty(), "{} is not pinned", l.name);
                assert!(!l.spec.chart.repo.is_empty());
            }
            listed.into_iter().map(|l| l.name).collect()
        };
        assert_eq!(names("monitoring"), vec!["alloy", "kube-state-metrics"]);
        assert_eq!(names("ingress"), vec!["ingress-nginx"]);
    }

    #[test]
    fn a_list_entry_without_a_namespace_is_refused() {
        assert!(parse_platform_list("- {name: a, spec: {chart: {path: x}}}").is_err());
        assert!(
            parse_platform_list("- {name: a, namespace: '', spec: {chart: {path: x}}}").is_err()
        );
        assert!(parse_platform_list("not: a list").is_err());
        assert_eq!(parse_platform_list("[]").unwrap().len(), 0);
    }
}
