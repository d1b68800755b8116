#!/usr/bin/env bash
# The README's first command: the operator, running locally against
#   - a real control plane (etcd + kube-apiserver from pkg/envtest),
#   - sample Helm releases installed with the real helm,
#   - a local stand-in for the Hossted API that prints every request,
#   - delivery: a chart repository on loopback, a HelmApp and a sequenced
#     HelmAppSet installed from it by the operator,
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
target/debug/envtest up --kubeconfig-out "$KUBECONFIG" \
  --chart examples/charts/web --chart examples/charts/tiny --chart examples/charts/reach --chart-repo-out "$WORK/repo-url" &
PIDS+=($!)
wait_for_file "$KUBECONFIG" "${PIDS[-1]}" "the control plane"
wait_for_file "$WORK/repo-url" "${PIDS[-1]}" "the chart repository"
REPO_URL="$(cat "$WORK/repo-url")"

echo "==> installing the CRDs (Hosstedproject, HelmApp, HelmAppSet)"
for crd in manifests/base/crd/hosstedprojects.hossted.com.yaml manifests/delivery/crd/helmapps.hossted.com.yaml manifests/delivery/crd/helmappsets.hossted.com.yaml; do
  kubectl apply -f "$crd" >/dev/null
done
kubectl wait --for condition=established crd/hosstedprojects.hossted.com crd/helmapps.hossted.com crd/helmappsets.hossted.com --timeout=60s >/dev/null

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

echo "==> delivery: HelmApp demo/shop and the sequenced HelmAppSet demo/stack (charts from $REPO_URL)"
kubectl create namespace demo >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: hossted.com/v1alpha1
kind: HelmApp
metadata: {name: shop, namespace: demo}
spec:
  chart: {repo: "$REPO_URL", name: web, version: "~1.2"}
  values: {image: "nginx:1.27.3"}
---
apiVersion: hossted.com/v1alpha1
kind: HelmAppSet
metadata: {name: stack, namespace: demo}
spec:
  sequenced: true
  apps:
    - {name: db, spec: {chart: {repo: "$REPO_URL", name: tiny}, values: {greeting: db}}}
    - {name: cache, spec: {chart: {repo: "$REPO_URL", name: tiny}, values: {greeting: cache}}}
    - {name: api, spec: {chart: {repo: "$REPO_URL", name: tiny}, values: {greeting: api}}}
YAML

echo "==> tenancy: in tenant-a helm runs as its hossted-deployer (examples/helmapp-tenant.yaml's Role)"
kubectl create namespace tenant-a >/dev/null
kubectl apply -f - >/dev/null <<YAML
$(awk '/^# Installs:/{exit} {print}' examples/helmapp-tenant.yaml)
apiVersion: hossted.com/v1alpha1
kind: HelmApp
metadata: {name: notes, namespace: tenant-a}
spec:
  chart: {repo: "$REPO_URL", name: tiny}
---
apiVersion: hossted.com/v1alpha1
kind: HelmApp
metadata: {name: admin, namespace: tenant-a}
spec:
  chart: {repo: "$REPO_URL", name: reach}
  values: {clusterAdmin: true}   # a ClusterRoleBinding to cluster-admin: refused (Forbidden)
YAML

# kubectl hossted: the binary is the plugin when named kubectl-hossted.
mkdir -p "$WORK/plugins"
ln -sf "$PWD/target/debug/hossted-operator" "$WORK/plugins/kubectl-hossted"

cat <<MSG

==> ready. The operator runs below; the receiver prints what it is sent.
In another terminal:
  export KUBECONFIG=$KUBECONFIG PATH=$KUBEBUILDER_ASSETS:$WORK/plugins:\$PATH
  kubectl get hp
  kubectl describe hp hossted-operator-cr
  helm upgrade web examples/charts/web -n team-a --set image=nginx:1.27.4   # one POST for web
  kubectl patch hp hossted-operator-cr --type=merge -p '{"spec":{"stop":true}}'
Delivery:
  kubectl get happ,happset -A                 # shop, stack-db → stack-cache → stack-api (1/3, 2/3, 3/3)
  kubectl describe happ -n demo shop          # conditions, history, Events
  kubectl patch happ -n demo shop --type=merge -p '{"spec":{"values":{"image":"nginx:1.27.4"}}}'   # one new revision
  kubectl delete service -n demo shop-web     # drift: it comes back (DriftRepaired)
  kubectl delete happset -n demo stack        # uninstalls api, cache, db — in that order
  kubectl hossted get -A                      # sets as trees: READY, STATUS, REVISION, CHART@VERSION, DRIFT
  kubectl hossted force -n demo shop --wait   # one upgrade with --force now, followed until done
Tenancy (helm runs as the operator only in hossted-operator and demo):
  kubectl get happ -n tenant-a                # notes: Ready; admin: Forbidden (no ClusterRoleBinding made)
  kubectl describe happ -n tenant-a admin     # what was refused, and what to do
Ctrl-C here stops everything.

MSG
HOSSTED_API_URL="$API_URL/v1" HOSSTED_AUTH_TOKEN="local-dev-token" EMAIL_ID="dev@example.com" \
  CONTEXT_NAME="local-envtest" RUST_LOG="${RUST_LOG:-info}" \
  target/debug/hossted-operator run --controllers inventory,delivery \
    --privileged-namespaces=hossted-operator,demo \
    --helm-binary "$KUBEBUILDER_ASSETS/helm" --work-dir "$WORK/delivery" &
PIDS+=($!)
wait "${PIDS[-1]}"
