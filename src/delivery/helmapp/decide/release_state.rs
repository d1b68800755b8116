//! What a HelmApp's release can be ([`ReleaseState`]): the vocabulary
//! `state.rs` decides in and `plan.rs` chooses a step from.

use std::time::Duration;

use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::observed::RunKind;

/// What the release of one HelmApp is.
#[derive(Debug, Clone, PartialEq)]
pub enum ReleaseState {
    /// A helm run of this reconcile made `revision`, and `spec.test.enable`
    /// asks for its tests.
    Untested {
        run: RunKind,
        revision: i64,
        before: i64,
    },
    /// A helm run of this reconcile made `revision` (tested, if asked):
    /// report it, and its readiness with `wait`.
    JustReleased { run: RunKind, revision: i64 },
    /// A helm run of this reconcile, or its tests, failed, for the
    /// `failures`-th time in a row.
    RunFailed {
        run: RunKind,
        message: String,
        failures: i32,
        /// The revision the status says last succeeded (0: none ever did):
        /// where a rollback returns.
        last_succeeded: i64,
    },
    /// The HelmApp is being deleted; `uninstall`: its release is ours and
    /// `uninstallOnDelete` holds.
    Deleting { uninstall: bool },
    /// Being deleted, its release ours to uninstall, and its target
    /// namespace gone or terminating: the release goes with it, no helm.
    GoesWithNamespace,
    /// Helm's storage is not what the operator left there
    /// (`observe::storage`): no helm runs on it; `deleting`: the HelmApp is
    /// being deleted and goes without an uninstall.
    Tampered { message: String, deleting: bool },
    /// `spec.suspend`: no helm operation.
    Suspended,
    /// Held back by something only a change can fix (or that re-queues it
    /// when it changes): a refused reference, a dependency, invalid values.
    Refused { reason: Reason, message: String },
    /// Waits for a dependency read by request (its kind is not watched, it
    /// may not be read, its expression failed), or for a remote cluster
    /// (its caches fill, a place under `--max-remote-clusters`): looked at
    /// again after `after`.
    DependencyPolled {
        reason: Reason,
        message: String,
        after: Duration,
    },
    /// The chart is being fetched; the fetch re-queues when it ends.
    FetchingChart,
    /// The chart cannot be had (`reason`: `ChartUnavailable`,
    /// `ChartInvalid` or `ChartSourceRefused`); `retry`: trying again may
    /// help, and `Ready` has said `reason` this long before.
    ChartUnavailable {
        reason: Reason,
        message: String,
        retry: Option<Duration>,
    },
    /// A helm run of this reconcile was refused by RBAC (`message` names
    /// the identity and what it may not do); `Ready` has said `Forbidden`
    /// for `waited` before it. Not a failure: nothing is counted or
    /// remedied, and no retry can succeed until RBAC changes.
    Forbidden { message: String, waited: Duration },
    /// Pending, and a helm run of ours holds it.
    HeldByHelm,
    /// A helm run of this reconcile could not start (`RunEnded::NotStarted`):
    /// `retry` when trying again may help.
    NotStarted {
        reason: Reason,
        message: String,
        retry: bool,
    },
    /// A helm run of this reconcile met the API server's outage.
    WaitingForApi,
    /// `helm uninstall` of a HelmApp being deleted failed.
    UninstallFailed { message: String },
    /// Pending with no helm of ours on it since this process leads, for
    /// less than `timeout`: another helm may run on it.
    Locked {
        message: String,
        remaining: Duration,
    },
    /// Pending with no helm of ours on it, since before this process led
    /// (its helm went with the operator that ran it) or for longer than
    /// `timeout`: unlock it.
    Stuck { message: String },
    /// Owned by another live HelmApp: never taken.
    OwnedByOther { message: String },
    /// Exists, and no live HelmApp owns it (`adopt` is false).
    NotOurs { message: String },
    /// No live HelmApp owns it, `adopt` is true, it is `deployed`, and
    /// whether adopting changes it is not known yet: render it.
    AdoptionToRender,
    /// The newest revision may be one our own helm made unrecorded
    /// (`Observed::own_unrecorded`): render this configuration to see.
    OwnRunToRender { revision: i64 },
    /// It renders as that revision holds (manifest and hooks): ours,
    /// recorded as after any run of ours.
    OwnRunRendered { revision: i64 },
    /// As [`ReleaseState::AdoptionToRender`], rendered: adopting changes
    /// no object. Taken over as it is — no helm run, no new revision.
    AdoptAsIs { revision: i64 },
    /// No live HelmApp owns it, `adopt` is true, and the operator's own
    /// identity may not take it over: its storage lists objects outside
    /// its namespace.
    AdoptionRefused { message: String },
    /// Deployed with this configuration. `revision`: the stored one, when
    /// the storage (not our own last write) says so.
    InSync { revision: Option<i64> },
    /// Deployed with this configuration, but objects of it were deleted.
    Drifted { objects: Vec<String> },
    /// Deployed with this configuration, fields of objects of it were
    /// edited, and `spec.drift.mode` is `enabled`: put them back.
    FieldsDrifted { objects: Vec<String> },
    /// The last attempt of this configuration failed less than its backoff
    /// ago ([`retry_backoff`]): try again after `remaining`. Kept in
    /// status, not in the work queue, so a storage event of the failed run
    /// or a restart does not skip it.
    BackingOff { remaining: Duration },
    /// Upgrades failed `remediation.retries` times: nothing runs until the
    /// configuration or `hossted.com/reconcile-at` changes.
    RetriesExhausted,
    /// `spec.approval: manual` and this configuration was never run:
    /// nothing runs until `hossted.com/approve` names `hash`. `stale`: the
    /// annotation's value, when it names another configuration.
    AwaitingApproval {
        hash: String,
        chart_version: String,
        stale: Option<String>,
    },
    /// A change that runs helm waits for the change windows: they open at
    /// `opens` (`None`: not within a year), `after` from now.
    OutsideWindow {
        change: Change,
        opens: Option<chrono::DateTime<chrono::Utc>>,
        after: Duration,
    },
    /// No release yet.
    Absent,
    /// Exists and must be upgraded.
    OutOfSync { why: OutOfSyncCause },
    /// Ours, and the configuration names a chart of another name
    /// (`from` → `to`) with `upgrade.chartNameChangeStrategy: Reinstall`:
    /// uninstall it, then install anew.
    ChartRenamed { from: String, to: String },
}

/// Why a release is out of sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfSyncCause {
    /// Its configuration hash is not ours.
    Changed,
    /// No live HelmApp owns it and `adopt` is true.
    Adopt,
    /// Its newest revision is not `deployed` (failed, or just unlocked).
    NotDeployed,
    /// `hossted.com/force-at` has a new value: one upgrade with `--force`.
    Forced,
    /// `helm test` failed after the last run of this configuration
    /// (`test.ignoreFailures` is false): upgraded again, as a failed
    /// upgrade is.
    TestFailed,
}

/// A change that runs helm, as change windows hold it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Install,
    Upgrade,
    /// Drift put right (`repairAnytime` lets it through).
    Repair,
    /// A deletion's uninstall: never held back by windows that cannot be
    /// read, nor run early by `force-at`.
    Uninstall,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Change::Install => "install",
            Change::Upgrade => "upgrade",
            Change::Repair => "repair",
            Change::Uninstall => "uninstall",
        })
    }
}
