//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! semantics: a candidate takes the Lease when it is free or when its record
//! has not changed for `lease_duration` *as observed locally* (so clock skew
//! between nodes does not matter); the leader renews every `retry_period`
//! and considers itself deposed when it could not renew for
//! `renew_deadline`; on shutdown it releases the Lease so a standby takes
//! over at once. Writes use the resourceVersion (optimistic concurrency), so
//! two candidates never both win.
//!
//! Every request is bounded: a renew by what is left of the renew deadline
//! (a half-open connection — the apiserver stopped answering, the TCP
//! connection stayed up — would otherwise hang the renew while a standby
//! takes the expired Lease: two leaders), an acquire or release attempt by
//! the renew deadline.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

/// Timing, as client-go's defaults. `renew_deadline` must be shorter than
/// `lease_duration`, or a deposed leader could still work while a standby
/// already holds the Lease.
#[derive(Debug, Clone)]
pub struct LeaseTiming {
    /// How long a standby waits after the last renewal it saw.
    pub lease_duration: Duration,
    /// How long the leader keeps working without a successful renewal.
    pub renew_deadline: Duration,
    /// How often candidates try and the leader renews.
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate for the Lease `namespace/name`.
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: LeaseTiming,
    /// The last Lease record seen (holder, renewTime, transitions) and when
    /// it was first seen with that content.
    observed: Option<((String, Option<MicroTime>), Instant)>,
    problems: Problems,
}

/// How often a problem that persists is logged again.
const REPEAT_PROBLEM: Duration = Duration::from_secs(60);

/// Which problems to log: a new one at once, the same one again only after
/// [`REPEAT_PROBLEM`] — not at every retry, twice a second.
#[derive(Default)]
struct Problems {
    /// The last problem logged, and when.
    last: Option<(String, Instant)>,
}

impl Problems {
    fn worth_logging(&mut self, problem: &str, now: Instant) -> bool {
        let repeated = self.last.as_ref().is_some_and(|(p, at)| {
            p == problem && now.saturating_duration_since(*at) < REPEAT_PROBLEM
        });
        if !repeated {
            self.last = Some((problem.to_string(), now));
        }
        !repeated
    }
}

/// What went wrong with the Lease `namespace/name`, in one line, and what
/// to do about it: never the Debug dump of the apiserver's answer.
fn describe(namespace: &str, name: &str, e: &kube::Error) -> String {
    let lease = format!("Lease {namespace}/{name}");
    match e {
        kube::Error::Api(s) if s.code == 404 => format!(
            "cannot create the {lease}: {}; create the namespace or set --leader-election-namespace",
            s.message
        ),
        kube::Error::Api(s) if s.code == 403 => format!(
            "the {lease} is forbidden: {}; grant get, create and update on leases.coordination.k8s.io in {namespace}",
            s.message
        ),
        kube::Error::Api(s) => format!("the {lease}: {} (HTTP {} {})", s.message, s.code, s.reason),
        other => format!("the {lease}: {other}"),
    }
}

/// The leader could not renew within the renew deadline.
#[derive(Debug, thiserror::Error)]
#[error("lost the leader lease {0}: could not renew it in time")]
pub struct LeaseLost(pub String);

impl LeaderElector {
    /// A candidate named `identity` for the Lease `namespace/name`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: LeaseTiming,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            observed: None,
            problems: Problems::default(),
        }
    }

    /// Logs `problem` unless it was the last one logged, less than
    /// [`REPEAT_PROBLEM`] ago.
    fn warn_once(&mut self, problem: String) {
        if self.problems.worth_logging(&problem, Instant::now()) {
            log::warn!("{problem} (retrying every {:?})", self.timing.retry_period);
        }
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            let attempt = self
                .renew_deadline_bounded(self.timing.renew_deadline)
                .await;
            match attempt {
                Ok(true) => {
                    log::info!(
                        "became leader (lease {}, identity {})",
                        self.name,
                        self.identity
                    );
                    return;
                }
                Ok(false) => {}
                Err(e) => self.warn_once(format!("leader election: {e}")),
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns when it could not be
    /// renewed for the renew deadline (or another holder took it).
    pub async fn hold(&mut self) -> LeaseLost {
        let mut last_renew = Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            // The renewal may take only what is left of the deadline.
            let left = self
                .timing
                .renew_deadline
                .saturating_sub(last_renew.elapsed());
            match self.renew_deadline_bounded(left).await {
                Ok(true) => last_renew = Instant::now(),
                Ok(false) => return LeaseLost(self.name.clone()),
                Err(e) => self.warn_once(format!("leader election: renewing failed: {e}")),
            }
            if last_renew.elapsed() >= self.timing.renew_deadline {
                return LeaseLost(self.name.clone());
            }
        }
    }

    /// One acquire-or-renew round that gives up after `limit`.
    async fn renew_deadline_bounded(&mut self, limit: Duration) -> Result<bool, String> {
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(r) => r.map_err(|e| describe(&self.namespace, &self.name, &e)),
            Err(_) => Err(format!("no answer from the apiserver within {limit:?}")),
        }
    }

    /// Gives the Lease up (holder cleared) so a standby need not wait for it
    /// to expire.
    pub async fn release(&mut self) {
        let deadline = self.timing.renew_deadline;
        if tokio::time::timeout(deadline, self.release_now())
            .await
            .is_err()
        {
            log::warn!(
                "could not release the leader lease {} within {deadline:?}; it expires on its own",
                self.name
            );
        }
    }

    async fn release_now(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => log::info!("released the leader lease {}", self.name),
            Err(e) => log::warn!("could not release the leader lease {}: {e}", self.name),
        }
    }

    /// One round: `true` when this candidate holds the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now_t = now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.timing.lease_duration.as_secs() as i32),
                    acquire_time: Some(now_t.clone()),
                    renew_time: Some(now_t),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if crate::is_conflict(&e) => Ok(false), // another candidate was faster
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = (holder.clone(), spec.renew_time.clone());
        let observed_at = match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => Instant::now(),
        };
        self.observed = Some((record, observed_at));
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(self.timing.lease_duration);
        let held_by_other = !holder.is_empty() && holder != self.identity;
        if held_by_other && observed_at.elapsed() < duration {
            return Ok(false);
        }
        let s = lease.spec.get_or_insert_with(Default::default);
        if holder != self.identity {
            s.acquire_time = Some(now_t.clone());
            s.lease_transitions = Some(s.lease_transitions.unwrap_or(0) + 1);
        }
        s.holder_identity = Some(self.identity.clone());
        s.lease_duration_seconds = Some(self.timing.lease_duration.as_secs() as i32);
        s.renew_time = Some(now_t);
        // The resourceVersion makes this a compare-and-swap.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if crate::is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message,
        }))
        .expect("status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_missing_namespace_says_what_to_do_in_one_line() {
        let e = api_error(404, "NotFound", "namespaces \"hossted-operator\" not found");
        let line = describe("hossted-operator", "hossted-operator-leader", &e);
        assert_eq!(
            line,
            "cannot create the Lease hossted-operator/hossted-operator-leader: namespaces \"hossted-operator\" not found; create the namespace or set --leader-election-namespace"
        );
        let e = api_error(403, "Forbidden", "leases is forbidden");
        assert!(describe("ns", "l", &e).contains("grant get, create and update on leases"));
        assert!(!describe("ns", "l", &e).contains("ErrorResponse"));
    }

    #[test]
    fn the_same_problem_is_logged_once_a_minute_and_a_new_one_at_once() {
        let mut problems = Problems::default();
        let t0 = Instant::now();
        assert!(problems.worth_logging("a", t0));
        assert!(!problems.worth_logging("a", t0 + Duration::from_secs(2)));
        assert!(!problems.worth_logging("a", t0 + Duration::from_secs(59)));
        assert!(problems.worth_logging("a", t0 + Duration::from_secs(60)));
        assert!(!problems.worth_logging("a", t0 + Duration::from_secs(61)));
        assert!(problems.worth_logging("b", t0 + Duration::from_secs(62)));
        assert!(problems.worth_logging("a", t0 + Duration::from_secs(63)));
    }
}
