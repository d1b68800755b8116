//! Marker detection (`hossted_helm: true`) per MB of rendered manifest:
//! the YAML-parser detector against the line scanner it replaced (kept here
//! as the baseline, measured in the same run). One JSON line per case.
//!
//! `cargo bench --bench marker` (hack/bench-marker.sh writes the report).

use std::hint::black_box;
use std::time::Instant;

use hossted_operator::lean::marker::has_hossted_marker;

/// The detector before the YAML parser: one key per line, block style only.
fn line_scanner(manifest: &str) -> bool {
    manifest.lines().any(|line| {
        let line = line.trim_start();
        let line = line.strip_prefix("- ").map(str::trim_start).unwrap_or(line);
        let Some(rest) = ["hossted_helm", "\"hossted_helm\"", "'hossted_helm'"]
            .iter()
            .find_map(|key| line.strip_prefix(key))
        else {
            return false;
        };
        let Some(value) = rest.trim_start().strip_prefix(':') else {
            return false;
        };
        let value = value.split(" #").next().unwrap_or_default().trim();
        matches!(value, "true" | "\"true\"" | "'true'")
    })
}

/// A chart-like document of about 2 KB; `label` is put in its labels.
fn document(i: usize, label: &str) -> String {
    let mut d = format!(
        "---\n# Source: app/templates/deploy-{i}.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  labels:\n    app.kubernetes.io/name: app\n    app.kubernetes.io/instance: rel\n{label}spec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n"
    );
    let mut c = 0;
    while d.len() < 2000 {
        d.push_str(&format!(
            "        - name: c{c}\n          image: \"docker.io/bitnami/app:1.2.{c}\"\n          env:\n            - {{name: A{c}, value: \"some value {c}\"}}\n          args: [\"--flag-{c}\", \"--other={c}\"]\n"
        ));
        c += 1;
    }
    d
}

/// A ~60 KB manifest of 30 documents, `marked` of them carrying `label`.
fn manifest(marked: usize, label: &str) -> String {
    (0..30)
        .map(|i| document(i, if i < marked { label } else { "" }))
        .collect()
}

fn measure(case: &str, m: &str, detector: &str, f: fn(&str) -> bool) {
    let mb = m.len() as f64 / (1024.0 * 1024.0);
    // Enough rounds for ~0.3 s at the slower detector's speed.
    let probe = Instant::now();
    black_box(f(black_box(m)));
    let rounds = ((0.3 / probe.elapsed().as_secs_f64().max(1e-7)) as usize).clamp(5, 200_000);
    let start = Instant::now();
    let mut found = false;
    for _ in 0..rounds {
        found = black_box(f(black_box(m)));
    }
    let per_mb_us = start.elapsed().as_secs_f64() * 1e6 / rounds as f64 / mb;
    println!(
        "{{\"bench\":\"marker\",\"case\":\"{case}\",\"detector\":\"{detector}\",\"kb\":{},\"found\":{found},\"us_per_mb\":{per_mb_us:.1}}}",
        m.len() / 1024
    );
}

fn main() {
    let cases = [
        ("no marker (most releases)", manifest(0, "")),
        (
            "marker in one document",
            manifest(1, "    hossted_helm: \"true\"\n"),
        ),
        (
            "marker-like text in every document",
            manifest(
                30,
                "    description: \"set hossted_helm: true to enable\"\n",
            ),
        ),
        (
            "flow-style marker (missed before)",
            manifest(1, "  annotations: {a: b, hossted_helm: \"true\"}\n"),
        ),
    ];
    for (case, m) in &cases {
        measure(case, m, "line scanner (before)", line_scanner);
        measure(case, m, "YAML parser (now)", has_hossted_marker);
    }
}
