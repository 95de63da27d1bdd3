#!/usr/bin/env python3
"""Checks the workspace's module shape, so that a reader finds each concept in one room.

  scripts/check-modules.py                      # this checkout
  scripts/check-modules.py --root DIR           # another tree (the self-test's fixtures)
  scripts/check-modules.py --long-functions 80  # also list functions over 80 lines (no failure)

Fails (exit 1), printing each finding, on:
- an import cycle between sibling modules (the modules of one folder, or a crate's top-level
  ones), directly or round a loop. A file under module a::x naming a::y by any path (`crate::a::y`,
  `super::y`, `self::..`, a grouped `use crate::{a::y::Z, b}`, nested `crate::a::y::z::f()`) is an
  edge x -> y of folder a. A name a module re-exports (`pub use y::Name`) leads to y;
- a type whose inherent `impl` blocks are not all in its room: the file that defines it, or a file
  inside the folder named for that file's module (a type of engine/commit.rs may have impls in
  engine/commit/*.rs; one of a mod.rs, anywhere in its folder; one of lib.rs or main.rs, there
  only).

Test code is not read: items under `#[cfg(test)]` and files named tests.rs or inside a tests/
folder; everything else in a file is, whatever follows a test module. Comments and strings are not
code. There is no limit on a file's length: a file is as long as its one concept needs."""

import argparse
import re
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
from rust_text import strip_code  # noqa: E402

ITEM_KINDS = ("struct", "enum", "union")


def blank(text, start, end):
    """`text` with [start, end) replaced by spaces, line breaks kept."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def matching_brace(code, i):
    """Index just past the brace closing the one at `i`."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def item_end(code, i):
    """End of the item starting at `i`: its closing brace, or its `;` if that comes first."""
    depth = 0
    for j in range(i, len(code)):
        c = code[j]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth == 0:
            return j + 1
        elif c == "{" and depth == 0:
            return matching_brace(code, j)
    return len(code)


def without_tests(code):
    """The code with every item under `#[cfg(test)]` blanked out."""
    for m in reversed(list(re.finditer(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]", code))):
        code = blank(code, m.start(), item_end(code, m.end()))
    return code


def line_of(code, pos):
    return code.count("\n", 0, pos) + 1


class SourceFile:
    def __init__(self, src, path):
        self.path = path
        self.module = module_of(src, path)
        self.code = without_tests(strip_code(path.read_text(encoding="utf-8", errors="replace")))
        # Inline modules: (start, end, path) of each `mod name { ... }`, outermost first.
        self.inline = []
        for m in re.finditer(r"\bmod\s+(\w+)\s*\{", self.code):
            self.inline.append((m.end() - 1, matching_brace(self.code, m.end() - 1), m.group(1)))

    def module_at(self, pos):
        path = list(self.module)
        for start, end, name in self.inline:
            if start < pos < end:
                path.append(name)
        return tuple(path)

    def inline_modules(self):
        return {self.module_at(start + 1) for start, _, _ in self.inline}


def module_of(src, path):
    """The module path of a file below `src`, as a tuple of names."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def is_test_file(src, path):
    return path.name == "tests.rs" or "tests" in path.relative_to(src).parts[:-1]


def use_paths(tree):
    """The paths a `use` tree names: `crate::{a::b, c::{d, e}}` gives a::b, c::d and c::e."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    paths = []

    def walk(prefix, s):
        # Split `s` at top-level commas.
        parts, depth, cur = [], 0, ""
        for c in s:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            if c == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += c
        parts.append(cur)
        for part in parts:
            if not part:
                continue
            brace = part.find("{")
            if brace >= 0 and part.endswith("}"):
                head = [p for p in part[:brace].split("::") if p]
                walk(prefix + head, part[brace + 1:-1])
            else:
                paths.append(prefix + [p for p in part.split("::") if p])

    walk([], tree)
    return paths


PATH_RE = re.compile(r"(?<![\w$])((?:crate|super|self)(?:::(?:super|\w+))+)")


def references(sf):
    """(position, segments) of every path beginning with crate, super or self."""
    refs = []
    for m in re.finditer(r"\buse\s+([^;]+);", sf.code):
        for path in use_paths(m.group(1)):
            if path and path[0] in ("crate", "super", "self"):
                refs.append((m.start(), path))
    for m in PATH_RE.finditer(sf.code):
        refs.append((m.start(), m.group(1).split("::")))
    return refs


def resolve(here, path, modules, reexports=None):
    """The module a path at module `here` reaches: its longest prefix that is a module, then,
    where that module re-exports the next name (`pub use x::Name`), the module it comes from."""
    i = 0
    if path[0] == "crate":
        base, i = (), 1
    else:
        base = here
        if path[0] == "self":
            i = 1
        while i < len(path) and path[i] == "super":
            base, i = base[:-1], i + 1
    for seg in path[i:]:
        if base + (seg,) in modules:
            base = base + (seg,)
        elif reexports and (base, seg) in reexports:
            base = reexports[(base, seg)]
        else:
            break
    return base


def reexported(files, modules):
    """(module, name) -> the module a `pub use` of that module brings the name from."""
    found = {}
    for sf in files:
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", sf.code):
            here = sf.module_at(m.start())
            for path in use_paths(m.group(1)):
                if path and path[-1] != "*":
                    there = resolve(here, path[:-1] or path, modules)
                    if there != here:
                        found.setdefault((here, path[-1]), there)
    return found


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def import_cycles(root, src, files):
    modules = {sf.module for sf in files}
    for sf in files:
        modules |= sf.inline_modules()
    for m in list(modules):
        modules.update(m[:k] for k in range(len(m)))
    reexports = reexported(files, modules)
    edges, evidence = {}, {}
    for sf in files:
        for pos, path in references(sf):
            here = sf.module_at(pos)
            there = resolve(here, path, modules, reexports)
            k = 0
            while k < min(len(here), len(there)) and here[k] == there[k]:
                k += 1
            if k == len(here) or k == len(there):
                continue  # a module and its own ancestor or descendant
            a, b = (here[:k], here[k]), (there[:k], there[k])
            edges.setdefault(a, set()).add(b)
            where = f"{sf.path.relative_to(root)}:{line_of(sf.code, pos)}"
            evidence.setdefault((a, b), where)
    problems = []
    for component in cycles(edges):
        names = " <-> ".join("::".join(p + (n,)) for p, n in component)
        seen = [f"{'::'.join(a[0] + (a[1],))} -> {b[1]} at {evidence[(a, b)]}"
                for a in component for b in component if (a, b) in evidence]
        problems.append(f"{src.relative_to(root)}: import cycle {names} ({'; '.join(seen)})")
    return problems


def header_type(header):
    """The type an inherent impl header (`impl<T> a::Foo<T> where ...`) is for, or None."""
    h = re.sub(r"^\s*(unsafe\s+)?impl\s*", "", header)
    if h.startswith("<"):
        depth = 0
        for j, c in enumerate(h):
            depth += {"<": 1, ">": -1}.get(c, 0)
            if depth == 0:
                h = h[j + 1:]
                break
    h = re.split(r"\bwhere\b", h)[0]
    if re.search(r"\bfor\b(?!\s*<)", h):
        return None  # a trait impl
    h = re.sub(r"^\s*dyn\s+", "", h)
    m = re.match(r"\s*((?:\w+::)*)(\w+)", h)
    return m.group(2) if m else None


def room(src, path):
    """The files a type defined in `path` may have its inherent impls in (a test for a path)."""
    rel = path.relative_to(src)
    if rel.name in ("lib.rs", "main.rs") and len(rel.parts) == 1:
        return lambda p: p == path
    folder = path.parent if rel.name == "mod.rs" else path.with_suffix("")
    return lambda p: p == path or folder in p.parents


def scattered_impls(root, src, files):
    defs, impls = {}, []
    for sf in files:
        for m in re.finditer(r"\b(%s)\s+(\w+)" % "|".join(ITEM_KINDS), sf.code):
            defs.setdefault(m.group(2), []).append(sf.path)
        for m in re.finditer(r"(?m)^[ \t]*(?:unsafe\s+)?impl\b", sf.code):
            brace = sf.code.find("{", m.start())
            semi = sf.code.find(";", m.start())
            if brace < 0 or 0 <= semi < brace:
                continue
            name = header_type(sf.code[m.start():brace])
            if name:
                impls.append((name, sf.path, line_of(sf.code, m.start())))
    outside = {}
    for name, path, line in impls:
        homes = defs.get(name)
        if not homes:
            continue  # a type of another crate (an extension trait would be a trait impl)
        if any(room(src, home)(path) for home in homes):
            continue
        outside.setdefault((name, tuple(homes)), []).append(f"{path.relative_to(root)}:{line}")
    problems = []
    for (name, homes), places in sorted(outside.items()):
        where = " or ".join(str(h.relative_to(root)) for h in homes)
        problems.append(f"{where}: type {name} has inherent impls outside its room: "
                        + ", ".join(places))
    return problems


def long_functions(root, files, limit):
    found = []
    for sf in files:
        for m in re.finditer(r"\bfn\s+(\w+)", sf.code):
            brace = sf.code.find("{", m.end())
            semi = sf.code.find(";", m.end())
            if brace < 0 or 0 <= semi < brace:
                continue
            end = matching_brace(sf.code, brace)
            lines = line_of(sf.code, end) - line_of(sf.code, m.start()) + 1
            if lines > limit:
                found.append((lines, f"{sf.path.relative_to(root)}:{line_of(sf.code, m.start())}: "
                                     f"fn {m.group(1)} is {lines} lines"))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--long-functions", type=int, metavar="N",
                        help="also list functions longer than N lines (a report, not a failure)")
    args = parser.parse_args()
    root = args.root.resolve()
    sources = [p / "src" for p in sorted((root / "crates").glob("*")) if (p / "src").is_dir()]
    if (root / "fuzz" / "src").is_dir():
        sources.append(root / "fuzz" / "src")
    problems, long = [], []
    for src in sources:
        paths = sorted(f for f in src.rglob("*.rs") if "bin" not in f.relative_to(src).parts)
        files = [SourceFile(src, f) for f in paths if not is_test_file(src, f)]
        problems += import_cycles(root, src, files)
        problems += scattered_impls(root, src, files)
        if args.long_functions is not None:
            long += long_functions(root, files, args.long_functions)
    if long:
        print(f"functions over {args.long_functions} lines (a report, not a failure):")
        for _, text in sorted(long, key=lambda x: (-x[0], x[1])):
            print("  " + text)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} module problem(s)", file=sys.stderr)
        sys.exit(1)
    print(f"modules: no import cycle, every type's impls in its room ({len(sources)} crates)")


if __name__ == "__main__":
    main()
