//! The HelmApp controller's event handlers. Each only maps an object to
//! the keys of the HelmApps it concerns and enqueues them; what it saw is
//! re-derived by `super::observe`, so nothing is kept here.

use std::sync::Arc;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use cache::{Event, Store};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use runtime::RateLimitingQueue;

use crate::delivery::names::{
    APPROVE, DEPENDS_ON_INDEX, FORCE_AT, RECONCILE_AT, TARGET_INDEX, VALUES_FROM_INDEX,
};
use crate::lean::fingerprint::Fingerprinted;
use crate::lean::objects::{INSTANCE_LABEL, Labelled, LeanMeta, label};
use crate::lean::storage::HelmRelease;

/// The queue and the HelmApp cache every handler maps through.
#[derive(Clone)]
pub struct Handlers {
    pub queue: Arc<RateLimitingQueue<String>>,
    pub apps: Store<HelmApp>,
    /// A remote cluster's handlers: the HelmApps that name it, by key, with
    /// their `Target::via` — a release object of that cluster concerns only
    /// them. `None`: the operator's own cluster.
    pub vias: Option<Vias>,
}

/// A remote cluster's users: HelmApp key → `Target::via`.
pub type Vias = Arc<parking_lot::Mutex<std::collections::HashMap<String, String>>>;

impl Handlers {
    /// Enqueues every HelmApp that `index` files under `value`, or only
    /// those `only` accepts.
    fn through(&self, index: &str, value: &str, only: impl Fn(&HelmApp) -> bool) {
        for app in self.apps.by_index(index, value) {
            log::debug!("{index} {value}: {}", cache::object_key(app.as_ref()));
            if only(&app) {
                self.queue.add(cache::object_key(app.as_ref()));
            }
        }
    }

    /// A HelmApp: new, deleted, its spec changed (generation), its deletion
    /// begun, or `hossted.com/reconcile-at`, `-force-at` or `-approve`
    /// changed — itself. Labels, other annotations and our own status
    /// writes are not reasons. When it appears, goes, or its `Ready`
    /// changes: its dependents.
    pub fn on_helmapp(&self, e: &Event<HelmApp>) {
        let asked = |a: &HelmApp| {
            let at = |k| a.annotations().get(k).cloned();
            (at(RECONCILE_AT), at(FORCE_AT), at(APPROVE))
        };
        let (app, itself, dependents) = match e {
            Event::Add(a) | Event::Delete(a) => (a, true, true),
            Event::Update { old, new } => (
                new,
                old.metadata.generation != new.metadata.generation
                    || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                    || asked(old) != asked(new),
                ready(old.status.as_ref().map(|s| &s.conditions[..]))
                    != ready(new.status.as_ref().map(|s| &s.conditions[..])),
            ),
        };
        if itself {
            self.queue.add(cache::object_key(app.as_ref()));
        }
        if dependents {
            let key = format!("HelmApp/{}", cache::object_key(app.as_ref()));
            self.through(DEPENDS_ON_INDEX, &key, |_| true);
        }
        if let Event::Delete(gone) = e {
            // A release it owned may now be another's to take (one that
            // waited as `ReleaseOwnedByOther`, or a HelmApp moved to the
            // operator's namespace): the other HelmApps of that release
            // look again.
            let release = crate::delivery::helmapp::decide::target::Target::of(gone).index_key();
            self.through(TARGET_INDEX, &release, |a| a.uid() != gone.uid());
        }
    }

    /// A HelmAppSet that HelmApps depend on: appeared, went, or its `Ready`
    /// changed — exactly its dependents.
    pub fn on_dependency(&self, e: &Event<HelmAppSet>) {
        let set = match e {
            Event::Add(s) | Event::Delete(s) => s,
            Event::Update { old, new } => {
                fn conditions(s: &HelmAppSet) -> Option<&[Condition]> {
                    s.status.as_ref().map(|s| &s.conditions[..])
                }
                if ready(conditions(old)) == ready(conditions(new)) {
                    return;
                }
                new
            }
        };
        let key = format!("HelmAppSet/{}", cache::object_key(set.as_ref()));
        self.through(DEPENDS_ON_INDEX, &key, |_| true);
    }

    /// A Secret or ConfigMap (`kind`) changed: the HelmApps whose
    /// `valuesFrom` names it (they run helm only if the named key's digest
    /// moved).
    pub fn on_values_source(&self, kind: &str, meta: &ObjectMeta) {
        let key = format!(
            "{kind}/{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        );
        self.through(VALUES_FROM_INDEX, &key, |_| true);
    }

    /// Enqueues the HelmApps whose release in this handler's cluster is
    /// `release` (`namespace/name`), or only those `only` accepts.
    fn through_target(&self, release: &str, only: impl Fn(&HelmApp) -> bool) {
        let Some(vias) = &self.vias else {
            return self.through(TARGET_INDEX, release, only);
        };
        let distinct: std::collections::BTreeSet<String> = vias.lock().values().cloned().collect();
        for via in distinct {
            self.through(TARGET_INDEX, &format!("{via}{release}"), &only);
        }
    }

    /// An object of a release was deleted, or a workload's rollout moved
    /// (`rollout_only`: then only the HelmApps that `wait`). The release
    /// is the one helm's annotations name (helm puts them on every object
    /// it applies, in any namespace), else the object's instance label in
    /// its own namespace.
    pub fn on_release_object(&self, meta: &LeanMeta, rollout_only: bool) {
        log::debug!(
            "release object {:?}/{:?} changed (rollout only: {rollout_only})",
            meta.namespace,
            meta.name
        );
        let key = match meta.helm_release() {
            Some(release) => release.to_string(),
            None => match label(meta, INSTANCE_LABEL) {
                "" => return,
                instance => format!(
                    "{}/{instance}",
                    meta.namespace.as_deref().unwrap_or_default()
                ),
            },
        };
        self.through_target(&key, |a| !rollout_only || a.spec.wait);
    }
}

impl Handlers {
    /// A Secret or ConfigMap of a release (by its instance label) whose
    /// sections changed or that was deleted: drift.
    pub fn on_member_data<K: cache::Object + Fingerprinted + Labelled>(&self, e: &Event<K>) {
        match e {
            Event::Update { old, new } if old.fingerprint() != new.fingerprint() => {
                self.on_release_object(new.lean_meta(), false)
            }
            Event::Delete(o) => self.on_release_object(o.lean_meta(), false),
            _ => {}
        }
    }

    /// A revision in Helm's storage that a HelmApp owns appeared or its
    /// payload changed (the digest moved): the HelmApps of that release —
    /// what changed it is decided against the digest they recorded.
    pub fn on_storage(&self, e: &Event<HelmRelease>) {
        let entry = match e {
            Event::Add(r) => r,
            Event::Update { old, new } if old.digest != new.digest => new,
            _ => return,
        };
        if entry.digest.is_none() {
            return;
        }
        let key = format!(
            "{}/{}",
            entry.metadata.namespace.as_deref().unwrap_or_default(),
            entry.release_name()
        );
        self.through_target(&key, |_| true);
    }
}

/// The status of a `Ready` condition.
fn ready(conditions: Option<&[Condition]>) -> Option<&str> {
    crate::condition::status(conditions?, "Ready")
}
