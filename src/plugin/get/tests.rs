//! The table of `kubectl hossted get`, from objects as the API returns them.

use super::*;
use chrono::TimeZone;
use serde_json::json;

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc
        .with_ymd_and_hms(2026, 11, 25, 12, 0, 0)
        .unwrap()
}

fn app(name: &str, owner: Option<&str>, ready: &str, reason: &str, revision: i64) -> HelmApp {
    let owners = owner.map_or(json!([]), |uid| {
        json!([{ "apiVersion": "hossted.com/v1alpha1", "kind": "HelmAppSet",
                 "name": "stack", "uid": uid }])
    });
    serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": "apps", "uid": format!("uid-{name}"),
                      "creationTimestamp": "2026-11-25T11:55:00Z", "ownerReferences": owners },
        "spec": { "chart": { "repo": "https://charts.example.com", "name": "tiny" } },
        "status": { "revision": revision, "chartVersion": "0.1.0",
                    "latestAvailable": if name == "solo" { "0.2.0" } else { "0.1.0" },
                    "drift": [{ "kind": "ConfigMap", "name": "x", "fields": ["/data/a"] }],
                    "conditions": [{ "type": "Ready", "status": ready, "reason": reason,
                                     "message": "", "lastTransitionTime": "2026-11-25T11:56:00Z" }] }
    }))
    .unwrap()
}

#[test]
fn a_set_is_a_tree_in_its_order_and_the_other_apps_follow() {
    let set: HelmAppSet = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmAppSet",
        "metadata": { "name": "stack", "namespace": "apps", "uid": "set-uid",
                      "creationTimestamp": "2026-11-23T12:00:00Z" },
        "spec": { "sequenced": true, "apps": [
            { "name": "web", "spec": { "chart": { "path": "tiny" } } },
            { "name": "db", "spec": { "chart": { "path": "tiny" } } }
        ] },
        "status": { "ready": "1/2", "conditions": [{ "type": "Ready", "status": "False",
            "reason": "DependencyNotReady", "message": "", "lastTransitionTime": "2026-11-25T11:56:00Z" }] }
    }))
    .unwrap();
    let apps = [
        app("solo", None, "True", "UpToDate", 3),
        app("stack-db", Some("set-uid"), "True", "InstallSucceeded", 1),
        app(
            "stack-web",
            Some("set-uid"),
            "False",
            "DependencyNotReady",
            0,
        ),
    ];
    let out = table(&[set], &apps, false, now(), false);
    let lines: Vec<String> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        lines[0],
        "NAME READY STATUS REVISION CHART@VERSION CLUSTER DRIFT UPDATE WAITING AGE"
    );
    assert_eq!(
        lines[1],
        "stack (set) 1/2 DependencyNotReady - 2 apps - - - dependency 2d"
    );
    assert_eq!(
        lines[2], "├─ stack-web False DependencyNotReady - tiny@0.1.0 in-cluster 1 - dependency 5m",
        "the set's order, not the names'"
    );
    assert_eq!(
        lines[3],
        "└─ stack-db True InstallSucceeded 1 tiny@0.1.0 in-cluster 1 - - 5m"
    );
    assert_eq!(
        lines[4], "solo True UpToDate 3 tiny@0.1.0 in-cluster 1 0.2.0 - 5m",
        "a newer version offered"
    );
    assert!(!out.contains('\x1b'), "no colour off a terminal");
    let all = table(&[], &apps[..1], true, now(), true);
    assert!(all.lines().next().unwrap().starts_with("NAMESPACE"));
    assert!(all.contains("\x1b[32mTrue"), "{all}");
    let mut later = apps[0].clone();
    later.status.as_mut().unwrap().next_window = "2026-12-01T21:00:00Z".into();
    let out = table(&[], &[later], false, now(), false);
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[8], "window:2026-12-01T21:00:00Z", "{out}");
}

#[test]
fn the_chart_is_named_by_its_status_and_a_tenants_escape_never_reaches_the_terminal() {
    let mut named = app("named", None, "True", "InstallSucceeded", 1);
    named.spec.chart =
        serde_json::from_value(json!({ "oci": "oci://r.example.com/charts/x" })).unwrap();
    named.status.as_mut().unwrap().chart_name = "podinfo".into();
    assert_eq!(app_row(&named, now()).chart, "podinfo@0.1.0");

    let mut hostile = app("hostile", None, "True", "InstallSucceeded", 1);
    hostile.spec.chart =
        serde_json::from_value(json!({ "oci": "oci://r.example.com/\u{1b}]52;c;aGk=\u{7}" }))
            .unwrap();
    let row = app_row(&hostile, now());
    assert!(!row.chart.chars().any(char::is_control), "{:?}", row.chart);
    let mut reordered = app("reordered", None, "True", "InstallSucceeded", 1);
    reordered.spec.chart =
        serde_json::from_value(json!({ "oci": "oci://r.example.com/x\u{202E}gpj" })).unwrap();
    assert_eq!(app_row(&reordered, now()).chart, "x?gpj@0.1.0");
}

#[test]
fn a_remote_release_shows_its_kubeconfig_secret_printable_and_bounded() {
    let remote = |secret: &str| {
        let mut a = app("remote", None, "True", "UpToDate", 2);
        a.spec.kube_config =
            Some(serde_json::from_value(json!({ "secretRef": { "name": secret } })).unwrap());
        a
    };
    assert_eq!(app_row(&remote("prod-eu"), now()).cluster, "prod-eu");
    let out = table(&[], &[remote("prod-eu")], false, now(), false);
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[5], "prod-eu", "{out}");
    // The operator's own cluster.
    let local = app("local", None, "True", "UpToDate", 1);
    assert_eq!(app_row(&local, now()).cluster, "in-cluster");

    // A name stored before the CRD checked it is the tenant's text: no
    // escape sequence or bidi control reaches the terminal, and it is cut.
    let hostile = app_row(&remote("\u{1b}]52;c;aGk=\u{7}x\u{202E}y"), now()).cluster;
    assert_eq!(hostile, "?]52;c;aGk=?x?y");
    let long = app_row(&remote(&"a".repeat(300)), now()).cluster;
    assert_eq!(long.chars().count(), CLUSTER_WIDTH, "{long}");
    assert!(long.ends_with('…'), "{long}");
}
