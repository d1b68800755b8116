#!/usr/bin/env bash
# The Git source benchmark (issue 38): create → helm start for a chart from
# Git against one from an HTTP repository (same run); the packs 100
# HelmApps of one repository fetch; the operator's peak RSS above idle for
# a 200 MB repository with a 50 KB chart directory. Writes the "git"
# section of bench/REPORT.md. Not part of hack/test.sh (~6 minutes).
#
#   hack/bench-git.sh                                  # the figures
#   COLD=5 APPS=20 BIG_MB=40 hack/bench-git.sh         # a quick look
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_git
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

"$TARGET/release/examples/bench_git" --cold "${COLD:-20}" --apps "${APPS:-100}" --big-mb "${BIG_MB:-200}" \
  --markdown "$OUT/git.md" | tee "$OUT/git.json"
{ echo "## Git sources: \`chart.git\`"; echo; cat "$OUT/git.md"; } > "$OUT/section.md"
replace_report_section git "$OUT/section.md"
echo "==> wrote the git section of bench/REPORT.md"
cat "$OUT/section.md"
