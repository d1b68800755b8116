#!/usr/bin/env bash
# The verification benchmark (issue 37): apply → Released of an OCI chart
# unsigned, cosign key-signed, keyless-signed against a private trust root,
# and a second app of a verified digest — interleaved rounds, same run — and
# the operator's own time per signature check. Writes the "verification"
# section of bench/REPORT.md. Not part of hack/test.sh (~3 minutes).
#
#   hack/bench-verify.sh            # 10 rounds
#   ROUNDS=3 hack/bench-verify.sh   # a quick look
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_verify
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

"$TARGET/release/examples/bench_verify" --rounds "${ROUNDS:-10}" --markdown "$OUT/verification.md" | tee "$OUT/verification.json"
replace_report_section verification "$OUT/verification.md"
echo "==> wrote the verification section of bench/REPORT.md"
cat "$OUT/verification.md"
