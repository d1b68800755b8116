//! Keeping a project's HelmApps: created in the operator's namespace (the
//! target namespace made first), a `spec.helm` entry's chart version pinned
//! once, updated when the project's spec changes; one made under the
//! earlier rule (in the target namespace) moved there first.

use std::collections::BTreeMap;

use apis::Hosstedproject;
use apis::helmapp::{HelmApp, HelmAppSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use record::EventType;
use serde_json::json;

use super::context::{PROJECT_LABEL, ProjectDelivery, ProjectError, SOURCE_LABEL};
use super::wanted::Wanted;
use crate::delivery::children::{self, Applied};
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::names::{RELEASE_INDEX, UID_LABEL};
use crate::delivery::source;

impl ProjectDelivery {
    /// Creates or updates the HelmApp of `w` in the operator's namespace,
    /// after moving one made under the earlier rule (in the target
    /// namespace) there; `true` when created.
    pub(super) async fn ensure(
        &self,
        hp: &Hosstedproject,
        w: &Wanted,
    ) -> Result<bool, ProjectError> {
        let project = hp.name_any();
        let name = w.app_name();
        let key = format!("{}/{name}", self.operator_namespace);
        let old = self
            .apps
            .get(&format!("{}/{}", w.target, w.release))
            .filter(|o| o.labels().get(PROJECT_LABEL) == Some(&project))
            .filter(|o| o.namespace().as_deref() != Some(self.operator_namespace.as_str()));
        if let Some(old) = old {
            self.move_if_proven(hp, w, &old).await?;
        }
        let existing = self.apps.get(&key);
        let mut spec = w.spec.clone();
        match &existing {
            Some(e) if e.labels().get(PROJECT_LABEL) != Some(&project) => {
                let message = format!(
                    "HelmApp {key} exists and was not made for this project; {}/{} is not delivered",
                    w.target, w.release
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
                self.namespace(&w.target).await?;
                if w.source == "helm" {
                    spec.chart.version = self.pin(hp, w).await?;
                }
            }
        }
        let (chart, version) = (spec.chart.name.clone(), spec.chart.version.clone());
        let app = self.made_app(hp, w, spec);
        let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &self.operator_namespace);
        let applied = children::create_or_replace(&api, existing.as_deref(), app).await?;
        if applied == Applied::Created {
            let message = format!(
                "HelmApp {key} created for {} (release {}/{}, chart {chart} {version})",
                w.source, w.target, w.release
            );
            let reason = Reason::DeliveryCreated.as_str();
            self.recorder.event(hp, EventType::Normal, reason, &message);
        }
        Ok(applied == Applied::Created)
    }

    /// The HelmApp of `w` with `spec`: in the operator's namespace, owned by
    /// the project (an ownerReference) and labelled with it.
    fn made_app(&self, hp: &Hosstedproject, w: &Wanted, spec: HelmAppSpec) -> HelmApp {
        HelmApp {
            metadata: ObjectMeta {
                name: Some(w.app_name()),
                namespace: Some(self.operator_namespace.clone()),
                labels: Some(BTreeMap::from([
                    (PROJECT_LABEL.to_string(), hp.name_any()),
                    (SOURCE_LABEL.to_string(), w.source.to_string()),
                ])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "hossted.com/v1".into(),
                    kind: "Hosstedproject".into(),
                    name: hp.name_any(),
                    uid: hp.uid().unwrap_or_default(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    /// Moves `old` ([`Self::move_to_operator_namespace`]) only when its
    /// storage is proven the operator's: a HelmApp's label and name prove
    /// nothing (a tenant may make one), the digests the operator recorded in
    /// its status do. Otherwise a Warning, and nothing moves: the new
    /// HelmApp then finds the release owned by a live one and takes nothing.
    async fn move_if_proven(
        &self,
        hp: &Hosstedproject,
        w: &Wanted,
        old: &HelmApp,
    ) -> Result<(), ProjectError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &w.target);
        let selector = format!(
            "owner=helm,name={},{UID_LABEL}={}",
            w.release,
            old.uid().unwrap_or_default()
        );
        let stored = secrets
            .list(&ListParams::default().labels(&selector))
            .await?;
        let status = old.status.clone().unwrap_or_default();
        match unproven(&status, &stored.items) {
            None => self.move_to_operator_namespace(hp, w, old).await,
            Some(why) => {
                let message = format!(
                    "HelmApp {}/{} is not moved to {}: {why}; its release {}/{} is left as it is",
                    old.namespace().unwrap_or_default(),
                    old.name_any(),
                    self.operator_namespace,
                    w.target,
                    w.release
                );
                let reason = Reason::StorageTampered.as_str();
                self.recorder
                    .event(hp, EventType::Warning, reason, &message);
                Ok(())
            }
        }
    }

    /// Moves `old` — made under the earlier rule, in the target namespace —
    /// to the operator's namespace without a helm run: the new HelmApp is
    /// made suspended, the owner labels of the release's storage are
    /// rewritten to it (no new revision), and `old` is removed without an
    /// uninstall (its release is no longer its own).
    async fn move_to_operator_namespace(
        &self,
        hp: &Hosstedproject,
        w: &Wanted,
        old: &HelmApp,
    ) -> Result<(), ProjectError> {
        let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &self.operator_namespace);
        let new = match api.get_opt(&w.app_name()).await? {
            Some(n) => n,
            None => {
                let mut spec = w.spec.clone();
                spec.chart.version = old.spec.chart.version.clone();
                spec.suspend = true;
                api.create(&PostParams::default(), &self.made_app(hp, w, spec))
                    .await?
            }
        };
        let (old_uid, new_uid) = (old.uid().unwrap_or_default(), new.uid().unwrap_or_default());
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &w.target);
        let selector = format!("owner=helm,name={},{UID_LABEL}={old_uid}", w.release);
        for s in secrets
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            let patch = json!({ "metadata": { "labels": { UID_LABEL: new_uid } } });
            secrets
                .patch(
                    &s.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
        let old_api: Api<HelmApp> =
            Api::namespaced(self.client.clone(), &old.namespace().unwrap_or_default());
        let keep = json!({ "spec": { "uninstallOnDelete": false } });
        runtime::ignore_not_found(
            old_api
                .patch(
                    &old.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&keep),
                )
                .await,
        )?;
        runtime::ignore_not_found(
            old_api
                .delete(&old.name_any(), &DeleteParams::default())
                .await,
        )?;
        let message = format!(
            "HelmApp {}/{} moved to {}/{} (release {}/{} kept as it is, no helm run)",
            old.namespace().unwrap_or_default(),
            old.name_any(),
            self.operator_namespace,
            w.app_name(),
            w.target,
            w.release
        );
        self.recorder.event(
            hp,
            EventType::Normal,
            Reason::DeliveryCreated.as_str(),
            &message,
        );
        Ok(())
    }

    /// The version a `spec.helm` entry is pinned to: that of the release
    /// already installed under its name (adoption changes nothing), else
    /// the repository's latest.
    async fn pin(&self, hp: &Hosstedproject, w: &Wanted) -> Result<String, ProjectError> {
        let entries = self
            .releases
            .by_index(RELEASE_INDEX, &format!("{}/{}", w.target, w.release));
        let installed = crate::lean::storage::newest_of(&entries).and_then(|r| {
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
        let fetched = self
            .sources
            .fetch(
                &self.operator_namespace,
                &w.spec.chart,
                source::Credentials::default(),
                // Only the version is read here; the app's own reconcile
                // verifies what it installs.
                None,
            )
            .await;
        fetched.map(|c| c.version).map_err(|e| {
            let message = format!("spec.helm {}: cannot pin a chart version: {e}", w.release);
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

/// Why the storage Secrets `stored` (labelled with a HelmApp's UID) are not
/// proven written by the operator for it, if they are not: the operator
/// ran helm for it (a digest on its history), and each revision has the
/// digest recorded in its `status.storageDigests`; a HelmApp from before
/// those were recorded proves only its newest revision, by the digest on
/// its history.
fn unproven(status: &apis::helmapp::HelmAppStatus, stored: &[Secret]) -> Option<String> {
    use crate::lean::storage::release_digest;
    let digest_of = |s: &Secret| {
        let payload = s.data.as_ref().and_then(|d| d.get("release"));
        release_digest(payload.map(|b| b.0.as_slice()).unwrap_or_default())
    };
    let revision_of = |s: &Secret| {
        s.labels()
            .get("version")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    if stored.is_empty() {
        return Some("no storage of its release carries its UID".into());
    }
    // Digests recorded on first sight (a release the operator found, not
    // made) prove nothing: only a helm action of the operator's records a
    // digest on the history.
    if !status.history.iter().any(|h| !h.release_digest.is_empty()) {
        return Some("the operator never ran helm for it".into());
    }
    if !status.storage_digests.is_empty() {
        return stored.iter().find_map(|s| {
            let (revision, digest) = (revision_of(s), digest_of(s));
            let known = status
                .storage_digests
                .iter()
                .any(|d| d.revision == revision && d.digest == digest);
            (!known).then(|| {
                format!(
                    "storage Secret {} is not one the operator recorded",
                    s.name_any()
                )
            })
        });
    }
    let newest = stored.iter().max_by_key(|s| revision_of(s))?;
    let recorded = status
        .history
        .iter()
        .map(|h| h.release_digest.as_str())
        .find(|d| !d.is_empty());
    (recorded != Some(digest_of(newest).as_str())).then(|| {
        format!(
            "its newest storage Secret {} is not one the operator recorded",
            newest.name_any()
        )
    })
}
