//! Helm's storage is evidence, never authority (docs/tenancy.md). It lives in the
//! target namespace, where others may write Secrets: a planted or
//! hand-edited revision could make helm's next upgrade, rollback or
//! uninstall delete what it lists — anything, when helm runs as the
//! operator. So:
//!
//! - after each helm action it takes, the operator records the digest of
//!   every revision in the storage (`status.storageDigests`; the newest's
//!   also on the history entry) — [`record_after_action`];
//! - before the next one, every revision helm may read for the release
//!   must be a release (labels and payload agree) with a recorded digest
//!   that matches — not just the newest — [`first_untrusted`].
//!
//! The cache may lag behind our own last run: a difference found in it is
//! confirmed with one fresh read of the storage before it counts.

use crate::lean::helm::HelmStatus;
use apis::helmapp::{HelmAppStatus, RunIntent, StorageDigest};
use kube::api::ListParams;
use kube::{Api, Client};

use crate::delivery::helmapp::decide::observed::Observed;
use crate::delivery::helmapp::decide::target::Target;
use crate::lean::objects::label;
use crate::lean::storage::HelmRelease;
use crate::lean::storage::{FreshRelease, HELMAPP_UID_LABEL, newest_of};

/// The newest revision of a release, read from the API now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Newest {
    pub revision: i64,
    /// The owner HelmApp's UID (label; empty: none).
    pub owner: String,
    /// [`crate::lean::storage::release_digest`] of its payload.
    pub digest: String,
}

/// Every storage entry of `target`'s release (label `owner=helm,name=…`:
/// what helm itself reads), read from the API now, not the cache.
pub async fn read(client: &Client, target: &Target) -> Result<Vec<HelmRelease>, kube::Error> {
    Ok(read_fresh(client, target)
        .await?
        .into_iter()
        .map(|f| f.0)
        .collect())
}

/// [`read`], each entry with its manifest.
async fn read_fresh(client: &Client, target: &Target) -> Result<Vec<FreshRelease>, kube::Error> {
    let api: Api<FreshRelease> = Api::namespaced(client.clone(), &target.namespace);
    let selector = format!("owner=helm,name={}", target.release);
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// The newest release among `entries` ([`newest_of`]), summarised.
pub fn newest(entries: &[HelmRelease]) -> Option<Newest> {
    newest_of(entries).map(|n| Newest {
        revision: n.version(),
        owner: label(&n.metadata, HELMAPP_UID_LABEL).to_string(),
        digest: n.digest_string().unwrap_or_default(),
    })
}

/// Why one storage entry is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// Not a release: it does not decode, or its labels and payload
    /// disagree (reason `InvalidRelease`, on the Secret).
    Invalid { secret: String, error: String },
    /// A revision the operator never recorded.
    Unrecorded { secret: String, revision: i64 },
    /// A revision whose payload differs from the one recorded.
    Changed {
        secret: String,
        revision: i64,
        digest: String,
        recorded: String,
    },
}

impl Untrusted {
    /// The condition's message.
    pub fn message(&self, release: &str) -> String {
        let what = match self {
            Untrusted::Invalid { secret, error } => {
                format!(
                    "storage Secret {secret} of release {release} is not a Helm release ({error})"
                )
            }
            Untrusted::Unrecorded { secret, revision } => format!(
                "revision {revision} of release {release} (Secret {secret}) was not made by the operator"
            ),
            Untrusted::Changed {
                secret,
                revision,
                digest,
                recorded,
            } => format!(
                "revision {revision} of release {release} (Secret {secret}) is not what the operator left there ({digest}, recorded {recorded})"
            ),
        };
        format!(
            "{what}: someone changed Helm's storage; no helm runs on it until someone allowed to patch this HelmApp sets the annotation hossted.com/reconcile-at to a new value, accepting the stored state"
        )
    }
}

/// The first entry (by revision, newest first) that is not a release, or
/// whose digest is not the one `recorded` for its revision. Nothing is
/// exempt: a revision a run of ours left unfinished (the operator died
/// while its helm ran) is unrecorded like a planted one — the run intent
/// names its number, not its content — and is proven ours by a render of
/// this configuration before it counts (`act::own_run`), never by a label
/// or by the intent alone.
pub fn first_untrusted<R: AsRef<HelmRelease>>(
    entries: &[R],
    recorded: &[StorageDigest],
) -> Option<Untrusted> {
    let mut sorted: Vec<&HelmRelease> = entries.iter().map(AsRef::as_ref).collect();
    sorted.sort_by_key(|e| std::cmp::Reverse(e.version()));
    let newest = sorted.first().map_or(0, |e| e.version());
    sorted.into_iter().find_map(|e| {
        let secret = e.metadata.name.clone().unwrap_or_default();
        if let Err(error) = &e.release {
            return Some(Untrusted::Invalid {
                secret,
                error: error.clone(),
            });
        }
        let revision = e.version();
        let digest = e.digest_string().unwrap_or_default();
        // Changed in its `info` alone (read afresh, so its content is
        // known) the way helm changes it: superseded, with a newer revision
        // there — also by a run of ours killed between that write and the
        // status write. Its manifest, hooks and values are still ours; any
        // other status written into it (an older revision made `deployed`
        // for helm to diff against, the newest made `failed`) is not helm's.
        let info_alone = |r: &StorageDigest| {
            !r.content.is_empty()
                && e.content.as_deref() == Some(r.content.as_str())
                && e.release
                    .as_ref()
                    .is_ok_and(|r| r.status == HelmStatus::Superseded)
                && e.version() < newest
        };
        match recorded.iter().find(|r| r.revision == revision) {
            None => Some(Untrusted::Unrecorded { secret, revision }),
            Some(r) if r.digest != digest && !info_alone(r) => Some(Untrusted::Changed {
                secret,
                revision,
                digest,
                recorded: r.digest.clone(),
            }),
            Some(_) => None,
        }
    })
}

/// The digest recorded of the newest revision before `storageDigests`
/// existed: the first history entry that has one.
pub fn recorded_newest(status: &HelmAppStatus) -> Option<&str> {
    status
        .history
        .iter()
        .map(|h| h.release_digest.as_str())
        .find(|d| !d.is_empty())
}

/// Records `entries` as the trusted state of the storage: every release
/// among them, and the newest's digest on the newest history entry.
pub fn trust(status: &mut HelmAppStatus, entries: &[HelmRelease]) {
    let mut digests: Vec<StorageDigest> = entries
        .iter()
        .filter(|e| e.release.is_ok())
        .filter_map(|e| {
            Some(StorageDigest {
                revision: e.version(),
                digest: e.digest_string()?,
                content: e.content.clone().unwrap_or_default(),
            })
        })
        .collect();
    digests.sort_by_key(|d| std::cmp::Reverse(d.revision));
    status.storage_digests = digests;
    if let (Some(h), Some(n)) = (status.history.first_mut(), newest(entries)) {
        h.release_digest = n.digest;
    }
}

/// After a helm action: records what helm left in the storage, proven
/// revision by revision ([`recorded_after`]), and returns what it read.
/// A failed read records nothing and returns `None` (the caller keeps the
/// action in mind: `Context::interrupted`).
pub async fn record_after_action(client: &Client, o: &mut Observed) -> Option<Vec<HelmRelease>> {
    record_after_run(client, o)
        .await
        .map(|(entries, _)| entries)
}

/// [`record_after_action`], with the newest entry's Secret name and
/// manifest (as read in the same request: what drift records the run's
/// objects from, read no second time).
pub async fn record_after_run(client: &Client, o: &mut Observed) -> Option<AfterRun> {
    match read_fresh(client, &o.target).await {
        Ok(fresh) => {
            let (entries, payloads): (Vec<HelmRelease>, Vec<Option<Vec<u8>>>) =
                fresh.into_iter().map(|f| (f.0, f.1)).unzip();
            // The newest revision's manifest alone, decoded once.
            let newest = newest_of(&entries).and_then(|n| {
                let at = entries.iter().position(|e| std::ptr::eq(e, n))?;
                let manifest =
                    crate::lean::helm::release_manifest(payloads[at].as_deref()?).ok()?;
                Some((n.metadata.name.clone()?, manifest))
            });
            record(o, &entries);
            Some((entries, newest))
        }
        Err(e) => {
            log::warn!(
                "{}: cannot read Helm's storage to record its digests: {e}",
                o.target.key()
            );
            None
        }
    }
}

/// The storage as read after a run: every entry, and the newest's Secret
/// name and manifest.
pub type AfterRun = (Vec<HelmRelease>, Option<(String, String)>);

/// What [`record_after_run`] reads, taken from the cache instead of a LIST
/// when the cache provably holds the run's last write: the run released
/// `revision` (no test or remedy wrote after it), and the cache holds that
/// revision, in helm's own Secret and no other, `deployed` — helm's last
/// write of an install or upgrade —
/// decoded after `run` started (so not an earlier release's revision of
/// the same number, left in a cache behind its deletion). The watch of
/// Helm's storage delivers writes in order, so every write helm made
/// before it (the revision it superseded, those it pruned) is there too.
/// Each revision whose digest is recorded keeps the content recorded;
/// another one needs its payload kept while the run was in flight
/// (`lean::recent`), as does the newest, whose manifest is returned.
/// `None`: read the storage instead.
pub fn after_run_from_cache(
    entries: &[std::sync::Arc<HelmRelease>],
    o: &Observed,
    run: &crate::lean::recent::Capturing,
) -> Option<AfterRun> {
    use crate::delivery::helmapp::decide::observed::RunEnded;
    let Some(RunEnded::Released { revision, .. }) = o.done.run_ended else {
        return None;
    };
    let mut entries: Vec<HelmRelease> = entries.iter().map(|e| (**e).clone()).collect();
    // helm's own Secret of the revision, and no other of that number (one
    // planted beside it under another name would leave the order saying
    // nothing of helm's).
    let helms = format!("sh.helm.release.v1.{}.v{revision}", o.target.release);
    let at_revision: Vec<&HelmRelease> =
        entries.iter().filter(|e| e.version() == revision).collect();
    if at_revision.len() != 1 || at_revision[0].metadata.name.as_deref() != Some(helms.as_str()) {
        return None;
    }
    let newest = newest_of(&entries)?;
    let last_write = newest.version() == revision
        && newest
            .release
            .as_ref()
            .is_ok_and(|r| r.status == HelmStatus::Deployed)
        && run.decoded_since(newest.kept);
    if !last_write {
        return None;
    }
    let json = crate::lean::helm::release_json(&crate::lean::recent::payload(newest.kept)?).ok()?;
    let newest_secret = newest.metadata.name.clone()?;
    let manifest = crate::lean::helm::release_manifest_of_json(&json).ok()?;
    for e in entries.iter_mut().filter(|e| e.release.is_ok()) {
        let digest = e.digest_string();
        let recorded = o.status.storage_digests.iter().find(|b| {
            b.revision == e.version() && Some(&b.digest) == digest.as_ref() && !b.content.is_empty()
        });
        e.content = match recorded {
            Some(b) => Some(b.content.clone()),
            None => crate::lean::storage::content_digest(&crate::lean::recent::payload(e.kept)?),
        };
    }
    Some((entries, Some((newest_secret, manifest))))
}

/// Records `entries`, read after a helm action, as [`recorded_after`] has
/// it; the newest's digest goes on the newest history entry.
///
/// The run intent proves the revision it names with the content helm
/// printed (after our own `helm test`, the content read again, `act::test`)
/// or a render proved. An intent whose helm printed nothing (a failed run,
/// a rollback: a Secret's writer may have put that number there first),
/// left by a run that ended unrecorded — its operator died — or whose
/// content the stored revision does not have proves nothing here, and
/// stays in the status while its revision is unrecorded, for the render
/// that can prove it (`act::own_run`) or refuse it.
pub fn record(o: &mut Observed, entries: &[HelmRelease]) {
    let before = std::mem::take(&mut o.status.storage_digests);
    let intent = o.status.run_intent.take();
    let printed = o.done.run_live && o.done.run_printed;
    let proving = intent.as_ref().filter(|i| !i.content.is_empty() || printed);
    o.status.storage_digests = recorded_after(entries, &before, proving, printed);
    o.done.run_live = false;
    o.done.run_printed = false;
    // The run's revision not recorded — what its helm printed does not
    // prove it, or nothing did: the intent stays, so the next reconcile
    // proves it by a render or refuses it, and never takes the storage on
    // first sight (`check`'s rule for statuses from before digests).
    // (Also when the revision is missing from this read while the status
    // says it was released: a Secret relabelled or deleted for the read
    // and put back planted must find the intent still there.)
    if let Some(left) = intent
        && !o
            .status
            .storage_digests
            .iter()
            .any(|d| d.revision == left.revision)
        && (entries.iter().any(|e| e.version() == left.revision)
            || o.status.revision >= left.revision)
    {
        o.status.run_intent = Some(left);
    }
    // The newest's digest on the history only when it is recorded: that
    // digest is what a status from before digests is trusted by.
    if let (Some(h), Some(n)) = (o.status.history.first_mut(), newest(entries))
        && o.status
            .storage_digests
            .iter()
            .any(|d| d.revision == n.revision && d.digest == n.digest)
    {
        h.release_digest = n.digest;
    }
}

/// Records `entries` as after a run of ours that made `revision` with
/// `content` — proven otherwise than by a run intent (a render of this
/// configuration, `act::own_run`).
pub fn record_proven(o: &mut Observed, entries: &[HelmRelease], revision: i64, content: &str) {
    o.status.run_intent = Some(RunIntent {
        revision,
        content: content.to_string(),
        ..Default::default()
    });
    record(o, entries);
}

/// A revision our last successful helm run made (`made`: revision and
/// the content digest helm printed) that the status has not recorded — the
/// storage read or the status write after the run failed, the API server
/// gone — is recorded now from a fresh read, if the stored revision's
/// content is what our helm printed. Anything else is left to
/// [`first_untrusted`]. `true` once the status as read holds it (it was
/// written): nothing is left to remember.
pub async fn record_own_revision(client: &Client, o: &mut Observed, made: (i64, String)) -> bool {
    let (revision, content) = made;
    if o.status
        .storage_digests
        .iter()
        .any(|d| d.revision == revision)
    {
        return true;
    }
    let Ok(entries) = read(client, &o.target).await else {
        return false;
    };
    if let Some(e) = own_stored(&entries, revision, &content)
        && let Some(digest) = e.digest_string()
    {
        o.status.storage_digests.push(StorageDigest {
            revision,
            digest,
            content,
        });
        o.status.storage_digests.sort_by_key(|d| d.revision);
        if o.status
            .run_intent
            .as_ref()
            .is_some_and(|i| i.revision == revision)
        {
            o.status.run_intent = None;
        }
    }
    // Remembered until a status write is seen to hold it.
    false
}

/// Revision `revision` of `entries` as our successful run left it: the
/// content helm printed (`content`), and `info` as helm left it
/// ([`as_helm_left`]) — its content alone is no proof that a status
/// another writer gave it is ours.
fn own_stored<'e>(
    entries: &'e [HelmRelease],
    revision: i64,
    content: &str,
) -> Option<&'e HelmRelease> {
    let newest = entries
        .iter()
        .map(HelmRelease::version)
        .max()
        .unwrap_or(revision);
    entries.iter().find(|e| {
        e.version() == revision && e.content.as_deref() == Some(content) && as_helm_left(e, newest)
    })
}

/// Before a remediation that follows a failed run (a rollback reads the
/// revision it returns to, an uninstall the newest's manifest): records
/// what the run left, as [`record_after_action`] does, and says why the
/// storage cannot be trusted now, if it cannot — a revision edited while
/// helm ran keeps its earlier record, so it is found here, before helm
/// reads it — and the entries it read. A failed read records nothing: the
/// caller runs no remedy.
pub async fn changed_during_run(
    client: &Client,
    o: &mut Observed,
) -> Result<(Option<Untrusted>, Vec<HelmRelease>), kube::Error> {
    let entries = read(client, &o.target).await?;
    record(o, &entries);
    Ok((
        first_untrusted(&entries, &o.status.storage_digests),
        entries,
    ))
}

/// What is recorded after a helm action, from the storage read then
/// (`entries`, with their content digests) and what was recorded before:
/// - a revision recorded before and unchanged, or changed in its `info`
///   alone to a status helm writes into a revision it does not make
///   ([`helm_rewrites_info`]): recorded as it is now;
/// - a revision recorded before whose content changed (an edit made while
///   helm ran): its earlier record stays, so the next check flags it;
/// - the revision new since that `intent` names (the run's), with the
///   content helm printed when it printed one (`printed`: and the `info`
///   helm leaves there, [`as_helm_left`]) or a render proved: recorded;
/// - anything else (planted while helm ran, whatever its labels, or put
///   in the place of the run's revision after helm printed it): not
///   recorded.
pub fn recorded_after(
    entries: &[HelmRelease],
    before: &[StorageDigest],
    intent: Option<&RunIntent>,
    printed: bool,
) -> Vec<StorageDigest> {
    // The newest revision as we know it — recorded, or our run's — not
    // whatever number a Secret planted beside them carries.
    let newest = before
        .iter()
        .map(|b| b.revision)
        .chain(intent.map(|i| i.revision))
        .max()
        .unwrap_or(0);
    let mut out: Vec<StorageDigest> = entries
        .iter()
        .filter(|e| e.release.is_ok())
        .filter_map(|e| {
            let now = StorageDigest {
                revision: e.version(),
                digest: e.digest_string()?,
                content: e.content.clone().unwrap_or_default(),
            };
            match before.iter().find(|b| b.revision == now.revision) {
                Some(b) if b.digest == now.digest => Some(now),
                Some(b)
                    if !b.content.is_empty()
                        && b.content == now.content
                        && helm_rewrites_info(e, newest) =>
                {
                    Some(now)
                }
                Some(b) => Some(b.clone()),
                None => intent
                    .is_some_and(|i| {
                        i.revision == now.revision
                            && (i.content.is_empty()
                                || (i.content == now.content
                                    && (!printed || as_helm_left(e, newest))))
                    })
                    .then_some(now),
            }
        })
        .collect();
    out.sort_by_key(|d| std::cmp::Reverse(d.revision));
    out
}

/// Whether `e`'s status is one helm (or the operator's unlock) writes into
/// a revision it does not make, so that an `info`-only change to it while
/// our run went on is helm's: `superseded` below a newer revision (an
/// upgrade or rollback), `failed` (a pending run unlocked or failed),
/// `uninstalling`/`uninstalled` (an uninstall keeping history). Never
/// `deployed` or `pending-*`: a revision made current again, or made to
/// look unfinished, is how a writer steers which of our revisions helm
/// takes as its base — no helm run does that to an existing revision.
/// Whether `e`, a revision a run of ours made whose content helm printed
/// (so the run ended: helm prints the release it stored last — a
/// revision a render proved may be a killed run's, `pending-*` as helm
/// left it, for the unlock), has the
/// `info` helm leaves there: `deployed` as the run wrote it, or a status
/// helm writes into it later ([`helm_rewrites_info`]). Made `pending-*`
/// by another writer — helm would take it for a run under way, and the
/// operator for one to unlock — it is not the run's.
fn as_helm_left(e: &HelmRelease, newest: i64) -> bool {
    e.release
        .as_ref()
        .is_ok_and(|r| r.status == HelmStatus::Deployed)
        || helm_rewrites_info(e, newest)
}

fn helm_rewrites_info(e: &HelmRelease, newest: i64) -> bool {
    e.release.as_ref().is_ok_and(|r| match r.status {
        HelmStatus::Superseded => r.version < newest,
        HelmStatus::Failed | HelmStatus::Uninstalling | HelmStatus::Uninstalled => true,
        _ => false,
    })
}

/// Whether the storage of `o`'s release can be trusted: `Some` with the
/// first entry that cannot. `cached` is the release's storage as the
/// cache has it; `fresh`, a read this reconcile already made. A difference
/// in the cache is confirmed with a fresh read. Nothing recorded yet (a
/// release owned before the rule): the storage is trusted on first sight,
/// if its newest revision is the one recorded on the history, if any.
pub async fn check(
    client: &Client,
    o: &mut Observed,
    cached: &[std::sync::Arc<HelmRelease>],
    fresh: Option<Vec<HelmRelease>>,
    operator_made: bool,
) -> Result<Option<Untrusted>, kube::Error> {
    let ours = cached
        .iter()
        .any(|e| label(&e.metadata, HELMAPP_UID_LABEL) == o.uid);
    // Trusted on first sight: the storage of a HelmApp that released
    // before digests were recorded (a revision in its status says so; a
    // failed first run leaves history but no revision). One that never did
    // has nothing of its own there — what carries its UID label (anyone can
    // read the UID and write the label) is checked like any unrecorded
    // revision: only its own run intent, or a render, proves it.
    // (A Hosstedproject's HelmApp — only the operator makes one, in its own
    // namespace — moved there from the earlier rule finds its storage
    // relabelled to it by the operator itself.)
    // A run intent left in the status is this version's: a revision it
    // could not prove is no legacy (`record`).
    let legacy = (o.status.revision > 0 || operator_made) && o.status.run_intent.is_none();
    if o.status.storage_digests.is_empty() && ours && !legacy {
        let fresh = match fresh {
            Some(f) => f,
            None => read(client, &o.target).await?,
        };
        return Ok(first_untrusted(&fresh, &[]));
    }
    if o.status.storage_digests.is_empty() {
        if !ours {
            return Ok(None);
        }
        let fresh = match fresh {
            Some(f) => f,
            None => read(client, &o.target).await?,
        };
        if let (Some(legacy), Some(n)) = (recorded_newest(&o.status), newest(&fresh))
            && n.digest != legacy
        {
            let secret = newest_of(&fresh)
                .and_then(|e| e.metadata.name.clone())
                .unwrap_or_default();
            return Ok(Some(Untrusted::Changed {
                secret,
                revision: n.revision,
                digest: n.digest,
                recorded: legacy.to_string(),
            }));
        }
        trust(&mut o.status, &fresh);
        return Ok(None);
    }
    if first_untrusted(cached, &o.status.storage_digests).is_none() {
        return Ok(None);
    }
    let fresh = match fresh {
        Some(f) => f,
        None => read(client, &o.target).await?,
    };
    let untrusted = first_untrusted(&fresh, &o.status.storage_digests);
    if untrusted.is_none() {
        // What changed in its `info` alone is recorded as it is now: the
        // cache agrees again, and no fresh read is made for it next time.
        o.status.storage_digests = recorded_after(&fresh, &o.status.storage_digests, None, false);
    }
    Ok(untrusted)
}

#[cfg(test)]
mod tests;
