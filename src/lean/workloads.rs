//! The other objects of a release the payload names (docs/inventory.md, "Fields the Go
//! operator 0.7.6 added"): Deployments, StatefulSets, ConfigMaps and
//! Secrets, cached as their metadata — plus, for a Deployment, the first
//! `secretKeyRef` its pod template uses (a name and a key, never a value),
//! and for a ConfigMap its data only when `--report-configmap-data` asks
//! (the informer's transform drops it otherwise). A Secret's data is never
//! parsed.

use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::lean::objects::{LeanMeta, lean_meta, resource};

/// A Deployment: its name, the first `secretKeyRef` of its pod template,
/// and its rollout.
#[derive(Clone, Debug)]
pub struct Deployment {
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
    pub secret_ref: Option<SecretKeyRef>,
    pub rollout: Rollout,
}

/// How far a workload's rollout is, from its spec and status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    /// `spec.replicas` (1 when unset).
    pub desired: i32,
    /// Replicas of the current template (`updatedReplicas`).
    pub updated: i32,
    /// Ready (StatefulSet) or available (Deployment) replicas.
    pub ready: i32,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
}

impl Rollout {
    /// Done: the controller saw the current spec and every desired replica
    /// runs the current template and is ready.
    pub fn is_done(&self, generation: Option<i64>) -> bool {
        self.observed_generation >= generation.unwrap_or(0)
            && self.updated >= self.desired
            && self.ready >= self.desired
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    #[serde(default)]
    observed_generation: i64,
    #[serde(default)]
    updated_replicas: i32,
    #[serde(default)]
    ready_replicas: i32,
    #[serde(default)]
    available_replicas: i32,
}
resource!(
    Deployment,
    "Deployment",
    "apps",
    "v1",
    "deployments",
    NamespaceResourceScope
);

/// `env[].valueFrom.secretKeyRef`: which Secret and key, not the value.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct SecretKeyRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub key: String,
}

impl<'de> Deserialize<'de> for Deployment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: LeanMeta,
            #[serde(default)]
            spec: Spec,
            #[serde(default)]
            status: RawStatus,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            replicas: Option<i32>,
            #[serde(default)]
            template: Template,
        }
        #[derive(Deserialize, Default)]
        struct Template {
            #[serde(default)]
            spec: PodSpec,
        }
        #[derive(Deserialize, Default)]
        struct PodSpec {
            #[serde(default)]
            containers: Vec<Container>,
        }
        #[derive(Deserialize)]
        struct Container {
            #[serde(default)]
            env: Vec<Env>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Env {
            value_from: Option<ValueFrom>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct ValueFrom {
            secret_key_ref: Option<SecretKeyRef>,
        }
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
        let rollout = Rollout {
            desired: raw.spec.replicas.unwrap_or(1),
            updated: raw.status.updated_replicas,
            ready: raw.status.available_replicas,
            observed_generation: raw.status.observed_generation,
        };
        let secret_ref = raw
            .spec
            .template
            .spec
            .containers
            .into_iter()
            .flat_map(|c| c.env)
            .find_map(|e| e.value_from.and_then(|v| v.secret_key_ref));
        Ok(Deployment {
            fingerprint,
            metadata: raw.metadata,
            secret_ref,
            rollout,
        })
    }
}

/// A StatefulSet: its name and its rollout.
#[derive(Clone, Debug)]
pub struct StatefulSet {
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
    pub rollout: Rollout,
}

impl<'de> Deserialize<'de> for StatefulSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: LeanMeta,
            #[serde(default)]
            spec: Spec,
            #[serde(default)]
            status: RawStatus,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            replicas: Option<i32>,
        }
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
        Ok(StatefulSet {
            fingerprint,
            metadata: raw.metadata,
            rollout: Rollout {
                desired: raw.spec.replicas.unwrap_or(1),
                updated: raw.status.updated_replicas,
                ready: raw.status.ready_replicas,
                observed_generation: raw.status.observed_generation,
            },
        })
    }
}
resource!(
    StatefulSet,
    "StatefulSet",
    "apps",
    "v1",
    "statefulsets",
    NamespaceResourceScope
);

/// A DaemonSet: its rollout (for `wait`).
#[derive(Clone, Debug)]
pub struct DaemonSet {
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
    pub rollout: Rollout,
}
resource!(
    DaemonSet,
    "DaemonSet",
    "apps",
    "v1",
    "daemonsets",
    NamespaceResourceScope
);

impl<'de> Deserialize<'de> for DaemonSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: LeanMeta,
            #[serde(default)]
            status: Status,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Status {
            #[serde(default)]
            observed_generation: i64,
            #[serde(default)]
            desired_number_scheduled: i32,
            #[serde(default)]
            updated_number_scheduled: i32,
            #[serde(default)]
            number_ready: i32,
        }
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
        Ok(DaemonSet {
            fingerprint,
            metadata: raw.metadata,
            rollout: Rollout {
                desired: raw.status.desired_number_scheduled,
                updated: raw.status.updated_number_scheduled,
                ready: raw.status.number_ready,
                observed_generation: raw.status.observed_generation,
            },
        })
    }
}

/// A Job: done when it has succeeded `completions` times (for `wait`).
#[derive(Clone, Debug)]
pub struct Job {
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
    /// `spec.completions` (1 when unset).
    pub completions: i32,
    /// `status.succeeded`.
    pub succeeded: i32,
}
resource!(Job, "Job", "batch", "v1", "jobs", NamespaceResourceScope);

impl Job {
    pub fn is_done(&self) -> bool {
        self.succeeded >= self.completions
    }
}

impl<'de> Deserialize<'de> for Job {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: LeanMeta,
            #[serde(default)]
            spec: Spec,
            #[serde(default)]
            status: Status,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            completions: Option<i32>,
        }
        #[derive(Deserialize, Default)]
        struct Status {
            #[serde(default)]
            succeeded: i32,
        }
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
        Ok(Job {
            fingerprint,
            metadata: raw.metadata,
            completions: raw.spec.completions.unwrap_or(1),
            succeeded: raw.status.succeeded,
        })
    }
}

/// A ConfigMap of a release: its name, and its data while
/// `--report-configmap-data` keeps it (see [`ConfigMap::without_data`]).
#[derive(Clone, Debug, Deserialize)]
pub struct ConfigMap {
    #[serde(deserialize_with = "lean_meta")]
    pub metadata: LeanMeta,
    #[serde(default)]
    pub data: Option<BTreeMap<String, String>>,
}
resource!(ConfigMap, "ConfigMap", "configmaps", NamespaceResourceScope);

impl ConfigMap {
    /// The informer's transform unless `--report-configmap-data`: the data
    /// never reaches the cache.
    pub fn without_data(mut self) -> Self {
        self.data = None;
        self
    }
}

/// A Secret of a release (label `app.kubernetes.io/managed-by=Helm`): its
/// name only — the parser skips `data` without reading it into memory.
#[derive(Clone, Debug, Deserialize)]
pub struct ReleaseSecret {
    #[serde(deserialize_with = "lean_meta")]
    pub metadata: LeanMeta,
}
resource!(ReleaseSecret, "Secret", "secrets", NamespaceResourceScope);

crate::lean::fingerprint::fingerprinted!(Deployment, StatefulSet, DaemonSet, Job);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(name: &str) -> serde_json::Value {
        json!({ "name": name, "namespace": "shop", "labels": { "app.kubernetes.io/instance": "web" } })
    }

    #[test]
    fn a_deployment_keeps_the_first_secret_key_ref_of_its_containers() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": meta("web"),
            "spec": { "template": { "spec": { "containers": [
                { "name": "a", "env": [{ "name": "PLAIN", "value": "x" },
                                       { "name": "FROM_CM", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "k" } } }] },
                { "name": "b", "env": [{ "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": "web-db", "key": "password" } } },
                                       { "name": "OTHER", "valueFrom": { "secretKeyRef": { "name": "later", "key": "k" } } }] }
            ] } } }
        }))
        .unwrap();
        assert_eq!(
            d.secret_ref,
            Some(SecretKeyRef {
                name: "web-db".into(),
                key: "password".into()
            })
        );
        let none: Deployment =
            serde_json::from_value(json!({ "metadata": meta("x"), "spec": {} })).unwrap();
        assert_eq!(none.secret_ref, None);
    }

    #[test]
    fn a_rollout_is_done_when_the_current_spec_runs_everywhere_and_is_ready() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": { "name": "web", "namespace": "shop", "generation": 3 },
            "spec": { "replicas": 2 },
            "status": { "observedGeneration": 3, "updatedReplicas": 2, "availableReplicas": 1, "readyReplicas": 2 }
        }))
        .unwrap();
        assert!(
            !d.rollout.is_done(d.metadata.generation),
            "one replica not available"
        );
        let s: StatefulSet = serde_json::from_value(json!({
            "metadata": { "name": "db", "namespace": "shop", "generation": 2 },
            "spec": {},
            "status": { "observedGeneration": 2, "updatedReplicas": 1, "readyReplicas": 1 }
        }))
        .unwrap();
        assert!(
            s.rollout.is_done(s.metadata.generation),
            "replicas default to 1"
        );
        let stale: StatefulSet = serde_json::from_value(json!({
            "metadata": { "name": "db", "namespace": "shop", "generation": 3 },
            "status": { "observedGeneration": 2, "updatedReplicas": 1, "readyReplicas": 1 }
        }))
        .unwrap();
        assert!(
            !stale.rollout.is_done(stale.metadata.generation),
            "the new spec is not seen yet"
        );
    }

    #[test]
    fn a_daemonset_and_a_job_are_done_when_their_status_says_so() {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": { "name": "agent", "namespace": "shop", "generation": 1 },
            "status": { "observedGeneration": 1, "desiredNumberScheduled": 3,
                        "updatedNumberScheduled": 3, "numberReady": 2 }
        }))
        .unwrap();
        assert!(!ds.rollout.is_done(ds.metadata.generation));
        let job: Job = serde_json::from_value(json!({
            "metadata": { "name": "migrate", "namespace": "shop" },
            "spec": { "completions": 2 }, "status": { "succeeded": 2 }
        }))
        .unwrap();
        assert!(job.is_done());
        let pending: Job =
            serde_json::from_value(json!({ "metadata": { "name": "m", "namespace": "shop" } }))
                .unwrap();
        assert!(!pending.is_done(), "one completion by default");
    }

    #[test]
    fn a_secret_is_cached_without_its_data_and_a_configmap_loses_it_on_request() {
        let s: ReleaseSecret = serde_json::from_value(json!({
            "metadata": meta("web-db"), "type": "Opaque", "data": { "password": "c2VjcmV0" }
        }))
        .unwrap();
        assert!(!format!("{s:?}").contains("c2VjcmV0"));
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": meta("web-env"), "data": { "LOG_LEVEL": "debug" }
        }))
        .unwrap();
        assert_eq!(cm.data.as_ref().unwrap()["LOG_LEVEL"], "debug");
        assert!(cm.without_data().data.is_none());
    }
}
