#!/usr/bin/env bash
# The "beyond the peers" benchmark (issue 27): push to deploy (signed
# chart-pushed → helm started, p99 over 20 pushes) and approval (spec
# change → status.pendingChange). Writes the "beyond" section of
# bench/REPORT.md. Not part of hack/test.sh (~2 minutes).
#
#   hack/bench-beyond.sh              # 20 pushes, 20 changes
#   PUSHES=5 hack/bench-beyond.sh     # a quick look
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_beyond
export HOSSTED_OPERATOR_BIN=target/release/hossted-operator
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

target/release/examples/bench_beyond --pushes "${PUSHES:-20}" \
  --markdown "$OUT/beyond.md" | tee "$OUT/beyond.json"
replace_report_section beyond "$OUT/beyond.md"
echo "==> wrote the beyond section of bench/REPORT.md"
cat "$OUT/beyond.md"
