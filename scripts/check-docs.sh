#!/usr/bin/env bash
# Checks that the documents name only files and Rust symbols that exist, where they say.
#
#   scripts/check-docs.sh                          # README.md and every .md below docs/
#   scripts/check-docs.sh docs/architecture.md     # some documents only
#   scripts/check-docs.sh --root DIR [FILE...]     # another tree (the self-test's fixtures)
#
# Every backticked token that looks like a repository path or a Rust symbol is checked against
# this checkout: a path must name exactly one file (from the repository root, `crates/`, or a
# crate's directory or `src/`), a bare file name one file (in the crate named beside it, if any),
# a symbol must be defined, and defined in one of the Rust files its sentence or table row names,
# if it names any. docs/testing.md ("The documents check") gives the rules. Prints each wrong
# token with its file and line, and exits 1 if there is any. Needs only bash and python3.
set -euo pipefail
CHECK_SCRIPTS=$(cd "$(dirname "$0")" && pwd)
export CHECK_SCRIPTS
cd "$CHECK_SCRIPTS/.."
if [ "${1:-}" = --root ]; then cd "$2"; shift 2; fi
if [ "$#" -eq 0 ]; then mapfile -t docs < <(find docs -name '*.md' | sort); set -- README.md "${docs[@]}"; fi
exec python3 - "$@" <<'PY'
import bisect
import collections
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, os.environ["CHECK_SCRIPTS"])
from rust_text import strip_code  # noqa: E402

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
# Build output, fuzzing data, and the self-test's fixture trees (scripts/check-selftest.sh).
SKIP_DIRS = ("target", ".git", "corpus", "artifacts", "check-fixtures")
RUST_DIRS = [d for d in ("crates", "fuzz", "tests") if os.path.isdir(d)]


def walk(top, keep):
    for base, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            if keep(name):
                yield os.path.join(base, name)


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
            code = strip_code(f.read(), keep_strings=True)
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

    def type_files(self, name, _cache={}):
        """Files holding an impl of `name` or the trait `name` itself."""
        if name not in _cache:
            _cache[name] = self.find_type_files(name)
        return _cache[name]

    def find_type_files(self, name):
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


def expand(token):
    """`a/{b,c}.rs` as a/b.rs and a/c.rs."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(",")
            for x in expand(token[:m.start()] + alt + token[m.end():])]


class Files:
    """Every file and directory of the checkout, and the crates they belong to."""

    def __init__(self, ix):
        self.all, self.by_name = set(), {}
        for base, dirs, files in os.walk("."):
            fixture = "check-fixtures" in base.split(os.sep)
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS or d == "check-fixtures"]
            self.all.add(os.path.normpath(base))
            for name in files:
                path = os.path.normpath(os.path.join(base, name))
                self.all.add(path)
                if not fixture:  # a fixture's files are not the ones a bare name means
                    self.by_name.setdefault(name, []).append(path)
        crates = sorted(os.listdir("crates")) if os.path.isdir("crates") else []
        self.crate_dirs = [os.path.join("crates", c) for c in crates
                           if os.path.isdir(os.path.join("crates", c))]
        self.packages = {}                # package, binary or library name -> crate directory
        for crate in self.crate_dirs + ["fuzz"]:
            cargo = os.path.join(crate, "Cargo.toml")
            if not os.path.isfile(cargo):
                continue
            with open(cargo, encoding="utf-8") as f:
                names = re.findall(r'^name\s*=\s*"([^"]+)"', f.read(), re.M)
            package = names[0] if names else None
            for name in names:
                if name == package or "-" in name:
                    self.packages[name] = crate
                    self.packages[name.replace("-", "_")] = crate

    def crate_of(self, path):
        for crate in self.crate_dirs + ["fuzz"]:
            if path == crate or path.startswith(crate + os.sep):
                return crate
        return None

    def locate(self, token):
        """The files a path names: itself from the repository root if it is there, else every
        reading of it below `crates/`, `fuzz/`, a crate's directory or a crate's `src/`."""
        t = os.path.normpath(token)
        if t.startswith(".."):
            return []
        if t in self.all:
            return [t]
        below = [os.path.join("crates", t), os.path.join("fuzz", t)]
        below += [os.path.join(c, t) for c in self.crate_dirs]
        below += [os.path.join(c, "src", t) for c in self.crate_dirs]
        return sorted({os.path.normpath(p) for p in below} & self.all)

    def rust_files(self, path):
        """The Rust sources a named file or directory stands for."""
        if path.endswith(".rs"):
            return {path}
        if path in self.by_name.get(os.path.basename(path), ()):
            return set()
        return {p for p in self.all if p.endswith(".rs") and p.startswith(path + os.sep)}


def crate_names(files, token):
    """The crate a token names by its package name, a Rust path or a path inside it (a bare
    file name names none: that is what a crate beside it is for)."""
    t = token.strip()
    if t in files.packages:
        return {files.packages[t]}
    head = t.split("::")[0]
    if "::" in t and "_" in head and head in files.packages:
        return {files.packages[head]}
    if "/" in t and re.fullmatch(r"[\w./{},-]+", t) and not t.startswith("/"):
        crates = set()
        for alt in expand(t):
            found = files.locate(alt)
            if len(found) == 1 and files.crate_of(found[0]):
                crates.add(files.crate_of(found[0]))
        return crates
    return set()


def plural(crates):
    return ", ".join(sorted(crates))


def resolve_path(files, token, context):
    """(files named, error) of a path token. A path must name exactly one file: where it could
    be read below several crates, the crate named beside it decides."""
    found_all = []
    for alt in expand(token):
        found = files.locate(alt)
        if not found:
            return [], "no such file or directory"
        if len(found) > 1:
            inside = [p for p in found if files.crate_of(p) in context[0]]
            if len(inside) != 1:
                return [], "names %d files or folders (%s): write the crate's part of the " \
                    "path, or name the crate beside it" % (len(found), plural(found))
            found = inside
        found_all += found
    return found_all, None


def resolve_bare(files, name, context):
    """(files named, error) of a bare file name: the file of that name at the repository root;
    else the one file of that name (a `.rs` one in the crate named beside it, if any is)."""
    if name in files.all:
        return [name], None
    found = sorted(files.by_name.get(name, []))
    if not found:
        return [], "no file of that name in the repository"
    crates, unit = context
    if name.endswith(".rs") and crates:
        inside = [p for p in found if files.crate_of(p) in crates]
        if not inside:
            return [], "%s is not in %s, the crate(s) its %s names: write its path" % (
                plural(found), plural(crates), unit)
        found = inside
    if len(found) > 1:
        return [], "%d files have that name (%s): write its path, or name its crate beside it" % (
            len(found), plural(found))
    return found, None


def check_token(ix, files, token, context):
    """(error, files named) for a token: an error if it names something missing, or a path
    that is not exactly one file."""
    t = token.strip()
    if not t or re.search(r"\s", t) or "<" in t and not re.fullmatch(r"[\w:]+<[^<>]*>", t):
        return None, []
    if "://" in t or t.startswith(("/", "-", "$", "~")):
        return None, []
    # Paths.
    if "/" in t:
        ext = re.search(r"\.(\w+)$", t)
        first = t.split("/")[0]
        looks = (ext and ext.group(1) in FILE_EXTENSIONS) or first in TOP_DIRS or \
            first in ix.crates or t.endswith("/") or first == ".."
        if not looks or not re.fullmatch(r"[\w./{},-]+", t):
            return None, []
        if first in ("target", "data"):
            return None, []  # build output and data directories, made by running things
        if first == ".." or t.startswith("../"):
            return "a path outside the repository", []
        named, error = resolve_path(files, t, context)
        return error, named
    # A bare file name: a source, script or document must exist and be the one meant; other
    # kinds (a `.toml` alone is an example file the reader makes) are not checked.
    m = re.fullmatch(r"[\w-]+\.(%s)" % "|".join(FILE_EXTENSIONS), t)
    if m:
        if m.group(1) not in ("rs", "md", "sh"):
            return None, []
        named, error = resolve_bare(files, t, context)
        return error, named
    if t in files.packages and "-" in t:
        return None, [files.packages[t]]
    return check_symbol(ix, t), []


REAL_KINDS = {"struct", "enum", "trait", "type", "fn", "const", "static", "union", "macro"}


def def_files(ix, token):
    """The files defining what a symbol token names (empty: not a Rust item, or not ours)."""
    t = token.strip()
    if t in EXTERNAL_NAMES or t.split("::")[0] in EXTERNAL_CRATES:
        return set()

    def of(name, kinds=REAL_KINDS):
        return {p for p, k in ix.defs.get(name, ()) if k in kinds}

    def variant_homes(name):
        return {p for e, vs in ix.variants.items() if name in vs for p in of(e, {"enum"})}

    m = re.fullmatch(r"([A-Z]\w*)\.([a-z_]\w*)", t)
    if m:
        return of(m.group(1), {"struct", "union"})
    m = re.fullmatch(r"([a-z_]\w*)\(\)", t)
    if m:
        return of(m.group(1), {"fn"})
    segs = [clean_segment(s) for s in t.split("::")]
    if not all(re.fullmatch(r"[A-Za-z_]\w*", s) for s in segs):
        return set()
    if len(segs) > 1 and not is_camel(segs[0]):
        return set()  # `module::Name` says where it is itself (check_path_symbol checks that)
    camel = [i for i, s in enumerate(segs) if is_camel(s)]
    if camel and camel[0] + 1 < len(segs):
        ty, member = segs[camel[0]], segs[camel[0] + 1]
        if member in ix.variants.get(ty, ()):
            return of(ty, {"enum"})
        return {p for p in ix.type_files(ty) if ix.defined(member, {p}, {"fn", "const", "type"})}
    name = segs[camel[0]] if camel else segs[-1]
    if is_camel(name):
        return of(name) or variant_homes(name)
    snake = r"[a-z][a-z0-9]*(_[a-z0-9]+)+|[A-Z][A-Z0-9]*(_[A-Z0-9]+)+"
    if len(segs) == 1 and not re.fullmatch(snake, t):
        return set()
    return of(name)


def check_beside(ix, files, token, named):
    """An error when a symbol's sentence names Rust files and none of them defines it."""
    sources = set()
    for path in named:
        sources |= files.rust_files(path)
    if not sources:
        return None
    homes = def_files(ix, token)
    if not homes or homes & sources:
        return None
    return "defined in %s, not in %s named beside it" % (plural(homes), plural(named))


def check_symbol(ix, t):
    """The checks of a name that is not a path (a Rust item, a setting, a package)."""
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



Token = collections.namedtuple(
    "Token", "line text sentence paragraph section in_heading index paired")
ABBREVIATIONS = re.compile(r"(?:\be\.g|\bi\.e|\betc|\bvs|\bcf)$")


def tokens(path):
    """Each backticked token of a document, with the units it is in.

    A sentence ends at `.`, `!` or `?` followed by a space and a capital, a backtick or an
    opening bracket, or at `;` and a space; a table row is one sentence and one paragraph; a
    list item or a heading starts a paragraph, a blank line ends one; a section is its
    heading's line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # Blank out fenced code blocks, keeping their lines so line numbers stay true.
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.M | re.S)
    masked = re.sub(r"`[^`]+`", lambda m: "`" + re.sub(r"[^\n]", "x", m.group(0)[1:-1]) + "`",
                    text)
    ends = [m.start() for m in re.finditer(r"[.!?][\"')*]*\s+(?=[A-Z`(\[*\"])|;\s", masked)
            if not ABBREVIATIONS.search(masked[max(0, m.start() - 6):m.start()])]
    lines = text.split("\n")
    para, sect, row = [], [], []
    p, s = 0, 0
    for line in lines:
        stripped = line.strip()
        heading = re.match(r"#{1,6}\s", stripped)
        is_row = stripped.startswith("|")
        if not stripped or heading or is_row or re.match(r"([-*+]|\d+[.)])\s", stripped):
            p += 1
        if heading:
            s += 1
        para.append(p)
        sect.append(s)
        row.append(is_row)
        if heading or is_row:
            p += 1
    spans = list(re.finditer(r"`([^`]+)`", text))
    for k, m in enumerate(spans):
        n = text.count("\n", 0, m.start())
        sentence = (para[n], -1) if row[n] else (para[n], bisect.bisect(ends, m.start()))
        heading = ("h", sect[n])
        # "`name` in `file`": the name is in that file.
        between = text[m.end():spans[k + 1].start()] if k + 1 < len(spans) else ""
        paired = re.fullmatch(r"\s+in\s+", between)
        yield Token(n + 1, m.group(1), sentence, para[n], heading,
                    lines[n].lstrip().startswith("#"), k, k + 1 if paired else None)


def check_document(ix, files, path):
    found = list(tokens(path))
    # The crates each sentence, paragraph and section heading names.
    named = {}
    for t in found:
        crates = crate_names(files, t.text)
        for unit in (t.sentence, t.paragraph) + ((t.section,) if t.in_heading else ()):
            named.setdefault(unit, set()).update(crates)
    errors, beside, resolved = [], {}, {}
    for t in found:
        context = (set(), None)
        for unit, word in ((t.sentence, "sentence"), (t.paragraph, "paragraph"),
                           (t.section, "section's heading")):
            if named.get(unit):
                context = (named[unit], word)
                break
        error, paths = check_token(ix, files, t.text, context)
        if error:
            errors.append((t.line, t.text, error))
        beside.setdefault(t.sentence, set()).update(paths)
        resolved[t.index] = paths
    bad = {(line, token) for line, token, _ in errors}
    for t in found:
        if (t.line, t.text) in bad:
            continue
        paths = beside.get(t.sentence, ())
        if t.paired is not None and resolved.get(t.paired):
            paths = resolved[t.paired]
        error = check_beside(ix, files, t.text, paths)
        if error:
            errors.append((t.line, t.text, error))
    return sorted(errors)


def main(files_to_check):
    ix = Index()
    files = Files(ix)
    missing = 0
    for path in files_to_check:
        for line, token, error in check_document(ix, files, path):
            missing += 1
            print("%s:%d: `%s`: %s" % (path, line, token, error))
    sys.stdout.flush()
    if missing:
        print("%d wrong name(s)" % missing, file=sys.stderr)
        return 1
    return 0


sys.exit(main(sys.argv[1:]))
PY
