//! Whether the API server answers, as delivery sees it: while it does not,
//! no helm process starts (each would fail to connect — an outage of a few
//! seconds used to spawn a hundred), and HelmApps wait parked, spending no
//! retry; one probe with backoff decides it is back and re-queues them,
//! oldest first.
//!
//! The state machine:
//!
//! ```text
//!   Up ──(before or after a helm run, one GET got no answer)──▶ Down
//!   Down ──(the probe's GET answered)──▶ Up, every parked key re-queued
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use kube::Client;
use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use runtime::RateLimitingQueue;

/// The probe's first wait; half as long again each time, up to
/// [`PROBE_MAX`] (reached after about 8 s: an outage of seconds is seen
/// to end soon after it does).
const PROBE_FIRST: Duration = Duration::from_millis(250);
const PROBE_MAX: Duration = Duration::from_secs(5);
/// How long one probe may take before it counts as no answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Shared by every reconcile of the HelmApp controller.
pub struct Reachability {
    client: Client,
    /// Set on the first unanswered GET after a failed helm run; cleared
    /// only by the probe, which then drains `parked`.
    down: AtomicBool,
    /// Keys that found the API down, in the order they came (each once).
    /// Invariant: only filled while `down`; emptied when it clears.
    parked: Mutex<Vec<String>>,
    /// `hossted_api_reachable`: 1 up, 0 down.
    gauge: Gauge,
    /// Where parked keys go back to (the controller's queue).
    queue: Arc<RateLimitingQueue<String>>,
    /// When a write of ours last got the API server's answer (a run's
    /// intent, written just before its helm starts): a helm starting
    /// within [`ANSWERED_LATELY`] of it needs no probe of its own.
    answered: Mutex<Option<Instant>>,
}

/// How recent an answer stands for the probe before a helm start: the
/// time a probe's answer is taken to hold anyway (helm starts after it).
const ANSWERED_LATELY: Duration = Duration::from_secs(2);

impl Reachability {
    pub fn new(
        client: Client,
        manager: &runtime::Manager,
        queue: Arc<RateLimitingQueue<String>>,
    ) -> Arc<Self> {
        let gauge = Gauge::default();
        gauge.set(1);
        manager.metrics().register(
            "api_reachable",
            "1 while delivery can reach the API server; 0 while it waits for it (no helm runs)",
            gauge.clone(),
        );
        Arc::new(Reachability {
            client,
            down: AtomicBool::new(false),
            parked: Mutex::default(),
            gauge,
            queue,
            answered: Mutex::new(None),
        })
    }

    /// A remote cluster's (docs/remote-clusters.md): like [`Self::new`],
    /// its gauge in no registry — `hossted_api_reachable` is the operator's
    /// own API server's.
    pub fn unregistered(client: Client, queue: Arc<RateLimitingQueue<String>>) -> Arc<Self> {
        let gauge = Gauge::default();
        gauge.set(1);
        Arc::new(Reachability {
            client,
            down: AtomicBool::new(false),
            parked: Mutex::default(),
            gauge,
            queue,
            answered: Mutex::new(None),
        })
    }

    /// Whether the API is taken to be down (no helm may start).
    pub fn is_down(&self) -> bool {
        self.down.load(SeqCst)
    }

    /// `key` waits for the API; re-queued when it is back. Parking after
    /// the probe already drained re-queues at once.
    pub fn park(&self, key: &str) {
        let mut parked = self.parked.lock();
        if !self.is_down() {
            drop(parked);
            self.requeue(key);
            return;
        }
        if !parked.iter().any(|k| k == key) {
            parked.push(key.to_string());
        }
    }

    /// A write of ours was just answered by the API server.
    pub fn note_answer(&self) {
        *self.answered.lock() = Some(Instant::now());
    }

    /// Before a helm starts: whether the API answers — taken from a write
    /// of ours answered within [`ANSWERED_LATELY`], else asked
    /// ([`Self::answers`]). After a failed run the API is always asked.
    pub async fn answers_before_start(self: &Arc<Self>) -> bool {
        if self.is_down() {
            return false;
        }
        let lately = self
            .answered
            .lock()
            .is_some_and(|at| at.elapsed() < ANSWERED_LATELY);
        lately || self.answers().await
    }

    /// Before a helm run, and after a failed one: whether the API answers
    /// now (one cheap GET). No answer (a connection or TLS error, a
    /// time-out, a 5xx) marks it down and starts the probe; a 4xx is an
    /// answer.
    pub async fn answers(self: &Arc<Self>) -> bool {
        if self.is_down() {
            return false;
        }
        if reachable(&self.client).await {
            return true;
        }
        if !self.down.swap(true, SeqCst) {
            log::warn!("the API server does not answer: no helm runs until it does");
            self.gauge.set(0);
            tokio::spawn(self.clone().probe());
        }
        false
    }

    /// GETs `/version` with backoff until it answers, then re-queues the
    /// parked keys in the order they came.
    async fn probe(self: Arc<Self>) {
        let mut wait = PROBE_FIRST;
        loop {
            tokio::time::sleep(wait).await;
            // Held by this probe alone: its (remote) cluster was let go —
            // nobody waits for it any more.
            if Arc::strong_count(&self) == 1 {
                return;
            }
            if reachable(&self.client).await {
                break;
            }
            wait = wait.mul_f64(1.5).min(PROBE_MAX);
        }
        let parked = {
            let mut parked = self.parked.lock();
            self.down.store(false, SeqCst);
            std::mem::take(&mut *parked)
        };
        self.gauge.set(1);
        log::info!(
            "the API server answers again: {} HelmApp(s) resume",
            parked.len()
        );
        for key in &parked {
            self.requeue(key);
        }
    }

    fn requeue(&self, key: &str) {
        self.queue.add(key.to_string());
    }
}

/// Whether `error` is no answer from the API server (no connection, a
/// TLS failure, a time-out, a 5xx) rather than its answer (a 4xx) or a
/// request that was never sent.
pub fn unanswered(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500,
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    }
}

/// One cheap GET that the API server answers without a store read.
async fn reachable(client: &Client) -> bool {
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => !unanswered(&e),
        Err(_) => false,
    }
}
