#!/usr/bin/env bash
# Draws bench/delivery-scale.png and bench/inventory-rss.png from the raw
# results in bench/REPORT.md (sections delivery-scale and scale), after
# SCALE=1000 hack/bench-delivery.sh and SCALES="1.0 10.0" hack/bench.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo run --release -q --example plot
