#!/usr/bin/env bash
# The README's first command: the operator, running locally against
#   - a real control plane (etcd + kube-apiserver from pkg/envtest),
#   - sample Helm releases installed with the real helm,
#   - a local stand-in for the Hossted API that prints every request,
# with the operator's logs in the foreground. Ctrl-C tears everything down.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
export PATH="$KUBEBUILDER_ASSETS:$PATH"

echo "==> building the operator and the envtest launcher"
cargo build --quiet --bin hossted-operator -p hossted-operator
cargo build --quiet -p envtest --bin envtest

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hossted-local.XXXXXX")"
export KUBECONFIG="$WORK/kubeconfig"
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

wait_for_file() { # FILE PID WHAT
  for _ in $(seq 1 600); do
    [[ -s "$1" ]] && return 0
    kill -0 "$2" 2>/dev/null || { echo "$3 failed to start (see above)" >&2; exit 1; }
    sleep 0.2
  done
  echo "$3 did not start within 2 minutes" >&2; exit 1
}

echo "==> starting etcd + kube-apiserver"
target/debug/envtest up --kubeconfig-out "$KUBECONFIG" &
PIDS+=($!)
wait_for_file "$KUBECONFIG" "${PIDS[-1]}" "the control plane"

echo "==> installing the Hosstedproject CRD"
kubectl apply -f manifests/base/crd/hosstedprojects.hossted.com.yaml >/dev/null
kubectl wait --for condition=established crd/hosstedprojects.hossted.com --timeout=60s >/dev/null

echo "==> installing sample releases: team-a/web, team-a/api, team-b/portal"
helm install web examples/charts/web -n team-a --create-namespace >/dev/null
helm install api examples/charts/web -n team-a --set headless=true,defaultBackendOnly=true,port=8080 >/dev/null
kubectl create namespace team-b >/dev/null
kubectl -n team-b create secret generic uuid --from-literal=uuid="$(cat /proc/sys/kernel/random/uuid)" >/dev/null
helm install portal examples/charts/hossted-app -n team-b >/dev/null
# No kubelet runs here: mark the sample pods Running ourselves.
for pod in web-web-0 api-web-0; do
  kubectl -n team-a patch pod "$pod" --subresource=status --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null
done

echo "==> starting the local Hossted API receiver"
target/debug/envtest receive --port 0 > >(tee "$WORK/receiver.log") &
PIDS+=($!)
wait_for_file "$WORK/receiver.log" "${PIDS[-1]}" "the receiver"
API_URL="$(sed -n 's/^receiver: listening on //p' "$WORK/receiver.log" | head -1)"

kubectl apply -f examples/hosstedproject.yaml >/dev/null

cat <<MSG

==> ready. The operator runs below; the receiver prints what it is sent.
In another terminal:
  export KUBECONFIG=$KUBECONFIG PATH=$KUBEBUILDER_ASSETS:\$PATH
  kubectl get hp
  kubectl describe hp hossted-operator-cr
  helm upgrade web examples/charts/web -n team-a --set image=nginx:1.27.4   # one POST for web
  kubectl patch hp hossted-operator-cr --type=merge -p '{"spec":{"stop":true}}'
Ctrl-C here stops everything.

MSG
HOSSTED_API_URL="$API_URL/v1" HOSSTED_AUTH_TOKEN="local-dev-token" EMAIL_ID="dev@example.com" \
  CONTEXT_NAME="local-envtest" RUST_LOG="${RUST_LOG:-info}" \
  target/debug/hossted-operator run &
PIDS+=($!)
wait "${PIDS[-1]}"
