#!/usr/bin/env bash
# The faults benchmark (issue 43): APPS (12) HelmApps moved value by value
# in waves on a real control plane, one fault a wave — kube-apiserver down
# OUTAGE_SECS (8), etcd frozen FREEZE_SECS (20), the operator SIGKILLed
# mid-upgrade — against a fault-free wave of the same run. Writes the
# "faults" section of bench/REPORT.md. Not part of hack/test.sh (~3 min).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_faults
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

"$TARGET/release/examples/bench_faults" --markdown "$OUT/faults.md" | tee "$OUT/faults.json"
replace_report_section faults "$OUT/faults.md"
echo "==> wrote the faults section of bench/REPORT.md"
cat "$OUT/faults.md"
