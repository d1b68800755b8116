//! With `wait`: which workloads of the release have not finished rolling
//! out (read from the caches, never `helm --wait`), and which of its
//! objects of other kinds are not ready (read while it waits). What that
//! makes of `Ready` is decided by `decide::ready`.

use apis::helmapp::{HealthCheckExpr, HelmApp};
use kube::ResourceExt;

use crate::delivery::helmapp::cluster::Cluster;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::kstatus::Readiness;
use crate::delivery::helmapp::decide::observed::{AppliedWorkload, Observed, RunEnded};
use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::helmapp::observe::drift::check::Object;
use crate::delivery::helmapp::observe::expressions::ExprError;
use crate::lean::members::MEMBER_INDEX;

/// The Deployments, StatefulSets, DaemonSets and Jobs (unless `jobs` is
/// false: `disableWaitForJobs`) of the release that are not done yet,
/// sorted (`Kind name`).
pub fn pending(cluster: &Cluster, target: &Target, jobs: bool) -> Vec<String> {
    let key = target.key();
    let m = &cluster.members;
    let mut pending: Vec<String> = m
        .deployments
        .by_index(MEMBER_INDEX, &key)
        .iter()
        .filter(|d| !d.rollout.is_done(d.metadata.generation))
        .map(|d| format!("Deployment {}", d.name_any()))
        .collect();
    pending.extend(
        m.daemonsets
            .by_index(MEMBER_INDEX, &key)
            .iter()
            .filter(|d| !d.rollout.is_done(d.metadata.generation))
            .map(|d| format!("DaemonSet {}", d.name_any())),
    );
    pending.extend(
        m.jobs
            .by_index(MEMBER_INDEX, &key)
            .iter()
            .filter(|_| jobs)
            .filter(|j| !j.is_done())
            .map(|j| format!("Job {}", j.name_any())),
    );
    pending.extend(
        m.statefulsets
            .by_index(MEMBER_INDEX, &key)
            .iter()
            .filter(|s| !s.rollout.is_done(s.metadata.generation))
            .map(|s| format!("StatefulSet {}", s.name_any())),
    );
    pending.sort();
    pending
}

/// After a run of this reconcile released a revision, with `wait`: its
/// workloads not done yet, and its objects pending until what the run
/// left is recorded (`plan::Step::RecordRun` lists them in
/// `status.inventory`); from then on they are judged as any reconcile
/// judges them ([`others`]) — a release whose objects are ready at once
/// is reported `Ready` in the run's one status write.
pub async fn after_run(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let (RunEnded::Released { revision, .. } | RunEnded::Tested { revision, .. }) =
        o.done.run_ended.as_ref().map_or(&RunEnded::SlotBusy, |e| e)
    else {
        return;
    };
    if !app.spec.wait {
        return;
    }
    let revision = *revision;
    let jobs = app.spec.waits_for_jobs(&o.status.last_action);
    o.pending = pending(&ctx.on(o), &o.target, jobs);
    o.readiness_polled = true;
    if !o.done.recorded || o.done.applied_workloads.is_none() {
        o.pending
            .push(format!("the objects of revision {revision}"));
        return;
    }
    // `Step::RecordRun` kept what the run applied (`Context::applied`):
    // judged as any later reconcile of this revision judges it.
    applied_not_cached(ctx, app, o);
    o.readiness_failed = others(ctx, app, o).await;
}

/// With `wait`, in any reconcile: the workloads this process's last run
/// applied at `o`'s revision that the cache does not hold at the
/// generation helm applied yet are pending too ([`not_cached_yet`]).
pub fn applied_not_cached(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let key = crate::delivery::helmapp::context::run_key(app);
    let applied = match ctx.applied.lock().get(&key) {
        Some((revision, applied)) if *revision == o.status.revision => applied.clone(),
        _ => return,
    };
    let jobs = app.spec.waits_for_jobs(&o.status.last_action);
    let cluster = ctx.on(o);
    for said in not_cached_yet(&applied, jobs, |w| cached_generation(&cluster, w)) {
        if !o.pending.contains(&said) {
            o.pending.push(said);
        }
    }
    o.pending.sort();
}

/// Of the workloads a run `applied`, those the cache does not hold at the
/// generation helm applied yet (`cached`: the generation it holds) — one
/// just made, or the last generation's, rolled out — as `Kind name`:
/// pending until it does (its event looks again). Jobs only when waited
/// for (`jobs`).
fn not_cached_yet(
    applied: &[AppliedWorkload],
    jobs: bool,
    cached: impl Fn(&AppliedWorkload) -> Option<i64>,
) -> Vec<String> {
    applied
        .iter()
        .filter(|w| jobs || w.kind != "Job")
        .filter(|w| cached(w) < Some(w.generation))
        .map(|w| format!("{} {}", w.kind, w.key.rsplit('/').next().unwrap_or("")))
        .collect()
}

/// The generation of `workload` in the cache that follows its kind.
fn cached_generation(cluster: &Cluster, workload: &AppliedWorkload) -> Option<i64> {
    let m = &cluster.members;
    let key = &workload.key;
    match workload.kind.as_str() {
        "Deployment" => m.deployments.get(key)?.metadata.generation,
        "StatefulSet" => m.statefulsets.get(key)?.metadata.generation,
        "DaemonSet" => m.daemonsets.get(key)?.metadata.generation,
        "Job" => m.jobs.get(key)?.metadata.generation,
        _ => None,
    }
}

/// With `wait`, while the release is not Ready: its objects of kinds no
/// cache follows, and of kinds `healthCheckExprs` names, read one request
/// each and judged by that kind's expressions, else by
/// [`crate::delivery::helmapp::decide::kstatus`]. Adds the ones not ready to `o.pending` and returns
/// the first one that failed (`Stalled`/`Failed`), with its message.
/// Until `status.inventory` lists the current revision, that is pending
/// too (nothing can be judged ready before its objects are known).
pub async fn others(ctx: &Context, app: &HelmApp, o: &mut Observed) -> Option<String> {
    if o.status.inventory_revision != o.status.revision {
        o.pending
            .push(format!("the objects of revision {}", o.status.revision));
        return None;
    }
    let user = o.identity.user();
    let mut failed = None;
    // Once the expression slots were busy with others' work, the rest of
    // this app's expressions wait for the next look rather than each
    // waiting its turn: a reconcile worker is never held by the queue.
    let mut slots_busy = false;
    let none = serde_json::Value::Null;
    let checks = &app.spec.health_check_exprs;
    let jobs = app.spec.waits_for_jobs(&o.status.last_action);
    for entry in &o.status.inventory {
        if !jobs && entry.api_version == "batch/v1" && entry.kind == "Job" {
            continue;
        }
        let check = crate::delivery::helmapp::observe::dependency::health_check(
            checks,
            &entry.api_version,
            &entry.kind,
        );
        if check.is_none()
            && crate::delivery::helmapp::decide::kstatus::without_readiness(
                &entry.api_version,
                &entry.kind,
            )
        {
            continue;
        }
        let object = Object {
            api_version: &entry.api_version,
            kind: &entry.kind,
            namespace: &entry.namespace,
            name: &entry.name,
            desired: &none,
            as_user: user.as_deref(),
        };
        let name = format!("{} {}", entry.kind, entry.name);
        if slots_busy && check.is_some() {
            o.pending.push(name);
            continue;
        }
        match ctx.on(o).drift.read(&ctx.on(o).client, &object).await {
            Ok(Some(live)) => match judge(check, live).await {
                Judged::Busy => {
                    slots_busy = true;
                    o.pending.push(name);
                }
                Judged::Is(Readiness::Ready) => {}
                Judged::Is(Readiness::Pending(_)) => o.pending.push(name),
                Judged::Is(Readiness::Failed(why)) => {
                    failed.get_or_insert(format!("{name} failed: {why}"));
                }
            },
            Ok(None) => o.pending.push(name),
            Err(e) => {
                log::warn!("{}: readiness of {name}: {e}", o.target.key());
                o.pending.push(name);
            }
        }
    }
    o.pending.sort();
    failed
}

/// `live` judged by its kind's `healthCheckExprs` entry, else by kstatus.
/// An expression that cannot be evaluated fails the object, saying why.
async fn judge(check: Option<&HealthCheckExpr>, live: serde_json::Value) -> Judged {
    match check {
        Some(check) => {
            match crate::delivery::helmapp::observe::dependency::health(check, live).await {
                Ok(readiness) => Judged::Is(readiness),
                // Others' expressions held the slots: not judged yet.
                Err(ExprError::Busy { .. }) => Judged::Busy,
                Err(e) => Judged::Is(Readiness::Failed(e.to_string())),
            }
        }
        None => Judged::Is(crate::delivery::helmapp::decide::kstatus::readiness(&live)),
    }
}

/// What [`judge`] came to.
enum Judged {
    Is(Readiness),
    /// No expression slot was free: not judged.
    Busy,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(kind: &str, name: &str, generation: i64) -> AppliedWorkload {
        AppliedWorkload {
            kind: kind.into(),
            key: format!("apps/{name}"),
            generation,
        }
    }

    #[test]
    fn a_workload_is_judged_from_the_cache_only_at_the_generation_helm_applied() {
        let runs = [
            applied("Deployment", "web", 2),
            applied("StatefulSet", "db", 1),
            applied("Job", "migrate", 1),
        ];
        // Not in the cache yet, or the generation before (rolled out as it
        // may be): pending.
        let cache = |w: &AppliedWorkload| match w.key.as_str() {
            "apps/web" => Some(1),
            "apps/db" => None,
            _ => Some(1),
        };
        assert_eq!(
            not_cached_yet(&runs, true, cache),
            ["Deployment web", "StatefulSet db"]
        );
        // At that generation or past it (an edit since): judged from the
        // cache, as any reconcile judges it.
        let caught_up = |w: &AppliedWorkload| Some(w.generation + i64::from(w.kind == "Job"));
        assert!(not_cached_yet(&runs, true, caught_up).is_empty());
        // Jobs left out when they are not waited for.
        let behind = |_: &AppliedWorkload| None;
        assert_eq!(
            not_cached_yet(&runs, false, behind),
            ["Deployment web", "StatefulSet db"]
        );
    }
}
