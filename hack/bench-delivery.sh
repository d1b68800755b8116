#!/usr/bin/env bash
# The delivery benchmark (issue 15): the release operator binary on a real
# control plane with a chart repository on loopback, against bare helm in
# the same run. Writes the "delivery" section of bench/REPORT.md.
# Not part of hack/test.sh (~13 minutes, 5 of them idle).
#
#   hack/bench-delivery.sh                      # the full run
#   IDLE_SECS=30 SINGLES=5 hack/bench-delivery.sh   # a quick look
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_delivery
export HOSSTED_OPERATOR_BIN=target/release/hossted-operator
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

target/release/examples/bench_delivery \
  --singles "${SINGLES:-15}" --batch "${BATCH:-100}" --rounds "${ROUNDS:-6}" \
  --idle-secs "${IDLE_SECS:-300}" --changes "${CHANGES:-20}" --drifts "${DRIFTS:-10}" \
  --markdown "$OUT/delivery.md" | tee "$OUT/delivery.json"
replace_report_section delivery "$OUT/delivery.md"
echo "==> wrote the delivery section of bench/REPORT.md"
cat "$OUT/delivery.md"
