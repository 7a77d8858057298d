#!/usr/bin/env python3
"""Measurement (not a test): the module graph of the workspace's crates, as a newcomer
meets it. For each crate under crates/, which of its modules name which others
(`crate::a::...`, `use crate::{a, b::c}`, `super::x` resolved to a module), the circles
among them (strongly connected components of more than one module), and the largest
source files.

    scripts/module-graph.py                  # every crate
    scripts/module-graph.py engine server    # some
    scripts/module-graph.py --largest 20     # how many of the largest files to list

A module is a file (`src/a.rs`, `src/a/mod.rs`: `a`; `src/a/b.rs`: `a::b`); a reference
to `crate::a::b::Thing` counts as an edge to the deepest module that exists (`a::b`).
Test modules inside a file count as the file; `tests/` and `benches/` are left out.
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def modules_of(src):
    """Maps module path (tuple) -> file, for every .rs file under src."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                module = ()
            elif rel[-1] == "mod":
                module = tuple(rel[:-1])
            else:
                module = tuple(rel)
            mods[module] = path
    return mods


USE_BLOCK = re.compile(r"\buse\s+crate::(\{.*?\}|[\w:]+(?:::\{.*?\})?)\s*;", re.S)
PATH_REF = re.compile(r"\bcrate::((?:\w+::)*\w+)")
SUPER_REF = re.compile(r"\bsuper::((?:\w+::)*\w+)")


def expand(tree):
    """Expands a use tree `a::{b, c::d}` into ['a::b', 'a::c::d']."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, text):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(text):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(text[start:i])
                start = i + 1
        parts.append(text[start:])
        for part in parts:
            if not part:
                continue
            if "{" in part:
                head, rest = part.split("{", 1)
                walk(prefix + head, rest[:-1])
            else:
                out.append(prefix + part)

    if tree.startswith("{"):
        walk("", tree[1:-1])
    else:
        walk("", tree)
    return out


def resolve(mods, path):
    """The deepest module of `path` (a list of names) that exists, or None."""
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return None


def graph_of(crate):
    src = os.path.join(ROOT, "crates", crate, "src")
    mods = modules_of(src)
    edges = defaultdict(set)
    for module, path in mods.items():
        text = open(path, encoding="utf-8").read()
        targets = []
        for tree in USE_BLOCK.findall(text):
            for item in expand(tree):
                targets.append(item.split("::"))
        for ref in PATH_REF.findall(text):
            targets.append(ref.split("::"))
        parent = list(module[:-1]) if path.endswith("mod.rs") is False else list(module[:-1])
        for ref in SUPER_REF.findall(text):
            targets.append(parent + ref.split("::"))
        for target in targets:
            to = resolve(mods, [t for t in target if t not in ("self", "*")])
            if to is not None and to != module and to != ():
                # A child module naming its own parent's items is structure, not a
                # dependency worth listing; a parent naming its child likewise.
                edges[module].add(to)
    return mods, edges


def components(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def name(module):
    return "::".join(module) if module else "(root)"


def main():
    args = sys.argv[1:]
    largest = 15
    if "--largest" in args:
        i = args.index("--largest")
        largest = int(args[i + 1])
        del args[i : i + 2]
    crates = args or sorted(
        d for d in os.listdir(os.path.join(ROOT, "crates"))
        if os.path.isdir(os.path.join(ROOT, "crates", d, "src"))
    )
    sizes = []
    for crate in crates:
        mods, edges = graph_of(crate)
        for module, path in mods.items():
            with open(path, encoding="utf-8") as f:
                sizes.append((sum(1 for _ in f), os.path.relpath(path, ROOT)))
        nodes = sorted(m for m in mods if m != ())
        edge_count = sum(len(v) for k, v in edges.items() if k != ())
        print(f"## {crate}: {len(nodes)} modules, {edge_count} edges")
        for module in nodes:
            targets = sorted(name(t) for t in edges.get(module, ()))
            print(f"  {name(module)} -> {', '.join(targets) if targets else '-'}")
        circles = [c for c in components(nodes, edges) if len(c) > 1]
        if circles:
            print(f"  circles ({len(circles)}):")
            for comp in sorted(circles, key=len, reverse=True):
                print(f"    {len(comp)} modules: {', '.join(sorted(name(m) for m in comp))}")
        else:
            print("  circles: none")
        print()
    print(f"## largest files (lines)")
    for lines, path in sorted(sizes, reverse=True)[:largest]:
        print(f"  {lines:6} {path}")


if __name__ == "__main__":
    main()
