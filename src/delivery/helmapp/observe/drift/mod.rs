//! Drift of every field, found by events (docs/delivery.md "Drift"). Part of *observe*: what it finds goes into
//! [`Found`] for `state`/`plan` to decide on, and `status.inventory`.
//!
//! - `status.inventory` lists the objects of the current revision, read
//!   once per revision from its manifest ([`manifest`]), each with the
//!   digest of the live object when drift was last decided on it
//!   (`checked`).
//! - An object of a watched kind is *suspect* when its cached
//!   [`Fingerprint`]'s digest (ignored sections left out) differs from
//!   `checked`: an informer's event re-queued the HelmApp, and only those
//!   objects are checked, one dry run each ([`check`]). First seen after a
//!   helm run, an object's digest is recorded without a check (helm has
//!   just applied it).
//! - Objects of other kinds are read one at a time, spread over
//!   `spec.interval`; only a changed digest leads to a dry run.
//! - The manifest stored in the release is the reference, never a
//!   re-render: `randAlphaNum` or `lookup` output is not drift.

pub mod check;
pub mod compare;
pub mod rules;

use crate::lean::helm::HelmStatus;
use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::{DriftMode, DriftedObject, HelmApp, InventoryEntry};
use serde_json::Value;

use crate::delivery::helmapp::cluster::Cluster;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::observed::{
    AppliedWorkload, Drifted, Observed, RunEnded, RunKind, Stored,
};
use crate::lean::fingerprint::{Fingerprint, Fingerprinted};
use check::{Object, with_helm_metadata};
use futures::StreamExt;

/// At most this many objects are checked in one reconcile (the others
/// stay suspect and are checked by the next).
const MAX_CHECKS: usize = 20;

/// `status.inventory` brought to the newest revision (whatever the drift
/// mode: readiness reads it too), then the drift of `app`'s release:
/// suspects checked. Only for a release of ours that is deployed, that no
/// helm of ours runs on, and whose storage is trusted: a planted revision's
/// manifest may name any object of any namespace, and neither its list
/// nor what is read of those objects may reach the status.
pub async fn observe(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let cluster = &ctx.on(o);
    let Some(newest) = o.newest.clone() else {
        return;
    };
    if o.busy
        || o.tampered.is_some()
        || newest.owner != o.uid
        || newest.status != HelmStatus::Deployed
    {
        return;
    }
    let Some(new_revision) = refresh_inventory(cluster, o, &newest).await else {
        return;
    };
    if app.spec.drift_mode() == DriftMode::Disabled {
        o.status.drift.clear();
        return;
    }
    // A new revision's objects were applied by the helm run that made it —
    // trusted at first sight only when that run was this process's. A
    // revision this process never ran helm for (its operator stopped
    // before the status write, found again after a restart) may have been
    // edited since: every object is compared with the manifest.
    let trust_first_sight = new_revision && o.produced == Some(newest.revision);
    let first_sight = match trust_first_sight {
        true => Recheck::TrustFirstSight,
        // No digest recorded when helm applied it (a run that could not
        // read them, or an operator stopped before its status write): an
        // edit made since must not be taken for the applied state.
        false => Recheck::Always,
    };
    // Refused before observe comes here (`Observed::invalid_drift_rule`).
    let Ok(rules) = rules::Rules::of(app) else {
        return;
    };
    // A selector reads the labels the chart renders: the manifest, read
    // once per revision into the cache, is needed before the suspects.
    let mut objects = None;
    if rules.need_manifest() {
        objects = Some(match manifest_of(cluster, o, &newest).await {
            Some(objects) => objects,
            None => return,
        });
    }
    let (suspects, unwatched) = suspects(
        cluster,
        app,
        o,
        &rules,
        objects.as_ref().map(|v| v.as_slice()),
        trust_first_sight,
    );
    let interval = crate::delivery::helmapp::decide::desired::parse_duration(&app.spec.interval)
        .unwrap_or(Duration::from_secs(600));
    let app_key = cache::object_key(app);
    let start = match new_revision {
        true => crate::delivery::helmapp::drift_cache::poll::Start::Now,
        false => crate::delivery::helmapp::drift_cache::poll::Start::Resume,
    };
    let (polled, after) = cluster
        .drift
        .polls
        .due(&app_key, &unwatched, interval, start);
    o.drift.poll_after = after;
    let mut todo = suspects;
    if let Some(i) = polled {
        let entry = &o.status.inventory[i];
        let previous = match entry.checked.as_str() {
            "" => first_sight,
            _ => Recheck::IfChanged(entry.checked.clone()),
        };
        todo.push((i, previous));
    }
    if todo.is_empty() {
        return;
    }
    let objects = match objects {
        Some(objects) => objects,
        None => match manifest_of(cluster, o, &newest).await {
            Some(objects) => objects,
            None => return,
        },
    };
    for (i, recheck) in todo.into_iter().take(MAX_CHECKS) {
        check_one(cluster, app, o, &rules, &objects, i, recheck).await;
    }
}

/// The objects of `newest`'s manifest (cached per revision); `None`:
/// unreadable, logged.
async fn manifest_of(
    cluster: &Cluster,
    o: &Observed,
    newest: &Stored,
) -> Option<crate::delivery::helmapp::drift_cache::manifest::Objects> {
    match cluster
        .drift
        .manifests
        .read(
            &cluster.client,
            &o.target.namespace,
            &newest.secret,
            newest.payload_digest(),
        )
        .await
    {
        Ok(objects) => Some(objects),
        Err(e) => {
            log::warn!("{}: cannot check drift: {e}", o.target.key());
            None
        }
    }
}

/// `status.inventory` brought to `newest`'s objects if it lists another
/// revision's: `Some(true)` when it did so now, `Some(false)` when it was
/// already, `None` when the objects could not be listed (logged).
async fn refresh_inventory(cluster: &Cluster, o: &mut Observed, newest: &Stored) -> Option<bool> {
    if o.status.inventory_revision == newest.revision {
        return Some(false);
    }
    match inventory(cluster, o, &newest.secret, newest.payload_digest()).await {
        Ok(entries) => {
            o.status.inventory = entries;
            o.status.inventory_revision = newest.revision;
            o.status.drift.clear();
            Some(true)
        }
        Err(e) => {
            log::warn!(
                "{}: cannot list the objects of revision {}: {e}",
                o.target.key(),
                newest.revision
            );
            None
        }
    }
}

/// After a helm run: [`record_revision`] of the newest of `entries` (the
/// storage read after it) if it is deployed and ours.
pub async fn record_deployed(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    entries: &[crate::lean::storage::HelmRelease],
) {
    let cluster = &ctx.on(o);
    let Some(newest) = crate::lean::storage::newest_of(entries) else {
        return;
    };
    let ours =
        crate::lean::objects::label(&newest.metadata, crate::delivery::names::UID_LABEL) == o.uid;
    let deployed = newest
        .release
        .as_ref()
        .is_ok_and(|r| r.status == HelmStatus::Deployed);
    // The objects of a revision whose content the record just refused
    // (rewritten after helm's last write: its labels may be copied) are
    // not listed — nor judged ready from its manifest: the next
    // reconcile's storage check says what it is.
    let recorded = newest.digest_string().is_some_and(|digest| {
        o.status
            .storage_digests
            .iter()
            .any(|d| d.revision == newest.version() && d.digest == digest)
    });
    if ours
        && deployed
        && recorded
        && let Some(secret) = &newest.metadata.name
    {
        let digest = newest.digest_string();
        record_revision(
            cluster,
            app,
            o,
            (secret, digest.as_deref()),
            newest.version(),
        )
        .await;
    }
}

/// After a helm run of ours left `revision` (stored in Secret `secret`)
/// deployed: `status.inventory` of it, with the digest of every object
/// read now — helm has just applied them — so that the status write that
/// says `Ready` carries them, and nothing is left to write after it. An
/// object that cannot be read keeps no digest (checked by the next
/// reconcile); an inventory that cannot be listed is left to the next
/// reconcile's [`observe`].
async fn record_revision(
    cluster: &Cluster,
    app: &HelmApp,
    o: &mut Observed,
    (secret, digest): (&str, Option<&str>),
    revision: i64,
) {
    let mut entries = match inventory(cluster, o, secret, digest).await {
        Ok(entries) => entries,
        Err(e) => {
            log::warn!(
                "{}: cannot list the objects of revision {revision}: {e}",
                o.target.key()
            );
            return;
        }
    };
    // With drift disabled no digest is compared: none is read.
    if app.spec.drift_mode() != DriftMode::Disabled {
        record_digests(cluster, app, o, &mut entries, (secret, digest)).await;
    }
    o.status.inventory = entries;
    o.status.inventory_revision = revision;
    o.status.drift.clear();
    cluster.drift.polls.forget(&cache::object_key(app));
}

/// The digest of each of `entries` that holds what its manifest sets, as
/// helm has just applied it (`checked`; [`UNVERIFIED`] for the others),
/// and the generations of its workloads (`Done::applied_workloads`).
async fn record_digests(
    cluster: &Cluster,
    app: &HelmApp,
    o: &mut Observed,
    entries: &mut [InventoryEntry],
    (secret, digest): (&str, Option<&str>),
) {
    // What helm applied, to tell it from an edit made between helm's
    // apply and this read: an object that differs from its manifest
    // keeps no digest and is checked by the next reconcile. Without
    // the manifest, nothing is recorded: everything is checked.
    let manifest = cluster
        .drift
        .manifests
        .read(&cluster.client, &o.target.namespace, secret, digest)
        .await
        .ok();
    let rules = rules::Rules::of(app).ok();
    let docs: Vec<Option<&Value>> = entries
        .iter()
        .map(|entry| {
            manifest
                .as_deref()
                .and_then(|objects| document(objects, entry, &o.target))
        })
        .collect();
    // Most objects are proven from what the caches decoded during the
    // run (`lean::recent`), without a request; the rest — not cached
    // yet, cached at a version that does not hold its manifest (the
    // cache may be behind helm), in another namespace (read as the
    // HelmApp's identity) — are read now.
    let kept: Vec<Option<Proven>> = entries
        .iter()
        .zip(&docs)
        .map(|(entry, doc)| proven_from_cache(cluster, o, entry, (*doc)?, rules.as_ref()?))
        .collect();
    let live = read_unproven(cluster, o, entries, &kept).await;
    o.done.applied_workloads = applied_workloads(entries, &live);
    for (((entry, live), doc), kept) in entries.iter_mut().zip(live).zip(docs).zip(kept) {
        // What is not proven as applied is not left without a digest:
        // an object of a kind cached by helm's label, absent from the
        // cache with no digest, would be taken for one never labelled
        // and polled once per interval — a deletion made during or
        // right after our run (gone now, or edited now and deleted
        // later) must be read by the next reconcile instead.
        entry.checked = UNVERIFIED.into();
        if let Some(kept) = kept {
            entry.checked = kept.digest;
            continue;
        }
        match live {
            Ok(Some(live)) => {
                let (Some(doc), Some(rules)) = (doc, &rules) else {
                    continue;
                };
                let ignored = rules.ignored(entry, Some(doc));
                if as_helm_applied(doc, &live, &ignored, &o.target) {
                    entry.checked = Fingerprint::of(&live).digest(&ignored);
                }
            }
            Ok(None) => {}
            Err(e) => log::warn!("{}: {e}", o.target.key()),
        }
    }
}

/// The objects of `entries` as [`proven_from_cache`] kept them, and the
/// others (`kept` is `None`) read now, as the HelmApp's identity.
async fn read_unproven(
    cluster: &Cluster,
    o: &Observed,
    entries: &[InventoryEntry],
    kept: &[Option<Proven>],
) -> Vec<Result<Option<Arc<Value>>, String>> {
    let user = o.identity.user();
    // The futures are made first: a stream that maps with a closure
    // over borrowed entries is not provably `Send` to the compiler.
    let reads: Vec<_> = entries
        .iter()
        .zip(kept)
        .filter(|(_, kept)| kept.is_none())
        .map(|(entry, _)| read_live(cluster, entry, user.as_deref()))
        .collect();
    let mut read = futures::stream::iter(reads)
        .buffered(READS_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter();
    kept.iter()
        .map(|kept| match kept {
            Some(proven) => Ok(Some(proven.live.clone())),
            None => read.next().unwrap_or(Ok(None)).map(|v| v.map(Arc::new)),
        })
        .collect()
}

/// The generation of each workload among `entries` that the member caches
/// can hold (helm's label) as `live` read it right after the run; `None`
/// if one could not be read or was gone (its readiness is then left to
/// the next reconcile).
fn applied_workloads(
    entries: &[InventoryEntry],
    live: &[Result<Option<Arc<Value>>, String>],
) -> Option<Vec<AppliedWorkload>> {
    let mut applied = Vec::new();
    for (entry, live) in entries.iter().zip(live) {
        let workload = matches!(
            (entry.api_version.as_str(), entry.kind.as_str()),
            ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet") | ("batch/v1", "Job")
        );
        if !workload {
            continue;
        }
        let live = live.as_ref().ok()?.as_ref()?;
        // The member caches hold only what carries helm's label (the
        // chart's to write): one without it was never judged from them.
        let cached = live
            .pointer("/metadata/labels/app.kubernetes.io~1managed-by")
            .and_then(Value::as_str)
            == Some("Helm");
        if !cached {
            continue;
        }
        let generation = live.pointer("/metadata/generation")?.as_i64()?;
        applied.push(AppliedWorkload {
            kind: entry.kind.clone(),
            key: format!("{}/{}", entry.namespace, entry.name),
            generation,
        });
    }
    Some(applied)
}

/// Whether `live` holds what the manifest (`objects`) sets for `entry`,
/// field for field as the API server stores it: a local look, no dry run.
/// The server's normalising (`cpu: 0.5` → `500m`) may make an object
/// applied as is look otherwise; that costs it one check by the next
/// reconcile, never a missed edit.
fn as_helm_applied(
    doc: &Value,
    live: &Value,
    ignored: &[&str],
    target: &crate::delivery::helmapp::decide::target::Target,
) -> bool {
    let desired = compare::without(
        &with_helm_metadata(doc, &target.release, &target.namespace),
        ignored,
    );
    compare::drifted_fields(&desired, &compare::as_stored(&desired), live, ignored).is_empty()
}

/// `entry`'s document in the manifest `objects`.
fn document<'v>(
    objects: &'v [Value],
    entry: &InventoryEntry,
    target: &crate::delivery::helmapp::decide::target::Target,
) -> Option<&'v Value> {
    crate::delivery::helmapp::drift_cache::manifest::find(
        objects,
        &entry.kind,
        &entry.namespace,
        &entry.name,
        &target.namespace,
    )
}

/// An object of a run proven as helm applied it from the version the
/// cache holds, kept whole since it was decoded (`lean::recent`).
struct Proven {
    /// Its digest, without the sections its ignore rules cover.
    digest: String,
    live: Arc<Value>,
}

/// `entry`'s object proven from the cache: the version the cache holds
/// now was decoded during this run (`lean::recent`, kept whole so) and
/// holds what `doc`, its manifest, sets. `None` — read it — when it is
/// not cached, was not kept, was decoded before the run (a version from
/// before helm's apply), does not hold its manifest (the cache may not
/// have seen helm's write yet), or lies outside the release's namespace
/// (read as the HelmApp's identity, which the caches are not). A workload
/// is read too unless the run installed the release: a version the cache
/// took during the run but before helm's apply (an upgrade's, perhaps
/// waiting for its helm slot) holds a manifest that only removes a field,
/// and its generation — the one readiness waits for — would be the last
/// one's. (Another kind's digest taken so is only checked once more.)
fn proven_from_cache(
    cluster: &Cluster,
    o: &Observed,
    entry: &InventoryEntry,
    doc: &Value,
    rules: &rules::Rules,
) -> Option<Proven> {
    let run = o.done.capturing.as_ref()?;
    if entry.namespace != o.target.namespace {
        return None;
    }
    let workload = matches!(
        (entry.api_version.as_str(), entry.kind.as_str()),
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet") | ("batch/v1", "Job")
    );
    let installed = matches!(
        o.done.run_ended,
        Some(RunEnded::Released {
            run: RunKind::Install,
            ..
        })
    );
    if workload && !installed {
        return None;
    }
    let fingerprint = cached_fingerprint(cluster, entry)?.0?;
    if !run.decoded_since(fingerprint.kept) {
        return None;
    }
    let live = crate::lean::recent::get(fingerprint.kept)?;
    let ignored = rules.ignored(entry, Some(doc));
    as_helm_applied(doc, &live, &ignored, &o.target).then(|| Proven {
        digest: fingerprint.digest(&ignored),
        live,
    })
}

/// The object of `entry` as the API has it now, read as `user`.
async fn read_live(
    cluster: &Cluster,
    entry: &InventoryEntry,
    user: Option<&str>,
) -> Result<Option<Value>, String> {
    let object = Object {
        api_version: &entry.api_version,
        kind: &entry.kind,
        namespace: &entry.namespace,
        name: &entry.name,
        desired: &Value::Null,
        as_user: user,
    };
    cluster.drift.read(&cluster.client, &object).await
}

/// Objects read at once by [`record_revision`].
const READS_AT_ONCE: usize = 8;

/// Whether a check reads the object and dry-runs it whatever its digest.
enum Recheck {
    Always,
    /// Only if its digest moved from this.
    IfChanged(String),
    /// Record its digest, check nothing (first sight, after a helm run).
    TrustFirstSight,
}

/// The inventory entries that are suspect (by their cached fingerprint),
/// and those of kinds not cached (polled). Records the digest of objects
/// seen for the first time in a `new_revision` whose helm run was ours
/// (helm has just applied them); one without a digest otherwise is
/// checked.
fn suspects(
    cluster: &Cluster,
    app: &HelmApp,
    o: &mut Observed,
    rules: &rules::Rules,
    objects: Option<&[Value]>,
    new_revision: bool,
) -> (Vec<(usize, Recheck)>, Vec<usize>) {
    let repairing = app.spec.drift_mode() == DriftMode::Enabled;
    let (mut suspects, mut unwatched) = (Vec::new(), Vec::new());
    for i in 0..o.status.inventory.len() {
        let entry = &o.status.inventory[i];
        let fingerprint = match cached(cluster, entry) {
            Cached::Live(f) => f,
            // Gone, or not in the cache (yet, or at all: an object without
            // helm's label): one read says which, and compares it with the
            // digest recorded — first sight is trusted only right after the
            // run that applied it.
            Cached::Absent => {
                let recheck = match (entry.checked.as_str(), new_revision) {
                    ("", true) => Recheck::TrustFirstSight,
                    ("", false) => Recheck::Always,
                    (checked, _) => Recheck::IfChanged(checked.to_string()),
                };
                suspects.push((i, recheck));
                continue;
            }
            Cached::NotWatched => {
                unwatched.push(i);
                continue;
            }
        };
        let desired = objects.and_then(|objects| document(objects, entry, &o.target));
        let ignored = rules.ignored(entry, desired);
        let digest = fingerprint.digest(&ignored);
        let listed = o.status.drift.iter().any(|d| same(d, entry));
        let entry = &mut o.status.inventory[i];
        if fingerprint.drift_disabled {
            entry.checked = digest;
            o.drift.cleared.push(identity(entry));
        } else if entry.checked.is_empty() && !listed && new_revision {
            entry.checked = digest;
        } else if digest != entry.checked || (repairing && listed) {
            // (An unrecorded digest differs from every digest: checked.)
            suspects.push((i, Recheck::Always));
        }
    }
    (suspects, unwatched)
}

/// Checks inventory entry `i` and records what was found.
async fn check_one(
    cluster: &Cluster,
    app: &HelmApp,
    o: &mut Observed,
    rules: &rules::Rules<'_>,
    objects: &[Value],
    i: usize,
    recheck: Recheck,
) {
    let entry = o.status.inventory[i].clone();
    let key = o.target.key();
    let Some(doc) = document(objects, &entry, &o.target) else {
        return;
    };
    let ignored: Vec<String> = rules
        .ignored(&entry, Some(doc))
        .into_iter()
        .map(str::to_string)
        .collect();
    let ignored_refs: Vec<&str> = ignored.iter().map(String::as_str).collect();
    let desired = compare::without(
        &with_helm_metadata(doc, &o.target.release, &o.target.namespace),
        &ignored_refs,
    );
    let user = o.identity.user();
    let object = Object {
        api_version: &entry.api_version,
        kind: &entry.kind,
        namespace: &entry.namespace,
        name: &entry.name,
        desired: &desired,
        as_user: user.as_deref(),
    };
    let previous = match &recheck {
        // No digest is empty: always compared.
        Recheck::Always => Some(""),
        Recheck::IfChanged(previous) => Some(previous.as_str()),
        Recheck::TrustFirstSight => None,
    };
    // Reported drift is confirmed by a dry run; drift that is put back is
    // confirmed by the put-back.
    let confirm = app.spec.drift_mode() != DriftMode::Enabled;
    let found = cluster
        .drift
        .check(&cluster.client, &object, &ignored_refs, previous, confirm)
        .await;
    match found {
        Ok(check::Found::Clean { digest }) | Ok(check::Found::Disabled { digest }) => {
            o.status.inventory[i].checked = digest;
            o.drift.cleared.push(identity(&entry));
        }
        Ok(check::Found::Drifted {
            fields,
            digest,
            live,
        }) => {
            // `checked` stays as it was: a drift found is recorded only by
            // the step that acts on it (put back, or reported). A step that
            // does neither (a chart still being fetched, a closed window, a
            // helm run holding the release) leaves the object suspect, so
            // the next reconcile finds it again.
            let mut object = identity(&entry);
            object.fields = fields;
            o.drift.drifted.push(Drifted {
                object,
                api_version: entry.api_version.clone(),
                desired,
                ignored,
                live,
                digest,
            });
        }
        Ok(check::Found::Gone) => {
            let gone = format!("{} {}/{}", entry.kind, entry.namespace, entry.name);
            if !o.missing.contains(&gone) {
                o.missing.push(gone);
            }
        }
        Err(e) => log::warn!("{key}: drift of {} {}: {e}", entry.kind, entry.name),
    }
}

/// The `checked` of an object the record after our run could not prove
/// as helm applied it (it differed, was gone, or could not be read): no
/// digest equals it, so the next reconcile reads and checks the object —
/// cached or not — and never leaves it to the poll of unwatched kinds.
pub const UNVERIFIED: &str = "unverified";

/// After a run whose record left objects [`UNVERIFIED`] (an edit or a
/// deletion between helm's apply and the read that followed it, or a read
/// that failed): when to look again — soon, whatever else wakes the
/// HelmApp.
pub fn recheck_unverified(app: &HelmApp, o: &Observed) -> Option<Duration> {
    (app.spec.drift_mode() != DriftMode::Disabled
        && o.status.inventory.iter().any(|e| e.checked == UNVERIFIED))
    .then_some(Duration::from_secs(1))
}

/// What the caches say of an inventory entry.
enum Cached {
    /// The object, as its fingerprint.
    Live(Fingerprint),
    /// Not in the cache that would hold it: its kind is cached whole
    /// (every Secret, every ConfigMap), or it was seen before (a digest is
    /// recorded).
    Absent,
    /// No cache holds it: a kind not watched, or an object without helm's
    /// label.
    NotWatched,
}

fn cached(cluster: &Cluster, entry: &InventoryEntry) -> Cached {
    // A kind cached by helm's label: an object with a digest recorded was
    // seen, so its absence is read (gone, or never labelled) — never left
    // to the slow poll of unwatched kinds.
    let seen = !entry.checked.is_empty();
    match cached_fingerprint(cluster, entry) {
        Some((Some(f), _)) => Cached::Live(f),
        Some((None, whole)) if whole || seen => Cached::Absent,
        _ => Cached::NotWatched,
    }
}

/// The fingerprint the cache of `entry`'s kind holds of it, and whether
/// that cache holds every object of the kind (Secrets, ConfigMaps) or only
/// those with helm's label; `None` when no cache holds the kind.
fn cached_fingerprint(
    cluster: &Cluster,
    entry: &InventoryEntry,
) -> Option<(Option<Fingerprint>, bool)> {
    fn fp<K: Fingerprinted>(found: Option<Arc<K>>) -> Option<Fingerprint> {
        found.map(|o| o.fingerprint().clone())
    }
    let key = format!("{}/{}", entry.namespace, entry.name);
    let m = &cluster.members;
    let d = &m.drift_only;
    let found = match (entry.api_version.as_str(), entry.kind.as_str()) {
        ("apps/v1", "Deployment") => fp(m.deployments.get(&key)),
        ("apps/v1", "StatefulSet") => fp(m.statefulsets.get(&key)),
        ("apps/v1", "DaemonSet") => fp(m.daemonsets.get(&key)),
        ("batch/v1", "Job") => fp(m.jobs.get(&key)),
        ("v1", "Service") => fp(m.services.get(&key)),
        ("networking.k8s.io/v1", "Ingress") => fp(m.ingresses.get(&key)),
        ("v1", "ServiceAccount") => fp(d.service_accounts.get(&key)),
        ("autoscaling/v2", "HorizontalPodAutoscaler") => fp(d.autoscalers.get(&key)),
        ("policy/v1", "PodDisruptionBudget") => fp(d.disruption_budgets.get(&key)),
        ("rbac.authorization.k8s.io/v1", "Role") => fp(d.roles.get(&key)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => fp(d.role_bindings.get(&key)),
        ("networking.k8s.io/v1", "NetworkPolicy") => fp(d.network_policies.get(&key)),
        ("v1", "Secret") => return Some((fp(cluster.secrets.get(&key)), true)),
        ("v1", "ConfigMap") => return Some((fp(cluster.configmaps.get(&key)), true)),
        _ => return None,
    };
    Some((found, false))
}

/// The objects of the revision stored in `secret`, as inventory entries
/// (namespaced kinds get the release's namespace when the manifest names
/// none; digests are recorded on first sight).
async fn inventory(
    cluster: &Cluster,
    o: &Observed,
    secret: &str,
    digest: Option<&str>,
) -> Result<Vec<InventoryEntry>, String> {
    let objects = cluster
        .drift
        .manifests
        .read(&cluster.client, &o.target.namespace, secret, digest)
        .await?;
    let mut entries = Vec::new();
    for object in objects.iter() {
        let s = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (api_version, kind, name) = (s("/apiVersion"), s("/kind"), s("/metadata/name"));
        if name.is_empty() {
            continue;
        }
        let namespaced = match cluster
            .drift
            .resources
            .lookup(&cluster.client, &api_version, &kind)
            .await
        {
            Ok(Some(r)) => r.namespaced,
            // Not served (yet): as written.
            Ok(None) => !s("/metadata/namespace").is_empty(),
            Err(e) => return Err(e),
        };
        let namespace = match (namespaced, s("/metadata/namespace")) {
            (false, _) => String::new(),
            (true, ns) if ns.is_empty() => o.target.namespace.clone(),
            (true, ns) => ns,
        };
        entries.push(InventoryEntry {
            kind,
            api_version,
            namespace,
            name,
            checked: String::new(),
        });
    }
    Ok(entries)
}

/// `entry` as a `status.drift` item (no fields yet).
fn identity(entry: &InventoryEntry) -> DriftedObject {
    DriftedObject {
        kind: entry.kind.clone(),
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        fields: Vec::new(),
    }
}

/// Whether `d` is about the object of `entry`.
pub fn same(d: &DriftedObject, entry: &InventoryEntry) -> bool {
    d.kind == entry.kind && d.namespace == entry.namespace && d.name == entry.name
}
