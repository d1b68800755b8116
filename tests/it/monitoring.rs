//! The operator's alerts (`manifests/monitoring/`): valid rules, each alert
//! unit-tested firing and not firing by promtool, and the same groups in the
//! plain rules file, the PrometheusRule and the chart.

use std::path::{Path, PathBuf};
use std::process::Command;

use envtest::Assets;
use serde_json::Value;

use crate::support::output_ok;

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/monitoring")
}

fn tool(name: &'static str) -> Command {
    Command::new(
        Assets::locate()
            .binary(name)
            .expect("the test assets (hack/setup-envtest.sh)"),
    )
}

fn yaml(path: &Path) -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_alerts_are_valid_and_each_fires_when_it_should_and_only_then() {
    let out = output_ok(tool("promtool").current_dir(monitoring()).args([
        "check",
        "rules",
        "alerts.yaml",
    ]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("SUCCESS: 8 rules found"), "{said}");
    let out = output_ok(tool("promtool").current_dir(monitoring()).args([
        "test",
        "rules",
        "alerts_test.yaml",
    ]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUCCESS"));
    // Every alert has a test that expects it.
    let tests = std::fs::read_to_string(monitoring().join("alerts_test.yaml")).unwrap();
    let rules = yaml(&monitoring().join("alerts.yaml"));
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let alert = rule["alert"].as_str().unwrap();
            assert!(
                tests.contains(&format!("alertname: {alert}\n")),
                "no test of {alert}"
            );
        }
    }
}

#[test]
fn the_prometheus_rule_and_the_chart_carry_the_same_alerts() {
    let groups = yaml(&monitoring().join("alerts.yaml"))["groups"].clone();
    let rule = yaml(&monitoring().join("prometheus-rule.yaml"));
    assert_eq!(
        rule["spec"]["groups"], groups,
        "manifests/monitoring/prometheus-rule.yaml"
    );
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/hossted-operator");
    let out = output_ok(tool("helm").arg("template").arg("x").arg(&chart).args([
        "--set",
        "prometheusRule.enabled=true",
        "-s",
        "templates/prometheusrule.yaml",
    ]));
    let rendered: Value = serde_yaml_ng::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rendered["spec"]["groups"], groups,
        "the chart's PrometheusRule"
    );
}

/// The dashboard's panels, rows left out.
fn panels(dashboard: &Value) -> Vec<&Value> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .collect()
}

#[test]
fn every_dashboard_panel_has_the_datasource_variable_and_a_checked_query() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring().join("dashboard.json")).unwrap(),
    )
    .unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a Prometheus datasource variable"
    );
    let mut exprs = Vec::new();
    for p in panels(&dashboard) {
        let title = p["title"].as_str().unwrap();
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty());
        for t in targets.unwrap_or_else(|| panic!("{title}: no query")) {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!expr.is_empty(), "{title}: an empty query");
            exprs.push(expr.to_string());
        }
    }
    // promtool parses every one of them, as recording rules.
    let queries = yaml(&monitoring().join("dashboard-queries.yaml"));
    let recorded: Vec<String> = queries["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        recorded, exprs,
        "dashboard-queries.yaml holds the dashboard's queries, in order"
    );
    output_ok(tool("promtool").current_dir(monitoring()).args([
        "check",
        "rules",
        "dashboard-queries.yaml",
    ]));
    // The chart ships the same dashboard.
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/hossted-operator");
    let out = output_ok(tool("helm").arg("template").arg("x").arg(&chart).args([
        "--set",
        "dashboards.enabled=true",
        "-s",
        "templates/dashboard.yaml",
    ]));
    let cm: Value = serde_yaml_ng::from_slice(&out.stdout).unwrap();
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value =
        serde_json::from_str(cm["data"]["hossted-operator.json"].as_str().unwrap()).unwrap();
    assert_eq!(shipped, dashboard, "the chart's dashboard");
}
