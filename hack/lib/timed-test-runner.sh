#!/bin/sh
# cargo's runner for the test binaries hack/test.sh runs: each reports its
# tests' times itself (libtest's --report-time). That flag is behind
# -Z unstable-options, which a test binary built by stable Rust accepts at
# run time when RUSTC_BOOTSTRAP is set in its environment — set here, for
# the run only: nothing is compiled with it.
bin="$1"
shift
RUSTC_BOOTSTRAP=1 exec "$bin" "$@" -Z unstable-options --report-time
