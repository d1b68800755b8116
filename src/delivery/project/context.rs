//! What the project-delivery controller is made of: its caches, client and
//! recorder, the names it writes, and its error.

use std::sync::Arc;

use apis::helmapp::HelmApp;
use apis::{Hosstedproject, HosstedprojectStatus};
use cache::Store;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use record::EventRecorder;
use runtime::StatusWriter;

use crate::delivery::source::fetch::Sources;
use crate::lean::storage::HelmRelease;

pub use crate::delivery::names::PROJECT_LABEL;
/// On a HelmApp made for a Hosstedproject: `helm`, `monitoring` or `ingress`.
pub const SOURCE_LABEL: &str = "hossted.com/delivered-for";
/// The ConfigMap (operator namespace) listing each toggle's apps.
pub const PLATFORM_CONFIGMAP: &str = "hossted-platform-charts";
/// Index of HelmApps by [`PROJECT_LABEL`].
pub(super) const PROJECT_INDEX: &str = "project";
/// The toggles that deliver, with their ConfigMap key.
pub(super) const TOGGLES: [&str; 2] = ["monitoring", "ingress"];

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
    pub(super) client: Client,
    pub(super) projects: Store<Hosstedproject>,
    pub(super) apps: Store<HelmApp>,
    pub(super) platform: Store<ConfigMap>,
    pub(super) releases: Store<HelmRelease>,
    pub(super) recorder: EventRecorder,
    /// Chart fetching, shared with the HelmApp controller.
    pub(super) sources: Arc<Sources>,
    /// Where its HelmApps live.
    pub(super) operator_namespace: String,
    /// Removes a `Delivering=False` left from a run without delivery.
    pub(super) delivering: StatusWriter<Hosstedproject, HosstedprojectStatus>,
}
