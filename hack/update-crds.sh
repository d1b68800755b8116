#!/usr/bin/env bash
# Regenerates manifests/crd/ from the Rust types in pkg/apis
# (`hossted-operator crd`). hack/test.sh fails when the checked-in YAML differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo run -q --bin hossted-operator -- crd > manifests/crd/hosstedprojects.hossted.com.yaml
echo "wrote manifests/crd/hosstedprojects.hossted.com.yaml"
