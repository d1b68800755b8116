#!/usr/bin/env bash
# Regenerates the CRDs (manifests/base/crd/, manifests/delivery/crd/, and
# the templates of charts/hossted-operator/templates/crds/) from
# the Rust types in pkg/apis
# (`hossted-operator crd NAME`), one file per CRD, and the API reference in
# docs/reference/ (`hossted-operator docs reference`). hack/test.sh fails when
# the checked-in YAML differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build -q --bin hossted-operator
for name in hosstedprojects.hossted.com helmapps.hossted.com helmappsets.hossted.com; do
  case "$name" in
    hosstedprojects.*) dir=manifests/base/crd ;;
    *) dir=manifests/delivery/crd ;;
  esac
  target/debug/hossted-operator crd "$name" > "$dir/$name.yaml"
  echo "wrote $dir/$name.yaml"
  mkdir -p charts/hossted-operator/templates/crds
  target/debug/hossted-operator crd --chart "$name" > "charts/hossted-operator/templates/crds/$name.yaml"
  echo "wrote charts/hossted-operator/templates/crds/$name.yaml"
done
target/debug/hossted-operator docs reference --out docs/reference
