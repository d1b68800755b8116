#!/usr/bin/env bash
# The import rules hack/test.sh keeps (hack/check-import-cycles.py): no
# circle among the files — or modules, `foo.rs` with `foo/` — of each tree
# below, and helmapp's decisions (decide/) pure: they reach, through
# their imports, no file that awaits, holds a kube client, touches the file
# system or starts a process.
#
#   hack/import-layers.sh             # check the repository
#   hack/import-layers.sh --self-test # and show that the check fails on a
#                                     # planted circle, a module circle and
#                                     # a decision that reaches I/O
#
# Kept everywhere: the whole of src/ and every crate under pkg/ (test
# support included).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=hack/check-import-cycles.py

check_repo() {
  python3 "$check" src \
    --pure delivery/helmapp/decide
  for tree in pkg/*/src; do
    python3 "$check" "$tree"
  done
}

# Each plant must fail the check, saying what it found.
expect_failure() {
  local what="$1" words="$2"; shift 2
  local out
  if out="$(python3 "$check" "$@" 2>&1)"; then
    echo "self-test: the check passed on $what" >&2
    exit 1
  fi
  if ! grep -q -- "$words" <<<"$out"; then
    echo "self-test: on $what the check said: $out" >&2
    exit 1
  fi
  echo "self-test: $what: found ($words)"
}

# Puts `line` into `file` before its tests (the check reads no test code).
plant() {
  python3 - "$1" "$2" <<'PY'
import sys
path, line = sys.argv[1], sys.argv[2]
text = open(path).read()
cut = text.find("#[cfg(test)]")
cut = len(text) if cut < 0 else cut
open(path, "w").write(text[:cut] + line + "\n\n" + text[cut:])
PY
}

self_test() {
  local t
  t="$(mktemp -d)"
  trap 'rm -rf "$t"' RETURN
  # Two files naming each other.
  mkdir -p "$t/files/src"
  printf 'mod a;\nmod b;\n' >"$t/files/src/lib.rs"
  printf 'pub struct A;\npub fn f() -> crate::b::B { crate::b::B }\n' >"$t/files/src/a.rs"
  printf 'pub struct B;\npub fn g() -> crate::a::A { crate::a::A }\n' >"$t/files/src/b.rs"
  expect_failure "two files in a circle" "import cycle: a.rs -> b.rs -> a.rs" "$t/files/src"
  # A module (`foo.rs` + `foo/`) in a circle with a file: no two files
  # import each other.
  mkdir -p "$t/modules/src/foo"
  printf 'mod bar;\nmod foo;\n' >"$t/modules/src/lib.rs"
  printf 'pub mod inner;\npub fn f() -> crate::bar::B { crate::bar::B }\n' >"$t/modules/src/foo.rs"
  printf 'pub struct Z;\n' >"$t/modules/src/foo/inner.rs"
  printf 'pub struct B;\npub fn g() -> crate::foo::inner::Z { crate::foo::inner::Z }\n' >"$t/modules/src/bar.rs"
  expect_failure "a module and a file in a circle" "folder import cycle" "$t/modules/src"
  # The real tree with a decision reaching I/O: plan.rs naming the context,
  # and state.rs naming helm's storage reads (observe/): layer breaches.
  mkdir -p "$t/real"
  cp -r src/delivery "$t/real/delivery"
  plant "$t/real/delivery/helmapp/decide/plan.rs" \
    'fn _planted(_: &crate::delivery::helmapp::context::Context) {}'
  expect_failure "decide/plan.rs reaching the context" "pure code reaches I/O" \
    "$t/real/delivery" crate::delivery --pure helmapp/decide
  cp src/delivery/helmapp/decide/plan.rs "$t/real/delivery/helmapp/decide/plan.rs"
  plant "$t/real/delivery/helmapp/decide/state.rs" \
    'fn _planted() { let _ = crate::delivery::helmapp::observe::storage::read; }'
  expect_failure "decide/state.rs reaching observe's storage reads" "pure code reaches I/O" \
    "$t/real/delivery" crate::delivery --pure helmapp/decide
  cp src/delivery/helmapp/decide/state.rs "$t/real/delivery/helmapp/decide/state.rs"
  # And a circle planted in the real tree: plan.rs naming act.
  plant "$t/real/delivery/helmapp/decide/plan.rs" \
    'fn _planted() { let _ = crate::delivery::helmapp::act::run; }'
  expect_failure "decide/plan.rs naming act" "import cycle" "$t/real/delivery" crate::delivery
  # A circle planted in the whole of src/, outside delivery: the
  # inventory's settings naming the informers, which read the settings.
  mkdir -p "$t/whole"
  cp -r src "$t/whole/src"
  plant "$t/whole/src/inventory/settings.rs" \
    'fn _planted() { let _ = crate::inventory::informers::Informers::new; }'
  expect_failure "the inventory's settings naming its informers" \
    "import cycle: inventory/settings.rs -> inventory/informers.rs" "$t/whole/src"
}

if [[ "${1:-}" == "--self-test" ]]; then
  self_test
fi
check_repo
