#!/usr/bin/env bash
# Installs the test assets (kube-apiserver, etcd, kubectl, helm, an OCI registry,
# cosign, sops, age,
# promtool) into a
# versioned cache outside the repository, building them from the Go module
# proxy. Nothing but Go modules is downloaded; no binary is committed.
#
#   hack/setup-envtest.sh            # build what is missing, print the bin dir
#   KUBEBUILDER_ASSETS=/some/dir hack/setup-envtest.sh
#   WITH_CONTROLLER_MANAGER=1 hack/setup-envtest.sh   # also kube-controller-manager
#
# kube-controller-manager is built only when asked for: the scale benchmark
# of delivery runs it (Deployments become Available the real way, garbage
# collection runs); the tests never do (DESIGN.md), so hack/test.sh on a
# fresh clone does not pay for it.
#
# Idempotent: when the cache is complete it returns at once.
#
# The versions are pinned in hack/envtest.env (also read by pkg/envtest);
# environment variables of the same names override them.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=envtest.env
PINNED_K8S="$(sed -n 's/^K8S_VERSION=//p' "$HERE/envtest.env")"
PINNED_ETCD="$(sed -n 's/^ETCD_VERSION=//p' "$HERE/envtest.env")"
PINNED_HELM="$(sed -n 's/^HELM_VERSION=//p' "$HERE/envtest.env")"
PINNED_HELM3="$(sed -n 's/^HELM3_VERSION=//p' "$HERE/envtest.env")"
PINNED_REGISTRY="$(sed -n 's/^REGISTRY_VERSION=//p' "$HERE/envtest.env")"
PINNED_PROMETHEUS="$(sed -n 's/^PROMETHEUS_VERSION=//p' "$HERE/envtest.env")"
PINNED_COSIGN="$(sed -n 's/^COSIGN_VERSION=//p' "$HERE/envtest.env")"
PINNED_SOPS="$(sed -n 's/^SOPS_VERSION=//p' "$HERE/envtest.env")"
PINNED_AGE="$(sed -n 's/^AGE_VERSION=//p' "$HERE/envtest.env")"
PINNED_HYDRA="$(sed -n 's/^HYDRA_VERSION=//p' "$HERE/envtest.env")"
K8S_VERSION="${K8S_VERSION:-$PINNED_K8S}"
ETCD_VERSION="${ETCD_VERSION:-$PINNED_ETCD}"
HELM_VERSION="${HELM_VERSION:-$PINNED_HELM}"
HELM3_VERSION="${HELM3_VERSION:-$PINNED_HELM3}"
REGISTRY_VERSION="${REGISTRY_VERSION:-$PINNED_REGISTRY}"
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-$PINNED_PROMETHEUS}"
COSIGN_VERSION="${COSIGN_VERSION:-$PINNED_COSIGN}"
SOPS_VERSION="${SOPS_VERSION:-$PINNED_SOPS}"
AGE_VERSION="${AGE_VERSION:-$PINNED_AGE}"
HYDRA_VERSION="${HYDRA_VERSION:-$PINNED_HYDRA}"

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/hossted-operator/envtest/${K8S_VERSION}"
BIN_DIR="${KUBEBUILDER_ASSETS:-$CACHE_ROOT/bin}"
STAMP="$BIN_DIR/.complete"
WANT_STAMP="kubernetes=v${K8S_VERSION} etcd=v${ETCD_VERSION} helm=v${HELM_VERSION} helm3=v${HELM3_VERSION} registry=v${REGISTRY_VERSION} promtool=v${PROMETHEUS_VERSION} cosign=v${COSIGN_VERSION} sops=v${SOPS_VERSION} age=v${AGE_VERSION} hydra=v${HYDRA_VERSION}"
ASSETS=(kube-apiserver kubectl etcd helm helm3 registry promtool cosign sops age age-keygen hydra)

complete() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_STAMP" ]] || return 1
  local a
  for a in "${ASSETS[@]}"; do [[ -x "$BIN_DIR/$a" ]] || return 1; done
}

controller_manager_wanted() {
  [[ -n "${WITH_CONTROLLER_MANAGER:-}" ]] || return 1
  [[ -x "$BIN_DIR/kube-controller-manager" && "$("$BIN_DIR/kube-controller-manager" --version 2>/dev/null)" == *"v${K8S_VERSION}" ]] && return 1
  return 0
}

if complete && ! controller_manager_wanted; then
  echo "$BIN_DIR"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "setup-envtest: Go is not installed (needed to build kube-apiserver, etcd, kubectl and helm from the Go module proxy); install Go >= 1.24 and re-run" >&2
  exit 1
fi

mkdir -p "$BIN_DIR" "$CACHE_ROOT/src"
export GOWORK=off CGO_ENABLED=0 GOFLAGS="-buildvcs=false -trimpath"
START=$(date +%s)

log() { printf '[setup-envtest +%3ss] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
# Never fail silently: name the command and line that failed.
trap 'log "FAILED (line $LINENO): $BASH_COMMAND"' ERR

# Runs a long command while printing a heartbeat, so the first build
# (10-20 minutes on 2 cores) visibly makes progress.
with_heartbeat() {
  local what="$1"; shift
  local logf="$CACHE_ROOT/src/${what// /_}.log"
  "$@" >"$logf" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 20
    kill -0 "$pid" 2>/dev/null && log "  ... still ${what}"
  done
  if ! wait "$pid"; then
    log "FAILED: ${what}; last lines of $logf:"
    tail -n 30 "$logf" >&2
    exit 1
  fi
}

# --- kube-apiserver and kubectl -------------------------------------------
# `go install k8s.io/kubernetes/...@v` is refused because kubernetes' go.mod
# replaces every k8s.io/* staging module with a local path. A throwaway
# wrapper module requires k8s.io/kubernetes and replaces each of those staging
# modules with its published v0.<minor>.<patch> release instead; the list is
# read from the upstream go.mod so it never needs hand maintenance.
kubernetes_wrapper() {
  local dir="$CACHE_ROOT/src/kubernetes-wrapper"
  local staging_ver="v0.${K8S_VERSION#1.}"
  rm -rf "$dir" && mkdir -p "$dir"
  cd "$dir"
  log "fetching k8s.io/kubernetes@v${K8S_VERSION} go.mod"
  local info upstream_mod
  if ! info=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" 2>&1); then
    log "could not download k8s.io/kubernetes@v${K8S_VERSION} from the Go module proxy:"
    echo "$info" >&2
    exit 1
  fi
  upstream_mod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' <<<"$info")
  {
    echo "module hossted.local/envtest-kubernetes"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$upstream_mod")"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "replace ("
    grep -E '^[[:space:]]*k8s\.io/[^ ]+ => \./staging/' "$upstream_mod" \
      | awk -v v="$staging_ver" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > go.mod
  log "wrapper module replaces $(grep -c '=> k8s.io' go.mod) staging modules with ${staging_ver}"
}

build_kubernetes() {
  kubernetes_wrapper
  with_heartbeat "resolving kubernetes modules" go get "k8s.io/kubernetes/cmd/kube-apiserver@v${K8S_VERSION}" "k8s.io/kubernetes/cmd/kubectl@v${K8S_VERSION}"
  log "building kube-apiserver v${K8S_VERSION} (first build takes several minutes)"
  with_heartbeat "building kube-apiserver" go build -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}" -o "$BIN_DIR/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  log "building kubectl v${K8S_VERSION}"
  with_heartbeat "building kubectl" go build -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=v${K8S_VERSION} -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION}" -o "$BIN_DIR/kubectl" k8s.io/kubernetes/cmd/kubectl
}

build_controller_manager() {
  kubernetes_wrapper
  with_heartbeat "resolving kube-controller-manager modules" go get "k8s.io/kubernetes/cmd/kube-controller-manager@v${K8S_VERSION}"
  log "building kube-controller-manager v${K8S_VERSION} (asked for by WITH_CONTROLLER_MANAGER; several minutes the first time)"
  with_heartbeat "building kube-controller-manager" go build -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}" -o "$BIN_DIR/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
}

# --- etcd -------------------------------------------------------------------
# etcd's server module also replaces its siblings with local paths, so the
# same wrapper trick applies (the siblings share the server's version).
build_etcd() {
  local dir="$CACHE_ROOT/src/etcd-wrapper"
  rm -rf "$dir" && mkdir -p "$dir"
  cd "$dir"
  printf 'module hossted.local/envtest-etcd\n\ngo 1.24\n' > go.mod
  with_heartbeat "resolving etcd modules" go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
  log "building etcd v${ETCD_VERSION}"
  with_heartbeat "building etcd" go build -ldflags "-s -w" -o "$BIN_DIR/etcd" go.etcd.io/etcd/server/v3
}

# --- helm -------------------------------------------------------------------
build_helm() {
  log "building helm v${HELM_VERSION}"
  local gobin="$CACHE_ROOT/src/helm-gobin"
  mkdir -p "$gobin"
  with_heartbeat "building helm" env GOBIN="$gobin" go install -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v${HELM_VERSION}" "helm.sh/helm/v4/cmd/helm@v${HELM_VERSION}"
  mv "$gobin/helm" "$BIN_DIR/helm"
}

# helm 3, for the tests of releases made by it and of the command lines the
# operator builds for it.
build_helm3() {
  log "building helm v${HELM3_VERSION} (as helm3)"
  local gobin="$CACHE_ROOT/src/helm3-gobin"
  mkdir -p "$gobin"
  with_heartbeat "building helm 3" env GOBIN="$gobin" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v${HELM3_VERSION}" "helm.sh/helm/v3/cmd/helm@v${HELM3_VERSION}"
  mv "$gobin/helm" "$BIN_DIR/helm3"
}

# --- OCI registry (CNCF distribution) ----------------------------------------
# The tests push charts with `helm push` and the operator pulls them: a real
# registry, served on loopback over plain HTTP or TLS with the test CA.
build_registry() {
  log "building registry (distribution) v${REGISTRY_VERSION}"
  local gobin="$CACHE_ROOT/src/registry-gobin"
  mkdir -p "$gobin"
  with_heartbeat "building registry" env GOBIN="$gobin" go install -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=v${REGISTRY_VERSION}" "github.com/distribution/distribution/v3/cmd/registry@v${REGISTRY_VERSION}"
  mv "$gobin/registry" "$BIN_DIR/registry"
}

# --- promtool -------------------------------------------------------------------
# Checks the alert and recording rules and runs their unit tests
# (manifests/monitoring/). The largest module of the set: ~10 minutes on 2
# cores the first time.
build_promtool() {
  log "building promtool (prometheus v${PROMETHEUS_VERSION}; takes ~10 minutes the first time)"
  local gobin="$CACHE_ROOT/src/promtool-gobin"
  mkdir -p "$gobin"
  with_heartbeat "building promtool" env GOBIN="$gobin" go install -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION}" "github.com/prometheus/prometheus/cmd/promtool@v${PROMETHEUS_VERSION}"
  mv "$gobin/promtool" "$BIN_DIR/promtool"
}

# --- cosign -------------------------------------------------------------------
# Signs charts for the verification tests (the operator verifies in Rust;
# cosign is never run by it). ~3 minutes on 2 cores the first time.
build_cosign() {
  log "building cosign v${COSIGN_VERSION}"
  local gobin="$CACHE_ROOT/src/cosign-gobin"
  mkdir -p "$gobin"
  with_heartbeat "building cosign" env GOBIN="$gobin" go install -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=v${COSIGN_VERSION}" "github.com/sigstore/cosign/v3/cmd/cosign@v${COSIGN_VERSION}"
  mv "$gobin/cosign" "$BIN_DIR/cosign"
}

# --- sops and age ------------------------------------------------------------
# Encrypt the values files of the SOPS tests the way users do (the operator
# decrypts in Rust; neither is ever run by it). ~2 minutes the first time.
build_sops_age() {
  log "building sops v${SOPS_VERSION} and age v${AGE_VERSION}"
  local gobin="$CACHE_ROOT/src/sops-gobin"
  mkdir -p "$gobin"
  with_heartbeat "building sops" env GOBIN="$gobin" go install -ldflags "-s -w" "github.com/getsops/sops/v3/cmd/sops@v${SOPS_VERSION}"
  with_heartbeat "building age" env GOBIN="$gobin" go install -ldflags "-s -w" "filippo.io/age/cmd/age@v${AGE_VERSION}" "filippo.io/age/cmd/age-keygen@v${AGE_VERSION}"
  mv "$gobin/sops" "$gobin/age" "$gobin/age-keygen" "$BIN_DIR/"
}

# --- hydra --------------------------------------------------------------------
# Ory Hydra: the OIDC provider the served UI signs in with in the tests (the
# operator verifies its tokens in Rust; hydra is never run by it). Its go.mod
# replaces its own client with a directory the module zip leaves out, so it is
# built as the main module of a copy with that one replace dropped (the client
# it names is published). cgo for the in-memory SQLite store. ~6 minutes the
# first time.
build_hydra() {
  log "building hydra v${HYDRA_VERSION}"
  local dir src="$CACHE_ROOT/src/hydra-src"
  dir=$(go mod download -json "github.com/ory/hydra/v2@v${HYDRA_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n "$dir" && -d "$dir" ]] || { log "FAILED: go mod download github.com/ory/hydra/v2@v${HYDRA_VERSION}"; exit 1; }
  rm -rf "$src"
  cp -r "$dir" "$src"
  chmod -R u+w "$src"
  (cd "$src" && go mod edit -dropreplace github.com/ory/hydra-client-go/v2)
  with_heartbeat "building hydra" env -C "$src" CGO_ENABLED=1 GOFLAGS="-buildvcs=false -trimpath -mod=mod" go build -tags sqlite -ldflags "-s -w -X github.com/ory/hydra/v2/driver/config.Version=v${HYDRA_VERSION}" -o "$BIN_DIR/hydra" .
}

rm -f "$STAMP"
log "installing test assets into $BIN_DIR ($WANT_STAMP)"
[[ -x "$BIN_DIR/etcd" && "$("$BIN_DIR/etcd" --version 2>/dev/null | head -1)" == *"$ETCD_VERSION"* ]] || build_etcd
[[ -x "$BIN_DIR/helm" && "$("$BIN_DIR/helm" version --short 2>/dev/null)" == "v${HELM_VERSION}"* ]] || build_helm
[[ -x "$BIN_DIR/helm3" && "$("$BIN_DIR/helm3" version --short 2>/dev/null)" == "v${HELM3_VERSION}"* ]] || build_helm3
[[ -x "$BIN_DIR/registry" && "$("$BIN_DIR/registry" --version 2>/dev/null)" == *"v${REGISTRY_VERSION}"* ]] || build_registry
[[ -x "$BIN_DIR/promtool" && "$("$BIN_DIR/promtool" --version 2>/dev/null | head -1)" == *"version ${PROMETHEUS_VERSION} "* ]] || build_promtool
[[ -x "$BIN_DIR/cosign" && "$("$BIN_DIR/cosign" version 2>/dev/null | grep GitVersion)" == *"v${COSIGN_VERSION}" ]] || build_cosign
[[ -x "$BIN_DIR/sops" && -x "$BIN_DIR/age" && -x "$BIN_DIR/age-keygen" && "$("$BIN_DIR/sops" --version --disable-version-check 2>/dev/null | head -1)" == *" ${SOPS_VERSION}"* && "$("$BIN_DIR/age" --version 2>/dev/null)" == "v${AGE_VERSION}" ]] || build_sops_age
if ! [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/kubectl" && "$("$BIN_DIR/kube-apiserver" --version 2>/dev/null)" == *"v${K8S_VERSION}" ]]; then
  build_kubernetes
fi
[[ -x "$BIN_DIR/hydra" && "$("$BIN_DIR/hydra" version 2>/dev/null | head -1)" == *"v${HYDRA_VERSION}" ]] || build_hydra
if controller_manager_wanted; then
  build_controller_manager
fi
echo "$WANT_STAMP" > "$STAMP"
log "done: $(cd "$BIN_DIR" && ls | tr '\n' ' ')"
echo "$BIN_DIR"
