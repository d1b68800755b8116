//! The faults benchmark (`hack/bench-faults.sh`, issue 43): the operator
//! binary (delivery only) on a real control plane, `APPS` HelmApps of the
//! `full` chart moved value by value in waves; during a wave, one fault:
//!
//! - none (the baseline, measured in the same run);
//! - kube-apiserver killed for `OUTAGE_SECS` and started on the same port;
//! - etcd frozen (SIGSTOP) for `FREEZE_SECS`, then thawed;
//! - the operator's process SIGKILLed while its helm runs (its helm goes
//!   with it), a new one started.
//!
//! Per fault: seconds from the fault's end to every HelmApp converged
//! (`Ready`, at its generation), helm processes started during the fault,
//! peak RSS of operator + children during the fault; for the run: helm
//! upgrades against the fault-free count. Prints one JSON line, and with
//! `--markdown FILE` the report section.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{DELIVERY_CRDS, Operator, apply_crds, log_lines, now_epoch, proc_field};
use envtest::ControlPlane;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

const NAMESPACES: usize = 3;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The operator binary's command line, its helm the logging wrapper.
fn operator(bin: &str, cp: &ControlPlane, wrapper: &Path, work: &Path, log: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", cp.kubeconfig_path())
        .env(
            "RUST_LOG",
            std::env::var("BENCH_RUST_LOG").unwrap_or("info".into()),
        )
        .args([
            "run",
            "--controllers",
            "delivery",
            "--privileged-namespaces=*",
        ])
        .arg("--helm-binary")
        .arg(wrapper)
        .arg("--work-dir")
        .arg(work)
        .arg("--chart-path-root")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts"))
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("log"),
        );
    cmd
}

/// RSS of `pid` and every process whose parent it is (helm runs), in MiB.
fn tree_rss_mib(pid: u32) -> f64 {
    let mut kb = proc_field(pid, "VmRSS:").unwrap_or(0);
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.filter_map(Result::ok) {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
            let child = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
            if let (Some(ppid), Some(child)) = (ppid, child)
                && ppid == pid
            {
                kb += proc_field(child, "VmRSS:").unwrap_or(0);
            }
        }
    }
    kb as f64 / 1024.0
}

/// `helm install` / `helm upgrade` starts (not dry runs) logged in
/// `(from, to)`.
fn upgrades_between(log: &Path, from: f64, to: f64) -> usize {
    log_lines(log)
        .iter()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let t: f64 = f.first().and_then(|t| t.parse().ok()).unwrap_or(0.0);
            t > from && t < to && common::writes_release(f.get(1)) && !l.contains("dry-run")
        })
        .count()
}

/// A helm that logs each start (as [`common::logging_helm`]) and, in a
/// second log, each end with its exit status: a run killed with the
/// operator never logs its end. helm dies with the wrapper (`setpriv
/// --pdeathsig`), as it dies with the operator when run directly: a pod's
/// kill takes every process of it.
fn helm_logging_ends(helm: &Path, dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (starts, ends) = (dir.join("helm-starts.log"), dir.join("helm-ends.log"));
    let wrapper = dir.join("helm-wrapper.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = version ]; then exec '{helm}' \"$@\"; fi\necho \"$(date +%s.%N) $*\" >> '{starts}'\nsetpriv --pdeathsig KILL -- '{helm}' \"$@\"\nrc=$?\necho \"$rc $*\" >> '{ends}'\nexit $rc\n",
            starts = starts.display(),
            ends = ends.display(),
            helm = helm.display()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (wrapper, starts, ends)
}

/// `helm install` / `helm upgrade` runs (not dry runs) that ended with
/// exit status 0.
fn upgrades_succeeded(ends: &Path) -> usize {
    log_lines(ends)
        .iter()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&"0") && common::writes_release(f.get(1)) && !l.contains("dry-run")
        })
        .count()
}

struct Bench {
    cp: ControlPlane,
    client: kube::Client,
    apps: usize,
}

impl Bench {
    fn name(i: usize) -> (String, String) {
        (format!("faults-{}", i % NAMESPACES), format!("app-{i}"))
    }

    /// Sets every HelmApp's `logLevel` to `value` (created the first time).
    async fn wave(&self, value: &str) {
        for i in 0..self.apps {
            let (ns, name) = Self::name(i);
            let api: Api<HelmApp> = Api::namespaced(self.client.clone(), &ns);
            let body = json!({
                "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
                "metadata": { "name": name, "namespace": ns },
                "spec": { "chart": { "path": "full" }, "values": { "logLevel": value } }
            });
            let params = PatchParams::apply("bench-faults").force();
            api.patch(&name, &params, &Patch::Apply(&body))
                .await
                .expect("apply HelmApp");
        }
    }

    /// How many HelmApps are `Ready` at their generation (0 when the API
    /// does not answer).
    async fn converged(&self) -> usize {
        let api: Api<HelmApp> = Api::all(self.client.clone());
        let Ok(list) = api.list(&ListParams::default()).await else {
            return 0;
        };
        list.items
            .iter()
            .filter(|a| {
                let Some(s) = a.status.as_ref() else {
                    return false;
                };
                s.observed_generation == a.metadata.generation
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
            })
            .count()
    }

    /// Seconds until every HelmApp converged, counted from `since`.
    async fn until_converged(&self, since: Instant, what: &str) -> f64 {
        let limit = Duration::from_secs(600);
        while self.converged().await < self.apps {
            assert!(
                since.elapsed() < limit,
                "{what}: not converged in {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        since.elapsed().as_secs_f64()
    }
}

/// Samples the RSS of `pid`'s tree every 100 ms until `stop`: the peak.
async fn peak_rss_while(pid: u32, stop: impl std::future::Future<Output = ()>) -> f64 {
    let mut peak = 0.0_f64;
    tokio::pin!(stop);
    loop {
        peak = peak.max(tree_rss_mib(pid));
        tokio::select! {
            _ = &mut stop => return peak,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

#[tokio::main]
async fn main() {
    let markdown = std::env::args()
        .skip_while(|a| a != "--markdown")
        .nth(1)
        .map(PathBuf::from);
    let bin = std::env::var("HOSSTED_OPERATOR_BIN").expect("HOSSTED_OPERATOR_BIN");
    let apps = env_or("APPS", 12) as usize;
    let outage = Duration::from_secs(env_or("OUTAGE_SECS", 8));
    let freeze = Duration::from_secs(env_or("FREEZE_SECS", 20));

    let cp = ControlPlane::start().await.expect("control plane");
    apply_crds(&cp, &DELIVERY_CRDS);
    let client = cp.client();
    for n in 0..NAMESPACES {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(format!("faults-{n}")),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace");
    }
    let dir = cp.dir().to_path_buf();
    let (wrapper, helm_log, ends_log) = helm_logging_ends(&cp.helm_binary(), &dir);
    let op_log = dir.join("operator.log");
    let command_in =
        |cp: &ControlPlane, work: &str| operator(&bin, cp, &wrapper, &dir.join(work), &op_log);
    let command = |cp: &ControlPlane| command_in(cp, "work");
    let mut op = Operator::spawn(command(&cp));
    op.ready().await;
    let bench = Bench { cp, client, apps };

    eprintln!("bench: installing {apps} HelmApps");
    let started = Instant::now();
    bench.wave("w0").await;
    bench.until_converged(started, "install").await;
    let mut waves = 1;

    eprintln!("bench: a wave without a fault");
    let started = Instant::now();
    bench.wave("w1").await;
    let baseline = bench.until_converged(started, "baseline").await;
    waves += 1;
    let mut rows = Vec::new();

    eprintln!("bench: kube-apiserver down {outage:?}");
    bench.wave("w2").await;
    let pid = op.pid();
    let mut bench = bench;
    let going = now_epoch();
    bench.cp.stop_apiserver();
    let down = now_epoch();
    let peak = peak_rss_while(pid, tokio::time::sleep(outage)).await;
    // The fault ends as the server starts again (it answers before it is ready).
    let (up, up_at) = (now_epoch(), Instant::now());
    bench.cp.start_apiserver().await.expect("apiserver back");
    let after = bench.until_converged(up_at, "apiserver outage").await;
    waves += 1;
    // A run whose gate passed as the server died starts a moment later:
    // the first second is counted apart.
    rows.push(
        json!({ "fault": format!("kube-apiserver down {}s", outage.as_secs()),
        "converged_after_s": after,
        "helm_started_first_second": upgrades_between(&helm_log, going, down + 1.0),
        "helm_started_during": upgrades_between(&helm_log, down + 1.0, up),
        "peak_rss_mib": peak }),
    );

    eprintln!("bench: etcd frozen {freeze:?}");
    bench.wave("w3").await;
    bench.cp.freeze_etcd();
    let frozen = now_epoch();
    let peak = peak_rss_while(pid, tokio::time::sleep(freeze)).await;
    bench.cp.thaw_etcd();
    let (thawed, thawed_at) = (now_epoch(), Instant::now());
    let after = bench.until_converged(thawed_at, "etcd frozen").await;
    waves += 1;
    rows.push(json!({ "fault": format!("etcd frozen {}s", freeze.as_secs()),
        "converged_after_s": after, "helm_started_during": upgrades_between(&helm_log, frozen, thawed),
        "peak_rss_mib": peak }));

    eprintln!("bench: the operator killed while its helm runs");
    let since = now_epoch();
    bench.wave("w4").await;
    // Killed once a helm has stored a pending revision (a run mid-way), or
    // at the latest when helm has started.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(bench.client.clone());
    let pending = ListParams::default().labels("owner=helm,status=pending-upgrade");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stored = secrets.list_metadata(&pending).await.map(|l| l.items.len());
        if stored.is_ok_and(|n| n > 0) || Instant::now() > deadline {
            break;
        }
        if upgrades_between(&helm_log, since, f64::MAX) > apps / 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    op.kill();
    let killed = now_epoch();
    op = Operator::spawn(command(&bench.cp));
    let restarted = Instant::now();
    op.ready().await;
    let after = bench.until_converged(restarted, "operator killed").await;
    waves += 1;
    let unlocked = unlock_delays(&bench.client, killed).await;
    rows.push(json!({ "fault": "operator SIGKILLed mid-upgrade",
        "converged_after_s": after, "helm_started_during": 0,
        "unlocked": unlocked.len(),
        "unlocked_max_s_after_start": unlocked.iter().copied().fold(0.0_f64, f64::max) }));
    op.stop();

    eprintln!("bench: two replicas, the leader killed mid-upgrade");
    let lease = [
        "--leader-elect",
        "--leader-election-namespace=faults-0",
        "--leader-elect-lease-duration=8s",
        "--leader-elect-renew-deadline=6s",
        "--leader-elect-retry-period=500ms",
    ];
    let mut replicas = Vec::new();
    for name in ["replica-a", "replica-b"] {
        let mut cmd = command_in(&bench.cp, name);
        cmd.env("POD_NAME", name).args(lease);
        let replica = Operator::spawn(cmd);
        replica.ready().await;
        replicas.push((name, replica));
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(bench.client.clone(), "faults-0");
    let holder = loop {
        let held = leases
            .get_opt("hossted-operator")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity);
        if let Some(h) = held.filter(|h| !h.is_empty()) {
            break h;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let since = now_epoch();
    bench.wave("w5").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while upgrades_between(&helm_log, since, f64::MAX) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let at = replicas
        .iter()
        .position(|(name, _)| holder.starts_with(name))
        .expect("the holder is a replica");
    let (_, leader) = replicas.remove(at);
    leader.kill();
    let killed_at = Instant::now();
    let after = bench.until_converged(killed_at, "leader killed").await;
    waves += 1;
    rows.push(
        json!({ "fault": "the leader SIGKILLed mid-upgrade (lease 8 s)",
        "converged_after_s": after, "target_extra_s": 8.0, "helm_started_during": 0 }),
    );
    for (_, replica) in replicas {
        replica.stop();
    }

    let upgrades = upgrades_between(&helm_log, 0.0, f64::MAX);
    let succeeded = upgrades_succeeded(&ends_log);
    let needed = waves * apps;
    let result = json!({ "apps": apps, "baseline_wave_s": baseline, "faults": rows,
        "helm_upgrades": upgrades, "helm_upgrades_needed": needed,
        "helm_upgrades_succeeded": succeeded,
        "ratio": upgrades as f64 / needed as f64 });
    println!("{result}");
    if let Some(path) = markdown {
        std::fs::write(&path, report(&result)).expect("markdown");
    }
}

/// For each HelmApp whose history has an `unlock` after `killed` (epoch
/// seconds): seconds from the kill to it (whole seconds: history times
/// are RFC 3339 to the second).
async fn unlock_delays(client: &kube::Client, killed: f64) -> Vec<f64> {
    let api: Api<HelmApp> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.expect("HelmApps");
    list.items
        .iter()
        .filter_map(|a| {
            let h = a
                .status
                .as_ref()?
                .history
                .iter()
                .find(|h| h.action == apis::helmapp::HistoryAction::Unlock)?;
            let at = chrono::DateTime::parse_from_rfc3339(&h.time).ok()?;
            let at = at.timestamp_millis() as f64 / 1000.0;
            (at >= killed.floor()).then_some(at - killed)
        })
        .collect()
}

fn report(r: &serde_json::Value) -> String {
    let mut out = String::new();
    out.push_str("### Faults\n\n");
    out.push_str(&format!(
        "Command: `hack/bench-faults.sh`. {} HelmApps of the `full` chart (6 objects), moved value by value in waves; during a wave one fault. The fault-free wave of the same run took **{:.1} s**.\n\n",
        r["apps"], r["baseline_wave_s"].as_f64().unwrap_or(f64::NAN)
    ));
    out.push_str("| fault | converged after its end | target (fault-free wave + 5 s; + the lease for a failover) | helm started during it (and in its first second) | peak RSS operator + helm during it |\n");
    out.push_str("| --- | ---: | ---: | ---: | ---: |\n");
    let base = r["baseline_wave_s"].as_f64().unwrap_or(f64::NAN) + 5.0;
    for row in r["faults"].as_array().into_iter().flatten() {
        let peak = row["peak_rss_mib"]
            .as_f64()
            .map(|p| format!("{p:.1} MiB"))
            .unwrap_or("—".into());
        let target = base + row["target_extra_s"].as_f64().unwrap_or(0.0);
        let started = match row["helm_started_first_second"].as_u64() {
            Some(first) => format!("{} ({first})", row["helm_started_during"]),
            None => row["helm_started_during"].to_string(),
        };
        out.push_str(&format!(
            "| {} | {:.1} s | {:.1} s | {} | {} |\n",
            row["fault"].as_str().unwrap_or_default(),
            row["converged_after_s"].as_f64().unwrap_or(f64::NAN),
            target,
            started,
            peak
        ));
    }
    for row in r["faults"].as_array().into_iter().flatten() {
        if let Some(n) = row["unlocked"].as_u64() {
            out.push_str(&format!(
                "\nThe kill left {n} release(s) pending; each was unlocked at most {:.0} s after the kill (history times are to the second; the new process started at once).\n",
                row["unlocked_max_s_after_start"].as_f64().unwrap_or(f64::NAN)
            ));
        }
    }
    out.push_str(&format!(
        "\nhelm upgrades over the run: **{}** where {} were needed (one per app per wave): **{:.2}×** (target ≤ 1.10×). \
         Of them {} succeeded; the other {} did not — runs in flight when a fault struck, killed with the operator or failing as the API server went away, \
         and run again after it (succeeded runs against those needed: {:.2}×).\n",
        r["helm_upgrades"], r["helm_upgrades_needed"], r["ratio"].as_f64().unwrap_or(f64::NAN),
        r["helm_upgrades_succeeded"],
        r["helm_upgrades"].as_u64().unwrap_or(0).saturating_sub(r["helm_upgrades_succeeded"].as_u64().unwrap_or(0)),
        r["helm_upgrades_succeeded"].as_f64().unwrap_or(f64::NAN) / r["helm_upgrades_needed"].as_f64().unwrap_or(f64::NAN),
    ));
    out.push_str(&format!(
        "\nGenerated on {}.\n",
        chrono::Utc::now().format("%Y-%m-%dT%H:%MZ")
    ));
    out
}
