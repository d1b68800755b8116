//! The [`Manager`]: what every controller of the process shares — the kube
//! client, ONE informer factory, the event broadcaster, the metrics registry
//! and the `/metrics` + probes server, leader election and the shutdown
//! signal — and the order in which it all starts and stops.
//!
//! [`Manager::run`]:
//! 1. serves metrics and probes (`/healthz` ok from here on);
//! 2. starts the informers and waits for every required cache;
//! 3. with leader election: stands by warm (ready) until it holds the Lease;
//! 4. runs every controller until the shutdown signal, then lets in-flight
//!    reconciles finish (bounded), releases the Lease and flushes Events.
//!
//! A leader that cannot renew its Lease within the renew deadline stops all
//! work at once and `run` returns [`ManagerError::LeaseLost`]: the process
//! should exit (client-go's convention; it restarts as a candidate).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use cache::{FactoryError, SharedInformerFactory};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use hyper::StatusCode;
use kube::Client;
use record::{EventBroadcaster, EventRecorder};
use tokio::net::TcpListener;

use crate::controller::{Controller, ControllerHost, Reconciler, Runnable};
use crate::leader::{LeaderElector, LeaseTiming};
use crate::metrics::Metrics;
use crate::server::{self, ServerOptions};

/// Where the Lease lives and how it is timed.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub namespace: String,
    pub name: String,
    pub timing: LeaseTiming,
}

/// How a [`Manager`] runs.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// Prefix of the runtime's own metric names (`<prefix>_reconcile_total`).
    pub metrics_prefix: String,
    /// Labels on every series `/metrics` serves (a shard's name: one
    /// dashboard tells the processes apart whatever scrapes them).
    pub metric_labels: Vec<(String, String)>,
    /// `source.component` of the Events written.
    pub component: String,
    /// This process (the pod's name), in Events and the Lease identity.
    pub instance: String,
    /// Where `/metrics` is served (`None`: not served).
    pub metrics_address: Option<SocketAddr>,
    /// Where `/healthz` and `/readyz` are served (`None`: not served). May
    /// equal `metrics_address`: one server then answers all three.
    pub health_address: Option<SocketAddr>,
    /// Limits of that server.
    pub server: ServerOptions,
    /// `Some`: run controllers only while holding this Lease.
    pub leader_election: Option<LeaderElection>,
    /// How long the required caches may take to sync.
    pub sync_timeout: Duration,
    /// On shutdown, how long the whole shutdown may take from the signal:
    /// in-flight reconciles drain for all of it but a [`reserve`] kept for
    /// what follows (the work-ended hooks, releasing the Lease, flushing
    /// Events), each bounded by what is left — so the process exits
    /// within it even with the API server gone.
    pub drain_timeout: Duration,
    /// Run after every reconcile of every controller, and once when the
    /// caches have synced: what the process wants done at those quiet
    /// points (the operator returns free heap pages to the kernel with
    /// [`crate::memory::release_free_memory`], which trims at most once a
    /// second whatever the rate of calls). `None`: nothing.
    pub after_each_item: Option<fn()>,
}

/// The part of a shutdown budget kept for the steps after the drain: a
/// quarter, at most 5 s.
pub fn reserve(budget: Duration) -> Duration {
    (budget / 4).min(Duration::from_secs(5))
}

impl ManagerOptions {
    /// Options with nothing served and no leader election.
    pub fn new(metrics_prefix: &str, component: &str) -> Self {
        ManagerOptions {
            metrics_prefix: metrics_prefix.to_string(),
            metric_labels: Vec::new(),
            component: component.to_string(),
            instance: component.to_string(),
            metrics_address: None,
            health_address: None,
            server: ServerOptions::default(),
            leader_election: None,
            sync_timeout: Duration::from_secs(120),
            drain_timeout: Duration::from_secs(30),
            after_each_item: None,
        }
    }
}

/// Why [`Manager::run`] stopped before a shutdown signal.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("cannot serve {what} on {address}: {source}")]
    Bind {
        what: &'static str,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Informers(#[from] FactoryError),
    #[error(
        "informer caches did not sync within {0:?}: check the API server and RBAC (the log names the kinds)"
    )]
    CacheSync(Duration),
    #[error("lost the leader lease {0}: could not renew it in time; all work stopped")]
    LeaseLost(String),
}

/// Readiness: required caches synced and, under leader election, either
/// leading or a warm standby.
#[derive(Debug, Default)]
struct Readiness {
    synced: AtomicBool,
    leading: AtomicBool,
    standby: AtomicBool,
}

/// Whether this replica leads now: under leader election, while it holds
/// the Lease; without, once the caches synced. What serves requests that
/// only the leader may act on (a webhook) answers 503 otherwise.
#[derive(Debug, Clone)]
pub struct Leading(Arc<Readiness>);

impl Leading {
    pub fn now(&self) -> bool {
        self.0.leading.load(Relaxed)
    }
}

/// Set once the shutdown signal came: a reconciler checks it before
/// starting something long it could leave to the next run (a POST).
#[derive(Debug, Clone, Default)]
pub struct Stopping(Arc<AtomicBool>);

impl Stopping {
    /// Whether shutdown has begun.
    pub fn is_set(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// See the module docs.
pub struct Manager {
    client: Client,
    factory: Arc<SharedInformerFactory>,
    broadcaster: EventBroadcaster,
    metrics: Arc<Metrics>,
    controllers: Vec<Arc<dyn Runnable>>,
    readiness: Arc<Readiness>,
    stopping: Stopping,
    options: ManagerOptions,
    /// Run first thing when the lease is lost, before workers are dropped
    /// and Events flushed: whatever must not race the next leader.
    on_lease_lost: Vec<Box<dyn Fn() + Send + Sync>>,
    /// Run when the controllers' work has ended on a shutdown (drained or
    /// past the drain timeout), before the Lease is released: whatever is
    /// still running must be gone before another replica may start.
    on_work_ended: Vec<Box<dyn Fn(Duration) + Send + Sync>>,
    /// When the shutdown budget ends: set by the shutdown signal.
    shutdown_deadline: Arc<std::sync::OnceLock<tokio::time::Instant>>,
    /// The recorder of the informers' `DecodeFailed` Events, emptied
    /// before the broadcaster flushes: the informers' hook holds this slot,
    /// not the recorder, so it cannot keep the event channel open.
    refusal_recorder: Arc<std::sync::Mutex<Option<EventRecorder>>>,
}

/// The reason of the Warning Event an object gets when an informer cannot
/// decode it.
pub const DECODE_FAILED: &str = "DecodeFailed";

/// The hook that gives an object an informer refused a `DecodeFailed`
/// Warning, while `slot` holds a recorder.
fn refusal_events(slot: Arc<std::sync::Mutex<Option<EventRecorder>>>) -> cache::RefusalHook {
    Arc::new(move |api_version, kind, refusal| {
        let Some(recorder) = lock(&slot).clone() else {
            return;
        };
        let message = format!(
            "this version of the object does not decode ({}): the operator's cache keeps the last version it could read and goes on with every other object; fix or remove the object",
            refusal.error
        );
        recorder.event_about(
            refusal.reference(api_version, kind),
            record::EventType::Warning,
            DECODE_FAILED,
            &message,
        );
    })
}

/// The slot's guard, whether or not a holder panicked.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Manager {
    /// A manager over `client`; nothing runs until [`run`](Self::run).
    pub fn new(client: Client, options: ManagerOptions) -> Self {
        let factory = Arc::new(SharedInformerFactory::new(client.clone(), None));
        let broadcaster = EventBroadcaster::new(client.clone());
        let refusal_recorder = Arc::new(std::sync::Mutex::new(Some(
            broadcaster.recorder(&options.component, &options.instance),
        )));
        factory.on_refused(refusal_events(refusal_recorder.clone()));
        Manager {
            broadcaster,
            refusal_recorder,
            metrics: Arc::new(Metrics::new(
                &options.metrics_prefix,
                &options.metric_labels,
                factory.clone(),
            )),
            client,
            factory,
            controllers: Vec::new(),
            readiness: Arc::default(),
            stopping: Stopping::default(),
            options,
            on_lease_lost: Vec::new(),
            on_work_ended: Vec::new(),
            shutdown_deadline: Default::default(),
        }
    }

    /// Registers `hook`, called the moment the leader lease is lost —
    /// before the controllers' workers are dropped and before [`run`](Self::run)
    /// returns — for work outside this process's tasks that another leader
    /// must not race (e.g. child processes). Never called without leader
    /// election, nor on a clean shutdown.
    pub fn on_lease_lost(&mut self, hook: impl Fn() + Send + Sync + 'static) {
        self.on_lease_lost.push(Box::new(hook));
    }

    /// Registers `hook`, called on a shutdown once the controllers' work
    /// has ended (drained, or past the drain timeout) and before the leader
    /// Lease is released: work outside this process's tasks (e.g. child
    /// processes) is stopped there, so the next leader never races it.
    /// Called with or without leader election, with the time left of the
    /// shutdown budget ([`ManagerOptions::drain_timeout`]); it should
    /// return within it.
    pub fn on_work_ended(&mut self, hook: impl Fn(Duration) + Send + Sync + 'static) {
        self.on_work_ended.push(Box::new(hook));
    }

    fn work_ended(&self) {
        for hook in &self.on_work_ended {
            hook(self.shutdown_left());
        }
    }

    /// What is left of the shutdown budget (all of it before a signal).
    fn shutdown_left(&self) -> Duration {
        match self.shutdown_deadline.get() {
            Some(at) => at.saturating_duration_since(tokio::time::Instant::now()),
            None => self.options.drain_timeout,
        }
    }

    /// The kube client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The informer factory every controller shares.
    pub fn factory(&self) -> &SharedInformerFactory {
        &self.factory
    }

    /// An event recorder reporting as this process.
    pub fn recorder(&self) -> EventRecorder {
        self.broadcaster
            .recorder(&self.options.component, &self.options.instance)
    }

    /// Whether this replica leads, read at any time.
    pub fn leading(&self) -> Leading {
        Leading(self.readiness.clone())
    }

    /// The flag that says shutdown has begun.
    pub fn stopping(&self) -> Stopping {
        self.stopping.clone()
    }

    /// The metrics registry (to add a controller's own metrics).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The registry, to read after the manager has been moved into `run`
    /// (tests scrape an in-process operator this way).
    pub fn metrics_handle(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Adds a controller; it runs when the manager runs (and, under leader
    /// election, only while leading).
    pub fn add<R: Reconciler>(&mut self, controller: Controller<R>) {
        self.controllers.push(Arc::new(controller));
    }

    /// Runs everything until `shutdown` completes (see the module docs).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ManagerError> {
        let flag = self.stopping.clone();
        let (deadline, budget) = (self.shutdown_deadline.clone(), self.options.drain_timeout);
        let shutdown: Shared<BoxFuture<'static, ()>> = async move {
            shutdown.await;
            let _ = deadline.set(tokio::time::Instant::now() + budget);
            flag.0.store(true, Relaxed);
        }
        .boxed()
        .shared();
        let servers = self.serve().await?;
        let outcome = self.run_controllers(shutdown).await;
        self.readiness.leading.store(false, Relaxed);
        self.factory.shutdown();
        for s in servers {
            s.abort();
        }
        drop(lock(&self.refusal_recorder).take());
        let flush = self.shutdown_left().min(Duration::from_secs(5));
        self.broadcaster.shutdown_within(flush).await;
        outcome
    }

    async fn run_controllers(
        &self,
        shutdown: Shared<BoxFuture<'static, ()>>,
    ) -> Result<(), ManagerError> {
        self.factory.start()?;
        log::info!("waiting for informer caches to sync");
        tokio::select! {
            synced = self.factory.wait_for_cache_sync(self.options.sync_timeout) => {
                if !synced {
                    return Err(ManagerError::CacheSync(self.options.sync_timeout));
                }
            }
            _ = shutdown.clone() => return Ok(()),
        }
        if let Some(hook) = self.options.after_each_item {
            hook();
        }
        self.readiness.synced.store(true, Relaxed);
        log::info!("caches synced");
        for (kind, crd) in self.factory.waiting_for_crds() {
            log::warn!(
                "the {kind} informer waits for CustomResourceDefinition {crd}; what reads {kind}s starts by itself once it exists (hossted-operator crd {crd} | kubectl apply -f -)"
            );
        }

        let Some(election) = &self.options.leader_election else {
            self.set_leading(true);
            self.run_all(shutdown).await;
            self.work_ended();
            return Ok(());
        };
        let identity = format!(
            "{}_{}",
            self.options.instance,
            uuid::Uuid::new_v4().simple()
        );
        let mut elector = LeaderElector::new(
            self.client.clone(),
            &election.namespace,
            &election.name,
            &identity,
            election.timing.clone(),
        );
        self.readiness.standby.store(true, Relaxed);
        log::info!(
            "standing by for lease {}/{} as {identity}",
            election.namespace,
            election.name
        );
        tokio::select! {
            _ = elector.acquire() => {}
            _ = shutdown.clone() => return Ok(()),
        }
        self.set_leading(true);
        let work = self.run_all(shutdown);
        tokio::select! {
            _ = work => {
                self.set_leading(false);
                self.work_ended();
                // Not released in time: it expires on its own.
                let left = self.shutdown_left();
                if tokio::time::timeout(left, elector.release()).await.is_err() {
                    log::warn!("the shutdown budget ended before the leader lease was released; it expires on its own");
                }
                Ok(())
            }
            lost = elector.hold() => {
                for hook in &self.on_lease_lost {
                    hook();
                }
                // Dropping `work` aborts every worker at once.
                self.set_leading(false);
                log::error!("{lost}; stopping all work now");
                Err(ManagerError::LeaseLost(format!("{}/{}", election.namespace, election.name)))
            }
        }
    }

    /// Runs every controller until `shutdown`, then waits for their drains
    /// (the shutdown budget but its [`reserve`]).
    async fn run_all(&self, shutdown: Shared<BoxFuture<'static, ()>>) {
        let budget = self.options.drain_timeout;
        let drain = budget - reserve(budget);
        let runs = self.controllers.iter().map(|c| {
            log::info!("starting controller {}", c.name());
            c.clone().run(shutdown.clone().boxed(), drain)
        });
        futures::future::join_all(runs).await;
    }

    fn set_leading(&self, leading: bool) {
        self.readiness.leading.store(leading, Relaxed);
        self.metrics.set_leader(leading);
    }

    /// Binds and spawns the metrics and probe servers.
    async fn serve(&self) -> Result<Vec<tokio::task::JoinHandle<()>>, ManagerError> {
        let (metrics_at, health_at) = (self.options.metrics_address, self.options.health_address);
        let mut servers = Vec::new();
        let mut plan: Vec<(&'static str, SocketAddr, bool, bool)> = Vec::new();
        match (metrics_at, health_at) {
            (Some(m), Some(h)) if m == h => plan.push(("metrics and health probes", m, true, true)),
            (m, h) => {
                plan.extend(m.map(|a| ("metrics", a, true, false)));
                plan.extend(h.map(|a| ("health probes", a, false, true)));
            }
        }
        for (what, address, metrics, probes) in plan {
            let listener =
                TcpListener::bind(address)
                    .await
                    .map_err(|source| ManagerError::Bind {
                        what,
                        address,
                        source,
                    })?;
            log::info!("serving {what} on {address}");
            let (m, r, f) = (
                self.metrics.clone(),
                self.readiness.clone(),
                self.factory.clone(),
            );
            let routes =
                move |path: &str| route(path, metrics.then_some(&*m), probes.then_some((&*r, &*f)));
            servers.push(tokio::spawn(server::serve(
                listener,
                routes,
                self.options.server.clone(),
            )));
        }
        Ok(servers)
    }
}

fn route(
    path: &str,
    metrics: Option<&Metrics>,
    probes: Option<(&Readiness, &SharedInformerFactory)>,
) -> server::Reply {
    const TEXT: &str = "text/plain; charset=utf-8";
    match (path, metrics, probes) {
        ("/metrics", Some(m), _) => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            m.encode(),
        ),
        ("/healthz", _, Some(_)) => (StatusCode::OK, TEXT, "ok\n".into()),
        ("/readyz", _, Some((r, factory))) => {
            let synced = r.synced.load(Relaxed) && factory.required_synced();
            let active = r.leading.load(Relaxed) || r.standby.load(Relaxed);
            match (synced, active) {
                (true, true) => (StatusCode::OK, TEXT, "ok\n".into()),
                (false, _) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "informer caches not synced\n".into(),
                ),
                (true, false) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "not running controllers\n".into(),
                ),
            }
        }
        _ => (StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}

impl ControllerHost for Manager {
    fn metrics_handle(&self) -> Arc<Metrics> {
        Manager::metrics_handle(self)
    }

    /// [`ManagerOptions::after_each_item`], for the controllers it runs.
    fn after_each_item(&self) -> Option<fn()> {
        self.options.after_each_item
    }
}
