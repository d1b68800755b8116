//! What `dependsOn` and the CEL expressions of a HelmApp hold it back for
//! (docs/dependencies.md): read here, decided by `decide::state`.
//!
//! A HelmApp or HelmAppSet dependency is Ready by its `Ready` condition. An
//! object of any other kind is ready, in this order, by its `readyExpr`,
//! by the `healthCheckExprs` entry of its kind, or by kstatus.

use apis::helmapp::{Dependency, DependencyTarget, HealthCheckExpr, HelmApp};
use kube::ResourceExt;
use serde_json::Value;

use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::dependencies::{cycle_through, namespace_of};
use crate::delivery::helmapp::decide::kstatus::{self, Readiness};
use crate::delivery::helmapp::decide::observed::Waiting;
use crate::delivery::helmapp::observe::expressions::{self, ExprError, Truth};
use crate::delivery::helmapp::watched_kinds::{Found, gvk_of};

/// The first expression of `app` that does not compile: `InvalidExpression`
/// with the field, line and column. Checked before anything is read.
pub fn invalid_expression(app: &HelmApp) -> Option<String> {
    let ready = app
        .spec
        .depends_on
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.ready_expr.is_empty())
        .map(|(i, d)| (format!("dependsOn[{i}].readyExpr"), &d.ready_expr));
    let health = app
        .spec
        .health_check_exprs
        .iter()
        .enumerate()
        .flat_map(|(i, h)| {
            [
                ("current", &h.current),
                ("inProgress", &h.in_progress),
                ("failed", &h.failed),
            ]
            .into_iter()
            .filter(|(_, e)| !e.is_empty())
            .map(move |(f, e)| (format!("healthCheckExprs[{i}].{f}"), e))
        });
    ready
        .chain(health)
        .find_map(|(field, source)| expressions::compile(&field, source).err())
        .map(|e| e.to_string())
}

/// At most this many distinct dependencies are read for one HelmApp: the
/// CRD allows 64 of its own and 64 of its set's, and a sequenced set adds
/// the app before it (objects stored before those bounds keep more).
const MAX_DEPENDENCIES: usize = 64 + 64 + 1;

/// Why `app` must wait for its `dependsOn`, if it must: a cycle, a
/// dependency that does not exist, may not be read, or is not ready.
pub async fn waiting(ctx: &Context, app: &HelmApp) -> Option<Waiting> {
    if let Some(path) = cycle_through(app, &ctx.apps, &ctx.sets) {
        let message = format!(
            "dependsOn makes a cycle: {}; remove one of these dependencies",
            path.join(" → ")
        );
        return Some(Waiting::until_changed(Reason::DependencyCycle, message));
    }
    let own_ns = app.namespace().unwrap_or_default();
    // Each distinct dependency once: a list that names one a thousand
    // times costs one read of it (one not cached is read by request).
    let mut distinct: Vec<(usize, &Dependency)> = Vec::new();
    for (i, d) in app.spec.depends_on.iter().enumerate() {
        if !distinct.iter().any(|(_, seen)| *seen == d) {
            distinct.push((i, d));
        }
    }
    if distinct.len() > MAX_DEPENDENCIES {
        return Some(Waiting::until_changed(
            Reason::TooManyDependencies,
            format!(
                "dependsOn names {} distinct dependencies (with its HelmAppSet's); at most {MAX_DEPENDENCIES} are read",
                distinct.len()
            ),
        ));
    }
    for (i, d) in distinct {
        let ns = namespace_of(&own_ns, d);
        let waits = match d.target() {
            DependencyTarget::HelmApp => {
                let (found, polled) =
                    as_identity(ctx, app, ns, &d.name, ctx.apps.get(&key(ns, d))).await;
                helmapp_like(app, i, found, polled, "HelmApp", ns, d).await
            }
            DependencyTarget::HelmAppSet => {
                let (found, polled) =
                    as_identity(ctx, app, ns, &d.name, ctx.sets.get(&key(ns, d))).await;
                helmapp_like(app, i, found, polled, "HelmAppSet", ns, d).await
            }
            DependencyTarget::Object { .. } => object(ctx, app, i, d, ns).await,
        };
        if waits.is_some() {
            return waits;
        }
    }
    None
}

/// A HelmApp or HelmAppSet dependency as `app`'s identity may see it, and
/// whether it was read by request (then nothing wakes `app` when it
/// changes: it is polled) — the one rule for reading another namespace, as
/// for objects of any kind (`super::super::watched_kinds`): in its own
/// namespace, or for a privileged app, the cache's `cached`; in another, a
/// GET as the identity (impersonated). A refusal reads as absent — the
/// same answer as a missing object, so a dependency says nothing of what
/// its identity may not read (a `readyExpr` is no oracle on another
/// tenant's values).
///
/// Not in the cache is not yet absent: the cache holds this process's
/// shard only (docs/shards.md), and a dependency may live in another —
/// it is read from the API server, as the operator where the cache would
/// have been read.
async fn as_identity<K>(
    ctx: &Context,
    app: &HelmApp,
    ns: &str,
    name: &str,
    cached: Option<std::sync::Arc<K>>,
) -> (Option<std::sync::Arc<K>>, bool)
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let user = ctx.settings.tenancy.identity(app).user();
    let user = match (user, app.namespace().as_deref() == Some(ns)) {
        (Some(user), false) => Some(user),
        _ if cached.is_some() => return (cached, false),
        _ => None,
    };
    let Ok(mut get) =
        kube::core::Request::new(K::url_path(&(), Some(ns))).get(name, &Default::default())
    else {
        return (None, true);
    };
    if let Some(user) = &user
        && crate::delivery::tenancy::impersonate(&mut get, Some(user)).is_err()
    {
        return (None, true);
    }
    match ctx.client.request::<K>(get).await {
        Ok(object) => (Some(std::sync::Arc::new(object)), true),
        Err(e) => {
            log::debug!(
                "{}: dependsOn {ns}/{name} read as {}: {e}",
                cache::object_key(app),
                user.as_deref().unwrap_or("the operator")
            );
            (None, true)
        }
    }
}

fn key(ns: &str, d: &Dependency) -> String {
    format!("{ns}/{}", d.name)
}

/// A HelmApp or HelmAppSet dependency: there, and `Ready` — or, with a
/// `readyExpr`, what it says of the dependency (looked at again with
/// backoff while false: only a change of `Ready` re-queues dependents).
/// One read by request (`polled`) is looked at again with backoff.
async fn helmapp_like<K: kube::Resource + HasConditions + serde::Serialize>(
    app: &HelmApp,
    i: usize,
    found: Option<std::sync::Arc<K>>,
    polled: bool,
    kind: &str,
    ns: &str,
    d: &Dependency,
) -> Option<Waiting> {
    let key = key(ns, d);
    let wait = |reason, message: String| {
        Some(if polled {
            Waiting::polled(reason, message)
        } else {
            Waiting::until_changed(reason, message)
        })
    };
    match found {
        None => wait(
            Reason::DependencyNotFound,
            format!("dependsOn {kind} {key} does not exist; installed once it does and is Ready"),
        ),
        Some(o) if !d.ready_expr.is_empty() => {
            let object = serde_json::to_value(o.as_ref()).unwrap_or(Value::Null);
            match judge(app, i, d, object).await {
                Ok(Readiness::Ready) => None,
                Ok(Readiness::Pending(why) | Readiness::Failed(why)) => Some(Waiting::polled(
                    Reason::DependencyNotReady,
                    format!("waiting for {kind} {key} to be ready: {why}"),
                )),
                Err(e) => Some(Waiting::polled(expression_reason(&e), e.to_string())),
            }
        }
        Some(o) if !crate::condition::is_true(o.conditions(), "Ready") => wait(
            Reason::DependencyNotReady,
            format!("waiting for {kind} {key} to be Ready"),
        ),
        Some(_) => None,
    }
}

/// What carries a `Ready` condition.
trait HasConditions {
    fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition];
}

impl HasConditions for HelmApp {
    fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl HasConditions for apis::helmappset::HelmAppSet {
    fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// An object dependency, read as `app`'s identity, then judged.
async fn object(
    ctx: &Context,
    app: &HelmApp,
    i: usize,
    d: &Dependency,
    ns: &str,
) -> Option<Waiting> {
    let what = format!("{} {}/{}", d.kind, ns, d.name);
    let (object, polled) = match read(ctx, app, i, d, ns, &what).await {
        Ok(read) => read,
        Err(waiting) => return Some(waiting),
    };
    let wait = |reason, message: String| {
        Some(if polled {
            Waiting::polled(reason, message)
        } else {
            Waiting::until_changed(reason, message)
        })
    };
    match judge(app, i, d, object).await {
        Ok(Readiness::Ready) => None,
        Ok(Readiness::Pending(why)) => wait(
            Reason::DependencyNotReady,
            format!("waiting for {what} to be ready: {why}"),
        ),
        Ok(Readiness::Failed(why)) => wait(
            Reason::DependencyNotReady,
            format!("dependsOn {what} failed: {why}"),
        ),
        Err(e) => Some(Waiting::polled(expression_reason(&e), e.to_string())),
    }
}

/// The object `d` names (`what`), read as `app`'s identity, and whether
/// its kind is read by request; or why the release waits.
async fn read(
    ctx: &Context,
    app: &HelmApp,
    i: usize,
    d: &Dependency,
    ns: &str,
    what: &str,
) -> Result<(Value, bool), Waiting> {
    let Some(gvk) = gvk_of(d) else {
        return Err(Waiting::until_changed(
            Reason::DependencyNotFound,
            format!(
                "dependsOn[{i}]: kind {} needs an apiVersion (HelmApp and HelmAppSet are the only kinds without one)",
                d.kind
            ),
        ));
    };
    let identity = ctx.settings.tenancy.identity(app);
    let user = identity.user();
    let lookup = ctx.watched.get(&gvk, ns, &d.name, user.as_deref()).await;
    let waiting = |reason, message: String| Err(Waiting::polled(reason, message));
    match lookup.found {
        Found::Object(object) => Ok((object, lookup.polled)),
        Found::Absent if !lookup.polled => Err(Waiting::until_changed(
            Reason::DependencyNotFound,
            format!("dependsOn {what} does not exist; installed once it does and is ready"),
        )),
        Found::Absent => waiting(
            Reason::DependencyNotFound,
            format!("dependsOn {what} does not exist; installed once it does and is ready"),
        ),
        Found::Unsynced => waiting(
            Reason::DependencyNotReady,
            format!("dependsOn {what}: its kind is being listed"),
        ),
        // In another namespace, a refusal reads as absent — the one rule
        // for reading another namespace (see `as_identity`); in its own,
        // the tenant is told what Role it lacks.
        Found::Forbidden(_) if app.namespace().as_deref() != Some(ns) => waiting(
            Reason::DependencyNotFound,
            format!("dependsOn {what} does not exist; installed once it does and is ready"),
        ),
        Found::Forbidden(message) => waiting(
            Reason::Forbidden,
            format!(
                "dependsOn {what}: {identity} may not read it ({message}); give it get on that kind in a Role"
            ),
        ),
        Found::NoSuchKind(message) => waiting(
            Reason::DependencyNotFound,
            format!("dependsOn {what}: {message}"),
        ),
        Found::Failed(message) => waiting(
            Reason::DependencyNotReady,
            format!("dependsOn {what}: cannot be read: {message}"),
        ),
    }
}

/// Whether `object` is ready: by `d`'s `readyExpr`, else by its kind's
/// `healthCheckExprs` entry, else by kstatus.
async fn judge(
    app: &HelmApp,
    i: usize,
    d: &Dependency,
    object: Value,
) -> Result<Readiness, ExprError> {
    if !d.ready_expr.is_empty() {
        let field = format!("dependsOn[{i}].readyExpr");
        let this = serde_json::to_value(app).unwrap_or(Value::Null);
        let vars = vec![("dep", object), ("self", this)];
        return Ok(
            match expressions::evaluate(&field, &d.ready_expr, vars).await? {
                Truth::Yes => Readiness::Ready,
                Truth::No => {
                    Readiness::Pending(format!("its readyExpr is false ({})", d.ready_expr))
                }
                Truth::NotYet(key) => {
                    Readiness::Pending(format!("its readyExpr reads {key}, not there yet"))
                }
            },
        );
    }
    match health_check(&app.spec.health_check_exprs, &d.api_version, &d.kind) {
        Some(check) => health(check, object).await,
        None => Ok(kstatus::readiness(&object)),
    }
}

/// The reason for an expression that could not be used.
pub fn expression_reason(e: &ExprError) -> Reason {
    match e {
        ExprError::Busy { .. } => Reason::DependencyNotReady,
        e if e.is_bound() => Reason::ExpressionCostExceeded,
        _ => Reason::InvalidExpression,
    }
}

/// The `healthCheckExprs` entry of a kind, if any.
pub fn health_check<'a>(
    checks: &'a [HealthCheckExpr],
    api_version: &str,
    kind: &str,
) -> Option<&'a HealthCheckExpr> {
    checks
        .iter()
        .find(|h| h.api_version == api_version && h.kind == kind)
}

/// `object` judged by `check`: `failed`, then `inProgress`, then
/// `current`; none true: not yet. A field not there yet: not yet.
pub async fn health(check: &HealthCheckExpr, object: Value) -> Result<Readiness, ExprError> {
    let field = |f: &str| format!("healthCheckExprs[{} {}].{f}", check.api_version, check.kind);
    let is = |name: &'static str, source: &str| {
        let (field, source, object) = (field(name), source.to_string(), object.clone());
        async move {
            if source.is_empty() {
                return Ok(Truth::No);
            }
            expressions::evaluate(&field, &source, vec![("self", object)]).await
        }
    };
    if is("failed", &check.failed).await? == Truth::Yes {
        return Ok(Readiness::Failed(format!(
            "its failed expression is true ({})",
            check.failed
        )));
    }
    if is("inProgress", &check.in_progress).await? == Truth::Yes {
        return Ok(Readiness::Pending(
            "its inProgress expression is true".into(),
        ));
    }
    Ok(match is("current", &check.current).await? {
        Truth::Yes => Readiness::Ready,
        Truth::No => Readiness::Pending("its current expression is false".into()),
        Truth::NotYet(key) => {
            Readiness::Pending(format!("its current expression reads {key}, not there yet"))
        }
    })
}
