//! Delivery's own metrics, on the manager's registry:
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `hossted_helm_runs_total{action,result}` | counter | helm runs (`upgrade`, `uninstall`, `rollback`) by `success` / `error` |
//! | `hossted_helm_run_duration_seconds{action}` | histogram | time per helm run |
//! | `hossted_helmapps{ready}` | gauge | HelmApps by their `Ready` condition (`True`, `False`, `Unknown`) |
//! | `hossted_helmapp_drifted_objects{namespace,name}` | gauge | objects of a HelmApp's release that drifted (`status.drift`) |
//! | `hossted_helmapp_update_available{namespace,name}` | gauge | 1 while the chart's source offers a newer stable version than the installed one (`status.latestAvailable`) |
//! | `hossted_helmapp_ready{namespace,name,reason}` | gauge | 1 while a HelmApp's `Ready` is `True`, else 0; `reason` is its reason (`Unknown` without one) — what an alert names |
//! | `hossted_drift_checks_total{kind}` | counter | suspect objects read and compared with their manifest |
//! | `hossted_drift_dry_runs_total{kind}` | counter | server-side apply dry runs confirming drift (`warn` mode) |
//! | `hossted_dependency_informers` | gauge | informers running for the kinds `dependsOn` names beyond HelmApps |
//! | `hossted_dependency_informers_started_total` | counter | such informers started (one per kind when first named) |

use apis::helmapp::HelmApp;
use cache::Store;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use runtime::Manager;

type Labels2 = [(&'static str, String); 2];
type Labels1 = [(&'static str, String); 1];

/// Helm runs take from a second to many minutes.
/// From "none" (a free slot) to minutes (a long queue).
const SLOT_WAIT_BUCKETS: [f64; 10] = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

const RUN_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// See the module docs.
#[derive(Clone)]
pub struct HelmMetrics {
    runs: Family<Labels2, Counter>,
    durations: Family<Labels1, Histogram, fn() -> Histogram>,
    drift_checks: Family<Labels1, Counter>,
    drift_dry_runs: Family<Labels1, Counter>,
    /// Time a helm run waited for one of `--max-concurrent-helm` slots:
    /// where a spec change's latency goes when helm is the bottleneck.
    slot_wait: Histogram,
}

/// A gauge per HelmApp (`namespace`, `name`, and `reason` when `value`
/// gives one), from the cache at each scrape — every HelmApp, 0 included:
/// an alert can see it clear.
struct PerApp {
    apps: Store<HelmApp>,
    value: fn(&HelmApp) -> (i64, Option<String>),
}

impl std::fmt::Debug for PerApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PerApp")
    }
}

impl TypedMetric for PerApp {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for PerApp {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // Every app at each scrape: 10,000 apps make 30,000 series of
        // these, so nothing is allocated per comparison or per label —
        // sorted by (namespace, name) borrowed, labels borrowed.
        let mut apps = self.apps.list();
        apps.sort_unstable_by(|a, b| id(a).cmp(&id(b)));
        for a in &apps {
            let (n, reason) = (self.value)(a);
            let (namespace, name) = id(a);
            let mut labels: Vec<(&str, &str)> = vec![("namespace", namespace), ("name", name)];
            if let Some(reason) = reason.as_deref() {
                labels.push(("reason", reason));
            }
            ConstGauge::new(n).encode(encoder.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// A HelmApp's (namespace, name), borrowed.
fn id(a: &HelmApp) -> (&str, &str) {
    let m = &a.metadata;
    (
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
    )
}

/// `hossted_helmapp_drifted_objects`: the objects in `status.drift`.
fn drifted_objects(a: &HelmApp) -> (i64, Option<String>) {
    (a.status.as_ref().map_or(0, |s| s.drift.len() as i64), None)
}

/// `hossted_helmapp_update_available`: a newer version is offered.
fn update_available(a: &HelmApp) -> (i64, Option<String>) {
    let newer = a
        .status
        .as_ref()
        .is_some_and(|s| crate::delivery::source::is_newer(&s.latest_available, &s.chart_version));
    (i64::from(newer), None)
}

/// `hossted_helmapp_ready`: 1 while `Ready` is `True`, with its reason.
fn ready(a: &HelmApp) -> (i64, Option<String>) {
    let ready = a
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) => (i64::from(c.status == "True"), Some(c.reason.clone())),
        None => (0, Some("Unknown".into())),
    }
}

/// `hossted_helmapps{ready}`, counted from the cache at each scrape.
struct AppsByReady(Store<HelmApp>);

impl std::fmt::Debug for AppsByReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppsByReady")
    }
}

impl TypedMetric for AppsByReady {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for AppsByReady {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut counts = [0i64; 3];
        for a in self.0.list() {
            let ready = a
                .status
                .as_ref()
                .and_then(|s| crate::condition::status(&s.conditions, "Ready"));
            counts[match ready {
                Some("True") => 0,
                Some("False") => 1,
                _ => 2,
            }] += 1;
        }
        for (name, n) in ["True", "False", "Unknown"].iter().zip(counts) {
            ConstGauge::new(n).encode(encoder.encode_family(&[("ready", *name)])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

impl std::fmt::Debug for HelmMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HelmMetrics")
    }
}

fn run_histogram() -> Histogram {
    Histogram::new(RUN_BUCKETS)
}

impl HelmMetrics {
    /// Registers delivery's metrics with `manager`; `apps` is counted at
    /// each scrape.
    pub fn register(manager: &Manager, apps: Store<HelmApp>) -> Self {
        let m = HelmMetrics {
            runs: Family::default(),
            durations: Family::new_with_constructor(run_histogram),
            drift_checks: Family::default(),
            drift_dry_runs: Family::default(),
            slot_wait: Histogram::new(SLOT_WAIT_BUCKETS),
        };
        let r = manager.metrics();
        r.register(
            "helm_runs",
            "helm runs by action and result",
            m.runs.clone(),
        );
        r.register(
            "helm_run_duration_seconds",
            "Time per helm run",
            m.durations.clone(),
        );
        r.register(
            "helm_slot_wait_seconds",
            "Time a helm run waited for a free --max-concurrent-helm slot",
            m.slot_wait.clone(),
        );
        r.register(
            "helmapps",
            "HelmApps by their Ready condition",
            AppsByReady(apps.clone()),
        );
        r.register(
            "helmapp_drifted_objects",
            "Objects of a HelmApp's release that drifted",
            PerApp {
                apps: apps.clone(),
                value: drifted_objects,
            },
        );
        r.register(
            "helmapp_update_available",
            "1 while the chart's source offers a newer stable version than the installed one",
            PerApp {
                apps: apps.clone(),
                value: update_available,
            },
        );
        r.register(
            "helmapp_ready",
            "1 while a HelmApp's Ready condition is True, by its reason",
            PerApp { apps, value: ready },
        );
        r.register(
            "drift_checks",
            "Suspect objects read and compared with their manifest, by kind",
            m.drift_checks.clone(),
        );
        r.register(
            "drift_dry_runs",
            "Server-side apply dry runs confirming drift, by kind",
            m.drift_dry_runs.clone(),
        );
        m
    }

    /// Counts one dry run confirming drift of an object of `kind`.
    pub fn drift_dry_run(&self, kind: &str) {
        self.drift_dry_runs
            .get_or_create(&[("kind", kind.to_string())])
            .inc();
    }

    /// Counts one check of a suspect object of `kind`.
    pub fn drift_checked(&self, kind: &str) {
        self.drift_checks
            .get_or_create(&[("kind", kind.to_string())])
            .inc();
    }

    /// Records how long a helm run waited for its slot.
    pub fn waited_for_slot(&self, seconds: f64) {
        self.slot_wait.observe(seconds);
    }

    /// Records one helm run.
    pub fn ran(&self, action: &str, ok: bool, seconds: f64) {
        let result = if ok { "success" } else { "error" };
        self.runs
            .get_or_create(&[
                ("action", action.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        self.durations
            .get_or_create(&[("action", action.to_string())])
            .observe(seconds);
    }
}

/// What the dependency-informer metrics read at each scrape: informers
/// started so far, and running now.
pub type InformerCounts = std::sync::Arc<dyn Fn() -> (u64, usize) + Send + Sync>;

/// `hossted_dependency_informers` (running) or
/// `hossted_dependency_informers_started_total`.
struct DependencyInformers {
    counts: InformerCounts,
    started: bool,
}

impl std::fmt::Debug for DependencyInformers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DependencyInformers")
    }
}

impl TypedMetric for DependencyInformers {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for DependencyInformers {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (started, running) = (self.counts)();
        if self.started {
            prometheus_client::metrics::counter::ConstCounter::new(started).encode(encoder)
        } else {
            ConstGauge::new(running as i64).encode(encoder)
        }
    }

    fn metric_type(&self) -> MetricType {
        if self.started {
            MetricType::Counter
        } else {
            MetricType::Gauge
        }
    }
}

/// `helmapp_records_held`: first installs' records held in memory for
/// their rollout (`decide::ready::hold`), read at each scrape.
pub fn register_records_held(manager: &Manager, held: runtime::HeldCount) {
    manager.metrics().register(
        "helmapp_records_held",
        "First installs' records held in memory until their rollout, to be written with Ready in one status write",
        RecordsHeld(held),
    );
}

#[derive(Debug)]
struct RecordsHeld(runtime::HeldCount);

impl TypedMetric for RecordsHeld {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for RecordsHeld {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        ConstGauge::new(self.0.get() as i64).encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// Registers the gauge of running dependency informers and the counter of
/// those started (docs/dependencies.md), read from `counts`.
pub fn register_dependency_informers(manager: &Manager, counts: InformerCounts) {
    let r = manager.metrics();
    r.register(
        "dependency_informers",
        "Informers running for kinds dependsOn names",
        DependencyInformers {
            counts: counts.clone(),
            started: false,
        },
    );
    r.register(
        "dependency_informers_started",
        "Informers started for kinds dependsOn names",
        DependencyInformers {
            counts,
            started: true,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn app(namespace: &str, name: &str, ready: Option<(&str, &str)>) -> Arc<HelmApp> {
        let mut app: HelmApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "hossted.com/v1", "kind": "HelmApp",
            "metadata": { "namespace": namespace, "name": name },
            "spec": { "chart": { "path": "tiny" } }
        }))
        .expect("a HelmApp");
        if let Some((status, reason)) = ready {
            app.status = Some(
                serde_json::from_value(serde_json::json!({
                    "conditions": [{ "type": "Ready", "status": status, "reason": reason,
                                     "message": "", "lastTransitionTime": "2026-11-29T00:00:00Z" }]
                }))
                .expect("a status"),
            );
        }
        Arc::new(app)
    }

    fn encoded(apps: &Store<HelmApp>) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register(
            "helmapp_ready",
            "ready",
            PerApp {
                apps: apps.clone(),
                value: ready,
            },
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        text
    }

    /// Every HelmApp once, in (namespace, name) order, 0 included, with its
    /// reason — and `Unknown` without a `Ready` condition.
    #[test]
    fn per_app_gauges_list_every_app_once_in_order_with_its_reason() {
        let apps = Store::new();
        apps.upsert(app("b", "one", Some(("True", "InstallSucceeded"))));
        apps.upsert(app("a-b", "x", Some(("False", "Forbidden"))));
        apps.upsert(app("a", "z", None));
        apps.upsert(app("a", "y", Some(("True", "UpgradeSucceeded"))));
        let text = encoded(&apps);
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("helmapp_ready{"))
            .collect();
        assert_eq!(
            series,
            [
                r#"helmapp_ready{namespace="a",name="y",reason="UpgradeSucceeded"} 1"#,
                r#"helmapp_ready{namespace="a",name="z",reason="Unknown"} 0"#,
                r#"helmapp_ready{namespace="a-b",name="x",reason="Forbidden"} 0"#,
                r#"helmapp_ready{namespace="b",name="one",reason="InstallSucceeded"} 1"#,
            ]
        );
    }
}
