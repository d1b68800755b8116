//! Observe: everything a decision about one HelmApp needs, gathered from
//! the caches, Helm's storage and the chart source into a plain
//! [`Observed`] value (`decide/observed.rs`). Nothing here decides; `decide::state` does, from this
//! alone — so what an event handler saw is always re-derived here, and a
//! restart or a new leader loses nothing.

pub mod adoptable;
pub mod chart;
pub mod dependency;
pub mod drift;
pub mod expressions;
pub mod inputs;
pub mod missing;
pub mod readiness;
pub mod release;
pub mod sops;
pub mod storage;
pub mod trust;
pub mod updates;

use apis::helmapp::{DriftMode, HelmApp};
use kube::{Api, ResourceExt};

use super::cluster::Cluster;
use super::context::{Context, run_key};
use super::remote::Resolved;
use crate::delivery::helmapp::decide::desired::config_hash;
use crate::delivery::helmapp::decide::observed::{
    Inputs, Observed, Refused, ReleaseCluster, Stored, timeout_of,
};
use crate::delivery::helmapp::decide::state;
use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::helmapp::decide::windows;
use crate::delivery::names::{APPROVE, FORCE_AT, RECONCILE_AT, UID_LABEL};
use crate::lean::objects::label;
use crate::lean::storage::newest_of;
/// Gathers what [`state::decide`] needs to decide about `app`. Fails only
/// when a read that a decision cannot be made without failed (Helm's
/// storage, re-read to confirm a difference from what was recorded):
/// nothing is decided on a guess.
pub async fn gather(ctx: &Context, app: &HelmApp) -> Result<Observed, kube::Error> {
    let target = Target::of(app);
    let as_user = ctx.settings.tenancy.identity(app).user();
    let privileged = ctx
        .settings
        .tenancy
        .is_privileged(&app.namespace().unwrap_or_default());
    let resolved = ctx
        .remotes
        .resolve(&ctx.client, app, as_user.as_deref(), privileged)
        .await?;
    let cluster = match resolved {
        Resolved::Own => None,
        Resolved::Remote(cluster) => Some(cluster),
        Resolved::Unavailable(problem) => {
            // Nothing of the release can be read: it is held back as it is.
            let mut o = first_look(ctx, app, target, &ctx.own, None, &[]);
            o.cluster_problem = Some(problem);
            return Ok(o);
        }
    };
    let on = cluster.clone().unwrap_or_else(|| ctx.own.clone());
    let entries = release::storage_entries(&on, &target);
    let entry = newest_of(&entries).cloned();
    let mut o = first_look(ctx, app, target, &on, cluster, &entries);
    o.windows = windows(app, o.now).await;
    let deleting_now = app.metadata.deletion_timestamp.is_some();
    let fresh = if deleting_now || o.newest.as_ref().is_some_and(|n| n.owner != o.uid) {
        release::refresh_owner(ctx, app, &mut o).await
    } else {
        None
    };
    let fresh = release::adopting(ctx, app, &mut o, fresh).await;
    release::own_revision(ctx, app, &mut o).await;
    o.tampered = release::tampered(ctx, app, &mut o, &entries, fresh).await?;
    if deleting_now {
        o.project_gone = project_gone(ctx, app).await;
        o.namespace_going = namespace_going_if_uninstalled(ctx, app, &o).await;
    }
    if app.metadata.deletion_timestamp.is_some()
        || app.spec.suspend
        || o.invalid_name.is_some()
        || o.cross_namespace.is_some()
        || o.invalid_expression.is_some()
        || o.invalid_drift_rule.is_some()
    {
        return Ok(o);
    }
    o.dependency = crate::delivery::helmapp::observe::dependency::waiting(ctx, app).await;
    if state::held_back(&o, app).is_some() {
        // Nothing below would be read: no chart is fetched for an app that
        // waits.
        return Ok(o);
    }
    o.inputs = Some(inputs(ctx, app, &o.target).await);
    o.chart_name = chart_name_if_changed(app, &o).await;
    if app.spec.wait {
        let jobs = app.spec.waits_for_jobs(&o.status.last_action);
        o.pending = readiness::pending(&on, &o.target, jobs);
        readiness::applied_not_cached(ctx, app, &mut o);
    }
    if app.spec.drift_mode() != DriftMode::Disabled
        && !o.busy
        && o.tampered.is_none()
        && let Some(entry) = entry.filter(|e| label(&e.metadata, UID_LABEL) == o.uid)
    {
        o.missing = missing::missing_objects(&on, &o.target, &entry).await;
    }
    crate::delivery::helmapp::observe::drift::observe(ctx, app, &mut o).await;
    if app.spec.wait
        && !crate::delivery::helmapp::decide::conditions::is_true(
            &o.status,
            crate::delivery::helmapp::decide::conditions::READY,
        )
    {
        o.readiness_polled = true;
        o.readiness_failed = readiness::others(ctx, app, &mut o).await;
    }
    Ok(o)
}

/// Between two steps of one reconcile: what a run of this reconcile
/// changed that the plan's next step reads — the workloads of a revision
/// it released (with `wait`), and, after a failed run whose remedy runs
/// helm, Helm's storage read again.
pub async fn after_step(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    readiness::after_run(ctx, app, o).await;
    release::recheck_after_failure(ctx, app, o).await;
}

/// What the HelmApp, the caches and this process's memory of its runs say
/// at once: the observation before any request.
fn first_look(
    ctx: &Context,
    app: &HelmApp,
    target: Target,
    on: &Cluster,
    cluster: Option<std::sync::Arc<Cluster>>,
    entries: &[std::sync::Arc<crate::lean::storage::HelmRelease>],
) -> Observed {
    let mut status = ctx.status.current(app);
    status.observed_generation = app.metadata.generation;
    status.release_name = target.release.clone();
    status.target_namespace = target.namespace.clone();
    let entry = newest_of(entries).cloned();
    let newest = entry.as_deref().map(Stored::of);
    let owner_is_live = newest
        .as_ref()
        .is_some_and(|r| release::owned_by_live(ctx, &r.owner, app));
    let (timeout, timeout_clamped) = timeout_of(app, ctx.settings.max_helm_timeout);
    let now = chrono::Utc::now();
    Observed {
        timeouts: crate::delivery::helmapp::decide::observed::Timeouts::of(
            app,
            timeout,
            ctx.settings.max_helm_timeout,
        ),
        timeout,
        timeout_clamped,
        resolve_after: resolve_after(app),
        uid: app.uid().unwrap_or_default(),
        identity: match on.remote {
            None => ctx.settings.tenancy.identity(app),
            Some(_) => crate::delivery::tenancy::remote_identity(app),
        },
        reconcile_at: annotation(app, RECONCILE_AT),
        force_at: annotation(app, FORCE_AT),
        approve: annotation(app, APPROVE),
        invalid_name: crate::delivery::helm::check_release_name(&target.release, &target.namespace)
            .err(),
        cross_namespace: cross_namespace(ctx, app, &target),
        invalid_expression: crate::delivery::helmapp::observe::dependency::invalid_expression(app),
        invalid_drift_rule: crate::delivery::helmapp::observe::drift::rules::Rules::of(app).err(),
        chart_name: None,
        dependency: None,
        inputs: None,
        refused: ctx.refused.lock().get(&run_key(app)).map(|r| {
            let now = std::time::Instant::now();
            Refused {
                lasted: now - r.since,
                message: r.message.clone(),
                inputs: r.inputs.clone(),
                again_in: r.again_at.saturating_duration_since(now),
            }
        }),
        cluster_id: on.remote.clone(),
        busy: on.helm.is_busy(&target.namespace, &target.release),
        our_helm_ended: on.helm.last_ended(&target.namespace, &target.release),
        produced: ctx.produced.lock().get(&run_key(app)).copied(),
        server_side_revisions: entries
            .iter()
            .filter(|e| e.release.as_ref().is_ok_and(|r| r.server_side))
            .map(|e| e.version())
            .collect(),
        newest,
        owner_is_live,
        tampered: None,
        own_unrecorded: None,
        adoption_refused: None,
        done: Default::default(),
        project_gone: false,
        namespace_going: false,
        windows: Default::default(),
        storage_recheck: None,
        missing: Vec::new(),
        pending: Vec::new(),
        readiness_failed: None,
        readiness_polled: false,
        drift: Default::default(),
        now,
        leading_since: *ctx.leading_since.get_or_init(chrono::Utc::now),
        status,
        target,
        cluster: cluster.map(|c| c as std::sync::Arc<dyn ReleaseCluster>),
        cluster_problem: None,
    }
}

/// What `app`'s change windows say at `now`, read on a blocking thread:
/// the schedules' search is bounded, but it is CPU a tenant's spec asks
/// for, never an async worker's time.
async fn windows(app: &HelmApp, now: chrono::DateTime<chrono::Utc>) -> windows::Seen {
    let Some(spec) = app.spec.change_windows.clone() else {
        return windows::Seen::Unset;
    };
    tokio::task::spawn_blocking(move || windows::look(Some(&spec), now))
        .await
        .unwrap_or_else(|e| windows::Seen::Invalid(format!("changeWindows: not read ({e})")))
}

/// `spec.interval` for a chart of a repository, a registry or Git, or
/// values files from Git (10m when it does not parse); `None` for a chart
/// by path alone.
fn resolve_after(app: &HelmApp) -> Option<std::time::Duration> {
    let c = &app.spec.chart;
    let fetched = !c.repo.is_empty() || !c.oci.is_empty() || c.git.is_some();
    (fetched || !app.spec.values_files.is_empty()).then(|| {
        crate::delivery::helmapp::decide::desired::parse_duration(&app.spec.interval)
            .unwrap_or(std::time::Duration::from_secs(600))
    })
}

fn annotation(app: &HelmApp, key: &str) -> String {
    app.annotations().get(key).cloned().unwrap_or_default()
}

/// Whether the Hosstedproject an operator-made app came from is gone or
/// being deleted: the garbage collector deletes such apps after their
/// project, and their releases stay.
async fn project_gone(ctx: &Context, app: &HelmApp) -> bool {
    if !ctx.settings.tenancy.operator_made(app) {
        return false;
    }
    let project = app
        .labels()
        .get(crate::delivery::project::PROJECT_LABEL)
        .cloned()
        .unwrap_or_default();
    let api: Api<apis::Hosstedproject> = Api::all(ctx.client.clone());
    match api.get_opt(&project).await {
        Ok(Some(hp)) => hp.metadata.deletion_timestamp.is_some(),
        Ok(None) => true,
        Err(e) => {
            let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
            log::warn!("{key}: cannot read Hosstedproject {project}: {e}");
            false
        }
    }
}

/// The chart, the cached digests of what `valuesFrom` names, and their
/// hash: deciding "nothing to do" reads no Secret. Values or `set` past
/// their bounds are refused first: no chart is fetched for them.
async fn inputs(ctx: &Context, app: &HelmApp, target: &Target) -> Inputs {
    if let Err(message) = crate::delivery::helm::values::check_bounds(&app.spec) {
        return Inputs::OutOfBounds(message);
    }
    let chart = match chart::chart(ctx, app).await {
        Ok(Some(c)) => c,
        Ok(None) => return Inputs::ChartPending,
        Err(problem) => return Inputs::ChartUnavailable(problem),
    };
    match inputs::reference_digests(ctx, app) {
        Ok(references) => Inputs::Ready {
            hash: config_hash(app, target, &chart, &references),
            chart,
        },
        Err(e) => Inputs::ValuesInvalid(e),
    }
}

/// The name of the chart about to replace our release's, when the
/// configuration changed (a chart of another name changes it) and a rename
/// would reinstall: read from the chart itself, off the runtime's threads.
async fn chart_name_if_changed(app: &HelmApp, o: &Observed) -> Option<String> {
    use apis::helmapp::ChartNameChangeStrategy;
    let Some(Inputs::Ready { chart, hash }) = &o.inputs else {
        return None;
    };
    if app.spec.upgrade.chart_name_change_strategy != ChartNameChangeStrategy::Reinstall {
        // Only a reinstall needs it.
        return None;
    }
    let newest = o.newest.as_ref()?;
    if newest.owner != o.uid || &newest.hash == hash || o.status.chart_name.is_empty() {
        return None;
    }
    let path = chart.path.clone();
    let key = o.target.key();
    match tokio::task::spawn_blocking(move || crate::delivery::source::chart_name(&path)).await {
        Ok(Ok(name)) => Some(name),
        Ok(Err(e)) => {
            log::warn!("{key}: the chart's name cannot be read: {e}");
            None
        }
        Err(_) => None,
    }
}

/// Why `app` may not name the namespace it targets or one of its
/// `dependsOn` names, if it may not ([`crate::delivery::tenancy`]). Checked
/// before anything that reads other namespaces (dependency cycles), so its
/// message reveals nothing of them.
fn cross_namespace(ctx: &Context, app: &HelmApp, target: &Target) -> Option<String> {
    let tenancy = &ctx.settings.tenancy;
    // A remote release's namespace is the remote cluster's: there the
    // kubeConfig's credentials (or the ServiceAccount they impersonate)
    // meet that cluster's RBAC, not this cluster's tenancy.
    if target.via.is_empty()
        && let Some(why) = tenancy.refuses_reference(app, &target.namespace)
    {
        return Some(format!("targetNamespace {}: {why}", target.namespace));
    }
    let own_ns = app.namespace().unwrap_or_default();
    app.spec.depends_on.iter().find_map(|d| {
        let ns = crate::delivery::helmapp::decide::dependencies::namespace_of(&own_ns, d);
        tenancy
            .refuses_reference(app, ns)
            .map(|why| format!("dependsOn {ns}/{}: {why}", d.name))
    })
}

/// For a HelmApp being deleted whose release would be uninstalled (ours,
/// `uninstallOnDelete`, its project not gone, its storage not tampered
/// with): whether the target namespace is gone or terminating — read only
/// then, and a read that fails counts as not going (helm's uninstall then
/// says what it finds), so that no deletion waits on it.
async fn namespace_going_if_uninstalled(ctx: &Context, app: &HelmApp, o: &Observed) -> bool {
    let ours = o.newest.as_ref().is_some_and(|r| {
        r.owner == o.uid && r.status != crate::lean::helm::HelmStatus::Uninstalled
    });
    if !(ours && app.spec.uninstall_on_delete && !o.project_gone && o.tampered.is_none()) {
        return false;
    }
    namespace_going(&ctx.on(o).client, &o.target.namespace)
        .await
        .unwrap_or_else(|e| {
            log::info!(
                "{}: cannot read namespace {}: {e}; helm's uninstall runs",
                o.target.key(),
                o.target.namespace
            );
            false
        })
}

/// Whether namespace `ns` is gone or terminating.
async fn namespace_going(client: &kube::Client, ns: &str) -> Result<bool, kube::Error> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    Ok(match runtime::ignore_not_found(api.get(ns).await)? {
        None => true,
        Some(n) => {
            n.metadata.deletion_timestamp.is_some()
                || n.status.and_then(|s| s.phase).as_deref() == Some("Terminating")
        }
    })
}
