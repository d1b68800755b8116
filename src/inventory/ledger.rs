//! What the inventory controller remembers between reconciles of a
//! Hosstedproject, beyond what its status says (the status it wrote last is
//! `runtime::StatusWriter`'s to remember): the payloads the API
//! rejected, and the `helm_info` last seen of each release (the compact
//! status keeps no chart or time, which a removal report carries). (App
//! UUIDs need no memory: they are derived, see the collector.)
//!
//! Typed keys throughout: a [`ReleaseRef`] names a release, a [`Target`] says
//! what a POST is about — nothing is `format!`ed into a string and parsed
//! back.

use std::collections::HashMap;

use apis::HelmInfo;
use parking_lot::Mutex;

/// A Helm release: its namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReleaseRef {
    pub namespace: String,
    pub name: String,
}

impl ReleaseRef {
    pub fn new(namespace: &str, name: &str) -> Self {
        ReleaseRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for ReleaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a request to the Hossted API is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// `POST /clusters/{uuid}/register`.
    Registration,
    /// `POST /apps` for this release.
    App(ReleaseRef),
}

/// The memory of one Hosstedproject.
#[derive(Default)]
struct Project {
    /// Fingerprints of payloads the API rejected (4xx), by target: not sent
    /// again until they change.
    rejected: HashMap<Target, u64>,
    /// The `helm_info` of each release as last seen in the caches, for its
    /// removal report once it is gone. Entries leave with the release.
    last_seen: HashMap<ReleaseRef, HelmInfo>,
}

/// See the module docs. One per controller, keyed by Hosstedproject name.
#[derive(Default)]
pub struct Ledger {
    projects: Mutex<HashMap<String, Project>>,
}

impl Ledger {
    /// Forgets a Hosstedproject that is gone.
    pub fn forget(&self, key: &str) {
        self.projects.lock().remove(key);
    }

    /// Whether exactly this payload (by fingerprint) was rejected before.
    pub fn was_rejected(&self, key: &str, target: &Target, fingerprint: u64) -> bool {
        self.projects
            .lock()
            .get(key)
            .and_then(|p| p.rejected.get(target))
            == Some(&fingerprint)
    }

    /// Records the API's verdict on a payload: rejected or not.
    pub fn verdict(&self, key: &str, target: Target, fingerprint: u64, rejected: bool) {
        let mut projects = self.projects.lock();
        let project = projects.entry(key.to_string()).or_default();
        if rejected {
            project.rejected.insert(target, fingerprint);
        } else {
            project.rejected.remove(&target);
        }
    }

    /// Forgets the rejections of releases `keep` says are gone.
    pub fn prune_rejected(&self, key: &str, keep: impl Fn(&ReleaseRef) -> bool) {
        if let Some(p) = self.projects.lock().get_mut(key) {
            p.rejected.retain(|t, _| match t {
                Target::App(r) => keep(r),
                Target::Registration => true,
            });
        }
    }
}

impl Ledger {
    /// Remembers `seen` as the newest `helm_info` of its release (copied
    /// only when it changed).
    pub fn saw(&self, key: &str, release: &ReleaseRef, seen: &HelmInfo) {
        let mut projects = self.projects.lock();
        let last_seen = &mut projects.entry(key.to_string()).or_default().last_seen;
        match last_seen.get_mut(release) {
            Some(old) if old == seen => {}
            Some(old) => *old = seen.clone(),
            None => {
                last_seen.insert(release.clone(), seen.clone());
            }
        }
    }

    /// The `helm_info` last seen of `release`, if this process saw it.
    pub fn last_seen(&self, key: &str, release: &ReleaseRef) -> Option<HelmInfo> {
        self.projects
            .lock()
            .get(key)
            .and_then(|p| p.last_seen.get(release))
            .cloned()
    }

    /// Forgets a release that is gone and whose removal was delivered (or
    /// that is no longer reported).
    pub fn forget_release(&self, key: &str, release: &ReleaseRef) {
        if let Some(p) = self.projects.lock().get_mut(key) {
            p.last_seen.remove(release);
            p.rejected.remove(&Target::App(release.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_holds_until_the_payload_changes_or_is_accepted() {
        let l = Ledger::default();
        let app = Target::App(ReleaseRef::new("a", "web"));
        l.verdict("p", app.clone(), 7, true);
        assert!(l.was_rejected("p", &app, 7));
        assert!(!l.was_rejected("p", &app, 8), "a changed payload is sent");
        assert!(!l.was_rejected("p", &Target::Registration, 7));
        assert!(!l.was_rejected("q", &app, 7), "per project");
        l.verdict("p", app.clone(), 7, false);
        assert!(!l.was_rejected("p", &app, 7));
    }

    #[test]
    fn rejections_of_gone_releases_are_pruned() {
        let l = Ledger::default();
        let (web, api) = (ReleaseRef::new("a", "web"), ReleaseRef::new("a", "api"));
        l.verdict("p", Target::App(web.clone()), 1, true);
        l.verdict("p", Target::App(api.clone()), 2, true);
        l.verdict("p", Target::Registration, 3, true);
        l.prune_rejected("p", |r| *r == web);
        assert!(l.was_rejected("p", &Target::App(web), 1));
        assert!(!l.was_rejected("p", &Target::App(api), 2));
        assert!(l.was_rejected("p", &Target::Registration, 3));
    }
}
