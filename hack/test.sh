#!/usr/bin/env bash
# THE test command: builds the test assets if needed, then format, lint and
# every test of the workspace (unit tests and integration tests against a
# real kube-apiserver + etcd); ends with the ten slowest tests.
#
#   hack/test.sh                 # everything (what CI runs)
#   hack/test.sh --changed       # a developer's loop: only the test binaries
#                                # of the crates changed since main (files
#                                # committed, staged, edited or new); CI
#                                # (CI=true) runs everything regardless
#   hack/test.sh -- NAME         # further arguments go to cargo test
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CHANGED=""
if [[ "${1:-}" == "--changed" ]]; then
  CHANGED=1
  shift
fi

step() { printf '\n==> %s\n' "$*"; }

# CI builds once in a fresh clone: incremental state would only fill the
# disk (it is most of a developer's target/). Free space is printed so a
# failed link (ld: Bus error) can be told from a full disk at a glance.
if [[ "${CI:-}" == "true" ]]; then
  export CARGO_INCREMENTAL=0
fi
step "disk: $(df -h --output=avail . | awk 'NR == 2 {print $1}') free where target/ is built"

step "test assets (hack/setup-envtest.sh)"
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS

# The Git source tests serve repositories with Git's own http-backend
# (Debian's git package); installed when missing, as root.
if ! [[ -x "$(git --exec-path 2>/dev/null)/git-http-backend" ]]; then
  if [[ "$(id -u)" == 0 ]]; then
    step "installing git (apt-get) for the Git source tests"
    apt-get update -qq && apt-get install -y -qq git >/dev/null
  else
    echo "hack/test.sh: git with git-http-backend is needed (apt-get install git)" >&2
    exit 1
  fi
fi

# The browser tests of `kubectl hossted ui` drive Debian's chromium through
# chromedriver (chromium-driver); installed when missing, as root.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]]; then
    step "installing chromium and chromium-driver (apt-get) for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "hack/test.sh: the browser tests need chromium and chromedriver (apt-get install chromium chromium-driver)" >&2
    exit 1
  fi
fi

# A lint tool that is missing fails CI (CI=true): a submission is never
# landed unchecked. A developer's run warns loudly and goes on.
missing_tool() {
  if [[ "${CI:-}" == "true" ]]; then
    echo "hack/test.sh: $1 is not installed; CI does not land unchecked code (rustup component add $2)" >&2
    exit 1
  fi
  echo "!!!! WARNING: $1 is not installed; it was NOT checked !!!!" >&2
}
if cargo fmt --version >/dev/null 2>&1; then
  step "cargo fmt --check"
  cargo fmt --all -- --check
else
  missing_tool rustfmt rustfmt
fi
if cargo clippy --version >/dev/null 2>&1; then
  step "cargo clippy -- -D warnings"
  cargo clippy --workspace --all-targets -- -D warnings
else
  missing_tool clippy clippy
fi

# Files and modules import downward only (observe → state → plan → act in
# delivery); a circle, or a decision that reaches I/O, is a design
# regression. The self-test first shows the check catches each.
step "no import cycle, pure decisions (hack/import-layers.sh --self-test)"
bash hack/import-layers.sh --self-test

# The integration tests mostly wait on real control planes (each its own
# etcd + apiserver, mostly idle): four at a time finish in ~60% of the time
# two take on a 2-core machine. RUST_TEST_THREADS overrides.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
# The crates (-p) whose files changed since main, for --changed.
changed_packages() {
  local f
  { git diff --name-only main...HEAD 2>/dev/null || true; git diff --name-only HEAD; git ls-files --others --exclude-standard; } \
    | sort -u | while read -r f; do
      case "$f" in
        pkg/*/*) sed -n 's/^name = "\(.*\)"/-p \1/p' "pkg/$(cut -d/ -f2 <<<"$f")/Cargo.toml" | awk 'NR == 1' ;;
        src/*|tests/*|examples/*|Cargo.toml|Cargo.lock|build.rs) echo "-p hossted-operator" ;;
      esac
    done | sort -u
}
packages=(--workspace)
if [[ -n "$CHANGED" && "${CI:-}" != "true" ]]; then
  read -r -a packages <<<"$(changed_packages | tr '\n' ' ')"
  if [[ ${#packages[@]} -eq 0 ]]; then
    step "no crate changed since main: no test runs"
    exit 0
  fi
fi
# Every test binary reports its tests' times (hack/lib/timed-test-runner.sh).
host="$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')"
export "CARGO_TARGET_${host}_RUNNER=$PWD/hack/lib/timed-test-runner.sh"
TEST_LOG="$(mktemp)"
trap 'rm -f "$TEST_LOG"' EXIT
step "cargo test ${packages[*]} (${RUST_TEST_THREADS} tests at a time per binary)"
cargo test "${packages[@]}" "$@" 2>&1 | tee "$TEST_LOG"

# The fuzz targets of the parsers hostile input reaches, a short fixed
# budget each (the same inputs every run): a panic on one fails CI.
# hack/fuzz.sh runs them for minutes.
step "short fuzz runs (tests/parsers.rs, FUZZ_INPUTS=10000 each)"
FUZZ_INPUTS=10000 cargo test -q --test parsers -- --ignored

# The Dockerfile's steps without Docker: the image's root filesystem (glibc
# release binary + helm at the pinned version), checked to run.
step "image root filesystem (hack/build-image-rootfs.sh)"
hack/build-image-rootfs.sh

# The cheap health signal: where the suite's time goes.
step "the ten slowest tests"
awk '/^ +Running /{bin = ($2 == "unittests") ? $3 : $2} /^test .* \.\.\. ok <[0-9.]+s>$/{t=$NF; gsub(/[<>s]/, "", t); print t, bin ": " $2}' "$TEST_LOG" \
  | sort -rn | awk 'NR <= 10 {printf "%8.1f s  %s %s\n", $1, $2, $3}'
# (awk reads all of sort's output: `head` would exit early, and under
# pipefail sort's SIGPIPE failed the run when its output came in pieces)
