//! The manager's metrics, encoded by `prometheus-client`.
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `workqueue_*{name}` | | client-go's work-queue metrics, one `name` per controller (see `pkg/workqueue`) |
//! | `<prefix>_reconcile_total{controller,result}` | counter | reconciles by `success` / `error` |
//! | `<prefix>_reconcile_duration_seconds{controller}` | histogram | time per reconcile, 1 ms to 10 min |
//! | `<prefix>_informer_synced{kind}` | gauge | 1 once an informer's cache holds a complete LIST |
//! | `<prefix>_informer_refused_total{kind}` | counter | object versions an informer could not decode and skipped (each also a log line and a `DecodeFailed` Warning Event on the object) |
//! | `<prefix>_leader` | gauge | 1 while this process holds the leader Lease (or runs without election) |
//!
//! Controllers add their own metrics with [`Metrics::register`].

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use cache::SharedInformerFactory;

/// Reconcile durations: 1 ms to 10 minutes (a Helm install can take that).
const RECONCILE_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];

type ControllerResult = [(&'static str, String); 2];
type ControllerLabel = [(&'static str, String); 1];

/// The registry behind `/metrics` and the series the runtime keeps itself.
pub struct Metrics {
    prefix: String,
    registry: Mutex<Registry>,
    reconciles: Family<ControllerResult, Counter>,
    durations: Family<ControllerLabel, Histogram>,
    leader: Gauge,
    /// The work queues' metrics; every controller's queue registers here.
    pub(crate) queues: workqueue::metrics::Registry,
}

impl Metrics {
    /// Metrics whose own series are named `<prefix>_...`, each series
    /// carrying `labels` (the collectors' too).
    pub(crate) fn new(
        prefix: &str,
        labels: &[(String, String)],
        factory: Arc<SharedInformerFactory>,
    ) -> Self {
        let mut registry = Registry::with_labels(
            labels
                .iter()
                .map(|(k, v)| (k.clone().into(), v.clone().into())),
        );
        let reconciles = Family::<ControllerResult, Counter>::default();
        let durations: Family<ControllerLabel, Histogram> =
            Family::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS));
        let leader = Gauge::default();
        let queues = workqueue::metrics::Registry::new();
        registry.register(
            format!("{prefix}_reconcile"),
            "Reconciles by controller and result",
            reconciles.clone(),
        );
        registry.register(
            format!("{prefix}_reconcile_duration_seconds"),
            "Time per reconcile",
            durations.clone(),
        );
        registry.register(
            format!("{prefix}_leader"),
            "1 while this process holds the leader lease",
            leader.clone(),
        );
        registry.register_collector(Box::new(queues.clone()));
        registry.register_collector(Box::new(InformerSynced {
            name: format!("{prefix}_informer_synced"),
            objects_name: format!("{prefix}_informer_objects"),
            refused_name: format!("{prefix}_informer_refused"),
            factory,
        }));
        Metrics {
            prefix: prefix.to_string(),
            registry: Mutex::new(registry),
            reconciles,
            durations,
            leader,
            queues,
        }
    }

    /// Adds a controller's own metric as `<prefix>_<name>`.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry
            .lock()
            .register(format!("{}_{name}", self.prefix), help, metric);
    }

    /// Records one reconcile of `controller`.
    pub(crate) fn reconciled(&self, controller: &str, ok: bool, took: std::time::Duration) {
        let result = if ok { "success" } else { "error" };
        self.reconciles
            .get_or_create(&[
                ("controller", controller.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        self.durations
            .get_or_create(&[("controller", controller.to_string())])
            .observe(took.as_secs_f64());
    }

    /// Sets `<prefix>_leader`.
    pub(crate) fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Everything, in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry.lock());
        out
    }
}

/// `<prefix>_informer_synced{kind}`, read from the factory at scrape time.
struct InformerSynced {
    name: String,
    objects_name: String,
    refused_name: String,
    factory: Arc<SharedInformerFactory>,
}

impl std::fmt::Debug for InformerSynced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerSynced")
            .field("name", &self.name)
            .finish()
    }
}

impl Collector for InformerSynced {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            &self.name,
            "1 once the informer's cache holds a complete LIST",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        // Several informers of one kind (other selectors): synced when all
        // are; their objects add up.
        let mut seen = std::collections::BTreeMap::<String, (bool, usize)>::new();
        for i in self.factory.synced() {
            let (all, objects) = seen.entry(i.kind).or_insert((true, 0));
            *all &= i.synced;
            *objects += i.objects;
        }
        for (kind, (synced, _)) in &seen {
            ConstGauge::new(i64::from(*synced))
                .encode(family.encode_family(&[("kind", kind.clone())])?)?;
        }
        let mut family = encoder.encode_descriptor(
            &self.objects_name,
            "Objects in the informers' caches, by kind",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (kind, (_, objects)) in seen {
            ConstGauge::new(objects as i64).encode(family.encode_family(&[("kind", kind)])?)?;
        }
        let mut refused = std::collections::BTreeMap::<String, u64>::new();
        for i in self.factory.synced() {
            *refused.entry(i.kind).or_default() += i.refused;
        }
        let mut family = encoder.encode_descriptor(
            &self.refused_name,
            "Object versions the informers could not decode and skipped, by kind",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (kind, n) in refused {
            prometheus_client::metrics::counter::ConstCounter::new(n)
                .encode(family.encode_family(&[("kind", kind)])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard's process: its name on the runtime's own series, a
    /// controller's and the collectors' alike.
    #[tokio::test]
    async fn every_series_carries_the_process_labels() {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let factory = Arc::new(SharedInformerFactory::new(client, None));
        let labels = [("shard".to_string(), "a".to_string())];
        let metrics = Metrics::new("hossted", &labels, factory);
        metrics.set_leader(true);
        metrics.register("helm_runs", "runs", Counter::<u64>::default());
        metrics.reconciled("helmapp", true, std::time::Duration::from_millis(1));
        let text = metrics.encode();
        let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(!series.is_empty());
        for line in &series {
            assert!(line.contains("shard=\"a\""), "{line}");
        }
        for name in [
            "hossted_leader",
            "hossted_helm_runs_total",
            "hossted_reconcile_total",
        ] {
            assert!(
                series.iter().any(|l| l.starts_with(name)),
                "{name} missing in {text}"
            );
        }
    }
}
