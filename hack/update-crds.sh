#!/usr/bin/env bash
# Regenerates the CRDs (manifests/base/crd/, manifests/delivery/crd/) from
# the Rust types in pkg/apis
# (`hossted-operator crd NAME`), one file per CRD. hack/test.sh fails when
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
done
