#!/usr/bin/env bash
# The drift benchmark (issue 23): APPS (100) settled HelmApps with drift
# enabled, EDITS (1000) kubectl-edit-style changes over MINUTES (10) —
# edit → put back p50/p99, the operator's requests per edit (audit log),
# dry runs against Flux's cost model, idle requests, memory per app.
# Writes the "drift" section of bench/REPORT.md. Not part of hack/test.sh
# (~14 minutes at the defaults; APPS=20 EDITS=100 MINUTES=1 for a look).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_drift
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

"$TARGET/release/examples/bench_drift" --markdown "$OUT/drift.md" | tee "$OUT/drift.json"
replace_report_section drift "$OUT/drift.md"
echo "==> wrote the drift section of bench/REPORT.md"
cat "$OUT/drift.md"
