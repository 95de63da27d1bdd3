#!/usr/bin/env python3
"""Differential test of geocount's Redis protocol against a real Redis.

Generates seeded random command sequences over the commands of issue #39 (PING, ECHO, SELECT,
INCR, INCRBY, DECR, DECRBY, GET, MGET, PFADD, PFCOUNT, DEL, UNLINK, EXPIRE, PEXPIRE, TTL, PTTL,
PERSIST, unknown commands, wrong arity; valid and invalid arguments, the i64 overflow edges;
single commands and pipelines) and sends each to both servers, step by step, comparing every
reply as a value (parsed by the `redis` client's own RESP parser; error replies as their whole
line). The only differences allowed are the entries of allowed.py, each citing the docs/api.md
wording it relies on; the script checks that docs/api.md still says it.

The Redis side should run with `--databases 1` (geocount has one database, so `SELECT 1` is
Redis's own "DB index is out of range" on both). Every sequence writes its own keys (a random
run prefix, the seed, the sequence number), so sequences are independent and one replays alone with
`--only`. Expiry times are 1000 s or more (or none, or in the past), so nothing expires while
the test runs; TTL and PTTL replies are compared within a small tolerance (the two servers
take each command a few milliseconds apart).

Exits 0 when every reply matched or was allowed, 1 with the first differences (seed, sequence,
the commands, both replies) otherwise, 2 on a usage or setup error.

    python3 tests/resp/differential.py --redis 127.0.0.1:6379 --geocount 127.0.0.1:7111 \\
        --seeds 1,2,3 --sequences 1000
"""

import argparse
import os
import random
import re
import sys
import threading
import time
from dataclasses import dataclass

try:
    import redis
    from redis._parsers import _RESP2Parser, _RESP3Parser
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import ResponseError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError:
    print(
        "differential.py: the Python client `redis` is missing "
        "(scripts/test.sh installs it; or `python3 -m pip install redis`)",
        file=sys.stderr,
    )
    sys.exit(2)

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
from allowed import ALLOWED, Closed, Difference, Err, Model, explain

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)


# ---------------------------------------------------------------------------------------------
# Replies as values


class Raw2(_RESP2Parser):
    """The client's RESP2 parser, keeping an error reply's whole line (code included)."""

    @classmethod
    def parse_error(cls, response):
        return ResponseError(response)


class Raw3(_RESP3Parser):
    """The client's RESP3 parser, keeping an error reply's whole line (code included)."""

    @classmethod
    def parse_error(cls, response):
        return ResponseError(response)


def parse_addr(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


class Server:
    """One connection to one server, replies read by the client library's parser."""

    def __init__(self, name, addr, args, password=None, tls_ca=None):
        self.name = name
        self.addr = addr
        self.args = args
        self.password = password
        self.tls_ca = tls_ca
        self.conn = None

    def connect(self):
        host, port = self.addr
        kwargs = dict(
            host=host,
            port=port,
            parser_class=Raw3 if self.args.protocol == 3 else Raw2,
            protocol=self.args.protocol,
            socket_timeout=self.args.timeout,
            socket_connect_timeout=self.args.timeout,
            password=self.password,
        )
        if self.tls_ca:
            cls = redis.SSLConnection
            kwargs.update(ssl_ca_certs=self.tls_ca, ssl_check_hostname=False)
        else:
            cls = redis.Connection
        # No CLIENT SETINFO on connect: the sequences alone are compared.
        try:
            self.conn = cls(driver_info=None, **kwargs)
        except TypeError:  # clients before driver_info
            self.conn = cls(lib_name=None, lib_version=None, **kwargs)
        self.conn.connect()

    def run(self, commands):
        """Sends `commands` (lists of bytes) in one write; their replies, in order."""
        if self.conn is None:
            self.connect()
        replies = []
        try:
            self.conn.send_packed_command(self.conn.pack_commands(commands))
            for _ in commands:
                try:
                    replies.append(self.conn.read_response())
                except ResponseError as error:
                    replies.append(Err(str(error)))
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            self.close()
            replies.extend(Closed(str(error)) for _ in range(len(commands) - len(replies)))
        return replies

    def close(self):
        if self.conn is not None:
            try:
                self.conn.disconnect()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self.conn = None


# ---------------------------------------------------------------------------------------------
# The generator


INVALID_INTEGERS = [
    b"+5", b"05", b"-0", b" 5", b"5 ", b"1.5", b"abc", b"", b"1e3", b"0x10", b"--1",
    str(I64_MAX + 1).encode(), str(I64_MIN - 1).encode(), b"99999999999999999999999",
]
UNKNOWN_COMMANDS = [b"FOO", b"INCRX", b"GETT", b"XYZZY", b"geocount", b"INCR_BY", b"PF"]


@dataclass
class Step:
    """One write to both servers: a single command, or a pipeline of several."""

    commands: list

    @property
    def pipelined(self):
        return len(self.commands) > 1


class Generator:
    def __init__(self, seed, index, prefix, pipelines=0.3):
        self.rng = random.Random(f"{seed}:{index}")
        self.pipelines = pipelines
        base = f"{prefix}{seed}:{index}:"
        self.sum_keys = [f"{base}n{i}".encode() for i in range(3)]
        self.unique_keys = [f"{base}u{i}".encode() for i in range(2)]
        # Valid ids of other shapes: spaces, punctuation, multi-byte UTF-8, 256 bytes.
        self.odd_keys = [
            f"{base}with space".encode(),
            f"{base}ключ:€".encode(),
            (base + "y" * 256)[:256].encode(),
        ]
        # Keys geocount cannot take as counter ids (1-256 bytes of UTF-8 without control
        # characters); the empty key only in commands that write nothing, as every sequence
        # shares it.
        self.invalid_keys = [
            (base + "x" * 257)[:257].encode(),
            f"{base}a\x01b".encode(),
            f"{base}tab\tkey".encode(),
            base.encode() + b"\xff\xfe",
            f"{base}nl\n".encode(),
            f"{base}\x7f".encode(),
        ]

    def key(self, reads=False):
        r = self.rng.random()
        if r < 0.005 and reads:
            return b""
        if r < 0.03:
            return self.rng.choice(self.invalid_keys)
        if r < 0.08:
            return self.rng.choice(self.odd_keys)
        if r < 0.18:
            return self.rng.choice(self.unique_keys)
        return self.rng.choice(self.sum_keys)

    def unique_key(self):
        if self.rng.random() < 0.1:
            return self.key()
        return self.rng.choice(self.unique_keys)

    def integer(self):
        r = self.rng.random()
        if r < 0.5:
            return str(self.rng.randint(-20, 20)).encode()
        if r < 0.65:
            return str(self.rng.choice([I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1, 2**62,
                                        -(2**62), 1, -1, 0])).encode()
        if r < 0.8:
            return str(self.rng.randint(I64_MIN, I64_MAX)).encode()
        return self.rng.choice(INVALID_INTEGERS)

    def seconds(self, unit):
        """An expiry argument: far enough ahead that nothing expires during the run, in the
        past (the key goes at once), or invalid."""
        r = self.rng.random()
        if r < 0.6:
            return str(self.rng.randint(1000, 100000) * unit).encode()
        if r < 0.75:
            return self.rng.choice([b"0", b"-1", str(-1000 * unit).encode()])
        if r < 0.85:
            return self.rng.choice([str(I64_MAX).encode(), str(I64_MIN).encode(),
                                    str(I64_MAX // 1000).encode()])
        return self.rng.choice(INVALID_INTEGERS)

    def item(self):
        return f"item-{self.rng.randint(0, 30)}".encode()

    def case(self, name: bytes):
        r = self.rng.random()
        if r < 0.7:
            return name
        if r < 0.85:
            return name.lower()
        return bytes(c ^ 0x20 if chr(c).isalpha() and self.rng.random() < 0.5 else c
                     for c in name)

    def command(self):
        rng = self.rng
        kind = rng.choices(
            ["incr", "incrby", "decr", "decrby", "get", "mget", "pfadd", "pfcount", "del",
             "expire", "ttl", "persist", "ping", "echo", "select", "unknown", "arity",
             "overflow"],
            weights=[14, 12, 6, 8, 14, 6, 8, 5, 4, 5, 5, 2, 2, 2, 2, 2, 4, 4],
        )[0]
        if kind == "incr":
            return [self.case(b"INCR"), self.key()]
        if kind == "decr":
            return [self.case(b"DECR"), self.key()]
        if kind == "incrby":
            return [self.case(b"INCRBY"), self.key(), self.integer()]
        if kind == "decrby":
            return [self.case(b"DECRBY"), self.key(), self.integer()]
        if kind == "get":
            return [self.case(b"GET"), self.key(reads=True)]
        if kind == "mget":
            return [self.case(b"MGET")] + [self.key(reads=True)
                                           for _ in range(rng.randint(1, 5))]
        if kind == "pfadd":
            return [self.case(b"PFADD"), self.unique_key()] + [
                self.item() for _ in range(rng.randint(0, 4))]
        if kind == "pfcount":
            keys = [self.unique_key()]
            if rng.random() < 0.2:
                keys.append(self.unique_key())
            return [self.case(b"PFCOUNT")] + keys
        if kind == "del":
            name = rng.choice([b"DEL", b"UNLINK"])
            return [self.case(name)] + [self.key() for _ in range(rng.randint(1, 3))]
        if kind == "expire":
            name, unit = rng.choice([(b"EXPIRE", 1), (b"PEXPIRE", 1000)])
            return [self.case(name), self.key(), self.seconds(unit)]
        if kind == "ttl":
            return [self.case(rng.choice([b"TTL", b"PTTL"])), self.key(reads=True)]
        if kind == "persist":
            return [self.case(b"PERSIST"), self.key()]
        if kind == "ping":
            if rng.random() < 0.5:
                return [self.case(b"PING")]
            return [self.case(b"PING"), f"hello {rng.randint(0, 9)}".encode()]
        if kind == "echo":
            size = rng.choice([0, 1, 5, 100, 3000])
            return [self.case(b"ECHO"), bytes(rng.randint(32, 126) for _ in range(size))]
        if kind == "select":
            return [self.case(b"SELECT"), rng.choice([b"0", b"0", b"1", b"15", b"-1", b"abc"])]
        if kind == "unknown":
            return [rng.choice(UNKNOWN_COMMANDS)] + [
                self.key() for _ in range(rng.randint(0, 3))]
        if kind == "arity":
            return self.wrong_arity()
        return self.overflow()

    def wrong_arity(self):
        rng = self.rng
        name, args = rng.choice([
            (b"INCR", 0), (b"INCR", 2), (b"INCRBY", 1), (b"INCRBY", 3), (b"DECR", 0),
            (b"DECRBY", 1), (b"GET", 0), (b"GET", 2), (b"MGET", 0), (b"PFCOUNT", 0),
            (b"PFADD", 0), (b"DEL", 0), (b"UNLINK", 0), (b"EXPIRE", 1), (b"PEXPIRE", 1),
            (b"TTL", 0), (b"TTL", 2), (b"PTTL", 2), (b"PERSIST", 0), (b"PERSIST", 2),
            (b"ECHO", 0), (b"ECHO", 2), (b"PING", 2), (b"SELECT", 0), (b"SELECT", 2),
        ])
        return [self.case(name)] + [self.key() for _ in range(args)]

    def overflow(self):
        """A command at the i64 edges of a counter that may sit near them."""
        rng = self.rng
        key = rng.choice(self.sum_keys)
        return rng.choice([
            [b"INCRBY", key, str(I64_MAX).encode()],
            [b"INCRBY", key, str(I64_MIN).encode()],
            [b"DECRBY", key, str(I64_MIN).encode()],
            [b"DECRBY", key, str(I64_MAX).encode()],
            [b"INCRBY", key, str(rng.choice([I64_MAX - 1, I64_MIN + 1])).encode()],
            [b"INCR", key],
            [b"DECR", key],
        ])

    def sequence(self):
        """Steps of one or several commands (a pipeline in `pipelines` of the steps)."""
        steps = []
        for _ in range(self.rng.randint(1, 12)):
            if self.rng.random() < self.pipelines:
                steps.append(Step([self.command() for _ in range(self.rng.randint(2, 10))]))
            else:
                steps.append(Step([self.command()]))
        return steps


# ---------------------------------------------------------------------------------------------
# Comparing


TTL_TOLERANCE = {b"TTL": 1, b"PTTL": 250}


def same(command, a, b):
    """Whether two replies to `command` are the same value (TTLs within the tolerance)."""
    if a == b:
        return True
    tolerance = TTL_TOLERANCE.get(command[0].upper())
    if tolerance is not None and isinstance(a, int) and isinstance(b, int):
        return a >= 0 and b >= 0 and abs(a - b) <= tolerance
    return False


def show(command):
    return " ".join(repr(arg)[1:] if len(arg) <= 60 else repr(arg[:57])[1:] + "..."
                    for arg in command)


def show_reply(reply):
    text = repr(reply)
    return text if len(text) <= 200 else text[:197] + "..."


@dataclass
class Mismatch:
    seed: int
    index: int
    step: int
    position: int
    steps: list
    command: list
    redis: object
    geocount: object


class Run:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.mismatches = []
        self.allowed = {entry.name: 0 for entry in ALLOWED}
        self.sequences = 0
        self.commands = 0
        self.pipelines = 0
        self.fatal = None

    def sequence(self, redis_side, geo_side, seed, index):
        steps = Generator(seed, index, self.args.prefix, self.args.pipelines).sequence()
        model = Model()
        commands = pipelines = 0
        allowed = {}
        for s, step in enumerate(steps):
            expected = redis_side.run(step.commands)
            actual = geo_side.run(step.commands)
            commands += len(step.commands)
            pipelines += step.pipelined
            for p, (command, a, b) in enumerate(zip(step.commands, expected, actual)):
                differ = not same(command, a, b)
                if differ:
                    names = explain(Difference(command, a, b, model.kinds, model.diverged, model.gone))
                    if names is None:
                        self.found(Mismatch(seed, index, s, p, steps, command, a, b))
                        self.count(commands, pipelines, allowed)
                        return
                    for name in names:
                        allowed[name] = allowed.get(name, 0) + 1
                model.apply(command, a, b, differ)
            if any(isinstance(reply, Closed) for reply in expected):
                with self.lock:
                    self.fatal = f"Redis closed the connection: {expected}"
                return
        self.count(commands, pipelines, allowed)

    def count(self, commands, pipelines, allowed):
        with self.lock:
            self.sequences += 1
            self.commands += commands
            self.pipelines += pipelines
            for name, n in allowed.items():
                self.allowed[name] += n

    def found(self, mismatch):
        with self.lock:
            self.mismatches.append(mismatch)

    def enough(self):
        with self.lock:
            if self.fatal is not None:
                return True
            return not self.args.all and len(self.mismatches) >= self.args.show

    def worker(self, jobs):
        redis_side = Server("redis", self.args.redis, self.args)
        geo_side = Server("geocount", self.args.geocount, self.args,
                          self.args.geocount_password, self.args.geocount_tls_ca)
        try:
            while not self.enough():
                with self.lock:
                    if not jobs:
                        return
                    seed, index = jobs.pop()
                self.sequence(redis_side, geo_side, seed, index)
        finally:
            redis_side.close()
            geo_side.close()

    def report(self, out):
        a = self.args
        mismatches = sorted(self.mismatches, key=lambda m: (m.seed, m.index))
        if a.all:
            # One example of each kind of difference, the kinds counted.
            kinds = {}
            for m in mismatches:
                kinds.setdefault(kind(m), []).append(m)
            print("kinds of mismatch (command: redis / geocount):", file=out)
            for k, group in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
                print(f"  {len(group):6}  {k}", file=out)
            mismatches = [group[0] for group in kinds.values()]
        for m in mismatches[: a.show]:
            print(f"MISMATCH seed {m.seed}, sequence {m.index}, step {m.step + 1}"
                  f"{f' (pipeline, command {m.position + 1})' if m.steps[m.step].pipelined else ''}",
                  file=out)
            print(f"  command:  {show(m.command)}", file=out)
            print(f"  redis:    {show_reply(m.redis)}", file=out)
            print(f"  geocount: {show_reply(m.geocount)}", file=out)
            print("  the sequence:", file=out)
            for s, step in enumerate(m.steps[: m.step + 1]):
                mark = "pipeline" if step.pipelined else ""
                for p, command in enumerate(step.commands):
                    label = f"{s + 1}" if p == 0 else ""
                    print(f"    {label:>3} {mark:8} {show(command)}", file=out)
            print(f"  replay: {sys.argv[0]} --redis {a.redis[0]}:{a.redis[1]} --geocount "
                  f"{a.geocount[0]}:{a.geocount[1]} --seeds {m.seed} --only {m.index} "
                  f"--prefix {a.prefix}", file=out)


def kind(m):
    """A mismatch's kind: its command and the shapes of both replies."""
    def shape(reply):
        if isinstance(reply, Err):
            return "error " + re.sub(r"'[^']*'", "'...'", reply.text)[:70]
        if isinstance(reply, Closed):
            return "closed"
        return type(reply).__name__
    return f"{m.command[0].upper().decode(errors='replace')}: {shape(m.redis)} / {shape(m.geocount)}"


def check_docs(path):
    """Every allow-list entry's wording is in docs/api.md (whitespace aside)."""
    if not ALLOWED:
        return
    if not os.path.exists(path):
        raise SystemExit(f"differential.py: {path} is missing (the allow-list cites it)")
    with open(path, encoding="utf-8") as f:
        text = " ".join(f.read().split())
    gone = [e.name for e in ALLOWED if " ".join(e.docs.split()) not in text]
    if gone:
        raise SystemExit(f"differential.py: {path} no longer says what the allow-list "
                         f"entries {', '.join(gone)} cite")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", type=parse_addr, required=True, help="HOST:PORT of Redis")
    parser.add_argument("--geocount", type=parse_addr, required=True,
                        help="HOST:PORT of a geocount shard node's RESP listener")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    parser.add_argument("--sequences", type=int, default=1000, help="sequences per seed")
    parser.add_argument("--only", type=int, help="run only this sequence of each seed")
    parser.add_argument("--prefix", default=f"d{random.randrange(16**6):06x}:",
                        help="key prefix of this run (default: random)")
    parser.add_argument("--pipelines", type=float, default=0.3,
                        help="the share of steps sent as pipelines (default 0.3; other "
                             "values make other sequences)")
    parser.add_argument("--workers", type=int, default=4, help="connections to each server")
    parser.add_argument("--protocol", type=int, choices=[2, 3], default=2)
    parser.add_argument("--geocount-password", help="AUTH with this token on geocount")
    parser.add_argument("--geocount-tls-ca",
                        help="speak TLS to geocount (not Redis), trusting this CA file")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per reply")
    parser.add_argument("--show", type=int, default=5, help="mismatches to print")
    parser.add_argument("--all", action="store_true",
                        help="run every sequence, count the mismatches by kind, and print "
                             "one example of each of the first --show kinds")
    parser.add_argument("--docs", default=os.path.join(here, "..", "..", "docs", "api.md"))
    args = parser.parse_args()
    check_docs(args.docs)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        parser.error(f"--seeds: expected integers, got {args.seeds!r}")
    indices = [args.only] if args.only is not None else range(args.sequences)
    jobs = [(seed, i) for seed in seeds for i in indices][::-1]
    run = Run(args)
    started = time.monotonic()
    threads = [threading.Thread(target=run.worker, args=(jobs,), daemon=True)
               for _ in range(max(1, args.workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    allowed = sum(run.allowed.values())
    print(f"differential: {run.sequences} sequences ({run.commands} commands, "
          f"{run.pipelines} pipelines) over seeds {args.seeds} in {elapsed:.1f} s, "
          f"RESP{args.protocol}: {len(run.mismatches)} mismatching sequences, "
          f"{allowed} documented differences"
          + "".join(f"\n  allowed {name}: {n}" for name, n in run.allowed.items() if n))
    if run.fatal:
        sys.exit(f"differential.py: {run.fatal}")
    if run.mismatches:
        run.report(sys.stdout)
        sys.exit(1)


if __name__ == "__main__":
    main()
