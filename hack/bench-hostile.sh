#!/usr/bin/env bash
# The hostile-input benchmark (issue 22): the release operator binary on a
# real control plane under one attack at a time — alias bombs in a release
# and in values, an endless index, an endless chart layer, 200 idle probe
# connections, a dripping repository, hostile signatures, hostile Git
# servers (an endless pack, a link out, a tree 100,000 deep, a tree fanning
# out, entries climbing out, a blob one byte over the chart bound), a
# private repository's pinned commit asked for without credentials,
# chart.git verify on an unsigned commit, a schema $ref to a server, a SOPS
# file with mac_only_encrypted and a clear value added, other bytes served
# for a verified chart version (issue 56), a quadratic readyExpr,
# every-second change windows beside month-long denials — its peak RSS
# next to its idle RSS, CPU-s and seconds to each outcome, alive or not,
# /healthz latency, and a normal HelmApp of another namespace timed idle
# and during the attack. Writes the "hostile" section of bench/REPORT.md.
# Not part of hack/test.sh (~3 minutes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_hostile
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

"$TARGET/release/examples/bench_hostile" --markdown "$OUT/hostile.md" | tee "$OUT/hostile.json"
replace_report_section hostile "$OUT/hostile.md"
echo "==> wrote the hostile section of bench/REPORT.md"
cat "$OUT/hostile.md"
