//! The remote clusters HelmApps name in `spec.kubeConfig`
//! (docs/remote-clusters.md): one client, one set of informers (Helm's
//! storage, the release objects and the Secret and ConfigMap digests, as
//! for the operator's own cluster) and one reachability per cluster, keyed
//! by its kubeconfig's digest. A cluster starts when a HelmApp first names
//! it and stops when none does; at most `--max-remote-clusters` run at
//! once.
//!
//! Each HelmApp's cluster is resolved anew by each of its reconciles
//! ([`RemoteClusters::resolve`]): the Secret read, its kubeconfig parsed
//! and refused or matched to a running cluster. The queue never runs two
//! reconciles of one key at once, so the cluster a reconcile resolved
//! keeps that HelmApp as a user — and runs — until that reconcile ends.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::HelmApp;
use cache::{InformerOptions, SharedInformerFactory, Store};
use k8s_openapi::api::core::v1::Secret;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use runtime::RateLimitingQueue;

use crate::delivery::helm::Helm;
use crate::delivery::helm::runner::RemoteRun;
use crate::delivery::helmapp::cluster::Cluster;
use crate::delivery::helmapp::decide::observed::Waiting;
use crate::delivery::helmapp::drift_cache::DriftCache;
use crate::delivery::helmapp::helm_runs::RemoteHelm;
use crate::delivery::helmapp::reachability::Reachability;
pub use crate::delivery::helmapp::remote_client::{ANSWER_DEADLINE, MAX_ANSWER_BYTES};
use crate::delivery::metrics::HelmMetrics;
use crate::delivery::names::RELEASE_INDEX;
use crate::delivery::reason::Reason;
use crate::delivery::remote::kubeconfig::{self, RemoteAccess};
use crate::delivery::source::address::AddressPolicy;
use crate::lean::digests::{ConfigMapDigests, SecretDigests};
use crate::lean::storage::{HelmRelease, helm_storage_options};

/// How long a new cluster's caches may take to fill before its HelmApps
/// are told it does not answer (and look again later).
const FIRST_SYNC: Duration = Duration::from_secs(10);

/// What a HelmApp's `kubeConfig` resolves to.
pub enum Resolved {
    /// No `kubeConfig`: the operator's own cluster.
    Own,
    /// The remote cluster, running, its caches filled, answering.
    Remote(Arc<Cluster>),
    /// Why the release's cluster cannot be used now.
    Unavailable(Waiting),
}

/// The parts every new cluster shares with the operator's own.
pub struct Shared {
    pub helm: Arc<Helm>,
    pub metrics: HelmMetrics,
    /// The HelmApp controller's queue: a remote cluster's events enqueue
    /// into it, and its reachability re-queues parked keys into it.
    pub queue: Arc<RateLimitingQueue<String>>,
    pub apps: Store<HelmApp>,
    /// The networks no remote API server may be in
    /// (`--deny-chart-source-cidrs`).
    pub policy: AddressPolicy,
    /// How host names are resolved for it (each connection's answer and
    /// each helm run's is checked against `policy`).
    pub lookup: crate::delivery::remote::connect::Lookup,
    /// The proxy helm's connections to every remote cluster go through.
    pub egress: Arc<crate::delivery::remote::egress::Egress>,
    /// `--max-remote-clusters`.
    pub max: usize,
    /// `--max-remote-clusters-per-namespace` (privileged namespaces are
    /// bounded by `max` alone).
    pub max_per_namespace: usize,
    /// `hossted_remote_clusters`: how many run now.
    pub running: prometheus_client::metrics::gauge::Gauge,
}

/// See the module docs.
pub struct RemoteClusters {
    shared: Shared,
    /// Running clusters by id. Invariant: each has at least one user in
    /// `users`; the last user's leaving stops and removes it, under this
    /// lock.
    clusters: Mutex<HashMap<String, Running>>,
    /// Per HelmApp key (`namespace/name`): the id of the cluster its last
    /// reconcile resolved.
    users: Mutex<HashMap<String, String>>,
}

/// A running remote cluster.
struct Running {
    cluster: Arc<Cluster>,
    factory: Arc<SharedInformerFactory>,
    /// Its users' keys and their `Target::via` (what the target index
    /// files their release under): shared with its event handlers.
    via: super::wiring::Vias,
    /// The namespace of the HelmApp that started it, when that namespace
    /// is bounded (`--max-remote-clusters-per-namespace`): it counts there
    /// while it runs.
    started_from: Option<String>,
}

impl RemoteClusters {
    pub fn new(shared: Shared) -> Self {
        RemoteClusters {
            shared,
            clusters: Mutex::default(),
            users: Mutex::default(),
        }
    }

    /// How many remote clusters run now.
    pub fn running(&self) -> usize {
        self.clusters.lock().len()
    }

    /// The cluster `app` names, started if it is new. `client`: the
    /// operator's own; `as_user`: whom the Secret is read as (the
    /// HelmApp's identity in the operator's cluster). `Err`: the operator's
    /// own API server did not answer the Secret's read.
    pub async fn resolve(
        &self,
        client: &Client,
        app: &HelmApp,
        as_user: Option<&str>,
        privileged: bool,
    ) -> Result<Resolved, kube::Error> {
        let key = cache::object_key(app);
        let Some(reference) = app.spec.kube_config.as_ref() else {
            self.leave(&key);
            return Ok(Resolved::Own);
        };
        let access = match read_kubeconfig(client, app, reference, as_user).await? {
            Ok(access) => access,
            Err(message) => {
                // A HelmApp being deleted uninstalls from the cluster it
                // last resolved, when this process still runs it: the
                // Secret often goes first (one `kubectl delete -f`).
                if app.metadata.deletion_timestamp.is_some()
                    && let Some(cluster) = self.last_of(&key)
                {
                    return Ok(self.answering(&key, cluster).await);
                }
                self.leave(&key);
                return Ok(Resolved::Unavailable(Waiting::until_changed(
                    Reason::InvalidKubeConfig,
                    message,
                )));
            }
        };
        let id = access.digest()[..16].to_string();
        let via = super::decide::target::Target::of(app).via;
        let cluster = match self.join(&key, &id, &via) {
            Some(cluster) => cluster,
            None => match self
                .start(
                    &key,
                    &id,
                    &via,
                    &access,
                    bounded_in(app, privileged).as_deref(),
                )
                .await
            {
                Ok(cluster) => cluster,
                Err(problem) => return Ok(Resolved::Unavailable(problem)),
            },
        };
        if let Some(problem) = self.unsynced(&id).await {
            return Ok(Resolved::Unavailable(problem));
        }
        Ok(self.answering(&key, cluster).await)
    }

    /// The HelmApp `key` is gone: it uses no cluster now.
    pub fn forget(&self, key: &str) {
        self.leave(key);
    }

    /// The cluster the HelmApp `key` last resolved, if it still runs.
    pub fn last_of(&self, key: &str) -> Option<Arc<Cluster>> {
        let id = self.users.lock().get(key).cloned()?;
        self.clusters.lock().get(&id).map(|r| r.cluster.clone())
    }

    /// `cluster`, unless its API server does not answer now: then `key`
    /// waits for it (re-queued when it answers), spending no retry.
    async fn answering(&self, key: &str, cluster: Arc<Cluster>) -> Resolved {
        if cluster.reachability.answers().await {
            return Resolved::Remote(cluster);
        }
        cluster.reachability.park(key);
        Resolved::Unavailable(Waiting::until_changed(
            Reason::ClusterUnreachable,
            "the remote cluster's API server does not answer: no helm runs until it does".into(),
        ))
    }

    /// `key` uses the running cluster `id`, if one runs.
    fn join(&self, key: &str, id: &str, via: &str) -> Option<Arc<Cluster>> {
        let clusters = self.clusters.lock();
        let running = clusters.get(id)?;
        running.via.lock().insert(key.to_string(), via.to_string());
        let cluster = running.cluster.clone();
        drop(clusters);
        self.now_uses(key, id);
        Some(cluster)
    }

    /// Starts the cluster `id` for `key`: its address checked, its client
    /// and informers made and started.
    async fn start(
        &self,
        key: &str,
        id: &str,
        via: &str,
        access: &RemoteAccess,
        bounded_in: Option<&str>,
    ) -> Result<Arc<Cluster>, Waiting> {
        if let Some(full) = self.full(bounded_in) {
            self.leave(key);
            return Err(full);
        }
        let invalid = |message: String| Waiting::until_changed(Reason::InvalidKubeConfig, message);
        let (policy, lookup) = (&self.shared.policy, &self.shared.lookup);
        kubeconfig::check_address(access, policy, lookup)
            .await
            .map_err(|e| invalid(format!("kubeConfig: {e}")))?;
        let client = super::remote_client::client_of(access, policy, lookup)
            .await
            .map_err(invalid)?;
        let mut running = self.running_cluster(id, client, access);
        running.started_from = bounded_in.map(str::to_string);
        let mut clusters = self.clusters.lock();
        // Another reconcile may have started it meanwhile: one runs.
        if let Some(other) = clusters.get(id) {
            running.factory.shutdown();
            other.via.lock().insert(key.to_string(), via.to_string());
            let cluster = other.cluster.clone();
            drop(clusters);
            self.now_uses(key, id);
            return Ok(cluster);
        }
        // Checked again under the lock: others may have started meanwhile.
        if let Some(full) = Self::full_of(&clusters, &self.shared, bounded_in) {
            drop(clusters);
            running.factory.shutdown();
            self.leave(key);
            return Err(full);
        }
        if let Err(e) = running.factory.start() {
            return Err(invalid(format!(
                "the remote cluster's informers did not start: {e}"
            )));
        }
        log::info!("remote cluster {id}: started");
        running.via.lock().insert(key.to_string(), via.to_string());
        let cluster = running.cluster.clone();
        clusters.insert(id.to_string(), running);
        self.shared.running.set(clusters.len() as i64);
        drop(clusters);
        self.now_uses(key, id);
        Ok(cluster)
    }

    /// Why no other cluster may start now for a HelmApp of namespace
    /// `bounded_in` (`None`: a privileged namespace, bounded by the total
    /// alone), if none may.
    fn full(&self, bounded_in: Option<&str>) -> Option<Waiting> {
        Self::full_of(&self.clusters.lock(), &self.shared, bounded_in)
    }

    fn full_of(
        clusters: &HashMap<String, Running>,
        shared: &Shared,
        bounded_in: Option<&str>,
    ) -> Option<Waiting> {
        if clusters.len() >= shared.max {
            return Some(Waiting::polled(
                Reason::ClusterLimitReached,
                format!(
                    "{} remote clusters run already (--max-remote-clusters): this one starts when another is no longer named",
                    shared.max
                ),
            ));
        }
        let ns = bounded_in?;
        let own = clusters
            .values()
            .filter(|r| r.started_from.as_deref() == Some(ns))
            .count();
        (own >= shared.max_per_namespace).then(|| {
            Waiting::polled(
                Reason::ClusterLimitReached,
                format!(
                    "HelmApps of namespace {ns} started {own} remote clusters already (--max-remote-clusters-per-namespace): this one starts when one of those is no longer named"
                ),
            )
        })
    }

    /// A new cluster's parts: informers of the same kinds and selectors as
    /// the operator's own cluster's, wired to the HelmApp queue through
    /// its users' target keys.
    fn running_cluster(&self, id: &str, client: Client, access: &RemoteAccess) -> Running {
        let factory = Arc::new(SharedInformerFactory::new(client.clone(), None));
        // Before any informer is asked for: each is bounded.
        factory.bound_objects(MAX_REMOTE_OBJECTS);
        let releases = factory.informer::<HelmRelease>(helm_storage_options());
        releases
            .store()
            .ensure_index(RELEASE_INDEX, super::cluster_informers::release_by_name());
        let secrets =
            factory.informer::<SecretDigests>(InformerOptions::default().labels("owner!=helm"));
        let configmaps =
            factory.informer::<ConfigMapDigests>(InformerOptions::default().labels("owner!=helm"));
        let members = super::cluster_informers::member_informers(&factory);
        let via = super::wiring::Vias::default();
        let to = super::wiring::Handlers {
            queue: self.shared.queue.clone(),
            apps: self.shared.apps.clone(),
            vias: Some(via.clone()),
        };
        super::cluster_informers::wire_cluster(&to, &releases, &secrets, &configmaps);
        members.wire(&to);
        let reachability = Reachability::unregistered(client.clone(), self.shared.queue.clone());
        let gate = {
            let reachability = reachability.clone();
            Arc::new(move || {
                let reachability = reachability.clone();
                Box::pin(async move { reachability.answers_before_start().await })
                    as futures::future::BoxFuture<'static, bool>
            })
        };
        let cluster = Arc::new(Cluster {
            remote: Some(id.to_string()),
            client,
            releases: releases.store(),
            members: members.stores(),
            secrets: secrets.store(),
            configmaps: configmaps.store(),
            drift: DriftCache::new(self.shared.metrics.clone()),
            reachability,
            helm: Arc::new(RemoteHelm {
                helm: self.shared.helm.clone(),
                run: RemoteRun {
                    id: id.to_string(),
                    access: Arc::new(access.clone()),
                    policy: self.shared.policy.clone(),
                    lookup: self.shared.lookup.clone(),
                    egress: self.shared.egress.clone(),
                    gate,
                },
            }),
        });
        Running {
            cluster,
            factory,
            via,
            started_from: None,
        }
    }

    /// Why the cluster `id`'s caches cannot be read yet, if they cannot:
    /// waits up to [`FIRST_SYNC`] for them first.
    async fn unsynced(&self, id: &str) -> Option<Waiting> {
        let factory = self.clusters.lock().get(id).map(|r| r.factory.clone())?;
        if factory.wait_for_cache_sync(FIRST_SYNC).await {
            return None;
        }
        let kinds: BTreeSet<String> = factory
            .synced()
            .into_iter()
            .filter(|s| !s.synced)
            .map(|s| s.kind)
            .collect();
        Some(Waiting::polled(
            Reason::ClusterUnreachable,
            format!(
                "the remote cluster's caches have not filled ({}): its API server does not answer, or the kubeconfig's identity may not list and watch these kinds in every namespace (docs/remote-clusters.md)",
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ))
    }

    /// `key` uses the cluster `id` (already among its users), and no
    /// longer the one it used before.
    fn now_uses(&self, key: &str, id: &str) {
        let previous = self.users.lock().insert(key.to_string(), id.to_string());
        if let Some(previous) = previous.filter(|p| p != id) {
            self.drop_user(key, &previous);
        }
    }

    /// `key` uses no cluster now.
    fn leave(&self, key: &str) {
        // Lock order: `clusters` before `users`, never both the other way.
        let id = self.users.lock().remove(key);
        if let Some(id) = id {
            self.drop_user(key, &id);
        }
    }

    /// `key` no longer uses the cluster `id`: stopped if it was the last.
    fn drop_user(&self, key: &str, id: &str) {
        let mut clusters = self.clusters.lock();
        let Some(running) = clusters.get(id) else {
            return;
        };
        let mut via = running.via.lock();
        via.remove(key);
        if !via.is_empty() {
            return;
        }
        drop(via);
        if let Some(running) = clusters.remove(id) {
            self.shared.running.set(clusters.len() as i64);
            running.factory.shutdown();
            log::info!("remote cluster {id}: no HelmApp names it; stopped");
        }
    }
}

/// The most objects one informer of a remote cluster holds: its API
/// server is the tenant's, and one that lists or watches without end would
/// fill the operator's memory. A cluster with more of one kind (Secrets,
/// say) than this is not served: its caches never fill, and its HelmApps
/// say `ClusterUnreachable` naming the kind.
pub const MAX_REMOTE_OBJECTS: usize = 20_000;

/// The namespace whose quota a new cluster of `app` counts against
/// (`None`: a privileged one, bounded by the total alone).
fn bounded_in(app: &HelmApp, privileged: bool) -> Option<String> {
    (!privileged).then(|| app.namespace().unwrap_or_default())
}

/// The kubeconfig `reference` names, read as `as_user` and parsed. The
/// inner `Err` says why it is refused; the outer, that the operator's API
/// server did not answer.
async fn read_kubeconfig(
    client: &Client,
    app: &HelmApp,
    reference: &apis::helmapp::KubeConfigReference,
    as_user: Option<&str>,
) -> Result<Result<RemoteAccess, String>, kube::Error> {
    let ns = app.namespace().unwrap_or_default();
    let name = &reference.secret_ref.name;
    let named = format!("kubeConfig.secretRef {ns}/{name}");
    let mut get = match kube::core::Request::new(format!("/api/v1/namespaces/{ns}/secrets"))
        .get(name, &Default::default())
    {
        Ok(get) => get,
        Err(e) => return Ok(Err(format!("{named}: not a Secret's name ({e})"))),
    };
    if let Err(e) = crate::delivery::tenancy::impersonate(&mut get, as_user) {
        return Ok(Err(format!("{named}: cannot be read as {e}")));
    }
    let secret: Secret = match client.request(get).await {
        Ok(secret) => secret,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Ok(Err(format!("{named} does not exist")));
        }
        Err(kube::Error::Api(s)) if s.code == 403 => {
            return Ok(Err(format!(
                "{named}: {} may not get it",
                as_user.unwrap_or("the operator")
            )));
        }
        Err(e) => return Err(e),
    };
    let data = secret.data.unwrap_or_default();
    let keys: Vec<&str> = match reference.secret_ref.key.as_str() {
        "" => vec!["value", "value.yaml"],
        key => vec![key],
    };
    let Some(bytes) = keys.iter().find_map(|k| data.get(*k)) else {
        return Ok(Err(format!("{named} has no key {}", keys.join(" or "))));
    };
    Ok(kubeconfig::parse(&bytes.0).map_err(|e| format!("{named}: {e}")))
}
