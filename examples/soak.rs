//! The churn soak (`hack/soak.sh`, issue 58; not in CI): the operator
//! binary (delivery only, `--max-concurrent-helm 2`) on a real control
//! plane, `APPS` HelmApps of the `full` chart with `drift.mode: enabled`,
//! churned for `SOAK_MINUTES`:
//!
//! - one values change a second (a random app's `logLevel`);
//! - one object of a random release deleted every 5 s (its ConfigMap or
//!   its Service);
//! - one HelmApp deleted and created again every 30 s;
//!
//! then `QUIET_MINUTES` of quiet. Prints every incomplete release (an
//! object missing, its last value not applied, not Ready at its last
//! generation), helm runs per change, and the operator's RSS each minute
//! with the slope of the churn's second half. One JSON line at the end.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{DELIVERY_CRDS, Operator, Rng, apply_crds, log_lines, proc_field};
use envtest::ControlPlane;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;

const NS: &str = "soak";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn name(i: usize) -> String {
    format!("app-{i:03}")
}

/// Creates or updates HelmApp `i` with `value` as its `logLevel`.
async fn put_app(client: &kube::Client, i: usize, value: &str) -> Result<(), kube::Error> {
    let body = json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name(i), "namespace": NS },
        "spec": { "chart": { "path": "full" }, "values": { "logLevel": value },
                  "drift": { "mode": "enabled" } }
    });
    Api::<HelmApp>::namespaced(client.clone(), NS)
        .patch(
            &name(i),
            &PatchParams::apply("soak").force(),
            &Patch::Apply(&body),
        )
        .await
        .map(|_| ())
}

/// Why app `i` is incomplete, if it is.
async fn incomplete(client: &kube::Client, i: usize, value: &str) -> Option<String> {
    let app = match Api::<HelmApp>::namespaced(client.clone(), NS)
        .get_opt(&name(i))
        .await
    {
        Ok(Some(a)) => a,
        Ok(None) => return Some("no HelmApp".into()),
        Err(e) => return Some(format!("cannot read: {e}")),
    };
    let status = app.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if status.observed_generation != app.metadata.generation || !ready {
        return Some("not Ready at its last generation".into());
    }
    let release = name(i);
    // A read that fails is no evidence of completeness.
    let cm = match Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get_opt(&format!("{release}-env"))
        .await
    {
        Ok(cm) => cm,
        Err(e) => return Some(format!("ConfigMap cannot be read: {e}")),
    };
    match cm
        .and_then(|c| c.data)
        .and_then(|d| d.get("LOG_LEVEL").cloned())
    {
        None => return Some("ConfigMap missing".into()),
        Some(v) if v != value => return Some(format!("LOG_LEVEL {v}, want {value}")),
        Some(_) => {}
    }
    match Api::<Service>::namespaced(client.clone(), NS)
        .get_opt(&format!("{release}-app"))
        .await
    {
        Ok(svc) => svc.is_none().then(|| "Service missing".into()),
        Err(e) => Some(format!("Service cannot be read: {e}")),
    }
}

/// Least-squares slope of `(minute, MiB)` points, in MiB per hour.
fn slope_per_hour(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den * 60.0 }
}

fn operator(bin: &str, cp: &ControlPlane, wrapper: &Path, work: &Path, log: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .args([
            "run",
            "--controllers",
            "delivery",
            "--privileged-namespaces=*",
        ])
        .args(["--max-concurrent-helm", "2"])
        .arg("--helm-binary")
        .arg(wrapper)
        .arg("--work-dir")
        .arg(work)
        .arg("--chart-path-root")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"));
    cmd
}

#[tokio::main]
async fn main() {
    let bin = std::env::var("HOSSTED_OPERATOR_BIN").expect("HOSSTED_OPERATOR_BIN");
    let apps = env_or("APPS", 100) as usize;
    let churn = Duration::from_secs(env_or("SOAK_MINUTES", 60) * 60);
    let quiet = Duration::from_secs(env_or("QUIET_MINUTES", 5) * 60);

    let cp = ControlPlane::start().await.expect("control plane");
    apply_crds(&cp, &DELIVERY_CRDS);
    let client = cp.client();
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let dir = cp.dir().to_path_buf();
    let (wrapper, helm_log) = common::logging_helm(&cp.helm_binary(), &dir);
    let op = Operator::spawn(operator(
        &bin,
        &cp,
        &wrapper,
        &dir.join("work"),
        &dir.join("operator.log"),
    ));
    op.ready().await;
    let pid = op.pid();
    let rss = || proc_field(pid, "VmRSS:").unwrap_or(0) as f64 / 1024.0;

    eprintln!("soak: installing {apps} HelmApps");
    let last: Arc<Mutex<BTreeMap<usize, String>>> = Arc::default();
    for i in 0..apps {
        put_app(&client, i, "v0").await.expect("create");
        last.lock().insert(i, "v0".into());
    }
    let started = Instant::now();
    while {
        let mut done = 0;
        for i in 0..apps {
            done += usize::from(incomplete(&client, i, "v0").await.is_none());
        }
        done < apps
    } {
        assert!(started.elapsed() < Duration::from_secs(1200), "install");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "soak: installed in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let mut rng = Rng(58);
    let (mut edits, mut deletions, mut recreations) = (0usize, 0usize, 0usize);
    let mut samples: Vec<(f64, f64)> = vec![(0.0, rss())];
    eprintln!("soak: minute 0: RSS {:.1} MiB", samples[0].1);
    let runs_before = log_lines(&helm_log).len();
    let churn_start = Instant::now();
    let mut tick = 0u64;
    let mut recreating = Vec::new();
    while churn_start.elapsed() < churn {
        tick += 1;
        let next = churn_start + Duration::from_secs(tick);
        let i = rng.below(apps as u64) as usize;
        let value = format!("v{tick}");
        if put_app(&client, i, &value).await.is_ok() {
            last.lock().insert(i, value);
            edits += 1;
        }
        if tick.is_multiple_of(5) {
            let j = rng.below(apps as u64) as usize;
            let gone = if rng.below(2) == 0 {
                Api::<ConfigMap>::namespaced(client.clone(), NS)
                    .delete(&format!("{}-env", name(j)), &DeleteParams::default())
                    .await
                    .map(|_| ())
            } else {
                Api::<Service>::namespaced(client.clone(), NS)
                    .delete(&format!("{}-app", name(j)), &DeleteParams::default())
                    .await
                    .map(|_| ())
            };
            deletions += usize::from(gone.is_ok());
        }
        if tick.is_multiple_of(30) {
            let k = rng.below(apps as u64) as usize;
            let (client, last) = (client.clone(), last.clone());
            recreations += 1;
            // Deleted (its finalizer uninstalls it), then created again
            // with its last value, without holding the churn.
            recreating.push(tokio::spawn(async move {
                let api = Api::<HelmApp>::namespaced(client.clone(), NS);
                let _ = api.delete(&name(k), &DeleteParams::default()).await;
                let t = Instant::now();
                while api.get_opt(&name(k)).await.ok().flatten().is_some()
                    && t.elapsed() < Duration::from_secs(300)
                {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                let value = last.lock().get(&k).cloned().unwrap_or_default();
                let _ = put_app(&client, k, &value).await;
            }));
        }
        if tick.is_multiple_of(60) {
            let minute = tick as f64 / 60.0;
            samples.push((minute, rss()));
            eprintln!("soak: minute {minute:.0}: RSS {:.1} MiB", rss());
        }
        tokio::time::sleep_until(next.into()).await;
    }
    for r in recreating {
        let _ = r.await;
    }
    let runs = log_lines(&helm_log)[runs_before..]
        .iter()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            common::writes_release(w.get(1)) && !l.contains("--dry-run")
        })
        .count();
    eprintln!("soak: churn over; {quiet:?} of quiet");
    tokio::time::sleep(quiet).await;
    let end_rss = rss();
    let mut incomplete_apps = Vec::new();
    for i in 0..apps {
        let value = last.lock().get(&i).cloned().unwrap_or_default();
        if let Some(why) = incomplete(&client, i, &value).await {
            eprintln!("soak: {} incomplete: {why}", name(i));
            incomplete_apps.push(json!({ "app": name(i), "why": why }));
        }
    }
    let half = samples.len() / 2;
    let slope = slope_per_hour(&samples[half..]);
    let changes = edits + deletions + recreations;
    println!(
        "{}",
        json!({
            "apps": apps, "churn_minutes": churn.as_secs() / 60, "quiet_minutes": quiet.as_secs() / 60,
            "edits": edits, "deletions": deletions, "recreations": recreations,
            "helm_upgrades": runs, "helm_upgrades_per_change": runs as f64 / changes.max(1) as f64,
            "incomplete": incomplete_apps,
            "rss_start_mib": samples[0].1, "rss_end_of_churn_mib": samples.last().map(|s| s.1),
            "rss_after_quiet_mib": end_rss, "rss_slope_second_half_mib_per_h": slope,
            "rss_per_minute_mib": samples.iter().map(|s| s.1).collect::<Vec<_>>(),
        })
    );
    // SOAK_KEEP=<dir>: the operator's log and helm's runs kept there (the
    // control plane's directory goes with it).
    if let Ok(keep) = std::env::var("SOAK_KEEP") {
        let keep = std::path::Path::new(&keep);
        let _ = std::fs::create_dir_all(keep);
        for (from, to) in [
            (dir.join("operator.log"), "operator.log"),
            (helm_log.clone(), "helm-runs.log"),
        ] {
            if let Err(e) = std::fs::copy(&from, keep.join(to)) {
                eprintln!("soak: cannot keep {}: {e}", from.display());
            }
        }
    }
    op.stop();
}
