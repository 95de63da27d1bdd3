#!/usr/bin/env python3
"""The fault campaign's bounded-counter and Redis-protocol writers (scripts/fault-campaign.sh).

    python3 scripts/campaign_writers.py --topology T --duration S --stop FILE --report FILE

Writes from its start until FILE exists, then settles and checks, and writes the figures to
the report (JSON). Needs the `redis` client (scripts/resp-clients.sh prints a python that has
it). Every address it reaches is the topology's (loopback).

Bounded counters: three created with `max`, one with `min` (written with decrements), each
made through a shard node of another datacenter and written by one client per datacenter, at
rates that differ by datacenter (so rights must move), with their room sized from the duration
so that each reaches its bound within the run. Every write carries its own Idempotency-Key; a
409 at the bound is an expected refusal; a write of unknown outcome (no answer, a 504, a 503
"not acknowledged") is retried with its key, to any shard node of its datacenter, every 2 s and
after the stop until it is answered for good. Once a second, and at the end, every part is read:
each datacenter aggregator replica's part (the datacenter's sum) and each shard node's slot. A
counter only ever moves towards its bound, so a part read late is never past the true value:
the sum of the newest parts of each replica index, and of the slots, must stay within the bound.
At the end, after the stop and the settling, every replica and both global replicas must agree
with the slots' sum, which must equal the acknowledged deltas (at most plus those of unknown
outcome).

Redis protocol: one client per shard node's `resp` port (redis-py, no retries of its own)
sends pipelines of 16 to 64 `INCRBY` over 24 counters. A reply is acknowledged (an integer),
refused (an error reply), or of unknown outcome (an error saying so, or the connection lost
after the pipeline was sent: every command of it). At the end each counter's slots, summed,
must equal its acknowledged increments plus at most its unknown ones, and both global replicas
must show that sum."""

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import sys
import threading
import time
import tomllib

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

# Writes per second of each datacenter's client of a bounded counter, by the counter's index.
BOUNDED_RATES = [(3.0, 1.0, 2.0), (1.0, 3.0, 2.0), (2.0, 1.0, 3.0), (2.0, 2.0, 2.0)]
# When each bounded counter reaches its bound, as a share of the run, at the rates above.
BOUNDED_REACH = [0.15, 0.4, 0.65, 0.5]
DELTAS = (1, 2, 3)
WRITE_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 0.5
RETRY_EVERY_S = 2.0
SETTLE_S = 45.0
CONVERGE_S = 30.0
RESP_KEYS = 24
RESP_PIPELINE = (16, 64)
RESP_PAUSE_S = 0.2
# A refusal that leaves the write in a shard node's log, or a forward that got no answer.
UNKNOWN_WORDS = ("not acknowledged", "outcome unknown")
# A RESP increment that was applied although its reply is an error.
APPLIED_WORDS = ("the increment was applied and is durable",)
# An error reply's kind, as the server said it (redis-py drops the word into the class).
ERROR_WORDS = {
    redis.ResponseError: "ERR",
    redis.exceptions.TryAgainError: "TRYAGAIN",
    redis.exceptions.OutOfMemoryError: "OOM",
}


def log(*words):
    print(time.strftime("%H:%M:%S"), *words, flush=True)


class Topology:
    def __init__(self, path):
        with open(path, "rb") as f:
            config = tomllib.load(f)
        glob = config["global"]
        self.globals = [glob["listen"], *glob.get("replicas", [])]
        self.dcs = []
        for dc in config["datacenters"]:
            self.dcs.append(
                {
                    "name": dc["name"],
                    "shards": dc["shards"],
                    "resp": dc.get("resp", []),
                    "aggregators": [dc["aggregator"], *dc.get("aggregator_replicas", [])],
                }
            )
        self.shards = [s for dc in self.dcs for s in dc["shards"]]
        self.replica_count = min(len(dc["aggregators"]) for dc in self.dcs)


def request(address, method, path, body=None, headers=None, timeout=WRITE_TIMEOUT_S):
    """(status, parsed JSON body or {}), or ("connect", error): nothing reached the node, or
    ("lost", error): sent, and no whole answer came back."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        try:
            conn.connect()
        except OSError as error:
            return "connect", str(error)
        try:
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers=headers or {})
            answer = conn.getresponse()
            raw = answer.read()
        except (OSError, http.client.HTTPException) as error:
            return "lost", str(error)
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"error": raw[:200].decode("utf-8", "replace")}
        return answer.status, parsed if isinstance(parsed, dict) else {}
    finally:
        conn.close()


def read_value(address, path):
    """The `value` of a read, or None when it did not answer 200 (404: 0, never written)."""
    status, body = request(address, "GET", path, timeout=READ_TIMEOUT_S)
    if status == 200 and isinstance(body.get("value"), int):
        return body["value"]
    if status == 404:
        return 0
    return None


class BoundedWrite:
    def __init__(self, key, counter, dc, delta):
        self.key, self.counter, self.dc, self.delta = key, counter, dc, delta
        self.applied = False
        self.maybe = False
        self.at_bound = False
        self.settled = False
        self.first = None
        self.last = ""
        self.unknown_answer = None

    def attempt(self, node):
        counter = self.counter
        status, body = request(
            node,
            "PATCH",
            f"/counter/{counter.id}/write?op={counter.op}",
            body={"delta": self.delta},
            headers={"Idempotency-Key": self.key, "Content-Type": "application/json"},
        )
        error = body if isinstance(body, str) else body.get("error", "")
        self.last = f"{status} {error}"[:300]
        if status == 200:
            outcome = "acknowledged"
            self.applied = self.settled = True
        elif status == 409 and body.get("bound"):
            outcome = "at bound"
            self.at_bound = self.settled = True
        elif status == "lost" or status == 504 or any(w in error for w in UNKNOWN_WORDS):
            outcome = "unknown"
            self.maybe = True
            self.unknown_answer = self.unknown_answer or self.last
        elif status == "connect" or (isinstance(status, int) and status >= 500):
            # Nothing applied; settled unless an earlier attempt may have applied it.
            outcome = "unavailable"
            self.settled = not self.maybe
        else:
            outcome = "refused"
            self.settled = True
        if self.first is None:
            self.first = outcome
        return outcome


class BoundedCounter:
    def __init__(self, index, duration, topology):
        self.index = index
        rates = BOUNDED_RATES[index]
        self.rates = {dc["name"]: rates[i % len(rates)] for i, dc in enumerate(topology.dcs)}
        units_per_s = sum(self.rates.values()) * sum(DELTAS) / len(DELTAS)
        room = int(units_per_s * duration * BOUNDED_REACH[index])
        self.decrements = index == len(BOUNDED_RATES) - 1
        self.bound = "min" if self.decrements else "max"
        self.limit = -room if self.decrements else room
        self.id = f"campaign-{self.bound}-{index}"
        self.op = "DECREMENT" if self.decrements else "INCREMENT"
        self.home = topology.dcs[index % len(topology.dcs)]
        self.writes = []
        self.lock = threading.Lock()
        self.reached_at = None
        self.worst_excess = 0
        self.worst_sample = None
        self.samples = 0
        # The newest value read of each part: (replica index, datacenter) and slot address.
        self.parts = {}
        self.slots = {}

    def excess(self, total):
        """How far a total is past the bound (0 within it)."""
        return max(0, self.limit - total) if self.decrements else max(0, total - self.limit)

    def create(self, deadline):
        node = self.home["shards"][0]
        while time.monotonic() < deadline:
            description = {"id": self.id, self.bound: self.limit}
            status, body = request(node, "POST", "/counter", body=description)
            if status in (200, 201):
                return
            # 503: some node does not hold it yet; send the same body again.
            if status not in (503, "connect", "lost"):
                break
            log(f"create {self.id} at {node}: {status} {body}")
            time.sleep(0.5)
        raise SystemExit(f"cannot create {self.id} at {node}: {status} {body}")

    def sample(self, topology, pool):
        """Reads every part once (at once) and checks the sums of the newest ones."""
        path = f"/counter/{self.id}"
        reads = {}
        for r in range(topology.replica_count):
            for dc in topology.dcs:
                reads[("part", r, dc["name"])] = pool.submit(read_value, dc["aggregators"][r], path)
        for node in topology.shards:
            reads[("slot", node)] = pool.submit(read_value, node, path)
        fresh = {}
        for what, future in reads.items():
            value = future.result()
            if value is not None:
                fresh[what] = value
        with self.lock:
            for what, value in fresh.items():
                if what[0] == "part":
                    self.parts[what[1:]] = value
                else:
                    self.slots[what[1]] = value
            sums = self.sums(topology)
            self.samples += 1
            for name, total in sums.items():
                excess = self.excess(total)
                if excess > self.worst_excess:
                    self.worst_excess = excess
                    self.worst_sample = {
                        "sum": name,
                        "total": total,
                        "parts": {f"{dc}@{r}": v for (r, dc), v in self.parts.items()},
                        "slots": dict(self.slots),
                    }
                    log(f"QUOTA EXCEEDED: {self.id} {self.bound} {self.limit}: {self.worst_sample}")
        return fresh, sums

    def sums(self, topology):
        sums = {}
        for r in range(topology.replica_count):
            parts = [self.parts.get((r, dc["name"]), 0) for dc in topology.dcs]
            sums[f"parts of replica {r}"] = sum(parts)
        sums["slots"] = sum(self.slots.get(node, 0) for node in topology.shards)
        return sums


def bounded_client(counter, dc, stop, start):
    """One datacenter's writes to one bounded counter until the stop, retrying the unsettled."""
    nodes = dc["shards"]
    pending = []
    n = 0
    due = time.monotonic()
    next_retry = due + RETRY_EVERY_S
    while not os.path.exists(stop):
        # The pace of the rate, without a burst to catch up after a write that hung.
        due = max(due + 1 / counter.rates[dc["name"]], time.monotonic())
        time.sleep(max(0.0, due - time.monotonic()))
        key = f"campaign-{counter.id}-{dc['name']}-{n}"
        write = BoundedWrite(key, counter, dc, random.choice(DELTAS))
        with counter.lock:
            counter.writes.append(write)
        outcome = write.attempt(nodes[n % len(nodes)])
        if outcome == "at bound" and counter.reached_at is None:
            counter.reached_at = time.monotonic() - start
            log(f"{counter.id}: first refusal at the bound, {dc['name']}, {write.last}")
        if not write.settled:
            pending.append(write)
        n += 1
        if time.monotonic() >= next_retry:
            for i, write in enumerate(pending):
                write.attempt(nodes[(n + i) % len(nodes)])
            pending = [w for w in pending if not w.settled]
            next_retry = time.monotonic() + RETRY_EVERY_S


def settle(counters, dcs_by_name):
    """Retries every write not yet answered for good, with its key, until each is."""
    deadline = time.monotonic() + SETTLE_S
    turn = 0
    while True:
        pending = [w for c in counters for w in c.writes if not w.settled]
        if not pending or time.monotonic() >= deadline:
            for w in pending:
                log(f"never settled: {w.key} (delta {w.delta}), last answer {w.last}")
            return len(pending)
        for w in pending:
            nodes = dcs_by_name[w.dc["name"]]["shards"]
            w.attempt(nodes[turn % len(nodes)])
        turn += 1
        time.sleep(0.2)


def checker(counters, topology, stop, pool):
    while not os.path.exists(stop):
        began = time.monotonic()
        for counter in counters:
            counter.sample(topology, pool)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))


def world_reads(topology, pool, counter_id):
    """Every slot and every global replica, read at once: (the slots' sum, or None if a slot
    did not answer; {global replica: value})."""
    slots = [pool.submit(read_value, node, f"/counter/{counter_id}") for node in topology.shards]
    globals_ = {
        f"global@{i}": pool.submit(read_value, g, f"/counter/{counter_id}?allow_partial=true")
        for i, g in enumerate(topology.globals)
    }
    values = [f.result() for f in slots]
    total = None if None in values else sum(values)
    return total, {name: f.result() for name, f in globals_.items()}


def bounded_final(counter, topology, pool):
    """Waits until every tier agrees with the slots, then checks the bound and the count."""
    deadline = time.monotonic() + CONVERGE_S
    while True:
        fresh, sums = counter.sample(topology, pool)
        every_part = topology.replica_count * len(topology.dcs) + len(topology.shards)
        _, globals_ = world_reads(topology, pool, counter.id)
        # The global total is clamped to the bound.
        clamped = (max if counter.decrements else min)(sums["slots"], counter.limit)
        converged = (
            len(fresh) == every_part
            and len(set(sums.values())) == 1
            and all(v == clamped for v in globals_.values())
        )
        if converged or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    with counter.lock:
        acked = sum(w.delta for w in counter.writes if w.applied)
        unknown = sum(w.delta for w in counter.writes if w.maybe and not w.applied)
        firsts = {}
        for w in counter.writes:
            firsts[w.first] = firsts.get(w.first, 0) + 1
        written = abs(sums["slots"])
        first_at_bound = None if counter.reached_at is None else round(counter.reached_at, 1)
        result = {
            "id": counter.id,
            "bound": counter.bound,
            "limit": counter.limit,
            "writes": len(counter.writes),
            "first_attempts": firsts,
            "acknowledged_writes": sum(1 for w in counter.writes if w.applied),
            "at_bound_writes": sum(1 for w in counter.writes if w.at_bound),
            "unknown_writes": sum(1 for w in counter.writes if w.maybe and not w.applied),
            "refused": [w.last for w in counter.writes if w.first == "refused"][:5],
            "unknown_answers": [w.unknown_answer for w in counter.writes if w.unknown_answer][:5],
            "acknowledged": acked,
            "unknown": unknown,
            "first_at_bound_s": first_at_bound,
            # Refused at the bound, with less room left than the largest delta.
            "reached": first_at_bound is not None and abs(counter.limit) - written < max(DELTAS),
            "samples": counter.samples,
            "sums": sums,
            "globals": globals_,
            "converged": converged,
            "exceeded": counter.worst_excess,
            "worst_sample": counter.worst_sample,
            "lost": max(0, acked - written),
            "doubled": max(0, written - acked - unknown),
        }
    log(f"bounded {counter.id}: {json.dumps(result)}")
    return result


def resp_client(address, tally, stop):
    host, port = address.rsplit(":", 1)
    client = redis.Redis(
        host=host,
        port=int(port),
        socket_timeout=WRITE_TIMEOUT_S,
        socket_connect_timeout=1,
        retry=Retry(NoBackoff(), 0),
    )
    while not os.path.exists(stop):
        commands = [
            (f"campaign-resp-{random.randrange(RESP_KEYS)}", random.randint(1, 9))
            for _ in range(random.randint(*RESP_PIPELINE))
        ]
        try:
            # Connects first: a failure here sent nothing.
            client.connection_pool.release(client.connection_pool.get_connection())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            tally.add(address, "connect", commands, None)
            time.sleep(0.5)
            continue
        pipe = client.pipeline(transaction=False)
        for key, delta in commands:
            pipe.incrby(key, delta)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.BusyLoadingError as error:
            # redis-py raises at a LOADING reply (the slot is restored) and reads no further:
            # the commands after it may have been applied once the restore ended.
            tally.add(address, "loading", commands, str(error))
            time.sleep(0.2)
            continue
        except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
            tally.add(address, "lost", commands, str(error))
            time.sleep(0.2)
            continue
        tally.add(address, "replies", commands, replies)
        time.sleep(RESP_PAUSE_S)


class RespTally:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}
        self.unknown = {}
        self.pipelines = 0
        self.commands = 0
        self.acknowledged = 0
        self.unknown_commands = 0
        self.errors = {}
        self.lost_pipelines = 0
        self.loading_pipelines = 0
        # A few answers of each kind that was not an acknowledgement, for the report.
        self.answers = {}

    def note(self, kind, text):
        seen = self.answers.setdefault(kind, [])
        if len(seen) < 5 and text not in seen:
            seen.append(text[:300])

    def add(self, address, kind, commands, replies):
        with self.lock:
            self.pipelines += 1
            self.commands += len(commands)
            if kind == "connect":
                self.errors["connect error"] = self.errors.get("connect error", 0) + len(commands)
                return
            if kind in ("lost", "loading"):
                self.note(kind, f"{address}: {replies}")
                if kind == "lost":
                    self.lost_pipelines += 1
                else:
                    self.loading_pipelines += 1
                for key, delta in commands:
                    self.unknown[key] = self.unknown.get(key, 0) + delta
                self.unknown_commands += len(commands)
                return
            for (key, delta), reply in zip(commands, replies):
                if isinstance(reply, int) or any(w in str(reply) for w in APPLIED_WORDS):
                    self.acked[key] = self.acked.get(key, 0) + delta
                    self.acknowledged += 1
                elif any(w in str(reply) for w in UNKNOWN_WORDS):
                    self.note("unknown", f"{address}: {reply}")
                    self.unknown[key] = self.unknown.get(key, 0) + delta
                    self.unknown_commands += 1
                else:
                    self.note("error", f"{address}: {reply}")
                    word = ERROR_WORDS.get(type(reply), type(reply).__name__)
                    self.errors[word] = self.errors.get(word, 0) + 1


def resp_final(tally, topology, pool):
    keys = [f"campaign-resp-{i}" for i in range(RESP_KEYS)]
    deadline = time.monotonic() + CONVERGE_S
    while True:
        reads = {key: world_reads(topology, pool, key) for key in keys}
        converged = all(
            total is not None and all(v == total for v in tiers.values())
            for total, tiers in reads.values()
        )
        if converged or time.monotonic() >= deadline:
            break
        time.sleep(0.3)
    lost = doubled = 0
    wrong = {}
    for key, (total, tiers) in reads.items():
        total = total or 0
        acked, unknown = tally.acked.get(key, 0), tally.unknown.get(key, 0)
        lost += max(0, acked - total)
        doubled += max(0, total - acked - unknown)
        if not (acked <= total <= acked + unknown) or any(v != total for v in tiers.values()):
            wrong[key] = {"slots": total, "acknowledged": acked, "unknown": unknown, "tiers": tiers}
    result = {
        "pipelines": tally.pipelines,
        "commands": tally.commands,
        "acknowledged": tally.acknowledged,
        "unknown": tally.unknown_commands,
        "lost_pipelines": tally.lost_pipelines,
        "loading_pipelines": tally.loading_pipelines,
        "errors": tally.errors,
        "answers": tally.answers,
        "acknowledged_total": sum(tally.acked.values()),
        "unknown_total": sum(tally.unknown.values()),
        "converged": converged,
        "lost": lost,
        "doubled": doubled,
        "wrong": wrong,
    }
    log(f"resp: {json.dumps(result)}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topology", required=True)
    parser.add_argument("--duration", type=int, required=True)
    parser.add_argument("--stop", required=True)
    parser.add_argument("--report", required=True)
    args = parser.parse_args()
    topology = Topology(args.topology)
    counters = [BoundedCounter(i, args.duration, topology) for i in range(len(BOUNDED_RATES))]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=32)
    deadline = time.monotonic() + 30
    for counter, _ in zip(counters, pool.map(lambda c: c.create(deadline), counters)):
        log(f"created {counter.id} ({counter.bound} {counter.limit}) at {counter.home['name']}")
    start = time.monotonic()
    threads = [threading.Thread(target=checker, args=(counters, topology, args.stop, pool))]
    for counter in counters:
        for dc in topology.dcs:
            client = (counter, dc, args.stop, start)
            threads.append(threading.Thread(target=bounded_client, args=client))
    tally = RespTally()
    resp_addresses = [a for dc in topology.dcs for a in dc["resp"]]
    for address in resp_addresses:
        threads.append(threading.Thread(target=resp_client, args=(address, tally, args.stop)))
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        t.join()
    log("stopped; settling the writes of unknown outcome")
    unsettled = settle(counters, {dc["name"]: dc for dc in topology.dcs})
    bounded = [bounded_final(c, topology, pool) for c in counters]
    resp = resp_final(tally, topology, pool)
    report = {
        "bounded": {
            "counters": bounded,
            "writes": sum(c["writes"] for c in bounded),
            "acknowledged": sum(c["acknowledged_writes"] for c in bounded),
            "at_bound": sum(c["at_bound_writes"] for c in bounded),
            "unknown": sum(c["unknown_writes"] for c in bounded),
            "unsettled": unsettled,
            "exceeded": sum(c["exceeded"] for c in bounded),
            "lost": sum(c["lost"] for c in bounded),
            "doubled": sum(c["doubled"] for c in bounded),
            "samples": sum(c["samples"] for c in bounded),
            "converged": all(c["converged"] for c in bounded),
            "reached": all(c["reached"] for c in bounded),
        },
        "resp": resp,
    }
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
