//! The plain value a decision about one HelmApp is made from: what
//! `observe` gathered. Data only; `super::state` decides from it.

use crate::lean::helm::HelmStatus;
use std::time::Duration;

use apis::helmapp::{DriftedObject, HelmApp, HelmAppStatus};
use serde_json::Value;

use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::desired::ChartProblem;
use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::source::LocalChart;

/// One revision of the release, as Helm's storage holds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    pub revision: i64,
    /// The storage Secret's name.
    pub secret: String,
    /// The UID of the HelmApp that owns it (label; empty: none).
    pub owner: String,
    /// The config hash it was made with (label).
    pub hash: String,
    /// Its `info.status` (`Other("")`: undecodable).
    pub status: HelmStatus,
    /// When helm last changed it (RFC 3339).
    pub updated: String,
    /// `sha256:<hex>` of its payload (empty: not ours, or unreadable).
    pub digest: String,
}

impl Stored {
    /// [`Stored::digest`], if known.
    pub fn payload_digest(&self) -> Option<&str> {
        Some(self.digest.as_str()).filter(|d| !d.is_empty())
    }
}

/// A dry run of the configuration against what Helm's storage holds:
/// whether it renders the same objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendering {
    /// The same objects (for an adoption, labels a Flux helm-controller
    /// adds aside; for a run of ours, the hooks too).
    Same,
    /// Some object differs, or the render failed.
    Differs,
}

/// What the drift part of observe found.
#[derive(Debug, Default)]
pub struct DriftFound {
    /// Objects whose fields drifted, checked now.
    pub drifted: Vec<Drifted>,
    /// Objects found clean now (or with drift disabled): off `status.drift`.
    pub cleared: Vec<DriftedObject>,
    /// Drifted objects a put-back failed on (still drifted).
    pub unrepaired: Vec<DriftedObject>,
    /// When the next object of an unwatched kind is due.
    pub poll_after: Option<Duration>,
}

/// One drifted object, with what a put-back needs.
#[derive(Debug, Clone)]
pub struct Drifted {
    pub object: DriftedObject,
    pub api_version: String,
    /// As the manifest has it, with helm's metadata.
    pub desired: Value,
    /// The pointers `spec.drift.ignore` leaves out for it.
    pub ignored: Vec<String>,
    /// The live object as read, when the drift is likely but not
    /// confirmed (the put-back confirms it).
    pub live: Option<Value>,
    /// The live object's digest when found: recorded as checked by the
    /// step that reports the drift, never before.
    pub digest: String,
}

/// Which helm run made or tried a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Install,
    Upgrade,
    /// The same inputs again, because objects of the release were deleted.
    Repair,
}

impl RunKind {
    /// helm's word for it (a repair is an upgrade).
    pub fn action(self) -> &'static str {
        match self {
            RunKind::Install => "install",
            RunKind::Upgrade | RunKind::Repair => "upgrade",
        }
    }

    /// Its entry in `status.history`.
    pub fn history_action(self) -> apis::helmapp::HistoryAction {
        match self {
            RunKind::Install => apis::helmapp::HistoryAction::Install,
            RunKind::Upgrade | RunKind::Repair => apis::helmapp::HistoryAction::Upgrade,
        }
    }
}

/// What a helm run of this reconcile came to, when what follows depends on
/// it: set by the action (`act`), decided on by `super::state`.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnded {
    /// helm made `revision`; `before`: the revision that had succeeded
    /// before it (where the status returns if its tests fail).
    Released {
        run: RunKind,
        revision: i64,
        before: i64,
    },
    /// Its tests passed, or their failure is ignored.
    Tested { run: RunKind, revision: i64 },
    /// The run or its tests failed (`message`: redacted), counted in
    /// `status.failures`.
    Failed { run: RunKind, message: String },
    /// Another helm run held the release's slot (a shutdown takes every
    /// slot): nothing ran, nothing is counted.
    SlotBusy,
    /// The API refused what helm had to do to the identity it ran as
    /// (`message`: who, what, and how to grant it): nothing is counted.
    Forbidden { message: String },
    /// helm was not started: what it needs could not be prepared — the
    /// values, the post-renderer's settings, the chart's CRDs (`reason`
    /// says which). `retry`: trying again may help (an API write failed),
    /// else only a change of the HelmApp or its inputs does.
    NotStarted {
        reason: Reason,
        message: String,
        retry: bool,
    },
    /// helm failed and the API server does not answer: not the release's
    /// failure — the HelmApp is parked until the API is back.
    Outage,
    /// `helm uninstall` failed (`message`: redacted) — tried again with
    /// backoff; the HelmApp keeps its finalizer.
    UninstallFailed { message: String },
}

/// Helm's storage read again after a failed run, before a remedy that
/// runs helm on it (a rollback reads the revision it returns to, an
/// uninstall the newest's manifest).
#[derive(Debug, Clone, PartialEq)]
pub enum StorageRecheck {
    /// As recorded, with what the failed run left recorded too.
    Trusted,
    /// Changed while the run ran: why no helm may run on it.
    Untrusted(String),
    /// It could not be read: why.
    Unreadable(String),
    /// The failed run's revision, named by its intent, which helm did not
    /// print: proven ours by a render before a remedy reads it.
    OwnRunUnproven { revision: i64 },
}

/// Why `dependsOn` holds a release back.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub reason: Reason,
    pub message: String,
    /// Read by request: nothing re-queues the HelmApp when it changes, so
    /// it is looked at again (with backoff).
    pub polled: bool,
}

impl Waiting {
    /// Waits for an event of what it waits for (a HelmApp, a watched kind).
    pub fn until_changed(reason: Reason, message: String) -> Self {
        Waiting {
            reason,
            message,
            polled: false,
        }
    }

    /// Waits, and is looked at again with backoff.
    pub fn polled(reason: Reason, message: String) -> Self {
        Waiting {
            reason,
            message,
            polled: true,
        }
    }
}

/// Helm's runs refused by RBAC in a row, as this process remembers them
/// (`context::Refusal`), in durations from the observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// How long the refusals have gone on.
    pub lasted: std::time::Duration,
    /// The last refusal's message.
    pub message: String,
    /// What the last refused run was decided from
    /// (`decide::refusal::inputs`).
    pub inputs: String,
    /// How long until a run of the same inputs may be tried again (zero:
    /// now).
    pub again_in: std::time::Duration,
}

/// The chart and the hash of every input, or why they could not be had.
#[derive(Debug)]
pub enum Inputs {
    Ready {
        chart: LocalChart,
        hash: String,
    },
    /// The chart is being fetched in the background; its end re-queues.
    ChartPending,
    ChartUnavailable(ChartProblem),
    ValuesInvalid(String),
    /// `values` or `set` past their bounds (`InvalidValues`): nothing
    /// else is read.
    OutOfBounds(String),
}

/// What the steps of one reconcile did — the action's record, beside
/// what observe saw: how a helm run ended, whether helm ran, what a render
/// of ours or of an adoption produced, and the redactor of the values
/// helm was given. Written by act, read by decide.
#[derive(Debug, Default)]
pub struct Done {
    /// What helm's messages about it are scrubbed of: its values, once an
    /// action has read them.
    pub redactor: crate::delivery::helm::values::Redactor,
    /// What a helm run of this reconcile came to (`None`: none ran yet).
    pub run_ended: Option<RunEnded>,
    /// A helm install or upgrade ran in this reconcile: what it and the
    /// steps after it left in the storage is recorded before the report
    /// of a release (`plan::Step::RecordRun`), else after the last step.
    pub helm_ran: bool,
    /// What the runs left was recorded (`plan::Step::RecordRun`): the
    /// storage's digests and the deployed revision's objects, in
    /// `status`; nothing is left to record after the last step.
    pub recorded: bool,
    /// The workloads of the revision deployed as the record read them
    /// just after the run (`None`: not read — drift disabled, a read that
    /// failed, a workload gone): a workload is judged from the cache only
    /// once the cache holds that generation of it.
    pub applied_workloads: Option<Vec<AppliedWorkload>>,
    /// Held from before a helm run until its record: the caches keep
    /// whole what they decode meanwhile, for the record to prove the
    /// run's objects from (`lean::recent`).
    pub capturing: Option<crate::lean::recent::Capturing>,
    /// An adoption's dry run against the live manifest, once rendered
    /// (`super::act::adopt`): whether taking the release over changes any
    /// of its objects.
    pub adoption_render: Option<Rendering>,
    /// The render of this configuration against the revision
    /// `Observed::own_unrecorded` names, once made (`act::own_run`).
    /// Keyed by the revision it is of: one reconcile may prove two (a dead
    /// operator's leftover, then its own failed run's).
    pub own_render: Option<(i64, Rendering)>,
    /// The revision the render proved ours and its content digest, as it
    /// was read for the proof: only that content is recorded.
    pub own_proven: Option<(i64, String)>,
    /// The run intent in the status is this reconcile's own, for a helm
    /// that is about to run or just ended (`super::act::intent::declare`).
    /// `false` as observed: an intent found in the status is a leftover,
    /// proving nothing by itself.
    pub run_live: bool,
    /// That helm ended and printed the release it stored
    /// (`super::act::intent::printed`): its revision is ours by that
    /// content — after our own `helm test` rewrote it, by the content read
    /// again when all but its hooks' last runs is the printed one
    /// (`act::test`). A run
    /// that printed nothing — it failed, or was a rollback — proves
    /// nothing by number: a Secret's writer may have put that number there
    /// first (helm refusing the name, or failing on it), so its revision is
    /// proven by a render (`observe::storage::record`, `act::own_run`).
    pub run_printed: bool,
    /// The revision helm printed and its content with its hooks' last runs
    /// left out (`Released::untested`): what our own `helm test` of it
    /// must leave (`act::test`).
    pub printed_untested: Option<(i64, String)>,
}

impl Done {
    /// The verdict of the render of `revision`, if one was made.
    pub fn own_render_of(&self, revision: i64) -> Option<Rendering> {
        self.own_render
            .filter(|(of, _)| *of == revision)
            .map(|(_, rendering)| rendering)
    }
}

/// A workload a run applied, as read right after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedWorkload {
    /// `Deployment`, `StatefulSet`, `DaemonSet` or `Job`.
    pub kind: String,
    /// `namespace/name`.
    pub key: String,
    pub generation: i64,
}

/// The cluster a release was read in, as a decision sees it: only that
/// it is one. `observe` puts the cluster there and `act` reaches it
/// through `Context::on`; nothing here may look inside (decide stays
/// pure: it holds no client).
pub trait ReleaseCluster: std::fmt::Debug + std::any::Any + Send + Sync {}

/// What a decision about one HelmApp needs (see the module docs).
#[derive(Debug)]
pub struct Observed {
    pub target: Target,
    /// Where the release lives (`None`: the operator's own cluster).
    pub cluster: Option<std::sync::Arc<dyn ReleaseCluster>>,
    /// Why the release's cluster cannot be used now, if it cannot (its
    /// `kubeConfig` is refused, it does not answer, too many clusters):
    /// nothing of the release was read.
    pub cluster_problem: Option<Waiting>,
    /// The HelmApp's UID.
    pub uid: String,
    /// Whom every helm action for it runs as (`crate::delivery::tenancy`).
    pub identity: crate::delivery::Identity,
    /// The newest status (the one written last, if the lister lags),
    /// with `observedGeneration`, `releaseName` and `targetNamespace` set.
    pub status: HelmAppStatus,
    /// The value of `hossted.com/reconcile-at` (empty: none).
    pub reconcile_at: String,
    /// The value of `hossted.com/force-at` (empty: none).
    pub force_at: String,
    /// The value of `hossted.com/approve` (empty: none).
    pub approve: String,
    /// Why the release's name (or namespace) can never be given to helm,
    /// if it cannot: a stored spec the CRD's pattern did not check (objects
    /// kept from before the pattern, under CRD ratcheting).
    pub invalid_name: Option<String>,
    /// Why `targetNamespace` is refused, if it is.
    pub cross_namespace: Option<String>,
    /// The first CEL expression of the spec that does not compile.
    pub invalid_expression: Option<String>,
    /// The first `drift.ignore` target that does not compile (a pattern or
    /// a selector).
    pub invalid_drift_rule: Option<String>,
    /// The name of the chart to release (its Chart.yaml's), read only when
    /// it may replace another: the release is ours and its configuration
    /// changed (`None`: not read, or unreadable).
    pub chart_name: Option<String>,
    /// Why `dependsOn` holds the release back, if it does.
    pub dependency: Option<Waiting>,
    /// `None`: not gathered, as something above already holds it back.
    pub inputs: Option<Inputs>,
    /// Helm's runs for this HelmApp refused by RBAC, as this process saw
    /// them (`None`: the last reconcile was not refused).
    pub refused: Option<Refused>,
    /// The remote cluster's id (its kubeconfig's digest), `None` for the
    /// operator's own: new credentials are new inputs to a refused run.
    pub cluster_id: Option<String>,
    /// The newest revision in Helm's storage.
    pub newest: Option<Stored>,
    /// The revisions helm 4 applied server-side (`apply_method: ssa`): an
    /// upgrade's `auto` follows the newest, a rollback's its target.
    pub server_side_revisions: std::collections::BTreeSet<i64>,
    /// Made from a Hosstedproject that is gone or being deleted (read when
    /// the HelmApp is being deleted): its release stays installed.
    pub project_gone: bool,
    /// The target namespace is gone or terminating (read when the HelmApp
    /// is being deleted): the release goes with it, without helm.
    pub namespace_going: bool,
    /// What `spec.changeWindows` say at `now`.
    pub windows: crate::delivery::helmapp::decide::windows::Seen,
    /// After a failed run whose remedy runs helm: the storage read again
    /// (`None`: not read).
    pub storage_recheck: Option<StorageRecheck>,
    /// Why the newest revision is not trusted, if it is not: it differs
    /// from the digest the operator recorded (`observe::storage`).
    pub tampered: Option<String>,
    /// The newest revision, when it may be one our own helm made and no
    /// status recorded (its operator stopped between helm's end and the
    /// status write): labelled ours, deployed, one past what was recorded.
    /// Trusted only if this configuration renders it ([`Self::own_render`]).
    pub own_unrecorded: Option<i64>,
    /// Why the operator's own identity may not adopt the release (read
    /// only when it would: `spec.adopt`, a privileged identity, a release
    /// no live HelmApp owns — `observe::adoptable`).
    pub adoption_refused: Option<String>,
    /// The newest revision's owner is another HelmApp that exists and is
    /// not being deleted.
    pub owner_is_live: bool,
    /// A helm process of ours runs on the release now.
    pub busy: bool,
    /// Objects of the newest revision that are gone (`Kind namespace/name`).
    pub missing: Vec<String>,
    /// With `wait`: workloads of the release still rolling out.
    pub pending: Vec<String>,
    /// With `wait`: an object of the release that failed (`Stalled` or
    /// `Failed`), with its message — not ready, without waiting for
    /// `timeout`.
    pub readiness_failed: Option<String>,
    /// With `wait`: objects of kinds no cache follows were read (and are
    /// read again while the release waits).
    pub readiness_polled: bool,
    /// What the drift check found (`observe::drift`).
    pub drift: DriftFound,
    pub now: chrono::DateTime<chrono::Utc>,
    /// Since when this process reconciles ([`super::context::Context::leading_since`]).
    pub leading_since: chrono::DateTime<chrono::Utc>,
    /// When this process's last helm action on the release ended.
    pub our_helm_ended: Option<chrono::DateTime<chrono::Utc>>,
    /// The last revision this process's helm made of the release.
    pub produced: Option<i64>,
    /// The helm timeout: `spec.timeout`, clamped to `--max-helm-timeout`.
    pub timeout: Duration,
    /// `spec.timeout` was longer than `--max-helm-timeout`.
    pub timeout_clamped: bool,
    /// Each action's own timeout ([`Timeouts`]).
    pub timeouts: Timeouts,
    /// A chart from a repository or registry is resolved again (its range,
    /// its newest version) after this (`spec.interval`); `None`: by path.
    pub resolve_after: Option<Duration>,
    /// What this reconcile's steps did so far.
    pub done: Done,
}

impl Observed {
    /// `hossted.com/force-at` has a value not yet acted on.
    pub fn forced(&self) -> bool {
        !self.force_at.is_empty() && self.force_at != self.status.last_handled_force_at
    }

    /// The hash of the inputs, when they were had.
    pub fn hash(&self) -> Option<&str> {
        match &self.inputs {
            Some(Inputs::Ready { hash, .. }) => Some(hash),
            _ => None,
        }
    }
}

/// helm's `--timeout` of each action: the action's own `timeout`, else
/// `spec.timeout` — each bounded by `--max-helm-timeout` (Flux's
/// per-action timeouts over the HelmRelease's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub install: Duration,
    pub upgrade: Duration,
    pub rollback: Duration,
    pub uninstall: Duration,
    pub test: Duration,
}

impl Timeouts {
    /// Of `app`, with `default` (`spec.timeout`, already bounded) where an
    /// action says none, and `max` the bound.
    pub fn of(app: &HelmApp, default: Duration, max: Duration) -> Self {
        let own = |t: &str| {
            crate::delivery::helmapp::decide::desired::parse_duration(t)
                .map_or(default, |d| d.min(max))
        };
        let s = &app.spec;
        Timeouts {
            install: own(&s.install.timeout),
            upgrade: own(&s.upgrade.timeout),
            rollback: own(&s.rollback.timeout),
            uninstall: own(&s.uninstall.timeout),
            test: own(&s.test.timeout),
        }
    }

    /// The timeout of an install or an upgrade (a repair is one).
    pub fn of_run(&self, kind: RunKind) -> Duration {
        match kind {
            RunKind::Install => self.install,
            RunKind::Upgrade | RunKind::Repair => self.upgrade,
        }
    }
}

/// `spec.timeout` (5m when it does not parse: the schema's pattern makes
/// that rare) clamped to `max`, and whether it was.
pub fn timeout_of(app: &HelmApp, max: Duration) -> (Duration, bool) {
    let asked = crate::delivery::helmapp::decide::desired::parse_duration(&app.spec.timeout)
        .unwrap_or(Duration::from_secs(300));
    (asked.min(max), asked > max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_past_the_bound_is_clamped_and_said_so() {
        let mut app = HelmApp::new("a", Default::default());
        let max = Duration::from_secs(1800);
        app.spec.timeout = "10h".into();
        assert_eq!(timeout_of(&app, max), (max, true));
        app.spec.timeout = "90s".into();
        assert_eq!(timeout_of(&app, max), (Duration::from_secs(90), false));
        app.spec.timeout = "30m".into();
        assert_eq!(timeout_of(&app, max), (max, false));
    }
}
