//! Change windows (issue 39, docs/change-windows.md): a change made
//! outside its window waits — `Released=False, OutsideChangeWindow`,
//! `status.nextWindow` — with no helm run, then runs once the window opens,
//! woken by a timer (nothing else changes); `force-at` runs at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{SecondsFormat, Timelike, Utc};

use super::*;

/// Six-field cron (seconds first) naming one instant, in UTC.
fn cron_at(t: chrono::DateTime<Utc>) -> String {
    use chrono::Datelike;
    format!(
        "{} {} {} {} {} *",
        t.second(),
        t.minute(),
        t.hour(),
        t.day(),
        t.month()
    )
}

/// Sleeps until `t` (at once if it is past).
async fn sleep_until(t: chrono::DateTime<Utc>) {
    if let Ok(left) = (t - Utc::now()).to_std() {
        tokio::time::sleep(left).await;
    }
}

fn released_condition(app: &HelmApp) -> (String, String) {
    app.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Released"))
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_change_outside_its_window_waits_then_runs_when_it_opens_and_force_at_runs_now() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    // Created with a window that opens an hour from now: it waits,
    // whatever the machine's speed.
    let far = (Utc::now() + chrono::Duration::hours(1))
        .with_nanosecond(0)
        .unwrap();
    let closed = json!({ "allow": [{ "schedule": cron_at(far), "duration": "1m" }] });
    apply(
        &f,
        "later",
        json!({ "chart": { "path": "tiny" }, "changeWindows": closed }),
    )
    .await;
    // Not open for an hour: force-at only.
    apply(
        &f,
        "forced",
        json!({ "chart": { "path": "tiny" }, "changeWindows": closed }),
    )
    .await;

    let waiting = envtest::eventually("later waits for its window", 60, || async {
        let app = get(&f, "later").await?;
        (released_condition(&app) == ("False".into(), "OutsideChangeWindow".into())).then_some(app)
    })
    .await;
    let status = waiting.status.unwrap();
    assert_eq!(
        status.next_window,
        far.to_rfc3339_opts(SecondsFormat::Secs, true),
        "the opening in status"
    );
    assert!(
        revisions(&f, "later").await.is_empty(),
        "no release before the window"
    );
    assert!(
        !helm_calls(&log).iter().any(|c| c.on("later")),
        "no helm run before the window"
    );
    an_event(&f, NS, "later", "OutsideChangeWindow").await;

    // The window moved to open 5 s from now, for a minute: it runs then —
    // never before, whether or not the operator saw the change before the
    // opening.
    let opens = (Utc::now() + chrono::Duration::seconds(5))
        .with_nanosecond(0)
        .unwrap();
    let windows = json!({ "allow": [{ "schedule": cron_at(opens), "duration": "1m" }] });
    patch(&f, "later", json!({ "spec": { "changeWindows": windows } })).await;
    // An ordering fact, not a finishing time: a second before the opening,
    // no helm has started for it.
    sleep_until(opens - chrono::Duration::seconds(1)).await;
    let calls = helm_calls(&log);
    // (Read before the clock: on a machine too slow to be here before the
    // opening, nothing can be concluded.)
    if Utc::now() < opens {
        assert!(
            !calls.iter().any(|c| c.on("later")),
            "no helm run before the moved window opens"
        );
    }

    // Nothing else happens: the window's own timer runs it.
    let installed = ready(&f, "later", "InstallSucceeded", 1).await;
    let status = installed.status.unwrap();
    let ran_at: chrono::DateTime<Utc> = status.history[0].time.parse().unwrap();
    assert!(
        ran_at >= opens,
        "ran at {ran_at}, the window opened at {opens}"
    );
    assert!(status.next_window.is_empty(), "nothing waits any more");
    assert_eq!(
        released_condition(&get(&f, "later").await.unwrap()).0,
        "True"
    );

    // force-at: at once, said in an Event.
    envtest::eventually("forced waits", 60, || async {
        let app = get(&f, "forced").await?;
        (released_condition(&app).1 == "OutsideChangeWindow").then_some(())
    })
    .await;
    patch(
        &f,
        "forced",
        json!({ "metadata": { "annotations": { "hossted.com/force-at": "now" } } }),
    )
    .await;
    ready(&f, "forced", "InstallSucceeded", 1).await;
    an_event(&f, NS, "forced", "ForcedOutsideChangeWindow").await;
    operator.stop().await;
}

#[tokio::test]
async fn a_deny_window_inside_an_allow_window_wins_until_it_ends() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    // Allowed all day, every day; denied from now for an hour: it waits,
    // whatever the machine's speed.
    let denied_from = Utc::now().with_nanosecond(0).unwrap();
    let deny = |duration: &str| {
        json!({
            "allow": [{ "schedule": "0 0 * * *", "duration": "24h" }],
            "deny": [{ "schedule": cron_at(denied_from), "duration": duration }],
        })
    };
    apply(
        &f,
        "denied",
        json!({ "chart": { "path": "tiny" }, "changeWindows": deny("1h") }),
    )
    .await;
    let waiting = envtest::eventually("denied waits", 30, || async {
        let app = get(&f, "denied").await?;
        (released_condition(&app) == ("False".into(), "OutsideChangeWindow".into())).then_some(app)
    })
    .await;
    assert_eq!(
        waiting.status.unwrap().next_window,
        (denied_from + chrono::Duration::hours(1)).to_rfc3339_opts(SecondsFormat::Secs, true),
        "the deny window's end is when changes may run"
    );
    // The deny window shortened to end 5 s from now: the change runs then,
    // not before.
    let denied_until = (Utc::now() + chrono::Duration::seconds(5))
        .with_nanosecond(0)
        .unwrap();
    let seconds = (denied_until - denied_from).num_seconds();
    patch(
        &f,
        "denied",
        json!({ "spec": { "changeWindows": deny(&format!("{seconds}s")) } }),
    )
    .await;
    sleep_until(denied_until - chrono::Duration::seconds(1)).await;
    let stored = revisions(&f, "denied").await;
    if Utc::now() < denied_until {
        assert!(stored.is_empty(), "no release before the deny window ends");
    }
    let installed = ready(&f, "denied", "InstallSucceeded", 1).await;
    let ran_at: chrono::DateTime<Utc> = installed.status.unwrap().history[0].time.parse().unwrap();
    assert!(
        ran_at >= denied_until,
        "ran at {ran_at}, the deny window ended at {denied_until}"
    );
    operator.stop().await;
}

/// The operator binary running delivery alone (every namespace
/// privileged), killed when dropped: a process of its own, so its CPU time
/// (`/proc/<pid>/stat`) and its `/healthz` are its own — not this test's,
/// whose runtime an in-process operator would share.
pub(super) struct OperatorProcess {
    child: std::process::Child,
}

impl OperatorProcess {
    /// Started with `helm`, `/healthz` served on `127.0.0.1:probe_port`
    /// (0: not served), its log in `operator.log` of the test's directory.
    pub(super) fn start(f: &Fixture, helm: &std::path::Path, probe_port: u16) -> Self {
        let log = std::fs::File::create(f.cp.dir().join("operator.log")).unwrap();
        let probes = match probe_port {
            0 => "0".to_string(),
            port => format!("127.0.0.1:{port}"),
        };
        let child = f
            .operator_command(f.cp.kubeconfig_path())
            .args([
                "run",
                "--controllers",
                "delivery",
                "--privileged-namespaces=*",
            ])
            .args([
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                probes.as_str(),
            ])
            .arg("--helm-binary")
            .arg(helm)
            .arg("--work-dir")
            .arg(f.cp.dir().join("operator-work"))
            .arg("--chart-path-root")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charts"))
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        OperatorProcess { child }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET url`'s status, or `None` when nothing answered within 5 s (a
/// blocking client on a blocking thread, timed by itself: this test's
/// runtime being busy does not make a probe fail).
async fn probe(url: &str) -> Option<u16> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        agent.get(&url).call().ok().map(|r| r.status().as_u16())
    })
    .await
    .ok()?
}

/// 20 windows `* * * * * *` (every second, open for a second): alone,
/// always open.
fn every_second() -> Vec<serde_json::Value> {
    (0..20)
        .map(|_| json!({ "schedule": "* * * * * *", "duration": "1s" }))
        .collect()
}

/// 20 deny windows of 744h opening at `from`, `from` − 1 s, … `from` − 19 s
/// (yearly): together denied until `from` + 744h.
fn month_long_denials(from: chrono::DateTime<Utc>) -> Vec<serde_json::Value> {
    (0..20)
        .map(|i| {
            let opens = from - chrono::Duration::seconds(i);
            json!({ "schedule": cron_at(opens), "duration": "744h" })
        })
        .collect()
}

#[tokio::test]
async fn every_second_allowed_beside_month_long_denials_gets_its_verdict_while_healthz_answers() {
    // Issue 57: windows stepped second by second on an async worker. The
    // operator is the binary (two async workers, as in a pod), so a
    // worker it blocks is one its own /healthz would be missing.
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let (wrapper, log) = counting_helm(&f);
    let port = free_port();
    let _operator = OperatorProcess::start(&f, &wrapper, port);
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    eventually("the operator's /healthz", 60, || async {
        (probe(&healthz).await == Some(200)).then_some(())
    })
    .await;
    // Probed every 100 ms from before the HelmApps exist until after
    // every verdict.
    let stop = Arc::new(AtomicBool::new(false));
    let prober = tokio::spawn({
        let (url, stop) = (healthz.clone(), stop.clone());
        async move {
            let mut answers = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                answers.push(probe(&url).await);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answers
        }
    });

    // Denied from now for 744h, allowed every second: closed until the
    // denials end. Four of them, so that more than one async worker would
    // be stepping at once.
    let denied_from = Utc::now().with_nanosecond(0).unwrap();
    let closed = json!({ "allow": every_second(), "deny": month_long_denials(denied_from) });
    let closed_apps: Vec<String> = (0..4).map(|i| format!("windowed-{i}")).collect();
    for name in &closed_apps {
        apply(
            &f,
            name,
            json!({ "chart": { "path": "tiny" }, "changeWindows": closed }),
        )
        .await;
    }
    // The same windows, the denials over an hour ago: open, it installs.
    let ended = json!({ "allow": every_second(),
        "deny": month_long_denials(denied_from - chrono::Duration::hours(745)) });
    apply(
        &f,
        "open",
        json!({ "chart": { "path": "tiny" }, "changeWindows": ended }),
    )
    .await;

    let opens =
        (denied_from + chrono::Duration::hours(744)).to_rfc3339_opts(SecondsFormat::Secs, true);
    for name in &closed_apps {
        let waiting = envtest::eventually(&format!("{name} waits for its window"), 60, || async {
            let app = get(&f, name).await?;
            (released_condition(&app) == ("False".into(), "OutsideChangeWindow".into()))
                .then_some(app)
        })
        .await;
        assert_eq!(
            waiting.status.unwrap().next_window,
            opens,
            "{name}: the end of the denials is when changes may run"
        );
    }
    ready(&f, "open", "InstallSucceeded", 1).await;
    // A few seconds more: the windows' timers and rechecks.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let answers = prober.await.unwrap();

    assert!(
        answers.len() >= 10,
        "only {} probes were made",
        answers.len()
    );
    let missed: Vec<(usize, Option<u16>)> = answers
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, a)| *a != Some(200))
        .collect();
    assert!(
        missed.is_empty(),
        "/healthz did not answer 200 to probes (index, answer) {missed:?} of {}",
        answers.len()
    );
    for name in &closed_apps {
        assert!(
            !helm_calls(&log).iter().any(|c| c.on(name)),
            "{name}: a helm run inside the denials"
        );
        assert!(revisions(&f, name).await.is_empty(), "{name} installed");
    }
}
