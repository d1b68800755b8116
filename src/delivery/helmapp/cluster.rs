//! A cluster releases go to: the operator's own, or a remote one a
//! HelmApp's `kubeConfig` names (docs/remote-clusters.md). Everything that
//! reads or changes a release — Helm's storage, its objects, drift,
//! readiness, helm itself — goes through the [`Cluster`] of its HelmApp;
//! the HelmApp itself, its status, Events and the Secrets and ConfigMaps
//! it names stay in the operator's cluster.

use std::sync::Arc;

use cache::Store;
use kube::Client;

use crate::delivery::helmapp::drift_cache::DriftCache;
use crate::delivery::helmapp::helm_runs::HelmRuns;
use crate::delivery::helmapp::reachability::Reachability;
use crate::lean::digests::{ConfigMapDigests, SecretDigests};
use crate::lean::drift_kinds;
use crate::lean::kinds::{Ingress, Service};
use crate::lean::storage::HelmRelease;
use crate::lean::workloads::{DaemonSet, Deployment, Job, ReleaseSecret, StatefulSet};

/// The caches of a release's objects, indexed by release
/// ([`crate::lean::members::MEMBER_INDEX`]) and keyed `namespace/name`.
pub struct Members {
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub daemonsets: Store<DaemonSet>,
    pub jobs: Store<Job>,
    pub services: Store<Service>,
    pub ingresses: Store<Ingress>,
    pub secrets: Store<ReleaseSecret>,
    /// Kinds watched for drift alone ([`crate::lean::drift_kinds`]).
    pub drift_only: DriftOnly,
}

/// The stores of [`crate::lean::drift_kinds`].
pub struct DriftOnly {
    pub service_accounts: Store<drift_kinds::ServiceAccount>,
    pub autoscalers: Store<drift_kinds::HorizontalPodAutoscaler>,
    pub disruption_budgets: Store<drift_kinds::PodDisruptionBudget>,
    pub roles: Store<drift_kinds::Role>,
    pub role_bindings: Store<drift_kinds::RoleBinding>,
    pub network_policies: Store<drift_kinds::NetworkPolicy>,
}

/// See the module docs.
pub struct Cluster {
    /// `None`: the operator's own cluster; else the remote cluster's id
    /// (the start of its kubeconfig's digest).
    pub remote: Option<String>,
    pub client: Client,
    /// Helm's release storage in this cluster.
    pub releases: Store<HelmRelease>,
    /// The release objects of this cluster.
    pub members: Members,
    /// Digests of this cluster's Secrets and ConfigMaps (Helm's storage
    /// excepted): a release's own among them, for drift.
    pub secrets: Store<SecretDigests>,
    pub configmaps: Store<ConfigMapDigests>,
    /// Discovery, recent manifests and polling, for drift.
    pub drift: DriftCache,
    /// Whether this cluster's API server answers: no helm starts on it
    /// while it does not.
    pub reachability: Arc<Reachability>,
    /// helm's runs on this cluster.
    pub helm: Arc<dyn HelmRuns>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl crate::delivery::helmapp::decide::observed::ReleaseCluster for Cluster {}
