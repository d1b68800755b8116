//! client-go's work-queue metrics, encoded by `prometheus-client`: a
//! [`Registry`] is a `prometheus_client` collector.
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

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// client-go's latency buckets: 10 ns · 10^i for i in 0..10, i.e. 10 ns to 10 s.
const BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// `(seconds of work in progress, longest running seconds)` of the items
/// in processing since `started` (client-go's unfinished-work gauges).
pub(crate) fn unfinished_work<'a>(
    started: impl Iterator<Item = &'a tokio::time::Instant>,
) -> (f64, f64) {
    let now = tokio::time::Instant::now();
    started.fold((0.0, 0.0), |(sum, longest), t| {
        let secs = now.saturating_duration_since(*t).as_secs_f64();
        (sum + secs, f64::max(longest, secs))
    })
}

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

    /// All metrics in the OpenMetrics text format, as a scrape shows them
    /// (the same encoding as registering this registry as a collector).
    pub fn render(&self) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.queues.lock().iter().map(|q| q.name.clone()).collect();
        f.debug_struct("Registry").field("queues", &names).finish()
    }
}

/// Every queue's metrics, read at scrape time (the hot path only touches
/// atomics; the encoder is `prometheus-client`'s).
impl Collector for Registry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let queues = self.queues.lock().clone();
        let e = &mut encoder;
        gauge(
            e,
            &queues,
            "workqueue_depth",
            "Current depth of workqueue",
            &|q| q.depth.load(Relaxed).max(0) as f64,
        )?;
        counter(
            e,
            &queues,
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            &|q| q.adds.load(Relaxed),
        )?;
        histogram(
            e,
            &queues,
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            &|q| &q.queue_duration,
        )?;
        histogram(
            e,
            &queues,
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            &|q| &q.work_duration,
        )?;
        gauge(
            e,
            &queues,
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            &|q| q.unfinished().0,
        )?;
        gauge(
            e,
            &queues,
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            &|q| q.unfinished().1,
        )?;
        counter(
            e,
            &queues,
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            &|q| q.retries.load(Relaxed),
        )
    }
}

/// The `name` label of a queue's series.
fn label(q: &QueueMetrics) -> [(&'static str, String); 1] {
    [("name", q.name.clone())]
}

/// One gauge family, a series per queue.
fn gauge(
    encoder: &mut DescriptorEncoder,
    queues: &[Arc<QueueMetrics>],
    name: &str,
    help: &str,
    value: &dyn Fn(&QueueMetrics) -> f64,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for q in queues {
        family.encode_family(&label(q))?.encode_gauge(&value(q))?;
    }
    Ok(())
}

/// One counter family, a series per queue.
fn counter(
    encoder: &mut DescriptorEncoder,
    queues: &[Arc<QueueMetrics>],
    name: &str,
    help: &str,
    value: &dyn Fn(&QueueMetrics) -> u64,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for q in queues {
        family
            .encode_family(&label(q))?
            .encode_counter::<NoLabelSet, _, u64>(&value(q), None)?;
    }
    Ok(())
}

/// One histogram family, a series per queue.
fn histogram(
    encoder: &mut DescriptorEncoder,
    queues: &[Arc<QueueMetrics>],
    name: &str,
    help: &str,
    h: &dyn Fn(&QueueMetrics) -> &Histogram,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for q in queues {
        let (sum, count, buckets) = h(q).snapshot();
        family
            .encode_family(&label(q))?
            .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
    }
    Ok(())
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

    /// `(sum in seconds, count, per-bucket counts ending with +Inf)`.
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let count = self.count.load(Relaxed);
        let mut buckets: Vec<(f64, u64)> = BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(b, n)| (*b, n.load(Relaxed)))
            .collect();
        let below: u64 = buckets.iter().map(|(_, n)| n).sum();
        buckets.push((f64::INFINITY, count.saturating_sub(below)));
        (self.sum_ns.load(Relaxed) as f64 / 1e9, count, buckets)
    }
}
