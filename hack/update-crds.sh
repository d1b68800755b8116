#!/usr/bin/env bash
# Regenerates manifests/crd/ from the Rust types in pkg/apis
# (`hossted-operator crd NAME`), one file per CRD. hack/test.sh fails when
# the checked-in YAML differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build -q --bin hossted-operator
for name in hosstedprojects.hossted.com helmapps.hossted.com helmappsets.hossted.com; do
  target/debug/hossted-operator crd "$name" > "manifests/crd/$name.yaml"
  echo "wrote manifests/crd/$name.yaml"
done
