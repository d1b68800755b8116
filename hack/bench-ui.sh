#!/usr/bin/env bash
# The web view benchmark (issue 44): `kubectl hossted ui` at 1,000
# HelmApps — server memory, time to first byte, page weight, and update
# latency kubectl patch → DOM changed measured in a real headless Chromium.
# Writes the "ui" section of bench/REPORT.md. Not part of hack/test.sh
# (~3 minutes after the release build).
#
#   hack/bench-ui.sh                    # the figures
#   APPS=200 EDITS=5 hack/bench-ui.sh   # a quick look
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_ui
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
