//! Change windows (issue 39, docs/change-windows.md): a change made
//! outside its window waits — `Released=False, OutsideChangeWindow`,
//! `status.nextWindow` — with no helm run, then runs once the window opens,
//! woken by a timer (nothing else changes); `force-at` runs at once.

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
