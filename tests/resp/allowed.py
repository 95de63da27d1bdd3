"""What differential.py may find different between geocount and one Redis: nothing but the
differences docs/api.md documents (its "Redis protocol" part), each entry of ALLOWED quoting
the wording it relies on (differential.py checks that docs/api.md still says it).

The entries judge a reply pair with what the sequence had done before the command: the Model,
which follows Redis's replies (what each key holds there).
"""

import unicodedata
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Err:
    """An error reply: its whole line, e.g. `ERR value is not an integer or out of range`."""

    text: str

    def __repr__(self):
        return f"error {self.text!r}"


@dataclass(frozen=True)
class Closed:
    """The server closed the connection (or stopped answering) instead of replying."""

    why: str

    def __repr__(self):
        return f"connection closed ({self.why})"


NOT_INTEGER = Err("ERR value is not an integer or out of range")
WRONGTYPE = Err("WRONGTYPE Operation against a key holding the wrong kind of value")

COUNTER_WRITES = {b"INCR", b"INCRBY", b"DECR", b"DECRBY"}
LIFECYCLE = {b"DEL", b"UNLINK", b"EXPIRE", b"PEXPIRE", b"PERSIST"}
WRITES = COUNTER_WRITES | {b"PFADD"} | LIFECYCLE
NOT_HLL = Err("WRONGTYPE Key is not a valid HyperLogLog string value.")
# The reply of each single-key command for a key that holds nothing.
MISSING = {b"GET": None, b"TTL": -2, b"PTTL": -2, b"PERSIST": 0, b"EXPIRE": 0, b"PEXPIRE": 0,
           b"PFCOUNT": 0}


def valid_counter_id(key: bytes) -> bool:
    """Whether geocount takes `key` as a counter id: 1-256 bytes of UTF-8 without control
    characters (Rust's `char::is_control`, the Unicode category Cc)."""
    if not 1 <= len(key) <= 256:
        return False
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any(unicodedata.category(ch) == "Cc" for ch in text)


def key_arguments(command):
    """The keys `command` names."""
    name = command[0].upper()
    if name in (b"MGET", b"DEL", b"UNLINK", b"PFCOUNT"):
        return command[1:]
    if name in COUNTER_WRITES | {b"GET", b"PFADD", b"EXPIRE", b"PEXPIRE", b"TTL", b"PTTL",
                                 b"PERSIST"} and len(command) > 1:
        return command[1:2]
    return []


def _effect(name, reply):
    """What write `name`'s reply says it did to the key: refused, applied, or for the lifecycle
    commands their integer (how many keys went, whether an expiry changed)."""
    if isinstance(reply, (Err, Closed)):
        return "refused"
    return reply if name in LIFECYCLE else "applied"


def _leaves_different(command, reply, other):
    """Whether a write whose replies differ leaves its key holding different things. Not DEL
    and UNLINK, nor an expiry in the past: after them neither holds the key."""
    name = command[0].upper()
    if name not in WRITES or name in (b"DEL", b"UNLINK"):
        return False
    if name in (b"EXPIRE", b"PEXPIRE"):
        try:
            if int(command[2]) <= 0:
                return False
        except ValueError:
            return False
    return _effect(name, reply) != _effect(name, other)


@dataclass
class Model:
    """What each key holds in Redis, from Redis's replies (keys never expire during a run):
    `sum`, `unique`, or `zero` (a sum made by a zero delta only, which geocount does not make);
    and the keys an allowed difference left holding different things (`diverged`)."""

    kinds: dict = field(default_factory=dict)
    diverged: set = field(default_factory=set)
    gone: dict = field(default_factory=dict)

    def apply(self, command, reply, other, allowed):
        """Follows Redis's `reply` to `command`; `other` is geocount's, `allowed` whether the
        two differ as ALLOWED lets them."""
        name = command[0].upper()
        if allowed and _leaves_different(command, reply, other):
            self.diverged.add(command[1])
        if isinstance(reply, (Err, Closed)):
            return
        key = command[1] if len(command) > 1 else None
        if name in COUNTER_WRITES:
            zero = name in (b"INCRBY", b"DECRBY") and command[2] == b"0"
            if not zero:
                self.kinds[key] = "sum"
            elif self.kinds.get(key) is None:
                self.kinds[key] = "zero"
        elif name == b"PFADD":
            self.kinds.setdefault(key, "unique")
        elif name in (b"DEL", b"UNLINK"):
            for key in command[1:]:
                if key in self.kinds:
                    self.gone[key] = self.kinds.pop(key)
                if not isinstance(other, (Err, Closed)):
                    self.diverged.discard(key)
        elif name in (b"EXPIRE", b"PEXPIRE") and reply == 1:
            try:
                if int(command[2]) <= 0 and key in self.kinds:
                    self.gone[key] = self.kinds.pop(key)
            except ValueError:
                pass


@dataclass
class Difference:
    """Two replies to one command that are not the same value, with what Redis held before."""

    command: list
    redis: object
    geocount: object
    kinds: dict
    diverged: set
    gone: dict = field(default_factory=dict)

    @property
    def name(self):
        return self.command[0].upper()

    @property
    def keys(self):
        return key_arguments(self.command)


def never(*_):
    return False


@dataclass
class Allowed:
    """A documented difference. `docs`: the docs/api.md wording it relies on; `reply`: whether
    it explains a whole reply pair; `value`: whether it explains one value of `GET` or `MGET`
    (key, what Redis held there, Redis's value, geocount's)."""

    name: str
    docs: str
    reply: Callable[[Difference], bool] = never
    value: Callable[[bytes, object, object, object], bool] = never


def _held_by_redis_only(d):
    """Of the distinct keys of `d`, those Redis holds and geocount cannot: (invalid ids,
    zero-delta sums)."""
    keys = set(d.keys)
    invalid = {k for k in keys if not valid_counter_id(k) and k in d.kinds}
    zero = {k for k in keys if d.kinds.get(k) == "zero"}
    return invalid, zero


def _deleted_count(d):
    """DEL and UNLINK count what Redis held and geocount could not hold."""
    if d.name not in (b"DEL", b"UNLINK"):
        return False
    if not (isinstance(d.redis, int) and isinstance(d.geocount, int)):
        return False
    invalid, zero = _held_by_redis_only(d)
    return d.redis - d.geocount == len(invalid) + len(zero)


def _invalid_id_reply(d):
    invalid = [k for k in d.keys if not valid_counter_id(k)]
    if not invalid:
        return False
    g = d.geocount
    if isinstance(g, Err) and g.text.startswith("ERR invalid counter id"):
        return True
    # What Redis holds under such a key, geocount holds nothing under.
    if d.name in MISSING and len(d.keys) == 1 and d.keys[0] in d.kinds:
        return g == MISSING[d.name]
    return _deleted_count(d) and bool(_held_by_redis_only(d)[0])


def _zero_delta_reply(d):
    if d.name in (b"DEL", b"UNLINK"):
        return _deleted_count(d) and bool(_held_by_redis_only(d)[1])
    if not d.keys or d.kinds.get(d.keys[0]) != "zero":
        return False
    r, g = d.redis, d.geocount
    if d.name in (b"TTL", b"PTTL"):
        return isinstance(r, int) and r != -2 and g == -2
    if d.name in (b"EXPIRE", b"PEXPIRE"):
        return r == 1 and g == 0
    if d.name == b"PFCOUNT" and len(d.keys) == 1:
        return r == NOT_HLL and g == 0
    if d.name == b"PFADD":
        return r == NOT_HLL and isinstance(g, int)
    return False


def _unique_value(key, kind, r, g):
    return (kind == "unique" and isinstance(r, bytes) and r.startswith(b"HYLL")
            and isinstance(g, bytes) and g.isdigit())


def _unique_written_as_sum(d):
    return (d.name in COUNTER_WRITES and d.kinds.get(d.keys[0] if d.keys else None) == "unique"
            and d.redis == NOT_INTEGER and d.geocount == WRONGTYPE)


def _pfadd_changed(d):
    return (d.name == b"PFADD" and bool(d.keys) and d.kinds.get(d.keys[0]) == "unique"
            and isinstance(d.redis, int) and isinstance(d.geocount, int)
            and {d.redis, d.geocount} == {0, 1})


def _pfcount_of_keys(d):
    return (d.name == b"PFCOUNT" and len(d.keys) > 1 and isinstance(d.geocount, Err)
            and d.geocount.text.startswith("ERR PFCOUNT of more than one key"))


OVERFLOW = Err("ERR increment or decrement would overflow")


def _reused_as_other_kind(d):
    """A key deleted (or expired) in both, written again as the other kind: geocount keeps the
    tombstone's kind."""
    if not d.keys or d.keys[0] in d.kinds or not isinstance(d.redis, int):
        return False
    was = d.gone.get(d.keys[0])
    if d.name in COUNTER_WRITES:
        return was == "unique" and d.geocount == WRONGTYPE
    if d.name == b"PFADD":
        return was in ("sum", "zero") and d.geocount == NOT_HLL
    return False


def _bucket_overflow(d):
    """A sum write whose one-second bucket would pass 64 bits while Redis's total does not."""
    return d.name in COUNTER_WRITES and isinstance(d.redis, int) and d.geocount == OVERFLOW


ALLOWED = [
    Allowed(
        name="a deleted counter written as the other kind",
        docs="writing it as the other kind is `-WRONGTYPE` until then",
        reply=_reused_as_other_kind,
    ),
    Allowed(
        name="a one-second bucket past 64 bits",
        docs="a write that would take its second's bucket past 64 bits is refused",
        reply=_bucket_overflow,
    ),
    Allowed(
        name="invalid counter id",
        docs="A write to another key is `-ERR invalid counter id: ...`; a read of one finds "
             "nothing (nil, 0, -2).",
        reply=_invalid_id_reply,
        value=lambda key, kind, r, g: not valid_counter_id(key) and g is None,
    ),
    Allowed(
        name="GET of a unique counter",
        docs="`GET` of a unique counter answers its estimate (Redis: the HLL's bytes)",
        value=_unique_value,
    ),
    Allowed(
        name="INCR of a unique counter",
        docs="`INCR` of one is `-WRONGTYPE` (Redis: not an integer)",
        reply=_unique_written_as_sum,
    ),
    Allowed(
        name="PFCOUNT of several keys",
        docs="`PFCOUNT` takes one key: more is refused",
        reply=_pfcount_of_keys,
    ),
    Allowed(
        name="PFADD's 1",
        docs="`PFADD`'s 1 means the world estimate changed, not that a register changed",
        reply=_pfadd_changed,
    ),
    Allowed(
        name="INCRBY k 0",
        docs="`INCRBY k 0` makes nothing: a key without a counter stays without one (Redis sets "
             "it to 0).",
        reply=_zero_delta_reply,
        value=lambda key, kind, r, g: kind == "zero" and r == b"0" and g is None,
    ),
    # A documented difference that one side applied and the other refused leaves the key
    # holding different things (PFADD of a key INCRBY k 0 made in Redis only): what follows on
    # that key follows from it.
    Allowed(
        name="after an allowed difference",
        docs="`INCRBY k 0` makes nothing: a key without a counter stays without one (Redis sets "
             "it to 0).",
        reply=lambda d: any(k in d.diverged for k in d.keys),
        value=lambda key, kind, r, g: kind == "diverged",
    ),
]


def explain(d):
    """The names of the entries that explain difference `d`, or None when none does."""
    if d.name in (b"GET", b"MGET") and not isinstance(d.redis, Err):
        values = [(d.redis, d.geocount)] if d.name == b"GET" else None
        if d.name == b"MGET":
            if not (isinstance(d.redis, list) and isinstance(d.geocount, list)
                    and len(d.redis) == len(d.geocount)):
                return None
            values = list(zip(d.redis, d.geocount))
        names = []
        for key, (r, g) in zip(d.keys, values):
            if r == g:
                continue
            kind = "diverged" if key in d.diverged else d.kinds.get(key)
            entry = next((e for e in ALLOWED if e.value(key, kind, r, g)), None)
            if entry is None:
                return None
            names.append(entry.name)
        return names
    entry = next((e for e in ALLOWED if e.reply(d)), None)
    return None if entry is None else [entry.name]
