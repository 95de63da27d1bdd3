#!/usr/bin/env python3
"""Checks the workspace's module shape: no Rust module over 600 lines before its tests, and no
import cycle between sibling modules of any crate (a folder's modules, or a crate's top-level
ones). Prints each finding and exits 1 if there is any.

A module's own tests (`#[cfg(test)]` onwards, or a `tests.rs` / `tests/` beside it) do not count
towards its length. An edge a -> b means a file under module a names sibling b by `crate::b`
(top level) or `super::b` (from a's own file or folder)."""

import re
import sys
from pathlib import Path

LIMIT = 600
ROOT = Path(__file__).resolve().parent.parent


def code_lines(path):
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]":
            return n
    return len(lines)


def module_of(src, path):
    """The module path of a file below `src`, as a tuple of names."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def main():
    problems = []
    sources = [p / "src" for p in sorted((ROOT / "crates").iterdir()) if (p / "src").is_dir()]
    sources.append(ROOT / "fuzz" / "src")
    for src in sources:
        files = [f for f in src.rglob("*.rs") if "bin" not in f.relative_to(src).parts]
        for f in files:
            if f.name == "tests.rs" or "tests" in f.relative_to(src).parts:
                continue
            n = code_lines(f)
            if n > LIMIT:
                problems.append(f"{f.relative_to(ROOT)}: {n} lines before its tests (limit {LIMIT})")
        # Edges between siblings: for each folder (module path prefix), its child modules.
        edges = {}
        for f in files:
            module = module_of(src, f)
            if "tests" in module:
                continue
            text = f.read_text()
            cut = text.find("#[cfg(test)]")
            text = text if cut < 0 else text[:cut]
            # Doc links and comments name modules without importing them.
            text = "\n".join(line.split("//")[0] for line in text.splitlines())
            for m in re.finditer(r"\bcrate::(\w+)", text):
                if module and module[0] != m.group(1):
                    edges.setdefault(((), module[0]), set()).add(((), m.group(1)))
            for m in re.finditer(r"\bsuper::(\w+)", text):
                # `super::x` in module a::b (file a/b.rs or a/b/mod.rs) is a::x, b's sibling.
                if not module or m.group(1) == module[-1]:
                    continue
                parent = module[:-1]
                edges.setdefault((parent, module[-1]), set()).add((parent, m.group(1)))
        for component in cycles(edges):
            names = " <-> ".join("::".join(p + (n,)) for p, n in component)
            problems.append(f"{src.relative_to(ROOT)}: import cycle {names}")
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"modules: none over {LIMIT} lines, no import cycle ({len(sources)} crates)")


if __name__ == "__main__":
    main()
