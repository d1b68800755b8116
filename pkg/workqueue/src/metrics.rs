//! client-go's work-queue metrics, rendered in Prometheus text format.
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `workqueue_depth` | gauge | items ready to be handed out |
//! | `workqueue_adds_total` | counter | items added (not counting deduplicated adds) |
//! | `workqueue_queue_duration_seconds` | histogram | time from add to `get` |
//! | `workqueue_work_duration_seconds` | histogram | time from `get` to `done` |
//! | `workqueue_unfinished_work_seconds` | gauge | seconds the items being processed have been at it, summed |
//! | `workqueue_longest_running_processor_seconds` | gauge | the longest of those |
//! | `workqueue_retries_total` | counter | rate-limited re-adds |
//!
//! Every series carries `name="<queue name>"`. Counters and histograms are
//! lock-free atomics updated on the hot path; the unfinished-work gauges are
//! computed from the queue when scraped.
//!
//! ```
//! use workqueue::{Queue, metrics::Registry};
//! let registry = Registry::new();
//! let queue: Queue<String> = Queue::with_metrics("hosstedproject", &registry);
//! queue.add("a".into());
//! let text = registry.render();
//! assert!(text.contains("workqueue_adds_total{name=\"hosstedproject\"} 1"));
//! assert!(text.contains("workqueue_depth{name=\"hosstedproject\"} 1"));
//! ```

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;

/// client-go's latency buckets: 10 ns · 10^i for i in 0..10, i.e. 10 ns to 10 s.
const BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

pub(crate) type UnfinishedProbe = Box<dyn Fn() -> (f64, f64) + Send + Sync>;

/// A set of queues whose metrics are rendered together.
#[derive(Clone, Default)]
pub struct Registry {
    queues: Arc<Mutex<Vec<Arc<QueueMetrics>>>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The metrics of the queue `name`, created on first use.
    pub(crate) fn queue(&self, name: &str) -> Arc<QueueMetrics> {
        let mut queues = self.queues.lock();
        if let Some(q) = queues.iter().find(|q| q.name == name) {
            return q.clone();
        }
        let q = Arc::new(QueueMetrics::new(name));
        queues.push(q.clone());
        q
    }

    /// All metrics in Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let queues = self.queues.lock().clone();
        let mut out = String::new();
        let family = |out: &mut String,
                      name: &str,
                      kind: &str,
                      help: &str,
                      f: &dyn Fn(&QueueMetrics, &mut String)| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for q in &queues {
                f(q, out);
            }
        };
        family(
            &mut out,
            "workqueue_depth",
            "gauge",
            "Current depth of workqueue",
            &|q, out| {
                let _ = writeln!(
                    out,
                    "workqueue_depth{{name=\"{}\"}} {}",
                    q.name,
                    q.depth.load(Relaxed).max(0)
                );
            },
        );
        family(
            &mut out,
            "workqueue_adds_total",
            "counter",
            "Total number of adds handled by workqueue",
            &|q, out| {
                let _ = writeln!(
                    out,
                    "workqueue_adds_total{{name=\"{}\"}} {}",
                    q.name,
                    q.adds.load(Relaxed)
                );
            },
        );
        family(
            &mut out,
            "workqueue_queue_duration_seconds",
            "histogram",
            "How long in seconds an item stays in workqueue before being requested",
            &|q, out| {
                q.queue_duration
                    .render(out, "workqueue_queue_duration_seconds", &q.name)
            },
        );
        family(
            &mut out,
            "workqueue_work_duration_seconds",
            "histogram",
            "How long in seconds processing an item from workqueue takes",
            &|q, out| {
                q.work_duration
                    .render(out, "workqueue_work_duration_seconds", &q.name)
            },
        );
        family(
            &mut out,
            "workqueue_unfinished_work_seconds",
            "gauge",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            &|q, out| {
                let _ = writeln!(
                    out,
                    "workqueue_unfinished_work_seconds{{name=\"{}\"}} {}",
                    q.name,
                    q.unfinished().0
                );
            },
        );
        family(
            &mut out,
            "workqueue_longest_running_processor_seconds",
            "gauge",
            "How many seconds has the longest running processor for workqueue been running",
            &|q, out| {
                let _ = writeln!(
                    out,
                    "workqueue_longest_running_processor_seconds{{name=\"{}\"}} {}",
                    q.name,
                    q.unfinished().1
                );
            },
        );
        family(
            &mut out,
            "workqueue_retries_total",
            "counter",
            "Total number of retries handled by workqueue",
            &|q, out| {
                let _ = writeln!(
                    out,
                    "workqueue_retries_total{{name=\"{}\"}} {}",
                    q.name,
                    q.retries.load(Relaxed)
                );
            },
        );
        out
    }
}

/// The metrics of one queue.
pub(crate) struct QueueMetrics {
    name: String,
    depth: AtomicI64,
    adds: AtomicU64,
    retries: AtomicU64,
    queue_duration: Histogram,
    work_duration: Histogram,
    /// Reads `(summed, longest)` unfinished seconds from the queue at scrape
    /// time; holds the queue's state weakly.
    unfinished_probe: Mutex<Option<UnfinishedProbe>>,
}

impl QueueMetrics {
    fn new(name: &str) -> Self {
        QueueMetrics {
            name: name.to_string(),
            depth: AtomicI64::new(0),
            adds: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            queue_duration: Histogram::default(),
            work_duration: Histogram::default(),
            unfinished_probe: Mutex::new(None),
        }
    }

    pub(crate) fn added(&self) {
        self.adds.fetch_add(1, Relaxed);
        self.depth.fetch_add(1, Relaxed);
    }

    pub(crate) fn got(&self, waited: Duration) {
        self.depth.fetch_sub(1, Relaxed);
        self.queue_duration.observe(waited);
    }

    pub(crate) fn done(&self, worked: Duration) {
        self.work_duration.observe(worked);
    }

    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Relaxed);
    }

    pub(crate) fn set_unfinished_probe(&self, probe: UnfinishedProbe) {
        *self.unfinished_probe.lock() = Some(probe);
    }

    fn unfinished(&self) -> (f64, f64) {
        self.unfinished_probe
            .lock()
            .as_ref()
            .map_or((0.0, 0.0), |p| p())
    }
}

/// A fixed-bucket histogram of durations, lock-free.
#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_ns
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    fn render(&self, out: &mut String, metric: &str, queue: &str) {
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += n.load(Relaxed);
            let _ = writeln!(
                out,
                "{metric}_bucket{{name=\"{queue}\",le=\"{bound:e}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Relaxed);
        let _ = writeln!(
            out,
            "{metric}_bucket{{name=\"{queue}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "{metric}_sum{{name=\"{queue}\"}} {}",
            self.sum_ns.load(Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "{metric}_count{{name=\"{queue}\"}} {count}");
    }
}
