//! The operator's Prometheus metrics, and the HTTP server for `/metrics`,
//! `/healthz` and `/readyz`.
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `workqueue_*{name="hosstedproject"}` | | client-go's work-queue metrics (see `pkg/workqueue`) |
//! | `hossted_reconcile_total{result}` | counter | reconciles by `success` / `error` |
//! | `hossted_reconcile_duration_seconds` | histogram | time per reconcile |
//! | `hossted_api_requests_total{endpoint,code}` | counter | requests to the Hossted API by `register` / `apps` and HTTP status (`error`: no answer, `dry-run`: printed) |
//! | `hossted_informer_synced{kind}` | gauge | 1 once an informer's cache is synced |
//! | `hossted_leader` | gauge | 1 while this process holds the leader lease |

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const DURATION_BUCKETS: [f64; 11] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

type SyncedProbe = Box<dyn Fn() -> Vec<(String, bool)> + Send + Sync>;

/// Everything `/metrics` shows and `/readyz` decides on.
#[derive(Default)]
pub struct Metrics {
    /// The work queue's metrics.
    pub queues: workqueue::metrics::Registry,
    reconcile_success: AtomicU64,
    reconcile_error: AtomicU64,
    reconcile_buckets: [AtomicU64; DURATION_BUCKETS.len()],
    reconcile_count: AtomicU64,
    reconcile_sum_us: AtomicU64,
    api_requests: Mutex<BTreeMap<(String, String), u64>>,
    synced: Mutex<Option<SyncedProbe>>,
    /// Whether this process leads (or leader election is off).
    pub leader: AtomicBool,
    /// Whether this process may be ready while not leading (a warm standby).
    pub standby_ready: AtomicBool,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Metrics::default())
    }

    /// Records one reconcile.
    pub fn reconciled(&self, ok: bool, took: Duration) {
        if ok {
            &self.reconcile_success
        } else {
            &self.reconcile_error
        }
        .fetch_add(1, Relaxed);
        let secs = took.as_secs_f64();
        if let Some(i) = DURATION_BUCKETS.iter().position(|b| secs <= *b) {
            self.reconcile_buckets[i].fetch_add(1, Relaxed);
        }
        self.reconcile_count.fetch_add(1, Relaxed);
        self.reconcile_sum_us
            .fetch_add(took.as_micros() as u64, Relaxed);
    }

    /// Records one request to the Hossted API.
    pub fn api_request(&self, endpoint: &str, code: &str) {
        *self
            .api_requests
            .lock()
            .entry((endpoint.to_string(), code.to_string()))
            .or_default() += 1;
    }

    /// Where `/readyz` and `hossted_informer_synced` read cache sync state.
    pub fn set_synced_probe(&self, probe: SyncedProbe) {
        *self.synced.lock() = Some(probe);
    }

    fn informers(&self) -> Vec<(String, bool)> {
        self.synced.lock().as_ref().map(|p| p()).unwrap_or_default()
    }

    /// Caches synced, and leading or allowed to stand by.
    pub fn ready(&self) -> bool {
        let informers = self.informers();
        !informers.is_empty()
            && informers.iter().all(|(_, s)| *s)
            && (self.leader.load(Relaxed) || self.standby_ready.load(Relaxed))
    }

    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = self.queues.render();
        let _ = writeln!(
            out,
            "# HELP hossted_reconcile_total Reconciles by result\n# TYPE hossted_reconcile_total counter\n\
             hossted_reconcile_total{{result=\"success\"}} {}\nhossted_reconcile_total{{result=\"error\"}} {}",
            self.reconcile_success.load(Relaxed),
            self.reconcile_error.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP hossted_reconcile_duration_seconds Time per reconcile\n# TYPE hossted_reconcile_duration_seconds histogram"
        );
        let mut cumulative = 0;
        for (bound, n) in DURATION_BUCKETS.iter().zip(&self.reconcile_buckets) {
            cumulative += n.load(Relaxed);
            let _ = writeln!(
                out,
                "hossted_reconcile_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.reconcile_count.load(Relaxed);
        let _ = writeln!(
            out,
            "hossted_reconcile_duration_seconds_bucket{{le=\"+Inf\"}} {count}\n\
             hossted_reconcile_duration_seconds_sum {}\nhossted_reconcile_duration_seconds_count {count}",
            self.reconcile_sum_us.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "# HELP hossted_api_requests_total Requests to the Hossted API\n# TYPE hossted_api_requests_total counter"
        );
        for ((endpoint, code), n) in self.api_requests.lock().iter() {
            let _ = writeln!(
                out,
                "hossted_api_requests_total{{endpoint=\"{endpoint}\",code=\"{code}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP hossted_informer_synced 1 once the informer's cache is synced\n# TYPE hossted_informer_synced gauge"
        );
        for (kind, synced) in self.informers() {
            let _ = writeln!(
                out,
                "hossted_informer_synced{{kind=\"{kind}\"}} {}",
                u8::from(synced)
            );
        }
        let _ = writeln!(
            out,
            "# HELP hossted_leader 1 while this process holds the leader lease\n# TYPE hossted_leader gauge\nhossted_leader {}",
            u8::from(self.leader.load(Relaxed))
        );
        out
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until the task
/// is dropped. GET only; anything else is 404.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf);
            let path = head.split_whitespace().nth(1).unwrap_or("/");
            let (status, content_type, body) = match path {
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
                "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
                "/readyz" if metrics.ready() => ("200 OK", "text/plain", "ok\n".to_string()),
                "/readyz" => (
                    "503 Service Unavailable",
                    "text/plain",
                    "caches not synced or not leading\n".to_string(),
                ),
                _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        });
    }
}
