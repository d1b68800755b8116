//! A release's resource tree, read with the viewer's rights: each workload
//! of the HelmApp's inventory (Deployment, StatefulSet, DaemonSet, Job),
//! the ReplicaSets a Deployment owns and the Pods each owns — by owner
//! UID, never by name — each with its kstatus and why it is not ready.
//!
//! Bounds: at most [`MAX_WORKLOADS`] workloads read, one LIST of
//! ReplicaSets and one of Pods per namespace (at most [`MAX_LISTED`] each,
//! at most [`MAX_NAMESPACES`] namespaces).

use std::collections::BTreeSet;

use apis::helmapp::HelmApp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::delivery::helmapp::decide::kstatus::{self, Readiness};

pub const MAX_WORKLOADS: usize = 50;
pub const MAX_LISTED: u32 = 500;
pub const MAX_NAMESPACES: usize = 8;

/// One node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// kstatus's word: `Current`, `InProgress`, `Failed`, `NotFound`,
    /// `Unknown`.
    pub status: &'static str,
    /// Why it is not ready (empty when it is).
    pub detail: String,
    /// A Pod's containers (for its logs).
    pub containers: Vec<String>,
    pub children: Vec<Node>,
}

/// The kinds that own Pods, as the inventory names them.
fn workload_kind(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("apps/v1", "Deployment") => Some("Deployment"),
        ("apps/v1", "StatefulSet") => Some("StatefulSet"),
        ("apps/v1", "DaemonSet") => Some("DaemonSet"),
        ("batch/v1", "Job") => Some("Job"),
        _ => None,
    }
}

/// The tree of `app`'s workloads, or why it cannot be read.
pub async fn tree(
    client: &kube::Client,
    kinds: &crate::ui::details::Kinds,
    app: &HelmApp,
) -> Result<Vec<Node>, String> {
    let Some(status) = &app.status else {
        return Ok(Vec::new());
    };
    let workloads: Vec<_> = status
        .inventory
        .iter()
        .filter_map(|e| workload_kind(&e.api_version, &e.kind).map(|k| (k, e)))
        .take(MAX_WORKLOADS)
        .collect();
    let namespaces: BTreeSet<&str> = workloads
        .iter()
        .map(|(_, e)| e.namespace.as_str())
        .take(MAX_NAMESPACES)
        .collect();
    let mut replica_sets = Vec::new();
    let mut pods = Vec::new();
    for ns in &namespaces {
        let lp = ListParams::default().limit(MAX_LISTED);
        if workloads.iter().any(|(k, _)| *k == "Deployment") {
            replica_sets.extend(
                Api::<ReplicaSet>::namespaced(client.clone(), ns)
                    .list(&lp)
                    .await
                    .map_err(|e| format!("cannot list ReplicaSets in {ns}: {e}"))?
                    .items,
            );
        }
        pods.extend(
            Api::<Pod>::namespaced(client.clone(), ns)
                .list(&lp)
                .await
                .map_err(|e| format!("cannot list Pods in {ns}: {e}"))?
                .items,
        );
    }
    let mut nodes = Vec::with_capacity(workloads.len());
    for (kind, e) in workloads {
        if !namespaces.contains(e.namespace.as_str()) {
            continue;
        }
        let live = kinds
            .get(client, &e.api_version, kind, &e.namespace, &e.name)
            .await;
        let (status, detail, uid) = match &live {
            Ok(Some(v)) => {
                let (s, d) = judged(v);
                let uid = v
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                (s, d, uid)
            }
            Ok(None) => ("NotFound", String::new(), None),
            Err(why) => ("Unknown", why.clone(), None),
        };
        let children = match (&uid, kind) {
            (Some(uid), "Deployment") => replica_sets
                .iter()
                .filter(|rs| owned_by(rs.owner_references(), uid))
                .map(|rs| replica_set_node(rs, &pods))
                .collect(),
            (Some(uid), _) => pods
                .iter()
                .filter(|p| owned_by(p.owner_references(), uid))
                .map(pod_node)
                .collect(),
            (None, _) => Vec::new(),
        };
        nodes.push(Node {
            kind,
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            status,
            detail,
            containers: Vec::new(),
            children,
        });
    }
    Ok(nodes)
}

fn owned_by(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    uid: &str,
) -> bool {
    owners.iter().any(|o| o.uid == uid)
}

fn judged(live: &Value) -> (&'static str, String) {
    match kstatus::readiness(live) {
        Readiness::Ready => ("Current", String::new()),
        Readiness::Pending(why) => ("InProgress", why),
        Readiness::Failed(why) => ("Failed", why),
    }
}

fn replica_set_node(rs: &ReplicaSet, pods: &[Pod]) -> Node {
    let (status, detail) = match serde_json::to_value(rs) {
        Ok(v) => judged(&v),
        Err(_) => ("Unknown", String::new()),
    };
    let uid = rs.uid().unwrap_or_default();
    Node {
        kind: "ReplicaSet",
        namespace: rs.namespace().unwrap_or_default(),
        name: rs.name_any(),
        status,
        detail,
        containers: Vec::new(),
        children: pods
            .iter()
            .filter(|p| owned_by(p.owner_references(), &uid))
            .map(pod_node)
            .collect(),
    }
}

/// A Pod's kstatus: Running with every container ready is `Current`;
/// Succeeded too; Failed, or a container waiting in a crash loop or on an
/// image it cannot pull, `Failed`; anything else `InProgress`, saying why.
fn pod_node(pod: &Pod) -> Node {
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_else(|| "Pending".into());
    let statuses = status.container_statuses.clone().unwrap_or_default();
    let waiting = statuses.iter().find_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        Some(format!(
            "container {} waiting: {}",
            c.name,
            w.reason.clone().unwrap_or_default()
        ))
    });
    let crashing = statuses.iter().any(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref())
            .is_some_and(|r| {
                matches!(
                    r,
                    "CrashLoopBackOff" | "ImagePullBackOff" | "ErrImagePull" | "InvalidImageName"
                )
            })
    });
    let restarts: i32 = statuses.iter().map(|c| c.restart_count).sum();
    let all_ready = !statuses.is_empty() && statuses.iter().all(|c| c.ready);
    let (word, mut detail) = match phase.as_str() {
        "Succeeded" => ("Current", String::new()),
        "Failed" => (
            "Failed",
            status
                .reason
                .clone()
                .unwrap_or_else(|| "phase Failed".into()),
        ),
        _ if crashing => ("Failed", waiting.clone().unwrap_or_default()),
        "Running" if all_ready => ("Current", String::new()),
        _ => (
            "InProgress",
            waiting.unwrap_or_else(|| format!("phase {phase}, not every container ready")),
        ),
    };
    if restarts > 0 {
        if !detail.is_empty() {
            detail.push_str("; ");
        }
        detail.push_str(&format!("{restarts} restarts"));
    }
    Node {
        kind: "Pod",
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        status: word,
        detail,
        containers: pod
            .spec
            .as_ref()
            .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default(),
        children: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "web-1", "namespace": "apps" },
            "spec": { "containers": [{ "name": "app", "image": "x" }] },
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_pods_state_and_why_come_from_its_phase_and_containers() {
        let running = pod(json!({ "phase": "Running", "containerStatuses": [
            { "name": "app", "ready": true, "restartCount": 0, "image": "x", "imageID": "" }] }));
        assert_eq!(pod_node(&running).status, "Current");
        let crashing = pod(json!({ "phase": "Running", "containerStatuses": [
            { "name": "app", "ready": false, "restartCount": 7, "image": "x", "imageID": "",
              "state": { "waiting": { "reason": "CrashLoopBackOff" } } }] }));
        let n = pod_node(&crashing);
        assert_eq!(n.status, "Failed");
        assert_eq!(
            n.detail,
            "container app waiting: CrashLoopBackOff; 7 restarts"
        );
        assert_eq!(n.containers, vec!["app".to_string()]);
        let pending = pod(json!({ "phase": "Pending" }));
        assert_eq!(pod_node(&pending).status, "InProgress");
        assert_eq!(pod(json!({})).status.unwrap().phase, None);
        assert_eq!(pod_node(&pod(json!({}))).status, "InProgress");
    }
}
