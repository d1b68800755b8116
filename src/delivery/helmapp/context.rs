//! What every part of the HelmApp controller reads from and writes
//! through: the client, the caches, the helm runner, the status writer and
//! the event recorder. Built once by `super::controller`.

use std::sync::{Arc, OnceLock};

use apis::helmapp::{HelmApp, HelmAppStatus};
use apis::helmappset::HelmAppSet;
use cache::Store;
use kube::{Api, Client, ResourceExt};
use record::EventRecorder;
use runtime::RateLimitingQueue;
use runtime::StatusWriter;

use crate::delivery::helmapp::cluster::Cluster;
use crate::delivery::helmapp::decide::observed::Observed;
use crate::delivery::settings::Settings;
use crate::delivery::source::fetch::Sources;
use crate::lean::digests::{ConfigMapDigests, SecretDigests};

/// See the module docs.
pub struct Context {
    /// The operator's own cluster's client: HelmApps, their status, the
    /// Secrets and ConfigMaps they name.
    pub client: Client,
    pub apps: Store<HelmApp>,
    /// HelmAppSets, for `dependsOn` of kind HelmAppSet.
    pub sets: Store<HelmAppSet>,
    /// Where releases go when no `kubeConfig` is named.
    pub own: Arc<Cluster>,
    /// The remote clusters HelmApps name (`spec.kubeConfig`).
    pub remotes: Arc<crate::delivery::helmapp::remote::RemoteClusters>,
    /// Digests of the Secrets and ConfigMaps `valuesFrom` may name.
    pub secrets: Store<SecretDigests>,
    pub configmaps: Store<ConfigMapDigests>,
    /// Chart fetching, shared with the other delivery controllers.
    pub sources: Arc<Sources>,
    /// The controller's queue: a background chart fetch re-queues its
    /// HelmApp when it ends.
    pub queue: Arc<RateLimitingQueue<String>>,
    pub status: StatusWriter<HelmApp, HelmAppStatus>,
    /// Set once the process shuts down: no status is held back then
    /// (`decide::ready::hold`); the drain writes what was.
    pub stopping: runtime::Stopping,
    pub recorder: EventRecorder,
    pub settings: Settings,
    /// The kinds `dependsOn` names beyond HelmApps: their informers.
    pub watched: Arc<crate::delivery::helmapp::watched_kinds::WatchedKinds>,
    /// When this process began reconciling — it leads from then on (a
    /// process that loses the lease exits): a helm that left a release
    /// pending before then ran in an operator that is gone, and its helm
    /// with it (killed with the pod, or by its shutdown or lease loss
    /// before another replica could lead).
    pub leading_since: OnceLock<chrono::DateTime<chrono::Utc>>,
    /// Per HelmApp key: the revision its last successful helm run made and
    /// that revision's content digest as helm printed it — kept until the
    /// status records it (the storage read or the status write after the
    /// run may fail: the API server went away), so that our own revision
    /// is never taken for someone else's.
    pub made: parking_lot::Mutex<std::collections::HashMap<String, (i64, String)>>,
    /// Per HelmApp key: the last revision this process's helm made (kept
    /// while the HelmApp exists): drift trusts the objects of a revision at
    /// first sight only when it is this one — they were just applied.
    pub produced: parking_lot::Mutex<std::collections::HashMap<String, i64>>,
    /// Per HelmApp key: the revision this process's last run deployed and
    /// the workloads it applied, at the generation read just after it.
    /// With `wait`, a workload is judged from the cache only once the cache
    /// holds that generation — by every reconcile of that revision, not
    /// only the run's (a storage event queues one at once, when the cache
    /// may still hold the last generation, rolled out).
    pub applied: parking_lot::Mutex<
        std::collections::HashMap<
            String,
            (
                i64,
                Vec<crate::delivery::helmapp::decide::observed::AppliedWorkload>,
            ),
        >,
    >,
    /// HelmApp keys whose helm run the API server's outage cut off, or
    /// whose storage could not be read after it: what that helm left (a
    /// revision superseded, one pending) is recorded as after any action
    /// of ours, by the first reconcile that can read the storage.
    pub interrupted: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Per HelmApp key: helm's runs for it refused by RBAC, in a row —
    /// kept while every reconcile ends refused, whether or not the status
    /// can say so (a HelmApp being deleted gets no status write: its
    /// refused uninstall backs off by this, and warns once per message).
    pub refused: parking_lot::Mutex<std::collections::HashMap<String, Refusal>>,
}

/// What this process remembers of a HelmApp's refused runs
/// ([`Context::refused`]).
#[derive(Debug, Clone)]
pub struct Refusal {
    /// When the first refusal of the row was.
    pub since: std::time::Instant,
    /// The last refusal's message (a Warning Event once per message).
    pub message: String,
    /// What the last refused run was decided from
    /// (`decide::refusal::inputs`) …
    pub inputs: String,
    /// … and not before when a run of the same inputs is tried again.
    pub again_at: std::time::Instant,
}

/// The key of what this process remembers of `app`'s helm runs (`made`,
/// `produced`, `interrupted`): its namespace/name and its UID — a HelmApp
/// deleted and created again under the same name is another one, and
/// inherits nothing.
pub fn run_key(app: &HelmApp) -> String {
    format!(
        "{}#{}",
        cache::object_key(app),
        app.metadata.uid.as_deref().unwrap_or_default()
    )
}

impl Context {
    /// Forgets what is remembered of the helm runs of every HelmApp that
    /// was `key` (namespace/name): it is gone.
    pub fn forget_runs(&self, key: &str) {
        let mine = |k: &String| k.split_once('#').is_some_and(|(name, _)| name == key);
        self.made.lock().retain(|k, _| !mine(k));
        self.produced.lock().retain(|k, _| !mine(k));
        self.applied.lock().retain(|k, _| !mine(k));
        self.interrupted.lock().retain(|k| !mine(k));
        self.refused.lock().retain(|k, _| !mine(k));
        // A status held back for it (`decide::ready::hold`) goes with it.
        self.status.forget_key(key);
    }

    /// The cluster `o` was observed in: its release's.
    pub fn on(&self, o: &Observed) -> Arc<Cluster> {
        // `Cluster` is the one kind of `ReleaseCluster`.
        o.cluster
            .clone()
            .and_then(|c| {
                (c as Arc<dyn std::any::Any + Send + Sync>)
                    .downcast::<Cluster>()
                    .ok()
            })
            .unwrap_or_else(|| self.own.clone())
    }

    /// The HelmApp API of `app`'s namespace.
    pub fn api_of(&self, app: &HelmApp) -> Api<HelmApp> {
        Api::namespaced(self.client.clone(), &app.namespace().unwrap_or_default())
    }
}
