#!/usr/bin/env bash
# Runs every example of the README's tour ("A five-minute tour") in order, as a reader would:
# a fresh `scripts/run-local.sh config/local.toml --fresh`, then each command, checking that it
# answers as the README prints it (the launcher's table, the statuses and JSON shapes in the
# examples' comments, and what the list below expects of each). Values that vary (PIDs,
# versions, staleness, timestamps) are compared by shape. The list is compared with the README
# first, so the two cannot drift: an example added, changed or moved in one but not the other
# fails the run.
#
#   scripts/readme-examples.sh                           # a release build, as the README runs it
#   RUN_LOCAL_PROFILE=debug scripts/readme-examples.sh   # the debug binaries (scripts/test.sh)
#   scripts/readme-examples.sh --check                   # only compare the list with the README
#
# The cluster keeps its data under data/readme-examples (not the reader's data/local). Needs the
# ports of config/local.toml free, curl, python3, and redis-cli and redis-benchmark (Debian's
# redis-tools, which scripts/resp-clients.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

README = "README.md"
TOPOLOGY = "config/local.toml"
DATA_DIR = "data/readme-examples"
# How long a read may take to show what the examples before it wrote (the tiers pull every
# 50-100 ms; a person reading the README takes longer than that between two commands).
CONVERGE_S = 15.0


class Expect:
    """What one example must answer.

    status: the HTTP status (curl); exit: the exit status (anything else);
    json: a check of the JSON answer (curl); out: a regular expression its standard output
    must match; wait: a read, tried again until it answers as expected (CONVERGE_S at most);
    settle: seconds to pause after it; interrupt: run it this many seconds, then Ctrl-C (a
    command that refreshes until interrupted).
    """

    def __init__(self, status=None, exit=0, json=None, out=None, wait=False, settle=0.0,
                 interrupt=None):
        self.status, self.exit, self.json, self.out = status, exit, json, out
        self.wait, self.settle, self.interrupt = wait, settle, interrupt


def has(*keys):
    return lambda j: all(k in j for k in keys)


# The tour's commands, verbatim and in order, each with what it must answer.
EXAMPLES = [
    ("""curl -X POST localhost:7101/counter -d '{"id": "tweet:1:likes", "numberOfShards": 2}'""",
     Expect(status=201, json=lambda j: j["id"] == "tweet:1:likes" and j["numberOfShards"] == 2)),
    ("""curl -X PATCH 'localhost:7201/counter/tweet:1:likes/write?op=INCREMENT' -d '{"delta": 5}'""",
     Expect(status=200, json=lambda j: j["value"] == 5 and j["slot"].startswith("DC_ASIA_0_VAL_"))),
    ("""curl -X PATCH 'localhost:7102/counter/tweet:1:likes/write?op=DECREMENT' -H 'Idempotency-Key: req-81'""",
     Expect(status=200, json=lambda j: j["value"] == -1 and j["slot"].startswith("DC_USA_0_VAL_"))),
    ("""curl 'localhost:7000/counter/tweet:1:likes'""",
     Expect(status=200, json=lambda j: set(j["datacenters"]) == {"USA_0", "ASIA_0", "EUROPE_0"},
            wait=True)),
    ("""curl 'localhost:7000/counter/tweet:1:likes?max_staleness_ms=500&allow_partial=true'""",
     Expect(status=200, json=lambda j: j["value"] == 4, wait=True)),
    ("""curl 'localhost:7100/counter/tweet:1:likes'""",
     Expect(status=200, json=lambda j: len(j["slots"]) == 3, wait=True)),
    ("""curl 'localhost:7000/counter/tweet:1:likes?window=300'""",
     Expect(status=200, json=lambda j: j["value"] == 4 and j["window"]["seconds"] == 300,
            wait=True)),
    ("""curl -X POST localhost:7101/counter -d '{"id": "page:home:visitors", "type": "unique"}'""",
     Expect(status=201, json=lambda j: j["type"] == "unique")),
    ("""curl -X PATCH 'localhost:7201/counter/page:home:visitors/write?op=INCREMENT' -d '{"item": "user-42"}'""",
     Expect(status=200, json=lambda j: j["value"] == 1)),
    ("""curl 'localhost:7000/counter/page:home:visitors'""",
     Expect(status=200, json=lambda j: j["value"] == 1, wait=True)),
    # A write keeps history only at a node that holds the description, which spreads in about
    # a second (api.md, "History"): a reader takes that long to type the next command.
    ("""curl -X POST localhost:7101/counter -d '{"id": "page:home:views", "history": [{"stepSeconds": 3600, "keepSeconds": 86400}]}'""",
     Expect(status=201, json=lambda j: j["history"] == [{"stepSeconds": 3600, "keepSeconds": 86400}],
            settle=2.0)),
    ("""curl -X PATCH 'localhost:7301/counter/page:home:views/write?op=INCREMENT'""",
     Expect(status=200, json=lambda j: j["value"] == 1)),
    ("""curl -X POST localhost:7101/counter -d '{"id": "api:quota", "max": 10}'""",
     Expect(status=201, json=lambda j: j["max"] == 10)),
    ("""curl -X POST localhost:7201/counters/api:quota/increment -d '{"delta": 10}'""",
     Expect(status=200, json=lambda j: j["value"] == 10)),
    ("""curl -X POST localhost:7301/counters/api:quota/increment""",
     Expect(status=409, json=lambda j: j["bound"] == "max" and j["limit"] == 10)),
    ("""curl -X PATCH 'localhost:7301/counter/%23geo/write?op=INCREMENT' -d '{"delta": 7}'""",
     Expect(status=200, json=lambda j: j["id"] == "#geo" and j["value"] == 7)),
    ("""curl 'localhost:7000/topk?k=10&prefix=%23&window=300'""",
     Expect(status=200, json=lambda j: j["datacenters"]["EUROPE_0"]["top"] == j["top"],
            wait=True)),
    ("""curl 'localhost:7000/trending?prefix=%23'""",
     Expect(status=200, json=lambda j: j["window"]["seconds"] == 300, wait=True)),
    ("""curl 'localhost:7000/datacenters'""",
     Expect(status=200, json=lambda j: all(d["heard"] for d in j["datacenters"].values()))),
    # The world total through a USA_0 node, this write counted: 4 + 5.
    ("""redis-cli -p 7111 INCRBY tweet:1:likes 5""", Expect(out=r"^9\n$")),
    ("""redis-cli -p 7211 GET tweet:1:likes""", Expect(out=r"^9\n$", wait=True)),
    ("""redis-benchmark -p 7111 -t incr,get -r 100000 -P 16 -q""",
     Expect(out=r"GET: [\d.]+ requests per second(.|\n)*INCR: [\d.]+ requests per second")),
    ("""target/release/geoctl create tweet:2:likes --shards 2""",
     Expect(out=r"^created counter tweet:2:likes .*\n(.|\n)*numberOfShards +2\n")),
    ("""target/release/geoctl incr tweet:2:likes --delta 3 --key req-82""",
     Expect(out=r"^counter tweet:2:likes \+3 ")),
    ("""target/release/geoctl get tweet:2:likes""",
     Expect(out=r"\nvalue +3\ncomplete +yes\n", wait=True)),
    ("""target/release/geoctl history page:home:views --step 3600""",
     Expect(out=r"\n  \d+  1\n", wait=True)),
    ("""target/release/geoctl sum tweet: --window 3600""",
     Expect(out=r"\nsum +12\ncounters +2\ncomplete +yes\n", wait=True)),
    ("""target/release/geoctl top --prefix '#' --window 300""",
     Expect(out=r"\n +1  #geo +7 +- +- +7\n", interrupt=3.0)),
    ("""target/release/geoctl top --trending --once""",
     Expect(out=r"^trending \"#\": at least 5, the last 300 s(.|\n)*\n +1  #geo +7 ")),
    ("""target/release/geoctl status""",
     Expect(out=r"\nhealthy: 13 lines, ", wait=True)),
    ("""target/release/geoctl lag --samples 300""",
     Expect(out=r"\nsamples +300\ntimed out +0 (.|\n)*\(300 visible\):\n  p50 +[\d.]+ ms\n")),
    ("""target/release/geoctl load --duration-secs 8 --path batch""",
     Expect(out=r"\nexact: \d+ counters, global totals equal the acknowledged deltas")),
]


def strip_comment(line):
    """`line` without its trailing `# ...` comment (a `#` inside quotes is kept); the comment."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def section(text, title):
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def tour(readme):
    """The tour's commands with their comments, in order: every line of its ```sh blocks."""
    examples = []
    for block in re.findall(r"```sh\n(.*?)```", section(readme, "A five-minute tour"), re.S):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                examples.append(strip_comment(line))
    return examples


def compare_list(readme):
    printed = [command for command, _ in tour(readme)]
    listed = [command for command, _ in EXAMPLES]
    if printed == listed:
        return True
    print("readme-examples: the README's tour and this script's list differ:", file=sys.stderr)
    for i in range(max(len(printed), len(listed))):
        a = printed[i] if i < len(printed) else "(none)"
        b = listed[i] if i < len(listed) else "(none)"
        if a != b:
            print(f"  example {i + 1}:\n    README: {a}\n    script: {b}", file=sys.stderr)
    return False


ANY = "\u0000any"


def shape(comment):
    """The HTTP status (or None) and JSON shape a comment prints (`409 {"bound": "max", ...}`):
    `<...>` stands for any value, `...` for more keys; None when it prints no object."""
    start = comment.find("{")
    if start < 0:
        return None, None
    status = re.search(r"\b([1-5]\d\d)\s*$", comment[:start])
    depth = 0
    for end, c in enumerate(comment[start:], start):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth == 0:
            break
    text = re.sub(r"<[^>]*>", lambda _: json.dumps(ANY), comment[start:end + 1])
    text = re.sub(r",\s*\.\.\.", "", text)
    text = re.sub(r"\[\s*\.\.\.\s*\]", "[]", text)
    return (int(status.group(1)) if status else None), json.loads(text)


def matches(pattern, value):
    if pattern == ANY:
        return True
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            k in value and matches(v, value[k]) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(value, list) and len(pattern) == len(value) and all(
            matches(p, v) for p, v in zip(pattern, value))
    return pattern == value


def launcher_block(readme):
    after = readme.index("and prints (a real run):")
    return re.search(r"```\n(.*?)```", readme[after:], re.S).group(1).splitlines()


def normalized(line):
    # PIDs (and counts) vary; the data directory is this run's own.
    line = line.replace(DATA_DIR, "data/local")
    return " ".join("N" if word.isdigit() else word for word in line.split())


def compare_launcher(printed, actual):
    """Every line the README prints, in order, by shape; `...` stands for any lines."""
    actual = [normalized(line) for line in actual]
    i = 0
    for k, line in enumerate(printed):
        if line.strip() == "...":
            following = normalized(printed[k + 1]) if k + 1 < len(printed) else None
            while i < len(actual) and actual[i] != following:
                i += 1
            continue
        if i >= len(actual) or actual[i] != normalized(line):
            got = actual[i] if i < len(actual) else "(nothing more)"
            return f"the README prints {line.strip()!r}; the launcher printed {got!r}"
        i += 1
    return None


def ports_in_use():
    with open(TOPOLOGY) as f:
        ports = sorted({int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", f.read())})
    busy = []
    for port in ports:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    return busy


def run_once(command, expect, bin_dir, scratch):
    """Runs `command` once; None when it answered as expected, else what it answered."""
    command = command.replace("target/release/", f"{bin_dir}/")
    body_file = os.path.join(scratch, "body")
    if command.startswith("curl "):
        command = f"curl -sS -o {body_file} -w '%{{http_code}}' " + command[len("curl "):]
    if expect.interrupt is not None:
        process = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(expect.interrupt)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=30)
        code = process.returncode
    else:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              timeout=300)
        out, err, code = done.stdout, done.stderr, done.returncode
    if command.startswith("curl "):
        with open(body_file) as f:
            body = f.read()
        try:
            answer = json.loads(body)
        except ValueError:
            return f"HTTP {out}: not JSON: {body[:300]!r} {err}"
        ok = out == str(expect.status)
        ok = ok and (expect.printed is None or matches(expect.printed, answer))
        try:
            ok = ok and (expect.json is None or expect.json(answer))
        except (KeyError, TypeError, IndexError) as e:
            ok = False
            err += f" (check failed on {e!r})"
        return None if ok else f"HTTP {out}: {body[:600]} {err}".rstrip()
    if code == expect.exit and re.search(expect.out or "", out):
        return None
    return f"exit {code}; stdout: {out[-1500:]!r}; stderr: {err[-600:]!r}"


def run_examples(readme, bin_dir):
    comments = dict(tour(readme))
    scratch = tempfile.mkdtemp(prefix="readme-examples-")
    for n, (command, expect) in enumerate(EXAMPLES, 1):
        status, expect.printed = shape(comments[command])
        if status is not None and status != expect.status:
            print(f"readme-examples: example {n} prints {status}; the script expects "
                  f"{expect.status}: {command}", file=sys.stderr)
            return False
        started = time.monotonic()
        while True:
            failure = run_once(command, expect, bin_dir, scratch)
            if failure is None or not expect.wait or time.monotonic() - started > CONVERGE_S:
                break
            time.sleep(0.25)
        took = time.monotonic() - started
        if failure is not None:
            print(f"FAIL {took:5.1f} s  {command}\n  expected: status {expect.status} exit "
                  f"{expect.exit} out /{expect.out}/, shape {expect.printed}\n  got: {failure}",
                  file=sys.stderr)
            return False
        print(f"ok   {took:5.1f} s  {command}")
        time.sleep(expect.settle)
    return True


def main():
    with open(README) as f:
        readme = f.read()
    if not compare_list(readme):
        return 1
    if sys.argv[1:] == ["--check"]:
        print(f"readme-examples: the list matches the README's {len(EXAMPLES)} examples")
        return 0
    busy = ports_in_use()
    if busy:
        print(f"readme-examples: ports of {TOPOLOGY} in use: {busy} (a local cluster running?)",
              file=sys.stderr)
        return 1
    profile = os.environ.get("RUN_LOCAL_PROFILE", "release")
    bin_dir = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), profile)
    log_path = os.path.join(tempfile.mkdtemp(prefix="readme-examples-"), "launcher.out")
    env = dict(os.environ, GEOCOUNT_SHARD__DATA_DIR=DATA_DIR)
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(["scripts/run-local.sh", TOPOLOGY, "--fresh"], stdout=log,
                                    stderr=subprocess.STDOUT, env=env)
    try:
        # run-local.sh builds first: a release build from scratch takes minutes.
        deadline = time.monotonic() + 3600
        while True:
            with open(log_path) as f:
                printed = f.read()
            if "Ctrl-C stops the cluster" in printed:
                break
            if launcher.poll() is not None or time.monotonic() > deadline:
                print(f"readme-examples: the cluster did not start:\n{printed[-3000:]}",
                      file=sys.stderr)
                return 1
            time.sleep(0.5)
        table = printed[printed.index("starting "):].splitlines()
        mismatch = compare_launcher(launcher_block(readme), table)
        if mismatch:
            print(f"readme-examples: {mismatch}", file=sys.stderr)
            return 1
        print("ok          scripts/run-local.sh prints what the README shows")
        if not run_examples(readme, bin_dir):
            print(f"readme-examples: the cluster's logs are in {DATA_DIR}/logs", file=sys.stderr)
            return 1
        print(f"readme-examples: all {len(EXAMPLES)} examples answer as the README prints them")
        return 0
    finally:
        launcher.send_signal(signal.SIGINT)
        try:
            launcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            launcher.kill()


sys.exit(main())
PY
