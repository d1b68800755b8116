#!/usr/bin/env bash
# The randomized, model-based hunt of delivery (tests/it/delivery/model.rs)
# over many seeds: HUNT_SEEDS sequences (default 200, about an hour),
# seeds 1000…; prints the failing seeds (replay one with HUNT_SEED=<n>).
# Not part of hack/test.sh, which runs the test's fixed seeds.
#
#   hack/hunt.sh                 # 200 seeds
#   HUNT_SEEDS=20 hack/hunt.sh   # fewer
#   HUNT_FIRST_SEED=1060 HUNT_SEEDS=20 hack/hunt.sh
#                                # seeds 1060…1079 (not yet run)
#   HUNT_RUST_LOG=info,cache=trace HUNT_SEED=1006 cargo test --test it -- delivery::model::random --nocapture
#                                # one seed, the operator logging each watch event
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
export HUNT_SEEDS="${HUNT_SEEDS:-200}"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
status=0
cargo test --test it -- delivery::model:: --nocapture 2>&1 | tee "$LOG" | grep -E '^(hunt:|HUNT FAILED)' || status=$?
echo
echo "failing seeds:"
grep -o '^HUNT FAILED seed [0-9]*' "$LOG" | awk '{print $4}' || echo "  none"
exit "$status"
