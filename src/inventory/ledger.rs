//! What the inventory controller remembers between reconciles of a
//! Hosstedproject, beyond what its status says: the status it wrote last
//! (the lister may lag behind its own write), the payloads the API rejected,
//! and the app UUIDs given to releases not delivered yet.
//!
//! Typed keys throughout: a [`ReleaseRef`] names a release, a [`Target`] says
//! what a POST is about — nothing is `format!`ed into a string and parsed
//! back.

use std::collections::HashMap;

use apis::{Hosstedproject, HosstedprojectStatus};
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
    /// The status this process wrote last, with the resourceVersion the
    /// write returned.
    written: Option<(u64, HosstedprojectStatus)>,
    /// Fingerprints of payloads the API rejected (4xx), by target: not sent
    /// again until they change.
    rejected: HashMap<Target, u64>,
    /// UUIDs (without `A-`) given to releases not delivered yet: a retry
    /// re-sends the same one, so the API never sees two for one release.
    pending_uuids: HashMap<ReleaseRef, String>,
}

/// See the module docs. One per controller, keyed by Hosstedproject name.
#[derive(Default)]
pub struct Ledger {
    projects: Mutex<HashMap<String, Project>>,
}

impl Ledger {
    /// The newest status known for `hp`: the lister's, or the one written
    /// here if the lister has not caught up with it yet.
    pub fn newest_status(&self, key: &str, hp: &Hosstedproject) -> HosstedprojectStatus {
        let listed = resource_version(hp);
        match self
            .projects
            .lock()
            .get(key)
            .and_then(|p| p.written.as_ref())
        {
            Some((rv, status)) if *rv > listed => status.clone(),
            _ => hp.status.clone().unwrap_or_default(),
        }
    }

    /// Records a status write that returned `written`.
    pub fn wrote(&self, key: &str, written: &Hosstedproject, status: &HosstedprojectStatus) {
        self.projects
            .lock()
            .entry(key.to_string())
            .or_default()
            .written = Some((resource_version(written), status.clone()));
    }

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

    /// The pending UUID of `release`, made on first request.
    pub fn pending_uuid(&self, key: &str, release: ReleaseRef) -> String {
        self.projects
            .lock()
            .entry(key.to_string())
            .or_default()
            .pending_uuids
            .entry(release)
            .or_insert_with(|| uuid::Uuid::new_v4().to_string())
            .clone()
    }

    /// Keeps the pending UUIDs of the releases `still_pending` says are.
    pub fn prune_pending(&self, key: &str, still_pending: impl Fn(&ReleaseRef) -> bool) {
        if let Some(p) = self.projects.lock().get_mut(key) {
            p.pending_uuids.retain(|r, _| still_pending(r));
        }
    }
}

fn resource_version(hp: &Hosstedproject) -> u64 {
    hp.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(rv: &str, apps: i64) -> Hosstedproject {
        let mut hp = Hosstedproject::new("p", Default::default());
        hp.metadata.resource_version = Some(rv.into());
        hp.status = Some(HosstedprojectStatus {
            app_count: apps,
            ..Default::default()
        });
        hp
    }

    #[test]
    fn the_newest_status_wins_over_a_lagging_lister() {
        let l = Ledger::default();
        let written = HosstedprojectStatus {
            app_count: 2,
            ..Default::default()
        };
        l.wrote("p", &hp("10", 0), &written);
        assert_eq!(
            l.newest_status("p", &hp("9", 1)).app_count,
            2,
            "lister behind"
        );
        assert_eq!(
            l.newest_status("p", &hp("11", 5)).app_count,
            5,
            "lister ahead"
        );
        l.forget("p");
        assert_eq!(l.newest_status("p", &hp("9", 1)).app_count, 1);
    }

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
    fn pending_uuids_are_stable_until_pruned() {
        let l = Ledger::default();
        let web = ReleaseRef::new("a", "web");
        let first = l.pending_uuid("p", web.clone());
        assert_eq!(l.pending_uuid("p", web.clone()), first);
        assert_ne!(l.pending_uuid("q", web.clone()), first, "per project");
        l.prune_pending("p", |_| false);
        assert_ne!(l.pending_uuid("p", web), first);
    }
}
