//! HelmApp delivery end to end: a real apiserver, the real helm binary run
//! by the operator, charts by path from `examples/charts`.

mod actions;
mod approval;
mod dependencies;
mod digests;
mod drift;
mod faults;
mod from_flux;
mod getting_started;
mod git;
mod helm4;
mod hostile;
mod lifecycle;
mod model;
mod processes;
mod readiness;
mod remote;
mod shards;
mod sources;
mod storage_trust;
mod tenancy;
mod updates;
mod values;
mod verification;
mod webhook;
mod windows;

pub use std::collections::BTreeMap;

pub use crate::support::*;
pub use apis::helmapp::HelmApp;
pub use k8s_openapi::api::core::v1::{ConfigMap, Secret};
pub use kube::Api;
pub use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
pub use serde_json::json;

const NS: &str = "apps";

async fn apply(f: &Fixture, name: &str, spec: serde_json::Value) {
    apply_helmapp(f, NS, name, spec).await
}

async fn patch(f: &Fixture, name: &str, body: serde_json::Value) {
    patch_helmapp(f, NS, name, body).await
}

async fn get(f: &Fixture, name: &str) -> Option<HelmApp> {
    get_helmapp(f, NS, name).await
}

/// The release's storage Secrets: revision → labels.
async fn revisions(f: &Fixture, release: &str) -> BTreeMap<i64, BTreeMap<String, String>> {
    storage_revisions(f, NS, release).await
}

/// The HelmApp once its Ready condition has `reason`, whatever its revision.
async fn with_reason(f: &Fixture, name: &str, reason: &str) -> HelmApp {
    helmapp_with_reason(f, NS, name, reason).await
}

/// The HelmApp once its Ready condition has `reason` and its revision is `revision`.
async fn ready(f: &Fixture, name: &str, reason: &str, revision: i64) -> HelmApp {
    helmapp_ready(f, NS, name, reason, revision).await
}

/// Waits (up to 10 s) for `series` to read `value` in the operator's
/// metrics: per-app gauges are computed from its cache at each scrape, so
/// a status seen on the API server reaches them one watch event later.
async fn gauge_reaches(operator: &Operator, series: &str, value: f64) {
    eventually(&format!("{series} = {value}"), 10, || async {
        (sample(&operator.scrape(), series) == Some(value)).then_some(())
    })
    .await;
}

/// Until `operator` holds one record for its rollout
/// (`decide::ready::hold`; its install may take a while on a busy
/// machine, the hold lasts until the release's readiness verdict).
async fn record_held(operator: &Operator) {
    eventually("a record held", 90, || async {
        (sample(&operator.scrape(), "hossted_helmapp_records_held") == Some(1.0)).then_some(())
    })
    .await;
}

async fn reasons_of_events(f: &Fixture, name: &str) -> Vec<String> {
    event_reasons(f, NS, name).await
}

fn is_ready(app: &HelmApp) -> bool {
    app.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// The ServiceAccount `tenant` in [`NS`], bound to a Role with `rules` (YAML
/// list items).
fn tenant_account(f: &Fixture, rules: &str) {
    let rbac = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: tenant, namespace: {NS} }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{ name: tenant, namespace: {NS} }}
rules:{rules}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{ name: tenant, namespace: {NS} }}
roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant }}
subjects: [{{ kind: ServiceAccount, name: tenant, namespace: {NS} }}]
"#
    );
    let file = f.cp.dir().join("tenant-rbac.yaml");
    std::fs::write(&file, rbac).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
}
