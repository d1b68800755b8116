//! Install, upgrade or repair: one `helm upgrade --install` with the merged
//! values on stdin and the config hash and owner UID as storage labels —
//! and, when it fails, what `super::super::plan::after_failure` says.

use apis::helmapp::{CrdPolicy, HelmApp};
use record::EventType;
use runtime::Action;

use super::outcome::{DeliveryError, Outcome, failed, forbidden, refuse};
use crate::delivery::helm::{Released, Upgrade, values};
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
    let uid = o.uid.clone();
    let labels = [(HASH_LABEL, hash.as_str()), (UID_LABEL, uid.as_str())];
    let user = o.identity.user();
    let upgrade = Upgrade {
        release: &o.target.release,
        namespace: &o.target.namespace,
        chart: &chart.path,
        values: &values,
        labels: &labels,
        create_namespace: app.spec.create_namespace,
        // CreateReplace: the operator applies them itself, just below.
        skip_crds: app.spec.crds != CrdPolicy::Create,
        as_user: user.as_deref(),
        timeout: o.timeout,
    };
    if app.spec.crds == CrdPolicy::CreateReplace
        && let Err(message) = ctx.replace_crds(&chart.path, upgrade.as_user).await
    {
        return Ok(failed(ctx, app, o, Reason::CRDsFailed, &message));
    }
    let Some(result) = ctx.helm.upgrade(&upgrade).await else {
        let action = Action::requeue_after(HELM_HOLDS, "another helm run holds the release");
        return Ok(Outcome::Finished(action));
    };
    let outcome = match result {
        Ok(released) => succeeded(ctx, app, o, kind, &hash, released),
        Err(e) => {
            let message = e.summary(&o.redactor);
            if let Some(refused) = e.forbidden() {
                let refused = o.redactor.redact(&refused);
                let revision = o.status.revision;
                push_history(
                    &mut o.status,
                    kind.action(),
                    revision,
                    &chart.version,
                    &hash,
                    "forbidden",
                );
                forbidden(ctx, app, o, kind.action(), &refused, &message)
            } else {
                failed_run(ctx, app, o, kind, &hash, chart.version.as_str(), &message).await
            }
        }
    };
    // Whatever helm left in the storage is what the next check expects.
    crate::delivery::helmapp::storage::record_after_action(&ctx.client, o).await;
    Ok(outcome)
}

/// A new configuration, or a new `hossted.com/reconcile-at`, starts the
/// retries afresh.
fn start_afresh_if_asked(o: &mut Observed, hash: &str) {
    let status = &mut o.status;
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

async fn failed_run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    kind: Kind,
    hash: &str,
    chart_version: &str,
    message: &str,
) -> Outcome {
    let status = &mut o.status;
    status.last_action = kind.action().into();
    status.failures += 1;
    let revision = status.revision;
    push_history(
        status,
        kind.action(),
        revision,
        chart_version,
        hash,
        "failed",
    );
    match after_failure(kind == Kind::Install, o.status.failures, app) {
        AfterFailure::UninstallAndRetry => {
            super::remediate::uninstall(ctx, app, o, hash).await;
            failed(ctx, app, o, Reason::InstallFailed, message)
        }
        AfterFailure::Retry => failed(ctx, app, o, Reason::UpgradeFailed, message),
        AfterFailure::Remediate(remedy) => {
            let done = super::remediate::run(ctx, app, o, remedy, hash).await;
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
