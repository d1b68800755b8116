//! What drift keeps over the process's life, shared by every reconcile.

use crate::delivery::metrics::HelmMetrics;

/// What drift keeps over the process's life: discovery, recent manifests,
/// the polling of unwatched kinds.
pub struct Shared {
    pub resources: super::resources::Resources,
    pub manifests: super::manifest::Manifests,
    pub(super) polls: super::poll::Polls,
    pub(super) metrics: HelmMetrics,
}

impl Shared {
    pub fn new(metrics: HelmMetrics) -> Self {
        Shared {
            resources: Default::default(),
            manifests: Default::default(),
            polls: Default::default(),
            metrics,
        }
    }

    /// Forgets what is kept for the HelmApp `key` (`namespace/name`): it
    /// is gone.
    pub fn forget(&self, key: &str) {
        self.polls.forget(key);
    }
}
