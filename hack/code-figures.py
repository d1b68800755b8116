#!/usr/bin/env python3
"""The code's shape, as issue 51's closing note gives it: files over 450
lines and functions over 80 lines (non-test code of src/ and pkg/*/src),
`Result<_, String>` in signatures, the `if`/`match` of act/ (an upper bound
of its decisions) and act's unit tests.

    python3 hack/code-figures.py          # the figures
    python3 hack/code-figures.py --list   # and what each counts

Test code is left out: files named tests.rs or *_tests.rs, files under a
tests/ folder, and everything from a file's first `#[cfg(test)]` on.
"""
import os
import re
import sys

ROOTS = ["src"] + sorted(
    os.path.join("pkg", p, "src") for p in os.listdir("pkg") if os.path.isdir(os.path.join("pkg", p, "src"))
)
ACT = os.path.join("src", "delivery", "helmapp", "act")


def rust_files():
    for root in ROOTS:
        for base, _, files in os.walk(root):
            for f in sorted(files):
                if f.endswith(".rs"):
                    yield os.path.join(base, f)


def is_test_file(path):
    name = os.path.basename(path)
    return name == "tests.rs" or name.endswith("_tests.rs") or f"{os.sep}tests{os.sep}" in path


def non_test(text):
    cut = text.find("#[cfg(test)]")
    return text if cut < 0 else text[:cut]


FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def long_functions(path, lines, limit):
    """Functions whose body spans more than `limit` lines (brace-counted)."""
    out = []
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            code = re.sub(r'"([^"\\]|\\.)*"|//.*$', "", lines[j])
            if not started and ";" in code and "{" not in code:
                break  # a declaration without a body
            depth += code.count("{") - code.count("}")
            started = started or "{" in code
            if started and depth <= 0:
                break
            j += 1
        if started and j - i + 1 > limit:
            out.append((j - i + 1, f"{path}:{i + 1} {m.group(6)}"))
        i = j + 1 if started else i + 1
    return out


def main():
    listing = "--list" in sys.argv
    big_files, long_fns, string_errors = [], [], []
    act_branches, act_tests = 0, 0
    for path in rust_files():
        text = open(path).read()
        if path.startswith(ACT):
            act_tests += len(re.findall(r"#\[(tokio::)?test", text))
        if is_test_file(path):
            continue
        code = non_test(text)
        lines = code.splitlines()
        if len(lines) > 450:
            big_files.append((len(lines), path))
        long_fns += long_functions(path, lines, 80)
        for n, line in enumerate(lines, 1):
            if re.search(r"Result<[^;{]*,\s*String>", line):
                string_errors.append(f"{path}:{n}")
            if path.startswith(ACT) and re.search(r"\b(if|match)\b", re.sub(r"//.*$", "", line)):
                act_branches += 1
    print(f"files over 450 lines:        {len(big_files)}")
    print(f"functions over 80 lines:     {len(long_fns)}")
    print(f"Result<_, String>:           {len(string_errors)}")
    print(f"if/match in act/:            {act_branches}")
    print(f"unit tests in act/:          {act_tests}")
    if listing:
        for n, p in sorted(big_files, reverse=True):
            print(f"  file {n:5} {p}")
        for n, p in sorted(long_fns, reverse=True):
            print(f"  fn   {n:5} {p}")


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
