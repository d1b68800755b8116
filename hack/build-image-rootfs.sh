#!/usr/bin/env bash
# The Dockerfile's build steps, run without Docker (there is no engine
# here): builds the image's root filesystem tree and checks it.
#
#   hack/build-image-rootfs.sh [OUT_DIR]     # default: target/image-rootfs
#
# - /hossted-operator: `cargo build --release --locked` (glibc), as the
#   `build` stage does;
# - /usr/local/bin/helm: `go install helm.sh/helm/v4/cmd/helm@v$HELM_VERSION`
#   from hack/envtest.env, as the `helm` stage does;
# then checks what the image's ENTRYPOINT would run: the binary's --help,
# `helm version` at the pinned version, and that the binary needs no shared
# library beyond what distroless/cc carries (glibc, libgcc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${1:-target/image-rootfs}"
START=$(date +%s)
log() { printf '[build-image-rootfs +%3ss] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
trap 'log "FAILED (line $LINENO): $BASH_COMMAND"' ERR

rm -rf "$OUT" && mkdir -p "$OUT/usr/local/bin"

log "stage build: cargo build --release --locked --bin hossted-operator"
cargo build --release --locked --bin hossted-operator
cp target/release/hossted-operator "$OUT/hossted-operator"

log "stage helm: go install helm (hack/envtest.env)"
# shellcheck source=envtest.env
. hack/envtest.env
GOBIN_DIR="$(mktemp -d)"
CGO_ENABLED=0 GOWORK=off GOBIN="$GOBIN_DIR" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v${HELM_VERSION}" \
  "helm.sh/helm/v4/cmd/helm@v${HELM_VERSION}"
mv "$GOBIN_DIR/helm" "$OUT/usr/local/bin/helm"
rmdir "$GOBIN_DIR"

log "checking the root filesystem"
"$OUT/hossted-operator" --help | grep -q "run" || { log "--help does not list run"; exit 1; }
got="$("$OUT/usr/local/bin/helm" version --short)"
[[ "$got" == "v${HELM_VERSION}"* ]] || { log "helm version is $got, want v${HELM_VERSION}"; exit 1; }
# The chart installs this image by its appVersion: they must agree.
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/hossted-operator/Chart.yaml)"
binary_version="$("$OUT/hossted-operator" --version | awk '{print $2}')"
[[ "$binary_version" == "$app_version" ]] || {
  log "the binary is version $binary_version, charts/hossted-operator/Chart.yaml's appVersion $app_version: make them agree"
  exit 1
}
# distroless/cc-debian12: glibc (libc, libm, libdl, libpthread, librt,
# ld-linux) and libgcc_s. Anything else would be missing in the image.
extra="$(ldd "$OUT/hossted-operator" | awk '{print $1}' \
  | grep -vE '^(linux-vdso\.so|/lib64/ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s\.so)' || true)"
if [[ -n "$extra" ]]; then
  log "the binary needs libraries distroless/cc does not carry: $extra"
  exit 1
fi
if ldd "$OUT/usr/local/bin/helm" >/dev/null 2>&1; then
  log "helm is dynamically linked; the image wants it static (CGO_ENABLED=0)"
  exit 1
fi
log "ok: $OUT/hossted-operator ($(du -h "$OUT/hossted-operator" | cut -f1)), helm ${got} — --help runs, helm version matches, the chart's appVersion ($app_version) matches, libraries covered"
