#!/usr/bin/env python3
"""Fails when files of a source tree import each other in a circle.

Usage: hack/check-import-cycles.py src/delivery [crate-path]

An edge A -> B means file A names an item that file B defines: through
`use` or a path in code (`crate::delivery::x::Y`, `super::Y`, `child::f`).
`mod child;` itself is containment, not an edge. A path that ends at a
module's `pub use` re-export is followed to the file that defines the item.
Test code (`#[cfg(test)]` modules, `tests.rs` files) is left out.

Folders count too: within each directory, a subfolder is one unit (all its
files together), so `a.rs -> b/x.rs` and `b/y.rs -> a.rs` is a circle
between `a.rs` and `b/` even though no two files import each other.
"""
import os
import re
import sys

root = sys.argv[1].rstrip("/")
crate_path = sys.argv[2] if len(sys.argv) > 2 else "crate::" + root.split("src/", 1)[-1].replace("/", "::")

# module path (tuple) -> file
modules = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith(".rs") or f == "tests.rs":
            continue
        rel = os.path.relpath(os.path.join(dp, f), root)[:-3].split(os.sep)
        if rel[-1] == "mod":
            rel = rel[:-1]
        modules[tuple(rel)] = os.path.join(dp, f)
files = {v: k for k, v in modules.items()}


def code_of(path):
    text = open(path).read()
    cut = text.find("#[cfg(test)]")
    text = text if cut < 0 else text[:cut]
    return re.sub(r"//[^\n]*", "", text)


def reexports(path):
    """name -> module path it is re-exported from (`pub use a::b::{X, Y}`)."""
    out = {}
    for m in re.finditer(r"pub use ([\w:]+?)(?:::\{([^}]*)\}|::(\w+))(?: as (\w+))?;", code_of(path)):
        base, group, single, alias = m.groups()
        names = [n.strip() for n in (group.split(",") if group else [single])]
        for n in names:
            if not n:
                continue
            parts = n.split(" as ")
            out[parts[-1].strip()] = base.split("::") + [parts[0].strip()]
    return out


def resolve(start, segments, seen=0):
    """The file defining the item that `segments` names from module `start`."""
    mod = list(start)
    i = 0
    while i < len(segments) and tuple(mod + [segments[i]]) in modules:
        mod.append(segments[i])
        i += 1
    target = modules.get(tuple(mod))
    if target and i < len(segments) and seen < 5:
        again = reexports(target).get(segments[i])
        if again:
            return resolve_from(tuple(mod), again, seen + 1) or target
    return target


def resolve_from(mod, segments, seen=0):
    segments = list(segments)
    base = list(mod)
    if segments[0] == "crate":
        prefix = crate_path.split("::")[1:]
        if segments[1 : 1 + len(prefix)] != prefix:
            return None
        return resolve((), segments[1 + len(prefix):], seen)
    if segments[0] == "self":
        segments = segments[1:]
    while segments and segments[0] == "super":
        base = base[:-1]
        segments = segments[1:]
    return resolve(tuple(base), segments, seen)


edges = {f: set() for f in files}
for path, mod in files.items():
    code = code_of(path)
    own = os.path.basename(path) == "mod.rs"
    here = mod if own else mod  # a file's own module path
    children = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))? )?mod (\w+);", code, re.M))
    refs = []
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", code):
        refs.append(m.group(1).split("::"))
    for m in re.finditer(r"use ((?:crate|super|self)[\w:]*)::\{([^}]*)\}", code):
        for n in m.group(2).split(","):
            n = n.strip().split(" as ")[0].strip()
            if n and n != "self":
                refs.append(m.group(1).split("::") + n.split("::"))
    for m in re.finditer(r"\b(\w+)::\w+", code):
        if m.group(1) in children:
            refs.append(["self", m.group(1)] + [m.group(0).split("::")[1]])
    for r in refs:
        # a non-mod.rs file's `super` is its directory's module
        start = here if own else here[:-1] + (here[-1],)
        if not own and r[0] == "super":
            start = here
        target = resolve_from(start, r)
        if target and target != path:
            edges[path].add(target)

# cycles: depth-first search
WHITE, GREY, BLACK = 0, 1, 2
color = {f: WHITE for f in edges}
stack = []
cycles = []


def visit(f):
    color[f] = GREY
    stack.append(f)
    for g in sorted(edges[f]):
        if color.get(g) == GREY:
            cycles.append(stack[stack.index(g):] + [g])
        elif color.get(g) == WHITE:
            visit(g)
    stack.pop()
    color[f] = BLACK


for f in sorted(edges):
    if color[f] == WHITE:
        visit(f)


def folder_cycles():
    """Circles among the files and subfolders of each directory."""
    found = []
    rel = {f: os.path.relpath(f, root).split(os.sep) for f in edges}
    dirs = {tuple(parts[:i]) for parts in rel.values() for i in range(len(parts))}
    for d in sorted(dirs):
        def unit(f):
            parts = rel[f]
            if len(parts) <= len(d) or tuple(parts[: len(d)]) != d:
                return None
            return parts[len(d)] + ("/" if len(parts) > len(d) + 1 else "")
        graph = {}
        for f, targets in edges.items():
            a = unit(f)
            if a is None:
                continue
            graph.setdefault(a, set())
            for g in targets:
                b = unit(g)
                if b is not None and b != a:
                    graph[a].add(b)
        state = {u: WHITE for u in graph}
        path = []

        def walk(u):
            state[u] = GREY
            path.append(u)
            for v in sorted(graph.get(u, ())):
                if state.get(v) == GREY:
                    c = path[path.index(v):] + [v]
                    if any(x.endswith("/") for x in c):
                        found.append("/".join(d) + ": " + " -> ".join(c))
                elif state.get(v, WHITE) == WHITE:
                    state[v] = WHITE
                    walk(v)
            path.pop()
            state[u] = BLACK

        for u in sorted(graph):
            if state[u] == WHITE:
                walk(u)
    return found


folders = folder_cycles()
if cycles or folders:
    for c in cycles:
        print("import cycle: " + " -> ".join(os.path.relpath(x, root) for x in c))
    for c in folders:
        print("folder import cycle in " + c)
    sys.exit(1)
print(f"no import cycle among {len(files)} files of {root} ({sum(len(e) for e in edges.values())} edges)")
