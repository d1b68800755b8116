//! The Hosstedproject controller, in the shape of `k8s.io/sample-controller`:
//! [`Controller::new`] creates the informers and registers handlers that only
//! enqueue keys; [`Controller::run`] waits for the caches and starts the
//! workers; [`Controller::process_next_work_item`] takes a key from the queue
//! and calls [`Controller::sync_handler`], which holds the business logic.
//!
//! Any relevant change — a Helm release, a pod, a service, a volume, an
//! ingress, a namespace, a `uuid` Secret — enqueues every Hosstedproject
//! after a short window, so a burst (a `helm upgrade` touching many objects)
//! becomes one reconcile. A safety resync enqueues them every
//! `RECONCILE_DURATION` as well; it is not the mechanism.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::{HelmInfo, Hosstedproject, HosstedprojectStatus};
use cache::{Event, HandlerFn, InformerOptions, SharedInformer, SharedInformerFactory};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use parking_lot::Mutex;
use record::{EventRecorder, EventType};
use serde::Serialize;
use workqueue::{RateLimitingQueue, default_controller_rate_limiter};

use crate::collector::{self, Caches, Context, RELEASE_INDEX, release_index};
use crate::metrics::Metrics;
use crate::objects::{
    HelmRelease, HelmReleaseConfigMap, Ingress, Namespace, PersistentVolumeClaim, Pod, Service,
    UuidSecret,
};
use crate::payload::{ClusterRegistration, OptionsState};
use crate::poster::{Delivery, PostError, Poster};

/// What the controller needs besides the cluster and the API.
#[derive(Debug, Clone)]
pub struct Settings {
    pub email_id: String,
    pub org_id: String,
    pub context_name: String,
    /// Safety resync period (`RECONCILE_DURATION`).
    pub resync: Duration,
    /// Events within this window after the first one become one reconcile.
    pub coalesce: Duration,
    /// Also watch Helm's configmap storage driver.
    pub configmap_driver: bool,
    /// How long to wait for the caches before giving up.
    pub sync_timeout: Duration,
}

/// Why a reconcile must be retried (with backoff).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Api(#[from] PostError),
    #[error("writing status: {0}")]
    Kube(#[from] kube::Error),
}

/// The informers the collector reads, all from one factory.
pub struct Informers {
    pub namespaces: Arc<SharedInformer<Namespace>>,
    pub releases: Arc<SharedInformer<HelmRelease>>,
    pub release_configmaps: Option<Arc<SharedInformer<HelmReleaseConfigMap>>>,
    pub uuid_secrets: Arc<SharedInformer<UuidSecret>>,
    pub pods: Arc<SharedInformer<Pod>>,
    pub services: Arc<SharedInformer<Service>>,
    pub pvcs: Arc<SharedInformer<PersistentVolumeClaim>>,
    pub ingresses: Arc<SharedInformer<Ingress>>,
}

impl Informers {
    /// Helm releases by label `owner=helm`, `uuid` Secrets by name, the rest
    /// of their kind in every namespace — each cached as its lean type.
    pub fn new(factory: &SharedInformerFactory, configmap_driver: bool) -> Self {
        // Release Secrets are large (a gzip'd release, base64'd twice): small
        // LIST pages keep the transient decode buffers small.
        fn helm<K>() -> InformerOptions<K> {
            let mut o = InformerOptions::default().labels("owner=helm");
            o.list_watch.page_size = 50;
            o
        }
        let i = Informers {
            namespaces: factory.informer(InformerOptions::default()),
            releases: factory.informer(helm()),
            release_configmaps: configmap_driver.then(|| factory.informer(helm())),
            uuid_secrets: factory.informer(InformerOptions::default().fields("metadata.name=uuid")),
            pods: factory.informer(InformerOptions::default()),
            services: factory.informer(InformerOptions::default()),
            pvcs: factory.informer(InformerOptions::default()),
            ingresses: factory.informer(InformerOptions::default()),
        };
        i.pods.store().add_index(RELEASE_INDEX, release_index());
        i.services.store().add_index(RELEASE_INDEX, release_index());
        i.pvcs.store().add_index(RELEASE_INDEX, release_index());
        i.ingresses
            .store()
            .add_index(RELEASE_INDEX, release_index());
        i
    }

    /// The collector's view of these informers' caches.
    pub fn caches(&self) -> Caches {
        Caches {
            namespaces: self.namespaces.store(),
            releases: self.releases.store(),
            release_configmaps: self.release_configmaps.as_ref().map(|i| i.store()),
            uuid_secrets: self.uuid_secrets.store(),
            pods: self.pods.store(),
            services: self.services.store(),
            pvcs: self.pvcs.store(),
            ingresses: self.ingresses.store(),
        }
    }
}

/// `hossted-operator collect`: the apps payloads for the cluster as it is
/// now, with the cluster UUID of an existing Hosstedproject if there is one.
pub async fn collect_once(
    client: Client,
    email_id: &str,
    configmap_driver: bool,
    timeout: Duration,
) -> Result<Vec<crate::payload::AppPayload>, String> {
    // A cluster without the CRD has no Hosstedproject: that is fine here.
    let project = match Api::<Hosstedproject>::all(client.clone())
        .list(&Default::default())
        .await
    {
        Ok(list) => list.items.into_iter().next(),
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(format!("cannot list Hosstedprojects: {e}")),
    };
    let factory = SharedInformerFactory::new(client, None);
    let informers = Informers::new(&factory, configmap_driver);
    factory.start();
    if !factory.wait_for_cache_sync(timeout).await {
        return Err(format!(
            "caches did not sync within {timeout:?}; check access to the cluster"
        ));
    }
    let status = project
        .as_ref()
        .and_then(|p| p.status.clone())
        .unwrap_or_default();
    let deny = project
        .map(|p| p.spec.deny_namespaces.clone())
        .unwrap_or_default();
    let collection = collector::collect(
        &informers.caches(),
        &Context {
            cluster_uuid: &status.cluster_uuid,
            email_id,
            deny_namespaces: &deny,
            known: &status.helm_status,
        },
        &mut |_, _| uuid::Uuid::new_v4().to_string(),
    );
    for bad in &collection.invalid {
        log::warn!(
            "cannot decode Helm release Secret {}/{}: {}",
            bad.namespace,
            bad.secret,
            bad.error
        );
    }
    factory.shutdown();
    Ok(collection.apps.into_iter().map(|a| a.payload).collect())
}

/// See the module docs.
pub struct Controller {
    client: Client,
    factory: SharedInformerFactory,
    queue: Arc<RateLimitingQueue<String>>,
    projects: Arc<SharedInformer<Hosstedproject>>,
    caches: Caches,
    recorder: EventRecorder,
    poster: Arc<Poster>,
    settings: Settings,
    /// Status this controller wrote, by key, with the resourceVersion the
    /// write returned: the lister may not show it yet, and reading an older
    /// status would re-send what was just delivered.
    written: Mutex<HashMap<String, (u64, HosstedprojectStatus)>>,
    /// Payloads the API rejected (4xx), by key and target: not sent again
    /// until they change.
    rejected: Mutex<HashMap<String, u64>>,
    metrics: Arc<Metrics>,
    /// App UUIDs given to releases not delivered yet (`key namespace/name`):
    /// a retry re-sends the same UUID, so the API never sees two for one release.
    pending_uuids: Mutex<HashMap<String, String>>,
}

impl Controller {
    /// Creates the informers and registers handlers that only enqueue.
    pub fn new(
        client: Client,
        recorder: EventRecorder,
        poster: Poster,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let factory = SharedInformerFactory::new(client.clone(), None);
        let projects = factory.informer::<Hosstedproject>(InformerOptions::default());
        let informers = Informers::new(&factory, settings.configmap_driver);
        let caches = informers.caches();
        let queue = Arc::new(RateLimitingQueue::with_metrics(
            default_controller_rate_limiter(),
            "hosstedproject",
            &metrics.queues,
        ));

        // A Hosstedproject: on creation, and when its spec changes (its
        // generation moves; our own status writes do not move it).
        projects.add_event_handler(HandlerFn({
            let queue = queue.clone();
            move |e: &Event<Hosstedproject>| match e {
                Event::Add(hp) => queue.add(hp.name_any()),
                Event::Update { old, new }
                    if old.metadata.generation != new.metadata.generation =>
                {
                    queue.add(new.name_any())
                }
                _ => {}
            }
        }));
        let c = Arc::new(Controller {
            client,
            factory,
            queue,
            projects,
            caches,
            recorder,
            poster: Arc::new(poster),
            settings,
            written: Mutex::new(HashMap::new()),
            rejected: Mutex::new(HashMap::new()),
            pending_uuids: Mutex::new(HashMap::new()),
            metrics,
        });
        let factory_synced = {
            let c = Arc::downgrade(&c);
            move || c.upgrade().map(|c| c.factory.synced()).unwrap_or_default()
        };
        c.metrics.set_synced_probe(Box::new(factory_synced));
        let i = &informers;
        c.enqueue_projects_on_change(&i.namespaces);
        c.enqueue_projects_on_change(&i.releases);
        c.enqueue_projects_on_change(&i.uuid_secrets);
        c.enqueue_projects_on_change(&i.pods);
        c.enqueue_projects_on_change(&i.services);
        c.enqueue_projects_on_change(&i.pvcs);
        c.enqueue_projects_on_change(&i.ingresses);
        if let Some(cm) = &i.release_configmaps {
            c.enqueue_projects_on_change(cm);
        }
        c
    }

    /// Any change of a `K` enqueues every Hosstedproject after the
    /// coalescing window. Updates that change nothing (same resourceVersion:
    /// a resync or a relist) are ignored.
    fn enqueue_projects_on_change<K>(self: &Arc<Self>, informer: &SharedInformer<K>)
    where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let queue = self.queue.clone();
        let projects = self.projects.store();
        let window = self.settings.coalesce;
        informer.add_event_handler(HandlerFn(move |e: &Event<K>| {
            if let Event::Update { old, new } = e
                && old.meta().resource_version == new.meta().resource_version
            {
                return;
            }
            for key in projects.list_keys() {
                queue.add_after(key, window);
            }
        }));
    }

    /// Starts the informers, waits for their caches, runs `workers` workers
    /// and the safety resync until `shutdown` completes, then lets in-flight
    /// reconciles finish (at most `drain_timeout`).
    pub async fn run(
        self: Arc<Self>,
        workers: usize,
        shutdown: impl std::future::Future<Output = ()>,
        drain_timeout: Duration,
    ) -> Result<(), String> {
        self.start().await?;
        self.run_workers(workers, shutdown, drain_timeout).await;
        Ok(())
    }

    /// Starts the informers and waits for their caches (a standby does this
    /// too, so that it can take over warm).
    pub async fn start(&self) -> Result<(), String> {
        self.factory.start();
        log::info!("waiting for informer caches to sync");
        if !self
            .factory
            .wait_for_cache_sync(self.settings.sync_timeout)
            .await
        {
            return Err(format!(
                "informer caches did not sync within {:?}: check the API server and RBAC (see the log above)",
                self.settings.sync_timeout
            ));
        }
        crate::memory::release_free_memory();
        log::info!("caches synced");
        Ok(())
    }

    /// Runs the workers and the safety resync until `shutdown` completes,
    /// then drains. Call after [`start`](Self::start).
    pub async fn run_workers(
        self: Arc<Self>,
        workers: usize,
        shutdown: impl std::future::Future<Output = ()>,
        drain_timeout: Duration,
    ) {
        log::info!(
            "starting {workers} workers (safety resync every {:?})",
            self.settings.resync
        );
        for key in self.projects.store().list_keys() {
            self.queue.add(key);
        }
        let mut tasks: Vec<_> = (0..workers.max(1))
            .map(|_| {
                let me = self.clone();
                tokio::spawn(async move { while me.process_next_work_item().await {} })
            })
            .collect();
        tasks.push(tokio::spawn({
            let me = self.clone();
            async move {
                let mut tick = tokio::time::interval(me.settings.resync);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    for key in me.projects.store().list_keys() {
                        me.queue.add(key);
                    }
                }
            }
        }));
        shutdown.await;
        log::info!("shutting down: finishing in-flight reconciles");
        if tokio::time::timeout(drain_timeout, self.queue.shutdown_with_drain())
            .await
            .is_err()
        {
            log::warn!("reconciles still running after {drain_timeout:?}; stopping anyway");
        }
        for t in tasks {
            t.abort();
        }
        self.factory.shutdown();
    }

    /// Takes one key and reconciles it; `false` once the queue shut down.
    pub async fn process_next_work_item(&self) -> bool {
        let Some(key) = self.queue.get().await else {
            return false;
        };
        let started = Instant::now();
        let result = self.sync_handler(&key).await;
        self.metrics.reconciled(result.is_ok(), started.elapsed());
        match result {
            Ok(outcome) => {
                self.queue.forget(&key);
                log::info!(
                    "reconciled {key} in {} ms: {outcome}",
                    started.elapsed().as_millis()
                );
            }
            Err(e) => {
                let retries = self.queue.num_requeues(&key);
                log::warn!(
                    "reconcile of {key} failed after {} ms (retry {}): {e}",
                    started.elapsed().as_millis(),
                    retries + 1
                );
                self.queue.add_rate_limited(key.clone());
            }
        }
        self.queue.done(&key);
        // A reconcile's transient buffers (the status, the payloads) go back
        // to the kernel rather than stay in the allocator's arenas.
        crate::memory::release_free_memory();
        true
    }

    /// Reconciles one Hosstedproject: register the cluster once, report every
    /// release that is new or changed, record what was delivered.
    pub async fn sync_handler(&self, key: &str) -> Result<String, SyncError> {
        let Some(hp) = self.projects.store().get(key) else {
            self.written.lock().remove(key);
            return Ok("gone".into());
        };
        let mut status = self.current_status(key, &hp);
        let generation = hp.metadata.generation;

        if hp.spec.stop {
            if !has_condition(&status, "False", "Stopped") {
                set_ready(
                    &mut status,
                    "False",
                    "Stopped",
                    "reporting is stopped (spec.stop is true)",
                    generation,
                );
                status.observed_generation = generation;
                self.write_status(key, &hp, &status).await?;
                self.recorder.event(
                    hp.as_ref(),
                    EventType::Normal,
                    "Stopped",
                    "reporting is stopped (spec.stop is true)",
                );
            }
            return Ok("stopped".into());
        }

        if status.cluster_uuid.is_empty() {
            status.cluster_uuid = format!("K-{}", uuid::Uuid::new_v4());
            self.write_status(key, &hp, &status).await?;
        }

        if !status.cluster_registered {
            let registration = ClusterRegistration {
                kind: "k8s".into(),
                org_id: self.settings.org_id.clone(),
                context_name: self.settings.context_name.clone(),
                email_id: self.settings.email_id.clone(),
                options_state: OptionsState {
                    monitoring: hp.spec.monitoring.enable,
                    logging: hp.spec.logging.enable,
                    cve_scan: hp.spec.cve.enable,
                    ingress: hp.spec.ingress.enable,
                },
            };
            let path = format!("/clusters/{}/register", status.cluster_uuid);
            match self.post(key, &path, &registration).await {
                Ok(()) => {
                    status.cluster_registered = true;
                    self.write_status(key, &hp, &status).await?;
                    self.recorder.event(
                        hp.as_ref(),
                        EventType::Normal,
                        "ClusterRegistered",
                        &format!(
                            "cluster {} registered with the Hossted API",
                            status.cluster_uuid
                        ),
                    );
                }
                Err(e) => return self.api_failed(key, &hp, status, e).await,
            }
        }

        let collect_started = Instant::now();
        let collection = collector::collect(
            &self.caches,
            &Context {
                cluster_uuid: &status.cluster_uuid,
                email_id: &self.settings.email_id,
                deny_namespaces: &hp.spec.deny_namespaces,
                known: &status.helm_status,
            },
            &mut |namespace, name| {
                self.pending_uuids
                    .lock()
                    .entry(format!("{key} {namespace}/{name}"))
                    .or_insert_with(|| uuid::Uuid::new_v4().to_string())
                    .clone()
            },
        );
        let collect_ms = collect_started.elapsed().as_secs_f64() * 1000.0;
        for bad in &collection.invalid {
            self.recorder.event(
                hp.as_ref(),
                EventType::Warning,
                "InvalidRelease",
                &format!(
                    "cannot decode Helm release Secret {}/{}: {}; the other releases are still reported",
                    bad.namespace, bad.secret, bad.error
                ),
            );
        }

        // Report what is new or changed; record only what was delivered.
        let mut delivered: Vec<HelmInfo> = Vec::new();
        let mut reported: Vec<String> = Vec::new();
        let mut failure: Option<PostError> = None;
        for app in &collection.apps {
            let known = status
                .helm_status
                .iter()
                .find(|k| k.name == app.status.name && k.namespace == app.status.namespace);
            if !collector::needs_report(app, &status.helm_status) {
                delivered.push(app.status.clone());
                continue;
            }
            let outcome = match &failure {
                Some(PostError::Unavailable { .. }) => None, // the API is down: don't hammer it
                _ => Some(self.post(key, "/apps", &app.payload).await),
            };
            match outcome {
                Some(Ok(())) => {
                    delivered.push(app.status.clone());
                    reported.push(format!("{}/{}", app.status.namespace, app.status.name));
                }
                Some(Err(e)) => {
                    delivered.extend(known.cloned());
                    if !matches!(failure, Some(PostError::Unavailable { .. })) {
                        failure = Some(e);
                    }
                }
                None => delivered.extend(known.cloned()),
            }
        }
        status.helm_status = delivered;
        // Delivered (or vanished) releases no longer need a pending UUID.
        self.pending_uuids.lock().retain(|k, _| {
            let Some(release) = k.strip_prefix(&format!("{key} ")) else {
                return true;
            };
            collection.apps.iter().any(|a| {
                format!("{}/{}", a.status.namespace, a.status.name) == release
                    && !status
                        .helm_status
                        .iter()
                        .any(|h| h.namespace == a.status.namespace && h.name == a.status.name)
            })
        });
        status.revision = {
            let mut r: Vec<i64> = status.helm_status.iter().map(|h| h.revision).collect();
            r.sort_unstable();
            r
        };
        status.reconcile_helm_releases = status
            .helm_status
            .iter()
            .map(|h| {
                (
                    format!("{}/{}", h.namespace, h.name),
                    h.revision.to_string(),
                )
            })
            .collect();
        status.app_count = status.helm_status.len() as i64;
        status.observed_generation = generation;
        if !reported.is_empty() {
            self.recorder.event(
                hp.as_ref(),
                EventType::Normal,
                "AppsReported",
                &format!(
                    "reported {} app(s): {}",
                    reported.len(),
                    reported.join(", ")
                ),
            );
        }
        if let Some(e) = failure {
            return self.api_failed(key, &hp, status, e).await;
        }
        status.last_reconcile_timestamp = now_rfc3339();
        let message = format!("{} app(s) reported to the Hossted API", status.app_count);
        set_ready(&mut status, "True", "Reporting", &message, generation);
        self.write_status(key, &hp, &status).await?;
        Ok(format!(
            "{} apps, {} posted, collected {} in {collect_ms:.1} ms",
            status.app_count,
            reported.len(),
            collection.apps.len()
        ))
    }

    /// Records an API failure in status and events. Unavailable: retry with
    /// backoff (an error); rejected: wait for the payload to change (ok).
    async fn api_failed(
        &self,
        key: &str,
        hp: &Hosstedproject,
        mut status: HosstedprojectStatus,
        e: PostError,
    ) -> Result<String, SyncError> {
        let (reason, retry) = match &e {
            PostError::Unavailable { .. } => ("ApiUnavailable", true),
            PostError::Rejected { .. } => ("ApiRejected", false),
        };
        let message = e.to_string();
        set_ready(
            &mut status,
            "False",
            reason,
            &message,
            hp.metadata.generation,
        );
        self.recorder
            .event(hp, EventType::Warning, reason, &message);
        self.write_status(key, hp, &status).await?;
        if retry {
            Err(e.into())
        } else {
            Ok(format!("rejected: {message}"))
        }
    }

    /// POSTs off the async runtime. A payload the API rejected before is not
    /// sent again (it would be rejected again) until it changes.
    async fn post(&self, key: &str, path: &str, body: &impl Serialize) -> Result<(), PostError> {
        let json = serde_json::to_value(body).unwrap_or_default();
        let target = format!("{key} {path} {}", app_identity(&json));
        let fingerprint = {
            let mut h = DefaultHasher::new();
            json.to_string().hash(&mut h);
            h.finish()
        };
        if self.rejected.lock().get(&target) == Some(&fingerprint) {
            return Err(PostError::Rejected {
                path: path.to_string(),
                status: 0,
                body: "this payload was rejected before; it is sent again once it changes".into(),
            });
        }
        let poster = self.poster.clone();
        let path_owned = path.to_string();
        let result = tokio::task::spawn_blocking(move || poster.post(&path_owned, &json))
            .await
            .unwrap_or_else(|e| {
                Err(PostError::Unavailable {
                    path: path.to_string(),
                    reason: format!("the request task failed: {e}"),
                    status: None,
                })
            });
        let endpoint = if path == "/apps" { "apps" } else { "register" };
        let code = match &result {
            Ok(Delivery::Delivered { status }) => status.to_string(),
            Ok(Delivery::Printed) => "dry-run".to_string(),
            Err(PostError::Rejected { status, .. }) => status.to_string(),
            Err(PostError::Unavailable {
                status: Some(s), ..
            }) => s.to_string(),
            Err(PostError::Unavailable { status: None, .. }) => "error".to_string(),
        };
        self.metrics.api_request(endpoint, &code);
        match result {
            Ok(Delivery::Delivered { .. } | Delivery::Printed) => {
                self.rejected.lock().remove(&target);
                Ok(())
            }
            Err(e) => {
                if matches!(e, PostError::Rejected { .. }) {
                    self.rejected.lock().insert(target, fingerprint);
                }
                Err(e)
            }
        }
    }

    /// The newest status known: the lister's, or the one this controller
    /// wrote if the lister has not caught up with it yet.
    fn current_status(&self, key: &str, hp: &Hosstedproject) -> HosstedprojectStatus {
        let listed_rv = resource_version(hp);
        match self.written.lock().get(key) {
            Some((rv, status)) if *rv > listed_rv => status.clone(),
            _ => hp.status.clone().unwrap_or_default(),
        }
    }

    /// Replaces the status subresource with `status`.
    async fn write_status(
        &self,
        key: &str,
        hp: &Hosstedproject,
        status: &HosstedprojectStatus,
    ) -> Result<(), kube::Error> {
        let api: Api<Hosstedproject> = Api::all(self.client.clone());
        // A JSON merge patch merges maps: name the releases that left as null.
        let mut body = serde_json::to_value(status).unwrap_or_default();
        let previous = self.current_status(key, hp);
        if let Some(map) = body
            .get_mut("reconcileHelmReleases")
            .and_then(|m| m.as_object_mut())
        {
            for gone in previous.reconcile_helm_releases.keys() {
                map.entry(gone.clone()).or_insert(serde_json::Value::Null);
            }
        }
        let patched = api
            .patch_status(
                &hp.name_any(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": body })),
            )
            .await?;
        self.written.lock().insert(
            key.to_string(),
            (resource_version(&patched), status.clone()),
        );
        Ok(())
    }
}

/// The release an `/apps` payload is about (empty for other payloads).
fn app_identity(json: &serde_json::Value) -> String {
    let h = &json["app_info"]["helm_info"];
    match (h["namespace"].as_str(), h["name"].as_str()) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        _ => String::new(),
    }
}

fn resource_version(hp: &Hosstedproject) -> u64 {
    hp.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn has_condition(status: &HosstedprojectStatus, value: &str, reason: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == value && c.reason == reason)
}

/// Sets the `Ready` condition; `lastTransitionTime` moves only when the
/// status value changes (API conventions).
fn set_ready(
    status: &mut HosstedprojectStatus,
    value: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    match status.conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = now;
            }
            c.status = value.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => status.conditions.push(Condition {
            type_: "Ready".into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: now,
            observed_generation: generation,
        }),
    }
}
