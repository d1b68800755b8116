//! HelmApps and Helm's storage, as the delivery tests read and write them:
//! one copy of each helper, for every test file about delivery.

use std::collections::BTreeMap;

use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Fixture, eventually};

/// Creates HelmApp `ns/name` with `spec`.
pub async fn apply_helmapp(f: &Fixture, ns: &str, name: &str, spec: serde_json::Value) {
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": ns }, "spec": spec
    }))
    .unwrap();
    Api::<HelmApp>::namespaced(f.cp.client(), ns)
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
}

/// Merge-patches HelmApp `ns/name` with `body`.
pub async fn patch_helmapp(f: &Fixture, ns: &str, name: &str, body: serde_json::Value) {
    Api::<HelmApp>::namespaced(f.cp.client(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap();
}

pub async fn get_helmapp(f: &Fixture, ns: &str, name: &str) -> Option<HelmApp> {
    Api::<HelmApp>::namespaced(f.cp.client(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// The storage Secrets of release `ns/release`: revision → labels.
pub async fn storage_revisions(
    f: &Fixture,
    ns: &str,
    release: &str,
) -> BTreeMap<i64, BTreeMap<String, String>> {
    Api::<Secret>::namespaced(f.cp.client(), ns)
        .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            let labels = s.metadata.labels.unwrap_or_default();
            let v = labels
                .get("version")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            (v, labels)
        })
        .collect()
}

/// The HelmApp once its Ready condition has `reason`, whatever its revision.
pub async fn helmapp_with_reason(f: &Fixture, ns: &str, name: &str, reason: &str) -> HelmApp {
    eventually(&format!("{name}: {reason}"), 120, || async {
        let app = get_helmapp(f, ns, name).await?;
        let c = app
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        (c.reason == reason).then_some(app)
    })
    .await
}

/// The HelmApp once its Ready condition has `reason` and its revision is `revision`.
pub async fn helmapp_ready(
    f: &Fixture,
    ns: &str,
    name: &str,
    reason: &str,
    revision: i64,
) -> HelmApp {
    eventually(
        &format!("{name}: {reason} at revision {revision}"),
        120,
        || async {
            let app = get_helmapp(f, ns, name).await?;
            let st = app.status.as_ref()?;
            let c = st.conditions.iter().find(|c| c.type_ == "Ready")?;
            (c.reason == reason && st.revision == revision).then_some(app.clone())
        },
    )
    .await
}

/// Waits (up to 30 s) for an Event with `reason` on `ns/name`. The recorder
/// writes Events after the status they go with, so a condition seen does not
/// mean its Event is there yet.
pub async fn an_event(f: &Fixture, ns: &str, name: &str, reason: &str) {
    eventually(&format!("a {reason} Event on {ns}/{name}"), 30, || async {
        event_reasons(f, ns, name)
            .await
            .iter()
            .any(|r| r == reason)
            .then_some(())
    })
    .await
}

/// The reasons of the Events about `ns/name`.
pub async fn event_reasons(f: &Fixture, ns: &str, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(f.cp.client(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}
