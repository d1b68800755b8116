//! The run intent (`status.runIntent`, docs/tenancy.md): before a helm
//! process that writes a revision starts, the operator writes into the
//! HelmApp's status — where the release's tenant cannot write — which
//! revision it is about to make. A revision missing from
//! `status.storageDigests` is taken as the leftover of the operator's own
//! run only when this names it; nothing in Helm's storage (labels, owner
//! UID) is evidence of that.

use apis::helmapp::{HelmApp, HelmAppStatus, RunIntent};

use super::outcome::DeliveryError;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{READY, Reason};
use crate::delivery::helmapp::decide::observed::{Observed, RunKind};
use crate::delivery::helmapp::observe::storage;

/// Writes the intent of a run of `action` into `o`'s status and the API
/// server, before helm starts: an `Err` means helm must not start.
pub async fn declare(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    action: &str,
) -> Result<(), DeliveryError> {
    if o.status.run_intent.is_some() {
        // A run that ended unrecorded (its operator died): what changed in
        // the storage since (helm's own rewrites of recorded revisions) is
        // recorded before its intent is replaced. Its own revision is
        // recorded only when proven by a render (`super::own_run`): the
        // storage check before this step found nothing unproven.
        let entries = storage::read(&ctx.on(o).client, &o.target).await?;
        storage::record(o, &entries);
    }
    // Helm writes the newest revision it finds, plus one; the storage was
    // checked before this step, so what is recorded is what helm reads.
    let newest = o
        .status
        .storage_digests
        .iter()
        .map(|d| d.revision)
        .chain(o.newest.as_ref().map(|n| n.revision))
        .max()
        .unwrap_or(0);
    o.status.run_intent = Some(RunIntent {
        action: action.into(),
        revision: newest + 1,
        config_hash: o.hash().unwrap_or_default().to_string(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        content: String::new(),
    });
    // The intent, and the storage as recorded now: a revision proven ours
    // in this reconcile (`own_run`, the records above) must be on the
    // server before helm supersedes it, or a stop during the run leaves it
    // unrecorded behind an intent that names the next. What this
    // reconcile decided (a force-at taken, a history entry) is written
    // with its outcome, not before — `kubectl hossted force --wait` reads
    // the one as the other.
    let mut written = ctx.status.current(app);
    written.run_intent = o.status.run_intent.clone();
    written.storage_digests = o.status.storage_digests.clone();
    // Where the run goes, for `kubectl get`'s RELEASE and NAMESPACE while
    // a first install's record is held (the spec's, read by nothing that
    // decides).
    written.release_name = o.status.release_name.clone();
    written.target_namespace = o.status.target_namespace.clone();
    say_first_install_runs(&mut written, app, o, action, newest + 1);
    let answered = ctx.status.write(app, &written).await;
    if let Err(e) = answered {
        // Not on the server, so no helm starts: nor may the reconcile's
        // last status write put it there.
        withdraw(o);
        return Err(e.into());
    }
    if matches!(answered, Ok(runtime::Written::Patched)) {
        // Answered just now: the helm about to start needs no probe of
        // its own.
        ctx.on(o).reachability.note_answer();
    }
    o.done.run_live = true;
    Ok(())
}

/// A first install's intent says so in `Ready` (`False`, `Progressing`,
/// "installing revision N"): its record may be held until its readiness
/// verdict (`decide::ready::hold`), and meanwhile this is what `kubectl
/// get` shows. Only when nothing was judged yet: an older verdict stays
/// until the run's own report replaces it. Written with the intent only —
/// the reconcile's own status carries the run's report, or nothing when
/// helm did not start after all.
fn say_first_install_runs(
    written: &mut HelmAppStatus,
    app: &HelmApp,
    o: &Observed,
    action: &str,
    revision: i64,
) {
    let unjudged = crate::condition::status(&written.conditions, READY).is_none();
    if action != RunKind::Install.action() || written.revision != 0 || !unjudged {
        return;
    }
    let mut message = format!("installing revision {revision}");
    if app.spec.wait {
        let timeout = crate::duration::go(o.timeout);
        message.push_str(&format!(
            "; Ready once its objects are ready (spec.wait, up to {timeout})"
        ));
    }
    // The condition's generation is the spec this run installs; the
    // status's own `observedGeneration` is the record's to write.
    crate::condition::set(
        &mut written.conditions,
        READY,
        false,
        Reason::Progressing.as_str(),
        &message,
        app.metadata.generation,
    );
}

/// helm ended and printed the release it stored (`revision`, `content`):
/// only that content is recorded as the run's.
pub fn printed(o: &mut Observed, revision: i64, content: &str) {
    if let Some(intent) = o.status.run_intent.as_mut() {
        intent.revision = revision;
        intent.content = content.to_string();
        o.done.run_printed = true;
    }
}

/// Takes the intent back: helm did not start after all.
pub fn withdraw(o: &mut Observed) {
    o.status.run_intent = None;
    o.done.run_live = false;
    o.done.run_printed = false;
}

/// Our own `helm test` rewrote the run's revision (its hooks' last runs)
/// and `content` is its content as read since, found to be what helm
/// printed in all but those (`act::test`): the record matches that now.
pub fn tested(o: &mut Observed, content: String) {
    if let Some(intent) = o.status.run_intent.as_mut() {
        intent.content = content;
    }
}
