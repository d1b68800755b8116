#!/usr/bin/env bash
# The dependency benchmark (issue 39): 100 HelmApps each depending on one
# of 100 custom objects — a dependency's status change → its dependent's
# helm start, against a values edit of the same apps (same run); the
# dependency informers started; the operator's requests while all wait.
# Writes the "dependencies" section of bench/REPORT.md. Not part of
# hack/test.sh (~5 minutes).
#
#   hack/bench-dependencies.sh             # 100 apps
#   APPS=20 hack/bench-dependencies.sh     # a quick look
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_dependencies
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

"$TARGET/release/examples/bench_dependencies" --apps "${APPS:-100}" --markdown "$OUT/dependencies.md" | tee "$OUT/dependencies.json"
{ echo "## Dependencies: \`dependsOn\` any object"; echo; cat "$OUT/dependencies.md"; } > "$OUT/section.md"
replace_report_section dependencies "$OUT/section.md"
echo "==> wrote the dependencies section of bench/REPORT.md"
cat "$OUT/section.md"
