//! Observe: everything a decision about one HelmApp needs, gathered from
//! the caches, Helm's storage and the chart source into a plain
//! [`Observed`] value (`observation.rs`). Nothing here decides; `super::state` does, from this
//! alone — so what an event handler saw is always re-derived here, and a
//! restart or a new leader loses nothing.

pub mod adoptable;
pub mod dependency;
pub mod drift;
pub mod expressions;
pub mod inputs;
pub mod readiness;
pub mod sops;
pub mod storage;
pub mod trust;
pub mod updates;

use crate::lean::helm::HelmStatus;
use std::sync::Arc;

use apis::helmapp::{DriftMode, HelmApp};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::{Api, ResourceExt};

use super::context::{Context, run_key};
use crate::delivery::helmapp::decide::conditions::{READY, Reason};
use crate::delivery::helmapp::decide::desired::config_hash;
use crate::delivery::helmapp::decide::observed::{Inputs, Observed, Stored, timeout_of};
use crate::delivery::helmapp::decide::state;
use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::names::{
    APPROVE, FORCE_AT, HASH_LABEL, RECONCILE_AT, RELEASE_INDEX, UID_LABEL,
};
use crate::lean::manifest::ManifestObject;
use crate::lean::objects::label;
use crate::lean::storage::HelmRelease;
use crate::lean::storage::newest_of;

/// Gathers what [`state::decide`] needs to decide about `app`. Fails only
/// when a read that a decision cannot be made without failed (Helm's
/// storage, re-read to confirm a difference from what was recorded):
/// nothing is decided on a guess.
pub async fn gather(ctx: &Context, app: &HelmApp) -> Result<Observed, kube::Error> {
    let target = Target::of(app);
    let mut status = ctx.status.current(app);
    status.observed_generation = app.metadata.generation;
    status.release_name = target.release.clone();
    status.target_namespace = target.namespace.clone();
    let entries = storage_entries(ctx, &target);
    let entry = newest_of(&entries).cloned();
    let newest = entry.as_deref().map(Stored::of);
    let owner_is_live = newest
        .as_ref()
        .is_some_and(|r| owned_by_live(ctx, &r.owner, app));
    let (timeout, timeout_clamped) = timeout_of(app, ctx.settings.max_helm_timeout);
    let mut o = Observed {
        timeouts: crate::delivery::helmapp::decide::observed::Timeouts::of(
            app,
            timeout,
            ctx.settings.max_helm_timeout,
        ),
        timeout,
        timeout_clamped,
        resolve_after: resolve_after(app),
        uid: app.uid().unwrap_or_default(),
        identity: ctx.settings.tenancy.identity(app),
        redactor: Default::default(),
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
        run_ended: None,
        refused_for: ctx
            .refused
            .lock()
            .get(&run_key(app))
            .map(|(since, _)| since.elapsed()),
        helm_ran: false,
        busy: ctx.helm.is_busy(&target.namespace, &target.release),
        our_helm_ended: ctx.helm.last_ended(&target.namespace, &target.release),
        produced: ctx.produced.lock().get(&run_key(app)).copied(),
        server_side_revisions: entries
            .iter()
            .filter(|e| e.release.as_ref().is_ok_and(|r| r.server_side))
            .map(|e| e.version())
            .collect(),
        newest,
        owner_is_live,
        tampered: None,
        adoption_render: None,
        own_unrecorded: None,
        own_render: None,
        own_proven: None,
        run_live: false,
        adoption_refused: None,
        project_gone: false,
        missing: Vec::new(),
        pending: Vec::new(),
        readiness_failed: None,
        readiness_polled: false,
        drift: Default::default(),
        now: chrono::Utc::now(),
        leading_since: *ctx.leading_since.get_or_init(chrono::Utc::now),
        status,
        target,
    };
    let deleting_now = app.metadata.deletion_timestamp.is_some();
    let fresh = if deleting_now || o.newest.as_ref().is_some_and(|n| n.owner != o.uid) {
        refresh_owner(ctx, app, &mut o).await
    } else {
        None
    };
    let fresh = adopting(ctx, app, &mut o, fresh).await;
    own_revision(ctx, app, &mut o).await;
    o.tampered = tampered(ctx, app, &mut o, &entries, fresh).await?;
    if deleting_now {
        o.project_gone = project_gone(ctx, app).await;
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
        o.pending = readiness::pending(ctx, &o.target, jobs);
    }
    if app.spec.drift_mode() != DriftMode::Disabled
        && !o.busy
        && o.tampered.is_none()
        && let Some(entry) = entry.filter(|e| label(&e.metadata, UID_LABEL) == o.uid)
    {
        o.missing = missing_objects(ctx, &o.target, &entry).await;
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

/// Records the revision our last helm run made, if the status lacks it
/// ([`storage::record_own_revision`]); after a run of ours that the API's
/// outage cut off, or whose storage could not be read, what it left, as
/// after any action of ours.
async fn own_revision(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let key = run_key(app);
    // (A run the status's intent names that ended unrecorded because its
    // operator died is not recorded here: whatever it left, pending,
    // failed or deployed, is unrecorded until a render of this
    // configuration proves it — `act::own_run`.)
    let interrupted = ctx.interrupted.lock().contains(&key);
    // (Recorded with the intent as a leftover: its revision, unread since
    // helm ended, is proven by a render like any other — an outage is no
    // reason to take a tenant's word for it.)
    if interrupted && storage::record_after_action(&ctx.client, o).await.is_some() {
        log::info!(
            "{}: recorded what our helm run, cut off by the API server's outage, left in Helm's storage",
            o.target.key()
        );
        ctx.interrupted.lock().remove(&key);
    }
    let made = ctx.made.lock().get(&key).cloned();
    if let Some(made) = made
        && storage::record_own_revision(&ctx.client, o, made).await
    {
        ctx.made.lock().remove(&key);
    }
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

/// The owner of the newest revision read afresh, before an uninstall, an
/// adoption or a refusal is decided on it: the storage's watch may lag
/// behind a move that just rewrote its owner labels. Returns the fresh
/// read (`None`: it failed), for the tamper check to reuse.
async fn refresh_owner(ctx: &Context, app: &HelmApp, o: &mut Observed) -> Option<Vec<HelmRelease>> {
    let read = match storage::read(&ctx.client, &o.target).await {
        Ok(entries) => {
            let fresh = storage::newest(&entries);
            match (o.newest.as_mut(), fresh.as_ref()) {
                (Some(cached), Some(fresh)) if cached.revision <= fresh.revision => {
                    cached.owner = fresh.owner.clone();
                }
                (Some(_), None) => o.newest = None,
                _ => {}
            }
            Some(entries)
        }
        Err(e) => {
            log::warn!("{}: cannot re-read Helm's storage: {e}", o.target.key());
            None
        }
    };
    o.owner_is_live = o
        .newest
        .as_ref()
        .is_some_and(|r| owned_by_live(ctx, &r.owner, app));
    read
}

/// A release no live HelmApp owns, about to be adopted (`spec.adopt`) or
/// installed over (its newest entry is `uninstalled`, kept by a deleted
/// HelmApp's `keepHistory`): its storage, as read now, is what the
/// operator trusts from then on — helm reads those entries too. An
/// adoption as the operator's identity is refused first when the storage
/// lists foreign objects ([`super::adoption`]); an install over
/// `uninstalled` entries takes nothing of theirs. Returns the fresh read
/// for the tamper check, or `None` when it was used here.
async fn adopting(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    fresh: Option<Vec<HelmRelease>>,
) -> Option<Vec<HelmRelease>> {
    let unowned = o
        .newest
        .as_ref()
        .is_some_and(|n| n.owner != o.uid && !o.owner_is_live);
    let installs_over = o
        .newest
        .as_ref()
        .is_some_and(|n| n.status == HelmStatus::Uninstalled);
    if !(app.spec.adopt || installs_over) || !unowned || app.metadata.deletion_timestamp.is_some() {
        return fresh;
    }
    let Some(entries) = fresh else {
        o.adoption_refused = Some("Helm's storage could not be read; trying again".into());
        return None;
    };
    if !installs_over && o.identity == crate::delivery::Identity::Operator {
        o.adoption_refused =
            match crate::delivery::helmapp::observe::adoptable::refused(&ctx.client, &o.target)
                .await
            {
                Ok(refused) => refused,
                Err(e) => Some(format!(
                    "Helm's storage could not be read ({e}); trying again"
                )),
            };
    }
    if o.adoption_refused.is_none() {
        storage::trust(&mut o.status, &entries);
    }
    None
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

/// Why the release's storage is not trusted, if it is not
/// ([`storage::check`]); an error when the cache shows a difference and
/// the read that would confirm it failed (an API outage must not turn
/// into `StorageTampered`: undecided, the reconcile waits and looks
/// again). Entries that are no release get their `InvalidRelease`
/// Warning. Changed storage is accepted only by a new
/// `hossted.com/reconcile-at` set after the change was reported (`Ready`
/// says `StorageTampered`): whoever may patch the HelmApp accepts the
/// stored state, which is trusted from then on. A configuration change
/// accepts nothing.
async fn tampered(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    entries: &[Arc<HelmRelease>],
    fresh: Option<Vec<HelmRelease>>,
) -> Result<Option<String>, kube::Error> {
    warn_invalid(ctx, app, entries);
    let operator_made = ctx.settings.tenancy.operator_made(app);
    let untrusted = match storage::check(&ctx.client, o, entries, fresh, operator_made).await? {
        None => return Ok(None),
        Some(u) => {
            o.own_unrecorded = own_unrecorded(o, entries, &u);
            u.message(&o.target.key())
        }
    };
    let reported = crate::delivery::helmapp::decide::conditions::has(
        &o.status,
        READY,
        false,
        Reason::StorageTampered,
    );
    if reported && o.reconcile_at != o.status.last_handled_reconcile_at {
        match storage::read(&ctx.client, &o.target).await {
            Ok(fresh) => {
                log::info!(
                    "{}: Helm's storage accepted as it is ({} set to {:?})",
                    o.target.key(),
                    RECONCILE_AT,
                    o.reconcile_at
                );
                storage::trust(&mut o.status, &fresh);
                o.status.last_handled_reconcile_at = o.reconcile_at.clone();
                return Ok(None);
            }
            Err(e) => log::warn!("{}: cannot re-read Helm's storage: {e}", o.target.key()),
        }
    }
    // Only a value set after this report accepts.
    o.status.last_handled_reconcile_at = o.reconcile_at.clone();
    Ok(Some(untrusted))
}

/// The revision `untrusted` names, when it may be one our own helm made
/// before its operator could record it: never recorded, labelled with
/// this HelmApp's UID, the newest, one past the newest recorded (a run
/// makes one revision), and either `deployed` or — the run intent in the
/// status naming it — `pending-*` or `failed` (the operator died while
/// its helm ran). Its labels and the intent only select it: it is
/// trusted once this configuration is found to render it
/// (`super::state`, `super::act::own_run`).
fn own_unrecorded(
    o: &Observed,
    entries: &[Arc<HelmRelease>],
    untrusted: &storage::Untrusted,
) -> Option<i64> {
    let storage::Untrusted::Unrecorded { revision, .. } = untrusted else {
        return None;
    };
    // (Nothing recorded: a first install whose operator stopped before
    // recording it.)
    let recorded = o
        .status
        .storage_digests
        .iter()
        .map(|d| d.revision)
        .max()
        .unwrap_or(0);
    let declared = o
        .status
        .run_intent
        .as_ref()
        .is_some_and(|i| i.revision == *revision);
    let newest = newest_of(entries)?;
    let candidate = newest.version() == *revision
        && *revision == recorded + 1
        && label(&newest.metadata, UID_LABEL) == o.uid
        && newest.release.as_ref().is_ok_and(|r| {
            r.status == HelmStatus::Deployed
                || (declared && (r.status.is_pending() || r.status == HelmStatus::Failed))
        });
    candidate.then_some(*revision)
}

/// One `InvalidRelease` Warning on each storage Secret of the release
/// that is not a release (the recorder folds repeats into one Event).
fn warn_invalid(ctx: &Context, app: &HelmApp, entries: &[Arc<HelmRelease>]) {
    for e in entries {
        let Err(error) = &e.release else { continue };
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: e.metadata.name.clone(),
                namespace: e.metadata.namespace.clone(),
                uid: e.metadata.uid.clone(),
                ..Default::default()
            },
            ..Default::default()
        };
        let message = format!(
            "not a Helm release ({error}): HelmApp {}/{} runs no helm on this release while it is here",
            app.namespace().unwrap_or_default(),
            app.name_any()
        );
        ctx.recorder.event(
            &secret,
            record::EventType::Warning,
            Reason::InvalidRelease.as_str(),
            &message,
        );
    }
}

/// The chart, the cached digests of what `valuesFrom` names, and their
/// hash: deciding "nothing to do" reads no Secret. Values or `set` past
/// their bounds are refused first: no chart is fetched for them.
async fn inputs(ctx: &Context, app: &HelmApp, target: &Target) -> Inputs {
    if let Err(message) = crate::delivery::helm::values::check_bounds(&app.spec) {
        return Inputs::OutOfBounds(message);
    }
    let chart = match inputs::chart(ctx, app).await {
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

/// Every cached storage entry of `target`'s release, releases or not.
fn storage_entries(ctx: &Context, target: &Target) -> Vec<Arc<HelmRelease>> {
    ctx.releases.by_index(RELEASE_INDEX, &target.key())
}

impl Stored {
    fn of(entry: &HelmRelease) -> Self {
        let (status, updated) = match &entry.release {
            Ok(r) => (r.status.clone(), r.updated.clone()),
            Err(_) => Default::default(),
        };
        Stored {
            revision: entry.version(),
            secret: entry.metadata.name.clone().unwrap_or_default(),
            owner: label(&entry.metadata, UID_LABEL).to_string(),
            hash: label(&entry.metadata, HASH_LABEL).to_string(),
            status,
            updated,
            digest: entry.digest_string().unwrap_or_default(),
        }
    }
}

/// Whether `owner` is the UID of another HelmApp that exists and is not
/// being deleted.
fn owned_by_live(ctx: &Context, owner: &str, app: &HelmApp) -> bool {
    !owner.is_empty()
        && app.uid().as_deref() != Some(owner)
        && ctx
            .apps
            .list()
            .iter()
            .any(|a| a.uid().as_deref() == Some(owner) && a.metadata.deletion_timestamp.is_none())
}

/// Why `app` may not name the namespace it targets or one of its
/// `dependsOn` names, if it may not ([`crate::delivery::tenancy`]). Checked
/// before anything that reads other namespaces (dependency cycles), so its
/// message reveals nothing of them.
fn cross_namespace(ctx: &Context, app: &HelmApp, target: &Target) -> Option<String> {
    let tenancy = &ctx.settings.tenancy;
    if let Some(why) = tenancy.refuses_reference(app, &target.namespace) {
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

/// Objects of `entry` (the release's newest revision, ours) that are not
/// in the caches and, asked of the API, are really gone (a cache may not
/// have seen an object helm has just created).
async fn missing_objects(ctx: &Context, target: &Target, entry: &HelmRelease) -> Vec<String> {
    let Ok(release) = entry.release.as_ref() else {
        return Vec::new();
    };
    let mut gone = Vec::new();
    for object in &release.objects {
        let ns = if object.namespace.is_empty() {
            target.namespace.as_str()
        } else {
            object.namespace.as_str()
        };
        if !cached(ctx, object, ns) && absent(ctx, object, ns).await {
            gone.push(format!("{} {ns}/{}", object.kind, object.name));
        }
    }
    gone
}

fn cached(ctx: &Context, object: &ManifestObject, ns: &str) -> bool {
    let key = format!("{ns}/{}", object.name);
    let m = &ctx.members;
    match object.kind.as_str() {
        "Deployment" => m.deployments.get(&key).is_some(),
        "StatefulSet" => m.statefulsets.get(&key).is_some(),
        "Service" => m.services.get(&key).is_some(),
        "Ingress" => m.ingresses.get(&key).is_some(),
        "Secret" => m.secrets.get(&key).is_some(),
        _ => true,
    }
}

/// Whether the API says `object` does not exist (an error says nothing:
/// not absent).
async fn absent(ctx: &Context, object: &ManifestObject, ns: &str) -> bool {
    async fn gone<K>(ctx: &Context, ns: &str, name: &str) -> bool
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
        matches!(api.get_metadata_opt(name).await, Ok(None))
    }
    let name = object.name.as_str();
    match object.kind.as_str() {
        "Deployment" => gone::<Deployment>(ctx, ns, name).await,
        "StatefulSet" => gone::<StatefulSet>(ctx, ns, name).await,
        "Service" => gone::<Service>(ctx, ns, name).await,
        "Ingress" => gone::<Ingress>(ctx, ns, name).await,
        "Secret" => gone::<Secret>(ctx, ns, name).await,
        _ => false,
    }
}
