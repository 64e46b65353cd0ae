#!/usr/bin/env python3
"""Lists import circles between the source files of each workspace crate.

A file is a node; `use crate::a::b`, `use super::x`, `use self::x` and inline
`crate::a::b::` paths are edges to the file that defines the module they name
(`mod child;` declarations are not edges: a parent owning a child is the tree,
not an import). Exits 1 and prints each circle when there is one.

    python3 scripts/import-cycles.py
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
USE = re.compile(r"\b(?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+")
USE_BLOCK = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M | re.S)


def module_files(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    out = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        out[tuple(parts)] = f
    return out


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    # Test modules may import anything of their parent; they are not the design.
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests", text)
    return text[: cut.start()] if cut else text


def expand_use(tree):
    """Flattens `a::{b, c::{d}}` into paths."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)::\{(.*)\}$", tree)
    if not m:
        return [tree.split(" as ")[0]]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur:
        parts.append(cur)
    out = []
    for p in parts:
        for e in expand_use(p):
            out.append(prefix if e == "self" else f"{prefix}::{e}")
    return out


def target(path, here, modules):
    """The module file a path like crate::a::b::C lands in."""
    segs = path.split("::")
    if segs[0] == "crate":
        base = []
    elif segs[0] == "self":
        base = list(here)
    else:
        base = list(here)
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
        segs = ["super"] + segs
    segs = segs[1:]
    best = tuple(base)
    cur = list(base)
    for s in segs:
        cur.append(s)
        if tuple(cur) in modules:
            best = tuple(cur)
        else:
            break
    return best


def cycles(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    bad = 0
    for src in sorted(ROOT.glob("crates/*/src")):
        modules = module_files(src)
        graph = {}
        for mod, f in modules.items():
            text = strip(f.read_text())
            paths = []
            for block in USE_BLOCK.findall(text):
                paths += [p for p in expand_use(block) if re.match(r"(crate|super|self)\b", p)]
            body = USE_BLOCK.sub("", text)
            paths += USE.findall(body)
            edges = set()
            for p in paths:
                t = target(p, mod, modules)
                if t != mod:
                    edges.add(t)
            graph[mod] = edges
        for comp in cycles(graph):
            bad += 1
            names = sorted("::".join(m) or "lib" for m in comp)
            print(f"{src.parent.name}: import circle between {', '.join(names)}")
    if bad:
        sys.exit(1)
    print("no import circles")


if __name__ == "__main__":
    main()
