//! What a privileged identity may adopt (docs/tenancy.md). A release no live HelmApp
//! owns carries no digest the operator recorded: anyone who may write
//! Secrets in its namespace may have written it. Taking it over as the
//! operator runs helm on what it lists — an upgrade deletes what the old
//! revision lists and the new one does not, an uninstall runs its hooks —
//! so a privileged adoption is refused when any stored revision names an
//! object outside the release's namespace or a cluster-scoped one. A
//! tenant identity may adopt as before: its own RBAC bounds what helm
//! does.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{GroupVersionKind, ListParams};
use kube::discovery::Scope;
use kube::{Api, Client};
use serde_json::Value;

use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::helmapp::drift_cache::manifest::objects_of;
use crate::lean::helm::release_manifests;

/// Kinds known to be namespaced (`apiVersion`, `kind`): no discovery
/// request for them.
const NAMESPACED: [(&str, &str); 17] = [
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("v1", "Pod"),
    ("v1", "PersistentVolumeClaim"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("networking.k8s.io/v1", "Ingress"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("policy/v1", "PodDisruptionBudget"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
];

/// Why the operator may not adopt `target`'s release: the first stored
/// object (any revision, hooks included) outside the release's namespace,
/// cluster-scoped, or of a kind whose scope the API does not say; or a
/// storage entry that is no release. `Ok(None)`: it may. `Err`: the
/// storage could not be read (try again).
pub async fn refused(client: &Client, target: &Target) -> Result<Option<String>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &target.namespace);
    let selector = format!("owner=helm,name={}", target.release);
    let list = api.list(&ListParams::default().labels(&selector)).await?;
    for secret in &list.items {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let payload = secret
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .map(|b| b.0.as_slice())
            .unwrap_or_default();
        let objects = match release_manifests(payload)
            .map_err(|e| e.to_string())
            .and_then(|ms| manifests_objects(&ms))
        {
            Ok(objects) => objects,
            Err(e) => return Ok(Some(format!("storage Secret {name} cannot be read: {e}"))),
        };
        for object in &objects {
            if let Some(why) = foreign(client, object, &target.namespace).await {
                return Ok(Some(format!(
                    "storage Secret {name} of release {} lists {why}: a privileged HelmApp adopts only a release whose stored objects are all in its namespace; remove the release or adopt it from a HelmApp that runs as a ServiceAccount of {}",
                    target.key(),
                    target.namespace
                )));
            }
        }
    }
    Ok(None)
}

fn manifests_objects(manifests: &[String]) -> Result<Vec<Value>, String> {
    let mut all = Vec::new();
    for m in manifests {
        all.extend(objects_of(m)?);
    }
    Ok(all)
}

/// `Some(what)` when `object` is outside `namespace` or cluster-scoped.
async fn foreign(client: &Client, object: &Value, namespace: &str) -> Option<String> {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (api_version, kind, name, ns) = (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/name"),
        s("/metadata/namespace"),
    );
    if !ns.is_empty() {
        return (ns != namespace).then(|| format!("{kind} {ns}/{name}"));
    }
    if NAMESPACED.contains(&(api_version, kind)) {
        return None;
    }
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::oneshot::pinned_kind(client, &gvk).await {
        Ok((_, caps)) if caps.scope == Scope::Namespaced => None,
        Ok(_) => Some(format!("the cluster-scoped {kind} {name}")),
        Err(_) => Some(format!(
            "{kind} {name} of {api_version}, a kind the API does not serve"
        )),
    }
}
