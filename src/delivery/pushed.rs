//! What the webhook receiver (`crate::delivery::webhook`) may ask of the
//! HelmApp controller: look again now. Its next reconcile is the normal
//! path — hash, approval and tenancy all apply.

use std::sync::Arc;

use apis::helmapp::HelmApp;
use cache::Store;
use runtime::RateLimitingQueue;

use crate::delivery::source::fetch::Sources;

/// See the module docs.
#[derive(Clone)]
pub struct PushTrigger {
    pub(super) queue: Arc<RateLimitingQueue<String>>,
    pub(super) apps: Store<HelmApp>,
    pub(super) sources: Arc<Sources>,
}

impl PushTrigger {
    /// A chart was published at `source` (a repository URL or an `oci://`
    /// reference): what was resolved from there is dropped, and every
    /// HelmApp whose chart comes from there — and is `name`, when given —
    /// is queued now, instead of at its next `interval` — only those of
    /// namespace `only`, when given (a request signed with that
    /// namespace's key). Returns their keys.
    pub fn chart_pushed(&self, source: &str, name: &str, only: Option<&str>) -> Vec<String> {
        self.sources.forget_source(source);
        let source = source.trim_end_matches('/');
        let keys: Vec<String> = self
            .apps
            .list()
            .into_iter()
            .filter(|a| only.is_none() || a.metadata.namespace.as_deref() == only)
            .filter(|a| {
                let c = &a.spec.chart;
                let from = [c.repo.as_str(), c.oci.as_str()]
                    .iter()
                    .any(|s| !s.is_empty() && s.trim_end_matches('/') == source);
                from && (name.is_empty() || c.name == name || c.oci.ends_with(&format!("/{name}")))
            })
            .map(|a| cache::object_key(a.as_ref()))
            .collect();
        for key in &keys {
            self.queue.add(key.clone());
        }
        keys
    }

    /// Whether HelmApp `namespace/name` exists (in the cache).
    pub fn exists(&self, namespace: &str, name: &str) -> bool {
        self.apps.get(&format!("{namespace}/{name}")).is_some()
    }
}
