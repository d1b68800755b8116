//! The objects `dependsOn` names that are not HelmApps: one informer per
//! kind in use, started when a HelmApp first names the kind and stopped
//! once none does (docs/dependencies.md).
//!
//! A kind the operator may not list and watch cluster-wide is read by
//! request instead (`Lookup::polled`: the caller looks again with backoff).
//! Whatever the kind, a tenant's dependency is also read as the tenant
//! ([`WatchedKinds::get`]'s `as_user`): a GET impersonating its identity,
//! whose 403 is `Forbidden`, never "not found". That answer is remembered
//! for [`ACCESS_TTL`], so a watched dependency costs no request per
//! reconcile.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use apis::helmapp::{DependencyTarget, HelmApp};
use cache::{Event, HandlerFn, ListWatchConfig, SharedInformer, Store};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use runtime::RateLimitingQueue;
use serde_json::Value;

use crate::delivery::helmapp::decide::dependencies::{namespace_of, object_index_key};
use crate::delivery::names::DEPENDS_ON_INDEX;

/// How long a tenant's permission to read a dependency is taken as known.
pub const ACCESS_TTL: Duration = Duration::from_secs(60);

/// One kind in use.
struct Kind {
    resource: ApiResource,
    namespaced: bool,
    /// `None`: the operator may not list and watch it — read by request.
    informer: Option<Arc<SharedInformer<DynamicObject>>>,
}

/// What a dependency object is, as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// The object, as the API serves it.
    Object(Value),
    /// No such object.
    Absent,
    /// The informer of its kind has not listed yet (its first list
    /// re-queues the dependents).
    Unsynced,
    /// The HelmApp's identity may not read it: the API's message.
    Forbidden(String),
    /// The API serves no such kind (its CRD is not installed?).
    NoSuchKind(String),
    /// The read failed otherwise.
    Failed(String),
}

/// A read of one dependency, and whether its kind is read by request
/// (nothing re-queues the dependents when it changes).
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    pub found: Found,
    pub polled: bool,
}

/// See the module docs.
pub struct WatchedKinds {
    client: Client,
    apps: Store<HelmApp>,
    /// The HelmApp queue: where the informers' handlers enqueue
    /// dependents.
    queue: Arc<RateLimitingQueue<String>>,
    /// Invariant: every informer here runs, and its kind is named by a
    /// HelmApp as of the last [`WatchedKinds::retain`].
    kinds: Mutex<HashMap<GroupVersionKind, Arc<Kind>>>,
    /// `(user, kind, namespace, name)` → when the user was last seen
    /// allowed to read it.
    allowed: Mutex<HashMap<(String, GroupVersionKind, String, String), Instant>>,
    /// Held while a kind is looked up and its informer started, so that
    /// reconciles naming a new kind at once start one informer, not one
    /// each.
    starting: tokio::sync::Mutex<()>,
    started: AtomicU64,
}

impl WatchedKinds {
    pub fn new(
        client: Client,
        apps: Store<HelmApp>,
        queue: Arc<RateLimitingQueue<String>>,
    ) -> Self {
        WatchedKinds {
            client,
            apps,
            queue,
            kinds: Mutex::default(),
            allowed: Mutex::default(),
            starting: tokio::sync::Mutex::new(()),
            started: AtomicU64::new(0),
        }
    }

    /// Informers started so far, and running now.
    pub fn informers(&self) -> (u64, usize) {
        let running = self
            .kinds
            .lock()
            .values()
            .filter(|k| k.informer.is_some())
            .count();
        (self.started.load(Relaxed), running)
    }

    /// The object `name` of kind `gvk` in `namespace` (ignored for a
    /// cluster-scoped kind), read as `as_user` (`None`: the operator).
    pub async fn get(
        &self,
        gvk: &GroupVersionKind,
        namespace: &str,
        name: &str,
        as_user: Option<&str>,
    ) -> Lookup {
        let kind = match self.kind(gvk).await {
            Ok(kind) => kind,
            Err(found) => {
                return Lookup {
                    found,
                    polled: true,
                };
            }
        };
        let ns = if kind.namespaced { namespace } else { "" };
        let polled = kind.informer.is_none();
        let access = (
            as_user.unwrap_or_default().to_string(),
            gvk.clone(),
            ns.to_string(),
            name.to_string(),
        );
        let known_allowed = as_user.is_none()
            || self
                .allowed
                .lock()
                .get(&access)
                .is_some_and(|at| at.elapsed() < ACCESS_TTL);
        let found = match (&kind.informer, known_allowed) {
            (Some(informer), true) if !informer.has_synced() => Found::Unsynced,
            (Some(informer), true) => {
                let key = if ns.is_empty() {
                    name.to_string()
                } else {
                    format!("{ns}/{name}")
                };
                informer
                    .store()
                    .get(&key)
                    .map_or(Found::Absent, |o| to_json(&o))
            }
            _ => {
                let found = self.read(&kind, ns, name, as_user).await;
                if as_user.is_some() && !matches!(found, Found::Forbidden(_) | Found::Failed(_)) {
                    self.allowed.lock().insert(access, Instant::now());
                }
                found
            }
        };
        Lookup { found, polled }
    }

    /// One GET, impersonating `as_user`.
    async fn read(&self, kind: &Kind, ns: &str, name: &str, as_user: Option<&str>) -> Found {
        let api: Api<DynamicObject> = if ns.is_empty() {
            Api::all_with(self.client.clone(), &kind.resource)
        } else {
            Api::namespaced_with(self.client.clone(), ns, &kind.resource)
        };
        let url = format!("{}/{name}", api.resource_url());
        let mut request = match http::Request::get(url).body(Vec::new()) {
            Ok(r) => r,
            Err(e) => return Found::Failed(e.to_string()),
        };
        if let Err(e) = crate::delivery::tenancy::impersonate(&mut request, as_user) {
            return Found::Failed(e);
        }
        match self.client.request::<Value>(request).await {
            Ok(mut object) => {
                if is_secret(&kind.resource) {
                    blank_values(&mut object);
                }
                Found::Object(object)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Found::Absent,
            Err(kube::Error::Api(e)) if e.code == 403 => Found::Forbidden(e.message),
            Err(e) => Found::Failed(e.to_string()),
        }
    }

    /// The kind `gvk`, found by discovery and its informer started on
    /// first use.
    async fn kind(&self, gvk: &GroupVersionKind) -> Result<Arc<Kind>, Found> {
        if let Some(kind) = self.kinds.lock().get(gvk) {
            return Ok(kind.clone());
        }
        let _one_at_a_time = self.starting.lock().await;
        if let Some(kind) = self.kinds.lock().get(gvk) {
            return Ok(kind.clone());
        }
        let (resource, caps) = kube::discovery::oneshot::pinned_kind(&self.client, gvk)
            .await
            .map_err(|e| match e {
                kube::Error::Api(e) if e.code == 403 => Found::Forbidden(e.message),
                e => Found::NoSuchKind(format!(
                    "the API serves no kind {} in {}/{} ({e}); is its CRD installed?",
                    gvk.kind, gvk.group, gvk.version
                )),
            })?;
        let namespaced = caps.scope == Scope::Namespaced;
        let informer = if self.may_watch(&resource).await {
            Some(self.start(gvk, &resource, namespaced))
        } else {
            log::info!(
                "dependsOn {}: the operator may not list and watch {} cluster-wide; read by request, with backoff",
                gvk.kind,
                resource.plural
            );
            None
        };
        let kind = Arc::new(Kind {
            resource,
            namespaced,
            informer,
        });
        self.kinds.lock().insert(gvk.clone(), kind.clone());
        Ok(kind)
    }

    /// Whether the operator may list and watch `resource` in every
    /// namespace (two self access reviews; a failed review: no).
    async fn may_watch(&self, resource: &ApiResource) -> bool {
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        for verb in ["list", "watch"] {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(resource.group.clone()),
                        resource: Some(resource.plural.clone()),
                        verb: Some(verb.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            match api.create(&PostParams::default(), &review).await {
                Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => {}
                _ => return false,
            }
        }
        true
    }

    /// Starts the informer of `gvk`; its changes enqueue the HelmApps that
    /// name the changed object.
    fn start(
        &self,
        gvk: &GroupVersionKind,
        resource: &ApiResource,
        namespaced: bool,
    ) -> Arc<SharedInformer<DynamicObject>> {
        let api = Api::all_with(self.client.clone(), resource);
        let (config, transform) = kept_of(resource);
        let informer = Arc::new(SharedInformer::dynamic(api, resource, config, transform));
        let apps = self.apps.clone();
        let queue = self.queue.clone();
        let group = gvk.group.clone();
        let kind = gvk.kind.clone();
        informer.add_event_handler(HandlerFn(move |e: &Event<DynamicObject>| {
            let object = match e {
                Event::Delete(o) => o,
                _ => match e.changed() {
                    Some(o) => o,
                    None => return,
                },
            };
            let object_ns = object.namespace().unwrap_or_default();
            let name = object.name_any();
            let key = object_index_key(&group, &kind, &name);
            for app in apps.by_index(DEPENDS_ON_INDEX, &key) {
                let app_ns = app.namespace().unwrap_or_default();
                let names_it = app.spec.depends_on.iter().any(|d| {
                    matches!(d.target(), DependencyTarget::Object { kind: k, .. } if k == kind)
                        && d.group() == group
                        && d.name == name
                        && (!namespaced || namespace_of(&app_ns, d) == object_ns)
                });
                if names_it {
                    queue.add(cache::object_key(app.as_ref()));
                }
            }
        }));
        informer.run();
        self.started.fetch_add(1, Relaxed);
        log::info!(
            "dependsOn: watching {} of {} (first named by a HelmApp)",
            resource.plural,
            resource.api_version
        );
        informer
    }

    /// Stops the informers of kinds no HelmApp names any more, and forgets
    /// access answers past their time.
    pub fn retain(&self) {
        let named: HashSet<GroupVersionKind> = self
            .apps
            .list()
            .iter()
            .flat_map(|a| {
                a.spec
                    .depends_on
                    .iter()
                    .filter_map(gvk_of)
                    .collect::<Vec<_>>()
            })
            .collect();
        self.kinds.lock().retain(|gvk, kind| {
            let keep = named.contains(gvk);
            if !keep && let Some(informer) = &kind.informer {
                informer.stop();
                log::info!(
                    "dependsOn: no HelmApp names {} of {} any more: stopped watching",
                    kind.resource.plural,
                    kind.resource.api_version
                );
            }
            keep
        });
        self.allowed
            .lock()
            .retain(|_, at| at.elapsed() < ACCESS_TTL);
    }
}

/// What an informer of `resource` lists, and what it keeps of each object.
/// Secrets and ConfigMaps: not Helm's release storage (large, and nobody's
/// dependency); of a Secret, its keys only — its values are never held
/// (an expression sees them empty).
fn kept_of(resource: &ApiResource) -> (ListWatchConfig, Option<cache::Transform<DynamicObject>>) {
    let mut config = ListWatchConfig::default();
    if !resource.group.is_empty() {
        return (config, None);
    }
    match resource.kind.as_str() {
        "Secret" | "ConfigMap" => config.label_selector = Some("owner!=helm".into()),
        _ => return (config, None),
    }
    if !is_secret(resource) {
        return (config, None);
    }
    let transform: cache::Transform<DynamicObject> = Arc::new(|mut secret: DynamicObject| {
        blank_values(&mut secret.data);
        secret
    });
    (config, Some(transform))
}

fn is_secret(resource: &ApiResource) -> bool {
    resource.group.is_empty() && resource.kind == "Secret"
}

/// Empties the values of a Secret's `data` and `stringData` (`fields`: the
/// object, or its fields beside `metadata`), keeping the keys.
fn blank_values(fields: &mut Value) {
    for field in ["data", "stringData"] {
        if let Some(Value::Object(values)) = fields.get_mut(field) {
            for value in values.values_mut() {
                *value = Value::String(String::new());
            }
        }
    }
}

/// The kind an object dependency names (`None`: a HelmApp or HelmAppSet,
/// or no `apiVersion`).
pub fn gvk_of(d: &apis::helmapp::Dependency) -> Option<GroupVersionKind> {
    match d.target() {
        DependencyTarget::Object { api_version, kind } if !api_version.is_empty() => {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            Some(GroupVersionKind::gvk(group, version, kind))
        }
        _ => None,
    }
}

fn to_json(object: &DynamicObject) -> Found {
    match serde_json::to_value(object) {
        Ok(v) => Found::Object(v),
        Err(e) => Found::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resource(group: &str, kind: &str) -> ApiResource {
        let gvk = GroupVersionKind::gvk(group, "v1", kind);
        ApiResource::from_gvk(&gvk)
    }

    #[test]
    fn a_secret_keeps_its_keys_and_never_its_values_and_helm_storage_is_not_listed() {
        let (config, transform) = kept_of(&resource("", "Secret"));
        assert_eq!(config.label_selector.as_deref(), Some("owner!=helm"));
        let secret: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "tls" },
            "type": "kubernetes.io/tls",
            "data": { "tls.crt": "c2VjcmV0", "tls.key": "a2V5" } }))
        .unwrap();
        let kept = transform.expect("a transform for Secrets")(secret);
        assert_eq!(kept.data["data"], json!({ "tls.crt": "", "tls.key": "" }));
        assert_eq!(kept.data["type"], "kubernetes.io/tls");
        let mut read = json!({ "kind": "Secret", "stringData": { "password": "hunter2" } });
        blank_values(&mut read);
        assert_eq!(read["stringData"]["password"], "");

        let (config, transform) = kept_of(&resource("", "ConfigMap"));
        assert_eq!(config.label_selector.as_deref(), Some("owner!=helm"));
        assert!(transform.is_none(), "a ConfigMap's data is kept");
        let (config, transform) = kept_of(&resource("example.hossted.com", "Secret"));
        assert!(config.label_selector.is_none() && transform.is_none());
    }

    #[test]
    fn an_object_dependency_names_its_group_version_and_kind() {
        let d = |api_version: &str, kind: &str| apis::helmapp::Dependency {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            gvk_of(&d("postgresql.cnpg.io/v1", "Cluster")),
            Some(GroupVersionKind::gvk("postgresql.cnpg.io", "v1", "Cluster"))
        );
        assert_eq!(
            gvk_of(&d("v1", "Secret")),
            Some(GroupVersionKind::gvk("", "v1", "Secret"))
        );
        assert_eq!(gvk_of(&d("", "HelmApp")), None);
        assert_eq!(gvk_of(&d("hossted.com/v1alpha1", "HelmAppSet")), None);
        assert_eq!(gvk_of(&d("", "Cluster")), None, "no apiVersion: reported");
        assert_eq!(
            gvk_of(&d("other.io/v1", "HelmApp")),
            Some(GroupVersionKind::gvk("other.io", "v1", "HelmApp")),
            "another group's HelmApp is an object"
        );
    }
}
