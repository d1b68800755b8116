#!/usr/bin/env bash
# The web view benchmark (issue 44): `kubectl hossted ui` at 1,000
# HelmApps — server memory, time to first byte, page weight, and update
# latency kubectl patch → DOM changed measured in a real headless Chromium.
# Writes the "ui" section of bench/REPORT.md. Not part of hack/test.sh
# (~3 minutes after the release build).
#
#   hack/bench-ui.sh                    # the figures
#   APPS=200 EDITS=5 hack/bench-ui.sh   # a quick look
#   USERS=50 QUIET=60 SERVED_EDITS=10     # the served view's part (issue 54)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_ui --example bench_ui_served
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

"$TARGET/release/examples/bench_ui" --apps "${APPS:-1000}" --edits "${EDITS:-20}" \
  --markdown "$OUT/ui.md" | tee "$OUT/ui.json"
{ echo "## Web view: \`kubectl hossted ui\` at ${APPS:-1000} HelmApps"; echo; cat "$OUT/ui.md"; } > "$OUT/section.md"
replace_report_section ui "$OUT/section.md"
echo "==> wrote the ui section of bench/REPORT.md"
cat "$OUT/section.md"

# The served view (issue 54): 1 and USERS signed-in sessions with streams.
"$TARGET/release/examples/bench_ui_served" --apps "${APPS:-1000}" --users "${USERS:-50}" \
  --quiet-seconds "${QUIET:-60}" --edits "${SERVED_EDITS:-10}" \
  --markdown "$OUT/served.md" | tee "$OUT/served.json"
{ echo "## Web view served: \`ui --serve\` with 1 and ${USERS:-50} signed-in users at ${APPS:-1000} HelmApps"; echo; cat "$OUT/served.md"; } > "$OUT/served-section.md"
replace_report_section ui-served "$OUT/served-section.md"
echo "==> wrote the ui-served section of bench/REPORT.md"
cat "$OUT/served-section.md"
