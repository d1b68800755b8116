#!/usr/bin/env python3
"""Fails when files of a source tree import each other in a circle.

Usage: hack/check-import-cycles.py src/delivery [crate-path]

An edge A -> B means file A names an item that file B defines: through
`use` or a path in code (`crate::delivery::x::Y`, `super::Y`, `child::f`).
`mod child;` itself is containment, not an edge. A path that ends at a
module's `pub use` re-export is followed to the file that defines the item.
Test code (`#[cfg(test)]` modules, `tests.rs` files) is left out.

Folders count too: within each directory, a module is one unit — its
file `b.rs` and its folder `b/` together — so `a.rs -> b/x.rs` and
`b.rs -> a.rs` (or `b/y.rs -> a.rs`) is a circle between `a` and `b` even
though no two files import each other.

Layers (`--layer FILE:FORBIDDEN[,FORBIDDEN...]`, paths relative to the
tree): FILE (a file, or a folder and everything in it) must not reach any
FORBIDDEN file or folder through its imports, directly or transitively —
e.g. the pure decision files of helmapp never reach what does I/O.
"""
import os
import re
import sys

args = sys.argv[1:]
layers = []
pure = []
while "--pure" in args:
    i = args.index("--pure")
    pure.append(args[i + 1])
    del args[i : i + 2]
while "--layer" in args:
    i = args.index("--layer")
    layers.append(args[i + 1])
    del args[i : i + 2]
root = args[0].rstrip("/")
if len(args) > 1:
    crate_path = args[1]
elif root.endswith("/src") or root == "src":
    crate_path = "crate"
else:
    crate_path = "crate::" + root.split("src/", 1)[-1].replace("/", "::")

# module path (tuple) -> file
modules = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith(".rs") or f == "tests.rs" or f.endswith("_tests.rs"):
            continue
        rel = os.path.relpath(os.path.join(dp, f), root)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib", "main") and len(rel) == 1 and rel[-1] != "mod":
            rel = []
        elif rel[-1] == "mod":
            rel = rel[:-1]
        if rel == [] and tuple(rel) in modules:
            continue  # main.rs beside lib.rs: a crate of its own
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
    # a folder's own file (`mod.rs`, or a crate root): its `super` is above
    own = os.path.basename(path) == "mod.rs" or mod == ()
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
    folders_of = {}
    for parts in rel.values():
        for i in range(len(parts) - 1):
            folders_of.setdefault(tuple(parts[:i]), set()).add(parts[i])
    for d in sorted(dirs):
        def unit(f):
            parts = rel[f]
            if len(parts) <= len(d) or tuple(parts[: len(d)]) != d:
                return None
            name = parts[len(d)]
            # `b.rs` and `b/` are one module: one unit, named `b/` when it
            # has a folder.
            stem = name[:-3] if name.endswith(".rs") else name
            return stem + "/" if stem in folders_of.get(d, ()) else name
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


def under(f, spec):
    """Whether file `f` is `spec` (a path relative to the tree) or in it."""
    r = os.path.relpath(f, root)
    return r == spec or r.startswith(spec.rstrip("/") + "/")


def first_reached(start, hit):
    """Breadth-first from `start` through the imports: the way (a list of
    files, `start` first) to the first file for which `hit` says something
    (its note), and that note; `None` if none is reached."""
    way = {start: None}
    todo = [start]
    while todo:
        g = todo.pop(0)
        note = hit(g)
        if note is not None:
            chain = [g]
            while way[chain[-1]] is not None:
                chain.append(way[chain[-1]])
            return list(reversed(chain)), note
        for h in sorted(edges[g]):
            if h not in way:
                way[h] = g
                todo.append(h)
    return None


def shown(chain):
    return " -> ".join(os.path.relpath(x, root) for x in chain)


def layer_breaches():
    """Each FILE of a `--layer` rule that reaches a FORBIDDEN one."""
    found = []
    for rule in layers:
        spec, forbidden = rule.split(":", 1)
        forbidden = forbidden.split(",")
        if not any(under(f, spec) for f in edges):
            found.append(f"layer rule {rule}: {spec} is no file or folder of {root}")
            continue
        for f in sorted(x for x in edges if under(x, spec)):
            reached = first_reached(
                f,
                lambda g: "" if any(under(g, x) for x in forbidden) and not under(g, spec) else None,
            )
            if reached:
                found.append(shown(reached[0]))
    return found


# What does I/O, read from the code (tests left out): an async function,
# an await, a kube client, the file system, a process, a socket.
IO = re.compile(r"\basync fn\b|\.await\b|\bkube::Client\b|\bClient\b|\bstd::fs\b|\btokio::fs\b|\bstd::process\b|\btokio::process\b|\bTcpStream\b")


def impure_reaches():
    """Each `--pure` FILE (or folder) that is, or reaches, a file doing I/O."""
    found = []
    for spec in pure:
        starts = sorted(f for f in edges if under(f, spec))
        if not starts:
            found.append(f"pure rule {spec}: no file or folder of {root}")
        for f in starts:
            def io(g):
                m = IO.search(code_of(g))
                return m.group(0) if m else None

            reached = first_reached(f, io)
            if reached:
                found.append(shown(reached[0]) + f" (`{reached[1]}`)")
    return found


folders = folder_cycles()
breaches = layer_breaches() + [f"{c}: pure code reaches I/O" for c in impure_reaches()]
if cycles or folders or breaches:
    for c in cycles:
        print("import cycle: " + " -> ".join(os.path.relpath(x, root) for x in c))
    for c in folders:
        print("folder import cycle in " + c)
    for c in breaches:
        print("layer breach: " + c)
    sys.exit(1)
print(f"no import cycle among {len(files)} files of {root} ({sum(len(e) for e in edges.values())} edges){', ' + str(len(layers) + len(pure)) + ' layer rules kept' if layers or pure else ''}")
