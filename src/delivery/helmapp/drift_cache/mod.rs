//! What drift keeps over the process's life, shared by every reconcile:
//! discovery, recent manifests, the polling of unwatched kinds. A leaf of
//! the controller — `context.rs` holds it and `drift/` uses it, and it
//! imports neither.

pub mod manifest;
pub mod poll;
pub mod resources;

use crate::delivery::metrics::HelmMetrics;

/// What drift keeps over the process's life: discovery, recent manifests,
/// the polling of unwatched kinds.
pub struct DriftCache {
    pub resources: resources::Resources,
    pub manifests: manifest::Manifests,
    pub polls: poll::Polls,
    pub metrics: HelmMetrics,
    /// Objects (`collection/name`) whose server-side apply the server
    /// found invalid once: put back by merge patch from then on, without
    /// asking again (at most [`MERGE_FIRST`] kept).
    pub merge_first: parking_lot::Mutex<std::collections::HashSet<String>>,
}

/// How many objects [`Shared::merge_first`] remembers.
pub const MERGE_FIRST: usize = 10_000;

impl DriftCache {
    pub fn new(metrics: HelmMetrics) -> Self {
        DriftCache {
            resources: Default::default(),
            manifests: Default::default(),
            polls: Default::default(),
            metrics,
            merge_first: Default::default(),
        }
    }

    /// Forgets what is kept for the HelmApp `key` (`namespace/name`): it
    /// is gone.
    pub fn forget(&self, key: &str) {
        self.polls.forget(key);
    }
}
