#!/usr/bin/env bash
# The README's first command: a real local control plane (etcd +
# kube-apiserver from pkg/envtest) with sample Helm releases, in the
# foreground until Ctrl-C, which tears everything down.
#
# Today it brings up the control plane and the sample releases; the local API
# receiver and the operator itself join it as they are built (issues 4 and 5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
export PATH="$KUBEBUILDER_ASSETS:$PATH"

echo "==> building the envtest launcher"
cargo build --quiet -p envtest --bin envtest

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hossted-local.XXXXXX")"
KUBECONFIG="$WORK/kubeconfig"
export KUBECONFIG
export HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"

PIDS=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "==> tearing down"
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

echo "==> starting etcd + kube-apiserver"
target/debug/envtest up --kubeconfig-out "$KUBECONFIG" &
PIDS+=($!)
for _ in $(seq 1 600); do
  [[ -f "$KUBECONFIG" ]] && break
  kill -0 "${PIDS[0]}" 2>/dev/null || { echo "the control plane failed to start (see above)" >&2; exit 1; }
  sleep 0.2
done

echo "==> installing the sample release 'tiny' into namespace demo"
helm install tiny examples/charts/tiny -n demo --create-namespace >/dev/null
kubectl get secrets -n demo -l owner=helm

cat <<MSG

Control plane is up. In another terminal:
  export KUBECONFIG=$KUBECONFIG PATH=$KUBEBUILDER_ASSETS:\$PATH
  kubectl get ns
  helm list -A
  helm upgrade tiny examples/charts/tiny -n demo --set greeting=hi

Ctrl-C here stops everything.
MSG
wait "${PIDS[0]}"
