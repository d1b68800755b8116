//! What Helm's storage says of a HelmApp's release, read for `gather`: the
//! storage entries the informer holds, whether their owner is a live
//! HelmApp, a fresh read when the owner matters, an adoption's render, the
//! revision our last run made, and whether someone else changed it
//! (docs/tenancy.md: storage is evidence, never authority).

use crate::lean::helm::HelmStatus;
use std::sync::Arc;

use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::storage;
use crate::delivery::helmapp::cluster::Cluster;
use crate::delivery::helmapp::context::{Context, run_key};
use crate::delivery::helmapp::decide::conditions::{READY, Reason};
use crate::delivery::helmapp::decide::failure::remedy_after;
use crate::delivery::helmapp::decide::observed::{Observed, RunEnded, StorageRecheck, Stored};
use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::names::{HASH_LABEL, RECONCILE_AT, RELEASE_INDEX, UID_LABEL};
use crate::lean::objects::label;
use crate::lean::storage::HelmRelease;
use crate::lean::storage::newest_of;

/// Records the revision our last helm run made, if the status lacks it
/// ([`storage::record_own_revision`]); after a run of ours that the API's
/// outage cut off, or whose storage could not be read, what it left, as
/// after any action of ours.
pub async fn own_revision(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let key = run_key(app);
    // (A run the status's intent names that ended unrecorded because its
    // operator died is not recorded here: whatever it left, pending,
    // failed or deployed, is unrecorded until a render of this
    // configuration proves it — `act::own_run`.)
    let interrupted = ctx.interrupted.lock().contains(&key);
    // (Recorded with the intent as a leftover: its revision, unread since
    // helm ended, is proven by a render like any other — an outage is no
    // reason to take a tenant's word for it.)
    if interrupted
        && storage::record_after_action(&ctx.on(o).client, o)
            .await
            .is_some()
    {
        log::info!(
            "{}: recorded what our helm run, cut off by the API server's outage, left in Helm's storage",
            o.target.key()
        );
        ctx.interrupted.lock().remove(&key);
    }
    let made = ctx.made.lock().get(&key).cloned();
    if let Some(made) = made
        && storage::record_own_revision(&ctx.on(o).client, o, made).await
    {
        ctx.made.lock().remove(&key);
    }
}

/// The owner of the newest revision read afresh, before an uninstall, an
/// adoption or a refusal is decided on it: the storage's watch may lag
/// behind a move that just rewrote its owner labels. Returns the fresh
/// read (`None`: it failed), for the tamper check to reuse.
pub async fn refresh_owner(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
) -> Option<Vec<HelmRelease>> {
    let read = match storage::read(&ctx.on(o).client, &o.target).await {
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
/// lists foreign objects ([`super::adoptable`]); an install over
/// `uninstalled` entries takes nothing of theirs. Returns the fresh read
/// for the tamper check, or `None` when it was used here.
pub async fn adopting(
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
        o.adoption_refused = match crate::delivery::helmapp::observe::adoptable::refused(
            &ctx.on(o).client,
            &o.target,
        )
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
pub async fn tampered(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    entries: &[Arc<HelmRelease>],
    fresh: Option<Vec<HelmRelease>>,
) -> Result<Option<String>, kube::Error> {
    warn_invalid(ctx, app, entries);
    let operator_made = ctx.settings.tenancy.operator_made(app);
    let untrusted =
        match storage::check(&ctx.on(o).client, o, entries, fresh, operator_made).await? {
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
        match storage::read(&ctx.on(o).client, &o.target).await {
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
/// (`decide::state`, `act::own_run`).
pub fn own_unrecorded<R: AsRef<HelmRelease>>(
    o: &Observed,
    entries: &[R],
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
    let newest: &HelmRelease = newest_of(entries)?.as_ref();
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
pub fn warn_invalid(ctx: &Context, app: &HelmApp, entries: &[Arc<HelmRelease>]) {
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

/// Every cached storage entry of `target`'s release, releases or not.
pub fn storage_entries(cluster: &Cluster, target: &Target) -> Vec<Arc<HelmRelease>> {
    cluster.releases.by_index(RELEASE_INDEX, &target.key())
}

impl Stored {
    pub fn of(entry: &HelmRelease) -> Self {
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
pub fn owned_by_live(ctx: &Context, owner: &str, app: &HelmApp) -> bool {
    !owner.is_empty()
        && app.uid().as_deref() != Some(owner)
        && ctx
            .apps
            .list()
            .iter()
            .any(|a| a.uid().as_deref() == Some(owner) && a.metadata.deletion_timestamp.is_none())
}

/// After a failed run of this reconcile whose remedy runs helm
/// (`decide::failure::remedy_after`): Helm's storage read again and recorded as after
/// the run ([`storage::changed_during_run`]) — an edit made while helm ran
/// is found before the remedy's helm reads it, and the revision the failed
/// run left (helm printed none) waits for the render that proves it ours
/// (`act::own_run`): whoever writes Secrets there may have put that number
/// there first.
pub async fn recheck_after_failure(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let Some(RunEnded::Failed { run, .. }) = &o.done.run_ended else {
        return;
    };
    let remedy = remedy_after(*run, o.status.failures, o.status.revision, app);
    if o.storage_recheck.is_some() || !remedy.is_some_and(|r| r.runs_helm()) {
        return;
    }
    o.storage_recheck = Some(
        match storage::changed_during_run(&ctx.on(o).client, o).await {
            Ok((None, _)) => StorageRecheck::Trusted,
            Ok((Some(untrusted), entries)) => match own_unrecorded(o, &entries, &untrusted) {
                Some(revision) => {
                    o.own_unrecorded = Some(revision);
                    StorageRecheck::OwnRunUnproven { revision }
                }
                None => StorageRecheck::Untrusted(untrusted.message(&o.target.key())),
            },
            Err(e) => StorageRecheck::Unreadable(e.to_string()),
        },
    );
}
