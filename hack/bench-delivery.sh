#!/usr/bin/env bash
# The delivery benchmark (issue 15): the release operator binary on a real
# control plane with a chart repository on loopback, against bare helm in
# the same run. Writes the "delivery" section of bench/REPORT.md.
# Not part of hack/test.sh (~13 minutes, 5 of them idle).
#
#   hack/bench-delivery.sh                      # the full run
#   IDLE_SECS=30 SINGLES=5 hack/bench-delivery.sh   # a quick look
#   SCALE=1000 hack/bench-delivery.sh           # delivery at scale (issue 25):
#       100, 500 and 1,000 HelmApps against bare helm with kube-controller-manager,
#       the index parsing row; section "delivery-scale" (~40 minutes)
#   ONLY="300:10:GOMAXPROCS=2 300:10" hack/bench-delivery.sh  # chosen runs
#       (apps:concurrency[:NAME=VALUE,...] each; ONLY_EDITS=N also restarts and
#       edits; ONLY_INDEX=1 adds the index row, ONLY="" ONLY_INDEX=1 is that
#       alone); section "delivery-only"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -n "${SCALE:-}" || -n "${ONLY:-}" || -n "${ONLY_INDEX:-}" ]]; then
  # The benchmark's control plane runs kube-controller-manager (the tests never do).
  KUBEBUILDER_ASSETS="$(WITH_CONTROLLER_MANAGER=1 hack/setup-envtest.sh)"
  export KUBEBUILDER_ASSETS
  echo "==> building the operator and the scale benchmark (release)"
  cargo build --release -q --bin hossted-operator --example bench_delivery_scale
  export HOSSTED_OPERATOR_BIN=target/release/hossted-operator
  OUT="$(mktemp -d)"
  trap 'rm -rf "$OUT"' EXIT
  # shellcheck source=lib/report-section.sh
  source hack/lib/report-section.sh
  # The previous run's table (its first: not the run before it), kept beside this one's.
  sed -n '/<!-- BEGIN delivery-scale -->/,/<!-- END delivery-scale -->/p' bench/REPORT.md 2>/dev/null \
    | awk '/^\| apps /{t=1} t&&/^$/{exit} t' > "$OUT/previous.md" || true
  if [[ -n "${ONLY:-}" || -n "${ONLY_INDEX:-}" ]]; then
    args=()
    for row in ${ONLY:-}; do args+=(--only "$row"); done
    if [[ -n "${ONLY_EDITS:-}" ]]; then args+=(--only-edits "$ONLY_EDITS"); fi
    if [[ -n "${ONLY_INDEX:-}" ]]; then args+=(--only-index yes); fi
    export ONLY
    target/release/examples/bench_delivery_scale "${args[@]}" --markdown "$OUT/only.md" | tee "$OUT/only.json"
    echo "Generated on $(date -u +%Y-%m-%dT%H:%MZ)." >> "$OUT/only.md"
    replace_report_section delivery-only "$OUT/only.md"
    echo "==> wrote the delivery-only section of bench/REPORT.md"
    cat "$OUT/only.md"
    exit 0
  fi
  SIZES="$(( SCALE / 10 )),$(( SCALE / 2 )),${SCALE}"
  target/release/examples/bench_delivery_scale --sizes "$SIZES" --edits "${EDITS:-100}" \
    --idle-secs "${IDLE_SECS:-60}" --high-concurrency "${HIGH_CONCURRENCY:-10}" \
    --markdown "$OUT/scale.md" | tee "$OUT/scale.json"
  if [[ -s "$OUT/previous.md" ]]; then
    { echo; echo "The previous run:"; echo; cat "$OUT/previous.md"; } >> "$OUT/scale.md"
  fi
  echo "Generated on $(date -u +%Y-%m-%dT%H:%MZ)." >> "$OUT/scale.md"
  replace_report_section delivery-scale "$OUT/scale.md"
  echo "==> wrote the delivery-scale section of bench/REPORT.md"
  cat "$OUT/scale.md"
  exit 0
fi

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
