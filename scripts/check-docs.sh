#!/usr/bin/env bash
# Checks that the documents name only files and Rust symbols that exist.
#
#   scripts/check-docs.sh                          # README.md, every docs/*.md and docs/design/*.md
#   scripts/check-docs.sh docs/architecture.md     # some documents only
#
# Every backticked token that looks like a repository path or a Rust symbol is checked against
# this checkout: paths on the filesystem (from the repository root, `crates/`, `crates/*/` or
# `crates/*/src/`), symbols by their definition in the Rust sources. Prints each missing token
# with its file and line, and exits 1 if there is any. Needs only bash and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then set -- README.md docs/*.md docs/design/*.md; fi
exec python3 - "$@" <<'PY'
import os
import re
import sys

ROOT = os.getcwd()

# Names from other crates (and the system) that the documents cite on purpose. Nothing here is
# checked, so keep the list to what the documents really name.
EXTERNAL_CRATES = {
    "tokio",        # the pull timer: `tokio::time::interval`
    "ring",         # the process keys' check: `ring::hmac::verify`
    "subtle",       # constant-time token comparison: `subtle::ConstantTimeEq`
    "redb",         # the store's seam: `redb::Database::create`
    "rand_distr",   # geoctl's workload: `rand_distr::Zipf`
    "u64", "i64",   # primitive types: `u64::MAX`
}
EXTERNAL_NAMES = {
    # std: types the layout notes compare with, `char::is_control` for ids
    "Box", "Vec", "ManuallyDrop", "RwLock", "BTreeSet", "None", "Eq", "Debug", "char::is_control",
    # redb: the store's database, its storage backend seam, a commit returning
    "Database", "StorageBackend", "commit()",
    # tokio's and turmoil's listeners, in the simulation's seam table
    "TcpListener",
    # turmoil: crashing a simulated host; its disk-fault setting the simulation leaves off
    "Sim::crash", "io_error_probability",
    # rand: the simulation's seeded generator
    "StdRng",
    # rustls: the client certificate verifier
    "WebPkiClientVerifier",
    # hashbrown and indexmap: the tables under and beside `IdTable`
    "HashTable", "IndexMap",
    # datasketches: the HyperLogLog crate not taken (architecture.md, "Decisions")
    "HllSketch::update", "HllUnion",
    # the kernel's append flag the log does without; glibc's allocator in a profile
    "O_APPEND", "malloc_consolidate",
    # HTTP request headers (RFC 7240, RFC 9110), not Rust names
    "Prefer", "Accept",
    # the variable geoctl does not read (operations.md says why)
    "GEOCOUNT_TOKEN",
    # Redis's commands and configuration parameters, as clients send them (api.md, "Redis
    # protocol at a shard node"); the command table is crates/resp/src/table.rs
    "PFADD", "DECR", "UNLINK", "APPEND", "proto-max-bulk-len",
}
CONFIG_SECTIONS = {"global", "shard", "sync", "http", "aggregator", "memory", "trending", "tls",
                   "auth", "wan", "resp"}
FILE_EXTENSIONS = ("rs", "toml", "sh", "md", "lock", "txt", "py", "yml", "yaml", "json")
TOP_DIRS = ("crates", "config", "scripts", "tests", "fuzz", "docs", "deploy")
RUST_DIRS = [d for d in ("crates", "fuzz", "tests") if os.path.isdir(d)]


def walk(top, keep):
    for base, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("target", ".git", "corpus", "artifacts")]
        for name in files:
            if keep(name):
                yield os.path.join(base, name)


def strip_comments(text):
    """Rust source without comments; strings and line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or text.startswith('r"', i) or text.startswith('r#"', i):
            hashes = ""
            if c == "r":
                hashes = "#" if text[i + 1] == "#" else ""
                j = i + 2 + len(hashes)
                end = text.find('"' + hashes, j)
                j = n if end < 0 else end + 1 + len(hashes)
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            out.append(text[i:j])
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:i + 4])
            out.append(m.group(0))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def body_after(code, start):
    """The text inside the braces opening at or after `start` (None for `;` first)."""
    i = start
    while i < len(code) and code[i] not in "{;":
        i += 1
    if i >= len(code) or code[i] == ";":
        return None
    depth, j = 0, i
    while j < len(code):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return code[i + 1:j]
        j += 1
    return code[i + 1:]


def top_level_items(body):
    """Split an enum or struct body at its top-level commas."""
    items, depth, cur = [], 0, []
    for c in body:
        if c in "({[<":
            depth += 1
        elif c in ")}]>":
            depth -= 1
        if c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    items.append("".join(cur))
    return items


def first_ident(item):
    item = re.sub(r"#\s*\[[^\]]*\]", " ", item)
    item = re.sub(r"^\s*pub(\([^)]*\))?\s+", "", item)
    m = re.match(r"\s*([A-Za-z_]\w*)", item)
    return m.group(1) if m else None


DEF_RE = re.compile(
    r"\b(?:(?:const|async|unsafe|extern\s+\"[^\"]*\")\s+)*"
    r"(struct|enum|trait|type|fn|const|static|mod|union)\s+(?:mut\s+)?(?:r#)?([A-Za-z_]\w*)")
USE_RE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")
FIELD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?([a-z_][a-z0-9_]*)\s*:(?!:)", re.M)


class Index:
    def __init__(self):
        self.code = {}                    # file -> source without comments
        self.defs = {}                    # name -> {(file, kind)}
        self.variants = {}                # enum name -> {variant}
        self.fields = {}                  # struct name -> {field}
        self.words = set()                # every identifier-like word in code and config
        self.crates = {}                  # crate name as code spells it -> crate directory
        for top in RUST_DIRS:
            for path in walk(top, lambda n: n.endswith(".rs")):
                self.add_rust(path)
        for path in walk(".", lambda n: n.endswith((".toml", ".sh")) and n != "check-docs.sh"):
            with open(path, encoding="utf-8", errors="replace") as f:
                self.words.update(re.findall(r"[A-Za-z0-9_][A-Za-z0-9_-]*", f.read()))
        cargos = [c for top in RUST_DIRS for c in walk(top, lambda n: n == "Cargo.toml")]
        for cargo in cargos:
            crate = os.path.dirname(cargo)
            if not os.path.isdir(os.path.join(crate, "src")):
                continue
            with open(cargo, encoding="utf-8") as f:
                text = f.read()
            names = {os.path.basename(crate)}
            names.update(re.findall(r'^name\s*=\s*"([^"]+)"', text, re.M))
            for name in names:
                name = name.replace("-", "_")
                self.crates.setdefault(name, crate)
                if name.startswith("geocount_"):
                    self.crates.setdefault(name[len("geocount_"):], crate)

    def add_rust(self, path):
        with open(path, encoding="utf-8", errors="replace") as f:
            code = strip_comments(f.read())
        self.code[path] = code
        self.words.update(re.findall(r"[A-Za-z_]\w*", code))
        for literal in re.findall(r'"((?:\\.|[^"\\])*)"', code):
            self.words.update(re.findall(r"[A-Za-z0-9_][A-Za-z0-9_-]*", literal))
        for m in DEF_RE.finditer(code):
            kind, name = m.group(1), m.group(2)
            self.defs.setdefault(name, set()).add((path, kind))
            if kind in ("enum", "struct", "union"):
                body = body_after(code, m.end())
                if body is None:
                    continue
                if kind == "enum":
                    names = {first_ident(item) for item in top_level_items(body)}
                    self.variants.setdefault(name, set()).update(x for x in names if x)
                else:
                    self.fields.setdefault(name, set()).update(
                        f for f in (first_ident(i) for i in top_level_items(body)) if f)
        for m in USE_RE.finditer(code):
            for name in re.findall(r"[A-Za-z_]\w*", m.group(1)):
                if name not in ("self", "crate", "super", "as"):
                    self.defs.setdefault(name, set()).add((path, "use"))
        for m in re.finditer(r"\bmacro_rules!\s*(\w+)", code):
            self.defs.setdefault(m.group(1), set()).add((path, "macro"))

    def defined(self, name, files=None, kinds=None):
        for path, kind in self.defs.get(name, ()):
            if (files is None or path in files) and (kinds is None or kind in kinds):
                return True
        return False

    def type_files(self, name):
        """Files holding an impl of `name` or the trait `name` itself."""
        pat = re.compile(r"\bimpl\b[^{;]*?\b%s\b|\btrait\s+%s\b" % (name, name))
        return {p for p, code in self.code.items() if pat.search(code)}

    def member(self, type_name, member):
        """`Type::member`: an associated fn or const, or a variant of an enum."""
        if member in self.variants.get(type_name, ()):
            return True
        files = self.type_files(type_name)
        return self.defined(member, files, {"fn", "const", "type"})

    def module_files(self, crate_dir, segments):
        """The files of module `crate::a::b` (itself and its submodules), or None."""
        src = os.path.join(crate_dir, "src")
        files = {os.path.join(src, "lib.rs"), os.path.join(src, "main.rs")}
        files = {f for f in files if f in self.code}
        here = src
        for seg in segments:
            as_file = os.path.join(here, seg + ".rs")
            as_dir = os.path.join(here, seg, "mod.rs")
            if as_file in self.code or as_dir in self.code:
                here = os.path.join(here, seg)
                files = {p for p in self.code
                         if p in (as_file, as_dir) or p.startswith(here + os.sep)}
            elif any(re.search(r"\bmod\s+%s\s*\{" % seg, self.code[f]) for f in files):
                continue  # an inline module: its items are in the same files
            else:
                return None
        return files


def is_camel(s):
    return re.fullmatch(r"[A-Z][A-Za-z0-9]*", s) is not None and re.search(r"[a-z]", s)


def clean_segment(s):
    s = re.sub(r"\(.*\)$", "", s)       # call arguments or a variant's fields
    s = re.sub(r"<.*>$", "", s)         # generic arguments
    return s


def check_path_symbol(ix, token):
    """`a::b::C`, `Type::member`, `crate::Name`. Returns an error or None."""
    segs = [clean_segment(s) for s in token.split("::")]
    if not all(re.fullmatch(r"[A-Za-z_]\w*", s) for s in segs):
        return None
    if segs[0] in EXTERNAL_CRATES or token in EXTERNAL_NAMES:
        return None
    head = segs[0]
    if is_camel(head):
        if not ix.defined(head) and head not in EXTERNAL_NAMES:
            return "type %s is not defined" % head
        if len(segs) == 2 and not ix.member(head, segs[1]):
            return "%s has no associated fn, const or variant %s" % (head, segs[1])
        return None
    # Leading lowercase segments: a crate of the workspace, or a module of one.
    roots = []
    if head in ix.crates:
        roots.append((ix.crates[head], segs[1:]))
    for crate_dir in sorted(set(ix.crates.values())):
        roots.append((crate_dir, segs))
    for crate_dir, rest in roots:
        mods = []
        for s in rest[:-1]:
            if is_camel(s):
                break
            mods.append(s)
        files = ix.module_files(crate_dir, mods)
        if files is None or (not mods and rest is segs):
            continue
        tail = rest[len(mods):]
        if len(tail) == 1:
            if ix.defined(tail[0], files):
                return None
        elif len(tail) == 2 and ix.defined(tail[0], files) and ix.member(tail[0], tail[1]):
            return None
    if head in ix.crates:
        return "not found in crate %s" % ix.crates[head]
    return "no module %s defines it" % "::".join(segs[:-1])


def resolve_path(token):
    """Whether a path token names something in the repository."""
    for prefix, alts in re.findall(r"(\{([^{}]*)\})", token)[:1]:
        return all(resolve_path(token.replace(prefix, alt, 1)) for alt in alts.split(","))
    bases = [".", "crates", "fuzz"]
    for crate in sorted(os.listdir("crates")):
        bases += [os.path.join("crates", crate), os.path.join("crates", crate, "src")]
    for base in bases:
        full = os.path.normpath(os.path.join(base, token))
        if full.startswith(".."):
            continue
        if os.path.exists(full):
            return True
    return False


def basename_exists(name, _cache={}):
    if not _cache:
        for path in walk(".", lambda n: True):
            _cache[os.path.basename(path)] = path
    return name in _cache


def check_token(ix, token):
    """An error for a token naming something missing; None if it exists or is not checked."""
    t = token.strip()
    if not t or re.search(r"\s", t) or "<" in t and not re.fullmatch(r"[\w:]+<[^<>]*>", t):
        return None
    if "://" in t or t.startswith(("/", "-", "$", "~")):
        return None
    # Paths.
    if "/" in t:
        ext = re.search(r"\.(\w+)$", t)
        first = t.split("/")[0]
        looks = (ext and ext.group(1) in FILE_EXTENSIONS) or first in TOP_DIRS or \
            first in ix.crates or t.endswith("/") or first == ".."
        if not looks or not re.fullmatch(r"[\w./{},-]+", t):
            return None
        if first in ("target", "data"):
            return None  # build output and data directories, made by running things
        if first == ".." or t.startswith("../"):
            return "a path outside the repository"
        return None if resolve_path(t) else "no such file or directory"
    # A bare file name: a source, script or document must exist somewhere; other kinds (a
    # `.toml` alone is an example file the reader makes) are not checked.
    m = re.fullmatch(r"[\w-]+\.(%s)" % "|".join(FILE_EXTENSIONS), t)
    if m:
        if m.group(1) not in ("rs", "md", "sh") or basename_exists(t):
            return None
        return "no file of that name in the repository"
    # Rust paths and associated items.
    if "::" in t:
        return check_path_symbol(ix, t)
    # `Type.field`.
    m = re.fullmatch(r"([A-Z]\w*)\.([a-z_]\w*)", t)
    if m:
        if not ix.defined(m.group(1)):
            return "type %s is not defined" % m.group(1)
        if m.group(2) not in ix.fields.get(m.group(1), ()):
            return "%s has no field %s" % m.groups()
        return None
    # `section.key` of the topology file.
    m = re.fullmatch(r"([a-z]+)\.([a-z_]+)", t)
    if m and m.group(1) in CONFIG_SECTIONS:
        return None if m.group(2) in ix.words else "no setting %s" % m.group(2)
    # A function.
    m = re.fullmatch(r"([a-z_]\w*)\(\)", t)
    if m:
        if t in EXTERNAL_NAMES or ix.defined(m.group(1), kinds={"fn", "use"}):
            return None
        return "fn %s is not defined" % m.group(1)
    t = clean_segment(t)
    if t in EXTERNAL_NAMES:
        return None
    # A type, trait or variant.
    if is_camel(t):
        if ix.defined(t) or any(t in v for v in ix.variants.values()):
            return None
        return "type %s is not defined" % t
    # snake_case and SCREAMING_CASE names: a definition, or a word the code or config uses
    # (setting keys, JSON fields, metric names without their prefix and suffix).
    if re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+|[A-Z][A-Z0-9]*(_[A-Z0-9]+)+|[A-Z]{4,}", t):
        bare = re.sub(r"^geocount_(shard|datacenter|global)_", "", t)
        bare = re.sub(r"_total$", "", bare)
        camel = "".join(w.capitalize() for w in t.split("_"))
        if ix.defined(t) or t in ix.words or bare in ix.words or \
                any(camel in v for v in ix.variants.values()):
            return None
        return "no definition or use of %s in the code" % t
    # Package and binary names.
    if re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)+", t):
        if t in ix.words or any(os.path.exists(os.path.join(c, "src", "bin", t + ".rs"))
                                for c in set(ix.crates.values())):
            return None
        return "no package, binary or name %s in the code" % t
    return None


def tokens(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # Blank out fenced code blocks, keeping their lines so line numbers stay true.
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.M | re.S)
    for m in re.finditer(r"`([^`]+)`", text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def main(files):
    ix = Index()
    missing = 0
    for path in files:
        for line, token in tokens(path):
            error = check_token(ix, token)
            if error:
                missing += 1
                print("%s:%d: `%s`: %s" % (path, line, token, error))
    sys.stdout.flush()
    if missing:
        print("%d missing name(s)" % missing, file=sys.stderr)
        return 1
    return 0


sys.exit(main(sys.argv[1:]))
PY
