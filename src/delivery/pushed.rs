//! What the webhook receiver (`crate::delivery::webhook`) may ask of the
//! HelmApp controller: look again now. Its next reconcile is the normal
//! path — hash, approval and tenancy all apply.

use std::sync::Arc;

use apis::helmapp::HelmApp;
use cache::Store;
use runtime::RateLimitingQueue;

use crate::delivery::source::{self, fetch::Sources};

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
        let trimmed = source.trim_end_matches('/');
        let uses = |a: &HelmApp| {
            let c = &a.spec.chart;
            [c.repo.as_str(), c.oci.as_str()]
                .iter()
                .any(|s| !s.is_empty() && s.trim_end_matches('/') == trimmed)
        };
        self.forget_if_theirs(source, only);
        let keys: Vec<String> = self
            .apps
            .list()
            .into_iter()
            .filter(|a| only.is_none() || a.metadata.namespace.as_deref() == only)
            .filter(|a| {
                let c = &a.spec.chart;
                uses(a)
                    && (name.is_empty() || c.name == name || c.oci.ends_with(&format!("/{name}")))
            })
            .map(|a| cache::object_key(a.as_ref()))
            .collect();
        for key in &keys {
            self.queue.add(key.clone());
        }
        keys
    }

    /// `reference` was pushed to Git repository `url` (empty: some ref):
    /// its checkouts are dropped, and every HelmApp whose chart or values
    /// files come from there at a ref that push may move is queued now —
    /// only those of namespace `only`, when given. Returns their keys.
    pub fn git_pushed(&self, url: &str, reference: &str, only: Option<&str>) -> Vec<String> {
        self.forget_if_theirs(url, only);
        let keys: Vec<String> = self
            .apps
            .list()
            .into_iter()
            .filter(|a| only.is_none() || a.metadata.namespace.as_deref() == only)
            .filter(|a| {
                let s = &a.spec;
                let values = s.values_source.as_ref().and_then(|v| v.git.as_ref());
                [s.chart.git.as_ref(), values]
                    .into_iter()
                    .flatten()
                    .any(|g| {
                        source::git::from_source(&source::git::key(g, ""), url)
                            && moves(&g.reference, reference)
                    })
            })
            .map(|a| cache::object_key(a.as_ref()))
            .collect();
        for key in &keys {
            self.queue.add(key.clone());
        }
        keys
    }

    /// Drops what was fetched from `source` (resolutions, checkouts, a
    /// failure's back-off) — for a namespace's key (`only`), only when no
    /// HelmApp of another namespace `uses` it: what is shared with other
    /// tenants is theirs too, and one tenant's key may not make every
    /// tenant fetch again. The asking namespace's apps are queued either
    /// way; on a shared source they see the push at their `interval`.
    fn forget_if_theirs(&self, source: &str, only: Option<&str>) {
        // Every kind of source counts: what is dropped is dropped for all
        // kinds (a repository's resolutions and a Git URL's checkouts).
        let shared = only.is_some_and(|ns| {
            self.apps
                .list()
                .iter()
                .any(|a| a.metadata.namespace.as_deref() != Some(ns) && names_source(a, source))
        });
        if shared {
            log::info!(
                "webhook: {source} is used outside namespace {}: what was fetched from it is kept (a namespace's key refreshes only what its namespace alone uses)",
                only.unwrap_or_default()
            );
        } else {
            self.sources.forget_source(source);
        }
    }

    /// Whether HelmApp `namespace/name` exists (in the cache).
    pub fn exists(&self, namespace: &str, name: &str) -> bool {
        self.apps.get(&format!("{namespace}/{name}")).is_some()
    }
}

/// Whether `app` fetches anything from `source` (a repository, a registry
/// reference or a Git URL; compared without a trailing `/`).
fn names_source(app: &HelmApp, source: &str) -> bool {
    let source = source.trim_end_matches('/');
    let s = &app.spec;
    let chart = [s.chart.repo.as_str(), s.chart.oci.as_str()]
        .iter()
        .any(|c| !c.is_empty() && c.trim_end_matches('/') == source);
    let values = s.values_source.as_ref().and_then(|v| v.git.as_ref());
    chart
        || [s.chart.git.as_ref(), values]
            .into_iter()
            .flatten()
            .any(|g| source::git::from_source(&source::git::key(g, ""), source))
}

/// Whether a push of `pushed` may move what `wanted` names: its branch
/// (`main` or `refs/heads/main`), its tag, any tag for a semver range, any
/// ref when the push does not say; never a pinned commit.
fn moves(wanted: &apis::helmapp::GitRef, pushed: &str) -> bool {
    if !wanted.commit.is_empty() {
        return false;
    }
    if pushed.is_empty() {
        return true;
    }
    let tag = pushed.strip_prefix("refs/tags/");
    let branch = pushed.strip_prefix("refs/heads/");
    if !wanted.semver.is_empty() {
        return tag.is_some() || branch.is_none();
    }
    if !wanted.tag.is_empty() {
        return tag.unwrap_or(pushed) == wanted.tag;
    }
    let mine = if wanted.branch.is_empty() {
        "main"
    } else {
        wanted.branch.as_str()
    };
    branch.unwrap_or(pushed) == mine
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::GitRef;

    #[test]
    fn a_push_moves_the_branch_tag_or_range_it_names_and_never_a_commit() {
        let r = |branch: &str, tag: &str, semver: &str, commit: &str| GitRef {
            branch: branch.into(),
            tag: tag.into(),
            semver: semver.into(),
            commit: commit.into(),
        };
        assert!(moves(&r("", "", "", ""), "refs/heads/main"));
        assert!(moves(&r("dev", "", "", ""), "dev"));
        assert!(!moves(&r("dev", "", "", ""), "refs/heads/main"));
        assert!(moves(&r("", "v1", "", ""), "refs/tags/v1"));
        assert!(!moves(&r("", "v1", "", ""), "refs/tags/v2"));
        assert!(moves(&r("", "", ">=1", ""), "refs/tags/v2"));
        assert!(!moves(&r("", "", ">=1", ""), "refs/heads/main"));
        assert!(!moves(&r("", "", "", &"a".repeat(40)), ""));
        assert!(moves(&r("", "", "", ""), ""));
    }
}
