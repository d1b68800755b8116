//! Keeping a project's HelmApps: created in the entry's namespace (made
//! first), a `spec.helm` entry's chart version pinned once, updated when the
//! project's spec changes.

use std::collections::BTreeMap;

use apis::Hosstedproject;
use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use record::EventType;

use super::context::{PROJECT_LABEL, ProjectDelivery, ProjectError, SOURCE_LABEL};
use super::wanted::Wanted;
use crate::delivery::children::{self, Applied};
use crate::delivery::helmapp::status::Reason;
use crate::delivery::names::RELEASE_INDEX;
use crate::delivery::source;

impl ProjectDelivery {
    /// Creates or updates the HelmApp `w`; `true` when created.
    pub(super) async fn ensure(
        &self,
        hp: &Hosstedproject,
        w: &Wanted,
    ) -> Result<bool, ProjectError> {
        let project = hp.name_any();
        let existing = self.apps.get(&format!("{}/{}", w.namespace, w.name));
        let mut spec = w.spec.clone();
        match &existing {
            Some(e) if e.labels().get(PROJECT_LABEL) != Some(&project) => {
                let message = format!(
                    "HelmApp {}/{} exists and was not made for this project; {} is not delivered",
                    w.namespace, w.name, w.name
                );
                let reason = Reason::NameTaken.as_str();
                self.recorder
                    .event(hp, EventType::Warning, reason, &message);
                return Ok(false);
            }
            // The version pinned at creation is kept while the chart is the
            // same one.
            Some(e)
                if w.source == "helm"
                    && e.spec.chart.repo == spec.chart.repo
                    && e.spec.chart.name == spec.chart.name =>
            {
                spec.chart.version = e.spec.chart.version.clone();
            }
            Some(_) if w.source == "helm" => spec.chart.version = self.pin(hp, w).await?,
            Some(_) => {}
            None => {
                self.namespace(&w.namespace).await?;
                if w.source == "helm" {
                    spec.chart.version = self.pin(hp, w).await?;
                }
            }
        }
        let (chart, version) = (spec.chart.name.clone(), spec.chart.version.clone());
        let app = HelmApp {
            metadata: ObjectMeta {
                name: Some(w.name.clone()),
                namespace: Some(w.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (PROJECT_LABEL.to_string(), project),
                    (SOURCE_LABEL.to_string(), w.source.to_string()),
                ])),
                ..Default::default()
            },
            spec,
            status: None,
        };
        let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &w.namespace);
        let applied = children::create_or_replace(&api, existing.as_deref(), app).await?;
        if applied == Applied::Created {
            let message = format!(
                "HelmApp {}/{} created for {} (chart {chart} {version})",
                w.namespace, w.name, w.source
            );
            let reason = Reason::DeliveryCreated.as_str();
            self.recorder.event(hp, EventType::Normal, reason, &message);
        }
        Ok(applied == Applied::Created)
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
            source::repo::fetch_from_repo(
                &chart,
                &source::Credentials::default(),
                &work_dir,
                &cache,
            )
        })
        .await
        .map_err(|e| ProjectError::Failed(e.to_string()))?;
        fetched.map(|c| c.version).map_err(|e| {
            let message = format!("spec.helm {}: cannot pin a chart version: {e}", w.name);
            self.recorder.event(
                hp,
                EventType::Warning,
                Reason::ChartUnavailable.as_str(),
                &message,
            );
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
            Err(e) if !runtime::is_conflict(&e) => Err(e.into()),
            _ => Ok(()),
        }
    }
}
