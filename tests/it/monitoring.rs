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
    assert!(said.contains("SUCCESS: 7 rules found"), "{said}");
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
