//! Install, upgrade or repair: one `helm upgrade --install` with the merged
//! values on stdin and the config hash and owner UID as storage labels —
//! and, when it fails, what `super::super::plan::after_failure` says.

use apis::helmapp::{CrdPolicy, HelmApp, ServerSideApply};
use record::EventType;
use runtime::Action;

use super::outcome::{DeliveryError, Outcome, failed, forbidden, refuse};
use super::remediate::Remedied;
use crate::delivery::helm::post_render::{self, ConfigFile};
use crate::delivery::helm::{Flags, HelmError, PostRender, Released, ServerSide, Upgrade, values};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::observed::{Inputs, Observed};
use crate::delivery::helmapp::plan::{AfterFailure, HELM_HOLDS, after_failure};
use crate::delivery::helmapp::readiness;
use crate::delivery::helmapp::status::{self, DRIFTED, READY, RELEASED, Reason, push_history};
use crate::delivery::names::{HASH_LABEL, UID_LABEL};

/// Which run this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Install,
    Upgrade,
    /// The same inputs again, because objects of the release were deleted.
    Repair,
}

impl Kind {
    fn action(self) -> &'static str {
        match self {
            Kind::Install => "install",
            Kind::Upgrade | Kind::Repair => "upgrade",
        }
    }
}

/// Runs helm for `app` (see the module docs).
pub async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: Kind,
) -> Result<Outcome, DeliveryError> {
    let Some(Inputs::Ready { chart, hash }) = &o.inputs else {
        return Ok(Outcome::Retry("the chart was not looked up".into()));
    };
    let (chart, hash) = (chart.clone(), hash.clone());
    start_afresh_if_asked(o, &hash);
    let values = match ctx.values(app).await {
        Ok(v) => v,
        Err(e) => {
            refuse(ctx, app, o, Reason::ValuesInvalid, &e, true);
            return Ok(Outcome::Finished(Action::done(format!(
                "ValuesInvalid: {e}"
            ))));
        }
    };
    o.redactor = values::Redactor::of(&values);
    warn_if_clamped(ctx, app, o);
    // Acted on now, whatever the run's end: each value once.
    let forced = o.forced();
    o.status.last_handled_force_at = o.force_at.clone();
    if forced {
        super::window::note_forced(ctx, app, o);
    }
    let post_render = match post_render_file(ctx, app) {
        Ok(file) => file,
        Err(message) => {
            refuse(ctx, app, o, Reason::PostRendererInvalid, &message, true);
            let action = Action::done(format!("PostRendererInvalid: {message}"));
            return Ok(Outcome::Finished(action));
        }
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
        flags: flags(app, kind, forced),
    };
    let upgrade = request(ctx, app, o, parts);
    if app.spec.crds == CrdPolicy::CreateReplace
        && let Err(message) = ctx.replace_crds(&chart.path, upgrade.as_user).await
    {
        // helm's and the apiserver's words: redacted like any helm message.
        let message = o.redactor.redact(&message);
        return Ok(failed(ctx, app, o, Reason::CRDsFailed, &message));
    }
    let Some(result) = ctx.helm.upgrade(&upgrade).await else {
        let action = Action::requeue_after(HELM_HOLDS, "another helm run holds the release");
        return Ok(Outcome::Finished(action));
    };
    drop(post_render);
    if let Err(e) = &result
        && super::outage::outage(ctx, app, e).await
    {
        // Not a failure of the release: nothing counted, recorded or said.
        return Ok(Outcome::Finished(Action::done(super::outage::OUTAGE)));
    }
    if let Ok(released) = &result
        && !released.content.is_empty()
    {
        // Ours, as our helm printed it: recorded even if the storage read
        // below fails (observe::own_revision).
        let made = (released.revision, released.content.clone());
        ctx.made.lock().insert(cache::object_key(app), made);
    }
    let outcome = match result {
        Ok(released) => succeeded_then_tested(ctx, app, o, kind, &hash, released).await,
        Err(e) => helm_failed(ctx, app, o, kind, &hash, &chart.version, e).await,
    };
    // Whatever helm left in the storage is what the next check expects;
    // the objects of a revision it deployed go in the same status write.
    match crate::delivery::helmapp::storage::record_after_action(&ctx.client, o).await {
        Some(entries) => {
            crate::delivery::helmapp::drift::record_deployed(ctx, app, o, &entries).await
        }
        None => {
            ctx.interrupted.lock().insert(cache::object_key(app));
        }
    }
    Ok(outcome)
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
}

/// The `helm upgrade --install` of `app` — the one an approval's dry run
/// previews, too.
pub(super) fn request<'a>(
    ctx: &'a Context,
    app: &HelmApp,
    o: &'a Observed,
    parts: Parts<'a>,
) -> Upgrade<'a> {
    Upgrade {
        release: &o.target.release,
        namespace: &o.target.namespace,
        chart: parts.chart,
        values: parts.values,
        labels: parts.labels,
        create_namespace: app.spec.create_namespace,
        // CreateReplace: the operator applies them itself, before helm.
        skip_crds: app.spec.crds != CrdPolicy::Create,
        as_user: parts.user,
        timeout: o.timeout,
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

/// helm succeeded; then `helm test`, when asked for, whose failure is the
/// run's.
async fn succeeded_then_tested(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: Kind,
    hash: &str,
    released: Released,
) -> Outcome {
    let (revision, good) = (released.revision, o.status.revision);
    let outcome = succeeded(ctx, app, o, kind, hash, released);
    match super::test::run(ctx, app, o, revision, hash).await {
        Some(message) => {
            // A revision whose tests fail is not one to roll back to.
            o.status.revision = good;
            failed_run(ctx, app, o, kind, hash, None, &message).await
        }
        None => outcome,
    }
}

/// helm failed: refused by RBAC (`Forbidden`, no remediation), or a
/// failure.
async fn helm_failed(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: Kind,
    hash: &str,
    version: &str,
    e: HelmError,
) -> Outcome {
    let message = e.summary(&o.redactor);
    let Some(refused) = e.forbidden() else {
        return failed_run(ctx, app, o, kind, hash, Some(version), &message).await;
    };
    let refused = o.redactor.redact(&refused);
    let revision = o.status.revision;
    push_history(
        &mut o.status,
        kind.action(),
        revision,
        version,
        hash,
        "forbidden",
    );
    forbidden(ctx, app, o, kind.action(), &refused, &message)
}

/// The flags of this run: `spec.install`'s for an install, `spec.upgrade`'s
/// for an upgrade — with `--force` too when `hossted.com/force-at` asked.
pub(super) fn flags(app: &HelmApp, kind: Kind, forced: bool) -> Flags {
    let (i, u) = (&app.spec.install, &app.spec.upgrade);
    match kind {
        Kind::Install => Flags {
            no_hooks: i.disable_hooks,
            skip_schema_validation: i.skip_schema_validation,
            server_side: Some(if i.server_side_apply {
                ServerSide::Enabled
            } else {
                ServerSide::Disabled
            }),
            ..Flags::default()
        },
        Kind::Upgrade | Kind::Repair => Flags {
            no_hooks: u.disable_hooks,
            force: u.force || forced,
            cleanup_on_fail: u.cleanup_on_fail,
            skip_schema_validation: u.skip_schema_validation,
            server_side: Some(match u.server_side_apply {
                ServerSideApply::Enabled => ServerSide::Enabled,
                ServerSideApply::Disabled => ServerSide::Disabled,
                ServerSideApply::Auto | ServerSideApply::Unknown => ServerSide::Auto,
            }),
        },
    }
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
    let forced = o.forced();
    let status = &mut o.status;
    if forced {
        status.failures = 0;
    }
    if o.reconcile_at != status.last_handled_reconcile_at {
        status.last_handled_reconcile_at = o.reconcile_at.clone();
        status.failures = 0;
    }
    if status
        .history
        .first()
        .is_some_and(|h| h.config_hash != hash)
    {
        status.failures = 0;
    }
}

fn succeeded(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: Kind,
    hash: &str,
    released: Released,
) -> Outcome {
    let reason = match kind {
        Kind::Install => Reason::InstallSucceeded,
        Kind::Upgrade => Reason::UpgradeSucceeded,
        Kind::Repair => Reason::DriftRepaired,
    };
    let message = format!(
        "{} of {} succeeded: revision {}, chart {} {}",
        kind.action(),
        o.target.key(),
        released.revision,
        app.spec.chart.name,
        released.chart_version
    );
    if let Some(Inputs::Ready { chart, .. }) = &o.inputs {
        o.status.chart_digest = chart.chart_digest();
        o.status.verification = chart.verified.as_deref().map(Into::into);
    }
    let status = &mut o.status;
    status.revision = released.revision;
    status.chart_version = released.chart_version.clone();
    status.app_version = released.app_version;
    status.config_hash = hash.to_string();
    status.last_action = kind.action().into();
    status.failures = 0;
    push_history(
        status,
        kind.action(),
        released.revision,
        &released.chart_version,
        hash,
        "succeeded",
    );
    status::set(status, READY, true, reason, &message);
    status::set(status, RELEASED, true, reason, &message);
    if kind == Kind::Repair {
        status::set(status, DRIFTED, false, Reason::DriftRepaired, &message);
    }
    ctx.recorder
        .event(app, EventType::Normal, reason.as_str(), &message);
    if app.spec.wait {
        // Not Ready before the objects of this revision are known and
        // judged: the next reconcile lists them (its storage event
        // re-queues, and so does this) and decides.
        o.pending = readiness::pending(ctx, &o.target);
        o.pending
            .push(format!("the objects of revision {}", released.revision));
        o.readiness_polled = true;
        if let Some((reason, text, again)) = readiness::verdict(o, o.timeout) {
            status::set(&mut o.status, READY, false, reason, &text);
            return Outcome::Finished(Action::requeue_after(again, text));
        }
    }
    Outcome::Finished(Action::done(message))
}

/// A failed run of `kind` — helm's (recorded in the history with the
/// chart `version` it tried), or its `helm test`'s (`version` `None`: the
/// test recorded itself) — and what follows it.
async fn failed_run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: Kind,
    hash: &str,
    version: Option<&str>,
    message: &str,
) -> Outcome {
    let status = &mut o.status;
    status.last_action = kind.action().into();
    status.failures += 1;
    let revision = status.revision;
    if let Some(version) = version {
        push_history(status, kind.action(), revision, version, hash, "failed");
    }
    match after_failure(kind == Kind::Install, o.status.failures, app) {
        AfterFailure::UninstallAndRetry => {
            match super::remediate::uninstall(ctx, app, o, hash).await {
                Remedied::Said(_) => failed(ctx, app, o, Reason::InstallFailed, message),
                Remedied::StorageTampered(refused) => {
                    tampered_during_run(ctx, app, o, kind, message, &refused)
                }
            }
        }
        AfterFailure::Retry => failed(ctx, app, o, Reason::UpgradeFailed, message),
        AfterFailure::Remediate(remedy) => {
            let done = match super::remediate::run(ctx, app, o, remedy, hash).await {
                Remedied::Said(done) => done,
                Remedied::StorageTampered(refused) => {
                    return tampered_during_run(ctx, app, o, kind, message, &refused);
                }
            };
            let message = format!(
                "upgrade failed {} time(s), the last: {message}; {done}; nothing more runs until the configuration or {} changes",
                o.status.failures,
                crate::delivery::names::RECONCILE_AT
            );
            status::set(
                &mut o.status,
                READY,
                false,
                Reason::RetriesExhausted,
                &message,
            );
            status::set(
                &mut o.status,
                RELEASED,
                false,
                Reason::UpgradeFailed,
                &message,
            );
            ctx.recorder.event(
                app,
                EventType::Warning,
                Reason::RetriesExhausted.as_str(),
                &message,
            );
            Outcome::Finished(Action::done("retries exhausted"))
        }
    }
}

/// The run failed, and Helm's storage changed while it ran: its
/// remediation did not run (`refused` says why). `Ready` says
/// `StorageTampered` — what the next check finds too, until someone accepts
/// the stored state.
fn tampered_during_run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: Kind,
    failure: &str,
    refused: &str,
) -> Outcome {
    // What stops helm first: condition messages are cut at 1 KiB, and
    // helm's own message may be longer.
    let message = format!(
        "{refused} (the {} before it failed: {failure})",
        kind.action()
    );
    let released = if kind == Kind::Install {
        Reason::InstallFailed
    } else {
        Reason::UpgradeFailed
    };
    status::set(&mut o.status, RELEASED, false, released, &message);
    refuse(ctx, app, o, Reason::StorageTampered, &message, true);
    Outcome::Finished(Action::done(format!("StorageTampered: {refused}")))
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
