//! Install, upgrade or repair: one `helm upgrade --install` (`helm install`
//! when no revision exists: `run_flags::over_nothing`) with the merged
//! values on stdin and the config hash and owner UID as storage labels. It
//! records how the run ended (`Observed::run_ended`, the history, the
//! status) and hands back to the plan: the tests, the report, or what a
//! failure calls for are later steps.

use apis::helmapp::{CrdPolicy, HelmApp, HistoryResult};
use record::EventType;

use super::outcome::{DeliveryError, Outcome, refused_run};
use crate::delivery::helm::post_render::{self, ConfigFile};
use crate::delivery::helm::{Flags, HelmError, PostRender, Released, Upgrade, values};
use crate::delivery::helmapp::context::{Context, run_key};
use crate::delivery::helmapp::decide::conditions::{
    self, DRIFTED, READY, RELEASED, Reason, push_history,
};
use crate::delivery::helmapp::decide::observed::{Inputs, Observed, RunEnded, RunKind};
use crate::delivery::helmapp::decide::run_flags;
use crate::delivery::helmapp::observe::storage;
use crate::delivery::names::{HASH_LABEL, UID_LABEL};

/// The longest chart name kept in the status and shown (a Kubernetes
/// object name's bound; helm's own rule is looser).
const MAX_CHART_NAME: usize = 253;

/// Runs helm for `app` (see the module docs).
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: RunKind,
) -> Result<Outcome, DeliveryError> {
    let Some(Inputs::Ready { chart, hash }) = &o.inputs else {
        return Ok(not_started(
            o,
            Reason::ChartUnavailable,
            "the chart was not looked up".into(),
            true,
        ));
    };
    let (chart, hash) = (chart.clone(), hash.clone());
    start_afresh_if_asked(o, &hash);
    let values = match crate::delivery::helmapp::observe::inputs::values(
        ctx,
        app,
        &chart.values_files,
    )
    .await
    {
        Ok(v) => v,
        Err(e) => return Ok(not_started(o, e.reason, e.message, false)),
    };
    o.done.redactor = values::Redactor::of(&values);
    warn_if_clamped(ctx, app, o);
    let forced = take_force(ctx, app, o);
    let post_render = match post_render_file(ctx, app) {
        Ok(file) => file,
        Err(message) => return Ok(not_started(o, Reason::PostRendererInvalid, message, false)),
    };
    let uid = o.uid.clone();
    let labels = [(HASH_LABEL, hash.as_str()), (UID_LABEL, uid.as_str())];
    let user = o.identity.user();
    let parts = Parts {
        chart: &chart.path,
        values: &values,
        labels: &labels,
        user: user.as_deref(),
        post_render: post_render.as_ref(),
        flags: run_flags::of_run(app, o, kind, forced),
        timeout: o.timeouts.of_run(kind),
        absent: run_flags::over_nothing(o, kind),
    };
    super::intent::declare(ctx, app, o, kind.action()).await?;
    // The record after the run reads the storage helm wrote and proves
    // its objects from what the caches decode meanwhile
    // (`observe::storage::after_run_from_cache`,
    // `observe::drift::record_revision`).
    o.done.capturing = Some(crate::lean::recent::Capturing::start(
        &o.target.namespace,
        &o.target.release,
    ));
    let upgrade = request(ctx, app, o, parts);
    if app.spec.crds == CrdPolicy::CreateReplace
        && let Err(message) =
            super::crds::replace_crds(&ctx.on(o), &chart.path, upgrade.as_user).await
    {
        super::intent::withdraw(o);
        // helm's and the apiserver's words: redacted like any helm message.
        let message = o.done.redactor.redact(&message);
        return Ok(not_started(o, Reason::CRDsFailed, message, true));
    }
    let started = std::time::Instant::now();
    let Some(result) = ctx.on(o).helm.upgrade(&upgrade).await else {
        super::intent::withdraw(o);
        o.done.run_ended = Some(RunEnded::SlotBusy);
        return Ok(Outcome::Replan);
    };
    drop(post_render);
    if let Err(
        HelmError::Unreachable { .. }
        | HelmError::InvalidName { .. }
        | HelmError::AddressRefused { .. },
    ) = &result
    {
        // helm did not start: no revision was written under this intent.
        super::intent::withdraw(o);
    }
    if let Err(e) = &result
        && super::outage::outage(ctx, app, o, e).await
    {
        // Not a failure of the release: nothing counted, recorded or said.
        o.done.run_ended = Some(RunEnded::Outage);
        return Ok(Outcome::Replan);
    }
    let outcome = ended(ctx, app, o, kind, (&hash, &chart.version), result);
    if let Some(entry) = o.status.history.first_mut() {
        entry.duration = format!("{:.1}s", started.elapsed().as_secs_f64());
    }
    Ok(outcome)
}

/// helm was not started (`RunEnded::NotStarted`): for the plan.
fn not_started(o: &mut Observed, reason: Reason, message: String, retry: bool) -> Outcome {
    o.done.run_ended = Some(RunEnded::NotStarted {
        reason,
        message,
        retry,
    });
    Outcome::Replan
}

/// Whether `hossted.com/force-at` asks for `--force` now; acted on at
/// once, whatever the run's end: each value once.
fn take_force(ctx: &Context, app: &HelmApp, o: &mut Observed) -> bool {
    let forced = o.forced();
    o.status.last_handled_force_at = o.force_at.clone();
    if forced {
        super::window::note_forced(ctx, app, o);
    }
    forced
}

/// Records how a run that reached helm ended (`run_ended`, status,
/// history) and hands back to the plan. `tried`: the config hash and chart
/// version it ran.
fn ended(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: RunKind,
    tried: (&str, &str),
    result: Result<Released, HelmError>,
) -> Outcome {
    let (hash, version) = tried;
    o.done.helm_ran = true;
    match result {
        Ok(released) => {
            ctx.produced.lock().insert(run_key(app), released.revision);
            if !released.content.is_empty() {
                // Ours, as our helm printed it: recorded even if the storage
                // read after the run fails (observe::own_revision).
                let made = (released.revision, released.content.clone());
                ctx.made.lock().insert(run_key(app), made);
                super::intent::printed(o, released.revision, &released.content);
                o.done.printed_untested = Some((released.revision, released.untested.clone()));
            }
            let before = o.status.revision;
            let revision = released.revision;
            succeeded(ctx, app, o, kind, hash, released);
            o.done.run_ended = Some(RunEnded::Released {
                run: kind,
                revision,
                before,
            });
            Outcome::Replan
        }
        Err(e) => helm_failed(o, kind, hash, version, e),
    }
}

/// Records what helm left in the storage — what the next check expects —
/// once the steps after a run (its tests, its remediation) are done: before
/// the report of a revision released (`plan::Step::RecordRun`), else after
/// the last step. The objects of a revision it deployed go in the same
/// status write. Storage that cannot be read now is recorded by the next
/// reconcile that can.
pub async fn record_storage(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    o.done.recorded = true;
    let cluster = ctx.on(o);
    let cached = o.done.capturing.as_ref().and_then(|run| {
        let entries =
            crate::delivery::helmapp::observe::release::storage_entries(&cluster, &o.target);
        storage::after_run_from_cache(&entries, o, run)
    });
    let read = match cached {
        Some((entries, newest)) => {
            storage::record(o, &entries);
            Some((entries, newest))
        }
        None => storage::record_after_run(&cluster.client, o).await,
    };
    match read {
        Some((entries, newest)) => {
            // The newest revision's objects, from this read: drift's record
            // of them reads its Secret no second time.
            if let Some((secret, manifest)) = newest
                && let Some(digest) = entries
                    .iter()
                    .find(|e| e.metadata.name.as_deref() == Some(secret.as_str()))
                    .and_then(|e| e.digest_string())
            {
                // (A manifest refused here is refused again, saying why,
                // by the read the record makes.)
                let ns = &o.target.namespace;
                let _ = ctx
                    .on(o)
                    .drift
                    .manifests
                    .remember(ns, &secret, &digest, &manifest);
            }
            crate::delivery::helmapp::observe::drift::record_deployed(ctx, app, o, &entries).await
        }
        None => {
            ctx.interrupted.lock().insert(run_key(app));
        }
    }
}

/// What a run is made of besides the HelmApp.
pub(super) struct Parts<'a> {
    pub chart: &'a std::path::Path,
    pub values: &'a serde_json::Value,
    /// The storage labels: config hash and owner UID.
    pub labels: &'a [(&'a str, &'a str)],
    /// Whom helm impersonates (`None`: the operator).
    pub user: Option<&'a str>,
    pub post_render: Option<&'a ConfigFile>,
    pub flags: Flags,
    /// helm's `--timeout` for this run (the install's or the upgrade's).
    pub timeout: std::time::Duration,
    /// `helm install`: no revision exists (`run_flags::over_nothing`).
    pub absent: bool,
}

/// The `helm upgrade --install` (or, over nothing, `helm install`) of
/// `app` — the one an approval's dry run previews, too.
pub(super) fn request<'a>(
    ctx: &'a Context,
    app: &HelmApp,
    o: &'a Observed,
    parts: Parts<'a>,
) -> Upgrade<'a> {
    Upgrade {
        absent: parts.absent,
        release: &o.target.release,
        namespace: &o.target.namespace,
        chart: parts.chart,
        values: parts.values,
        labels: parts.labels,
        create_namespace: app.spec.create_namespace,
        // CreateReplace: the operator applies them itself, before helm.
        skip_crds: app.spec.crds != CrdPolicy::Create,
        as_user: parts.user,
        timeout: parts.timeout,
        flags: parts.flags,
        history_max: app.spec.max_history(),
        post_renderer: parts.post_render.and_then(|f| {
            Some(PostRender {
                binary: ctx.settings.helm.post_renderer.as_deref()?,
                config: f.path(),
            })
        }),
    }
}

/// helm failed: refused by RBAC (`Forbidden`, a state: no remediation),
/// or a failure, recorded for the plan to choose what follows.
fn helm_failed(
    o: &mut Observed,
    kind: RunKind,
    hash: &str,
    version: &str,
    e: HelmError,
) -> Outcome {
    let message = e.summary(&o.done.redactor);
    let Some(refused) = e.forbidden() else {
        let status = &mut o.status;
        status.last_action = kind.action().into();
        status.failures += 1;
        let revision = status.revision;
        push_history(
            status,
            kind.history_action(),
            revision,
            version,
            hash,
            HistoryResult::Failed,
        );
        o.done.run_ended = Some(RunEnded::Failed { run: kind, message });
        return Outcome::Replan;
    };
    let refused = o.done.redactor.redact(&refused);
    let revision = o.status.revision;
    push_history(
        &mut o.status,
        kind.history_action(),
        revision,
        version,
        hash,
        HistoryResult::Forbidden,
    );
    refused_run(o, kind.action(), &refused, &message)
}

/// The post-renderer's settings written for this run (`None`: the app asks
/// for no post-rendering); `Err` says what is wrong with them. A Warning
/// when a merge patch replaces a list whole.
pub(super) fn post_render_file(ctx: &Context, app: &HelmApp) -> Result<Option<ConfigFile>, String> {
    let Some(config) = post_render::Config::of(&app.spec) else {
        return Ok(None);
    };
    config.check()?;
    if ctx.settings.helm.post_renderer.is_none() {
        return Err(
            "no post-renderer binary is known: start the operator with --post-renderer-binary"
                .into(),
        );
    }
    let replaced = config.lists_replaced();
    if !replaced.is_empty() {
        let message = format!(
            "{}: a JSON merge patch replaces a list whole (a strategic merge would merge it by key); use JSON 6902 operations to change one item",
            replaced.join(", ")
        );
        let reason = Reason::PostRendererListReplaced.as_str();
        ctx.recorder
            .event(app, EventType::Warning, reason, &message);
    }
    ConfigFile::write(&ctx.settings.helm.work_dir, &config)
        .map(Some)
        .map_err(|e| format!("cannot write the post-renderer's settings: {e}"))
}

/// A new configuration, or a new `hossted.com/reconcile-at`, starts the
/// retries afresh.
fn start_afresh_if_asked(o: &mut Observed, hash: &str) {
    if crate::delivery::helmapp::decide::state::starts_afresh(o, hash) {
        o.status.failures = 0;
    }
    o.status.last_handled_reconcile_at = o.reconcile_at.clone();
}

/// The run succeeded: the status and the history say so (a repair, an
/// Event too).
fn succeeded(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: RunKind,
    hash: &str,
    released: Released,
) {
    let reason = match kind {
        RunKind::Install => Reason::InstallSucceeded,
        RunKind::Upgrade => Reason::UpgradeSucceeded,
        RunKind::Repair => Reason::DriftRepaired,
    };
    // The chart's own name (its Chart.yaml, as helm stored it): an OCI
    // or Git chart has none in the spec.
    let chart = match released.chart_name.as_str() {
        "" => app.spec.chart.name.as_str(),
        name if name.len() > MAX_CHART_NAME => "(a name too long to show)",
        name => name,
    };
    let message = format!(
        "{} of {} succeeded: revision {}, chart {chart} {}",
        kind.action(),
        o.target.key(),
        released.revision,
        released.chart_version
    );
    if let Some(Inputs::Ready { chart, .. }) = &o.inputs {
        o.status.chart_digest = chart.chart_digest();
        o.status.verification = chart.verified.as_deref().map(Into::into);
        o.status.source = (!chart.revision.is_empty()).then(|| apis::helmapp::SourceStatus {
            revision: chart.revision.clone(),
        });
    }
    let status = &mut o.status;
    status.revision = released.revision;
    status.chart_version = released.chart_version.clone();
    // A chart's author writes its name: one too long to be a name is not
    // kept (unknown, as after a rollback) — never a status too big to write.
    status.chart_name = Some(&released.chart_name)
        .filter(|n| n.len() <= MAX_CHART_NAME)
        .cloned()
        .unwrap_or_default();
    status.app_version = released.app_version;
    status.config_hash = hash.to_string();
    status.last_action = kind.action().into();
    status.failures = 0;
    push_history(
        status,
        kind.history_action(),
        released.revision,
        &released.chart_version,
        hash,
        HistoryResult::Succeeded,
    );
    conditions::set(status, READY, true, reason, &message);
    conditions::set(status, RELEASED, true, reason, &message);
    // An install or upgrade that succeeded is in the status (the
    // conditions above, the history entry with its time and digest) and
    // makes no Event: in a wave of installs it was the one request per
    // release beyond helm's own that no write which happens anyway could
    // carry (docs/delivery.md). A repair is news the status does not keep.
    if kind == RunKind::Repair {
        conditions::set(status, DRIFTED, false, Reason::DriftRepaired, &message);
        ctx.recorder
            .event(app, EventType::Normal, reason.as_str(), &message);
    }
}

/// A Warning when `spec.timeout` was clamped to `--max-helm-timeout`.
fn warn_if_clamped(ctx: &Context, app: &HelmApp, o: &Observed) {
    if !o.timeout_clamped {
        return;
    }
    let message = format!(
        "spec.timeout {} is longer than the operator's --max-helm-timeout: helm runs with {}s",
        app.spec.timeout,
        o.timeout.as_secs()
    );
    ctx.recorder.event(
        app,
        EventType::Warning,
        Reason::TimeoutClamped.as_str(),
        &message,
    );
}
