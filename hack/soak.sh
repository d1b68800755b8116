#!/usr/bin/env bash
# The churn soak (issue 58; not part of hack/test.sh): the release operator
# binary on a real control plane, APPS HelmApps (default 100, drift
# `mode: enabled`) churned for SOAK_MINUTES (default 60) — a values change
# a second, an object deleted every 5 s, a HelmApp deleted and created
# again every 30 s — then QUIET_MINUTES (default 5) of quiet. Prints each
# incomplete release, helm upgrades per change, and RSS every minute with
# the slope of the churn's second half; one JSON line at the end.
#
#   hack/soak.sh                              # the hour
#   SOAK_MINUTES=10 APPS=30 hack/soak.sh      # shorter
#   SOAK_KEEP=/tmp/soak-logs hack/soak.sh     # keep the operator's log
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the soak (release)"
cargo build --release -q --bin hossted-operator --example soak
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
"$TARGET/release/examples/soak"
