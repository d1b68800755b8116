#!/usr/bin/env bash
# The remote-clusters and shards benchmark (issue 53): the release operator
# binary on envtest control planes (no kube-controller-manager), podinfo
# HelmApps with wait: false, --max-concurrent-helm 4. Writes the "remote"
# section of bench/REPORT.md (examples/bench_remote.rs):
#
#   1. remote  APPS_REMOTE (200) HelmApps released into the operator's
#              cluster A, then as many into a remote cluster B through
#              spec.kubeConfig (fresh A and B each run): time to all Ready,
#              requests to A's and to B's apiserver (audit logs), requests
#              per release, operator peak RSS and CPU        (~4 minutes)
#   2. memory  operator RSS after 30 s idle with 0, 1, 3, 5 (REMOTES) remote
#              clusters, one HelmApp in each; delta per cluster; idle
#              requests a minute to each remote (IDLE_WINDOW_SECS, 60)
#                                                            (~9 minutes)
#   3. shards  APPS_SHARDS (1,000) HelmApps: one process against two
#              --shard processes (half labelled each): time to all Ready,
#              RSS per process, peak helm children, CPU; the idle RSS of a
#              shard owning no HelmApp                       (~11 minutes)
#   4. ten     only with TEN_K=1 (or ONLY=ten): APPS_TEN (10,000) HelmApps,
#              one process (and two shards with TEN_K_SHARDS=1): time to all
#              Ready, steady RSS, then a restart: time to every app
#              reconciled, requests by verb, writes, helm runs
#                                        (~1-2 hours, as long again for shards)
#
# Not part of hack/test.sh: ~25-30 minutes by default on 2 cores, plus the
# release build; TEN_K=1 adds 1-2 hours.
#
#   hack/bench-remote.sh                         # parts 1-3
#   TEN_K=1 hack/bench-remote.sh                 # parts 1-4
#   ONLY=shards APPS_SHARDS=200 hack/bench-remote.sh   # chosen parts (comma-separated)
#   ONLY=ten APPS_TEN=500 hack/bench-remote.sh   # part 4 at a size to try it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
TARGET="${CARGO_TARGET_DIR:-target}"
echo "==> building the operator and the remote benchmark (release)"
cargo build --release -q --bin hossted-operator --example bench_remote
export HOSSTED_OPERATOR_BIN="$TARGET/release/hossted-operator"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=lib/report-section.sh
source hack/lib/report-section.sh

args=(--apps-remote "${APPS_REMOTE:-200}" --apps-shards "${APPS_SHARDS:-1000}"
  --apps-ten "${APPS_TEN:-10000}" --remotes "${REMOTES:-5}"
  --idle-window-secs "${IDLE_WINDOW_SECS:-60}")
if [[ -n "${ONLY:-}" ]]; then args+=(--only "$ONLY"); fi
if [[ "${TEN_K:-}" == 1 ]]; then args+=(--ten-thousand); fi
# TEN_K_SHARDS=1 reaches the benchmark through the environment.
"$TARGET/release/examples/bench_remote" "${args[@]}" --markdown "$OUT/remote.md" | tee "$OUT/remote.json"
echo "Generated on $(date -u +%Y-%m-%dT%H:%MZ)." >> "$OUT/remote.md"
replace_report_section remote "$OUT/remote.md"
echo "==> wrote the remote section of bench/REPORT.md"
cat "$OUT/remote.md"
