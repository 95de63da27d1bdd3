#!/usr/bin/env python3
"""The Python client `redis` (PyPI) driving a geocount shard node's RESP listener.

Checks, with asserts, what an application does with its usual client: INCR and its kin, a
pipeline, GET and MGET, PFADD and PFCOUNT, DEL, EXPIRE, TTL and PERSIST, error replies as
exceptions, and with `--token` AUTH (NOAUTH before it, a wrong token refused; with
`--reader-token` a read-only token that may GET but not INCR). Runs over RESP2 and over RESP3
(`HELLO 3`) unless `--protocol` picks one. Every check holds against a real Redis too (with
`--token`, one started with `--requirepass TOKEN`; the rights check needs geocount).

    python3 tests/resp/clients.py 127.0.0.1:7111 [--token T [--reader-token R]] [--tls-ca CA]

Prints one line per protocol and exits 0, or fails with the assertion that broke.
"""

import argparse
import inspect
import random
import sys

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.exceptions import AuthenticationError, ResponseError
    from redis.retry import Retry
except ImportError:
    print(
        "clients.py: the Python client `redis` is missing "
        "(scripts/test.sh installs it; or `python3 -m pip install redis`)",
        file=sys.stderr,
    )
    sys.exit(2)

I64_MAX = 2**63 - 1


def client(args, protocol, password=None, setinfo=True):
    """A client of the listener; without `setinfo`, one that sends nothing on connect (but
    HELLO 3 for RESP3), so its first command meets the server's NOAUTH."""
    host, _, port = args.addr.rpartition(":")
    # No retries: a refusal is what the checks look at (the client retries a refused
    # connection three times, backing off, by default).
    options = dict(host=host, port=int(port), protocol=protocol, password=password,
                   socket_timeout=10, decode_responses=True, retry=Retry(NoBackoff(), 0))
    if not setinfo:
        if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
            options.update(driver_info=None)
        else:
            options.update(lib_name=None, lib_version=None)
    if args.tls_ca:
        options.update(ssl=True, ssl_ca_certs=args.tls_ca, ssl_check_hostname=False)
    return redis.Redis(**options)


def raises(call, words, kind=ResponseError):
    """`call()` raises `kind` naming every one of `words`; the exception's text."""
    try:
        result = call()
    except kind as error:
        text = str(error)
        for word in words:
            assert word in text, f"{word!r} missing in the error {text!r}"
        return text
    raise AssertionError(f"expected an error naming {words}, got {result!r}")


def counters(r, key):
    assert r.ping() is True
    assert r.echo("hello") == "hello"
    assert r.incr(f"{key}:a") == 1
    assert r.incr(f"{key}:a") == 2
    assert r.incrby(f"{key}:a", 40) == 42
    assert r.decr(f"{key}:a") == 41
    assert r.decrby(f"{key}:a", 11) == 30
    assert r.incrby(f"{key}:a", -5) == 25
    assert r.get(f"{key}:a") == "25"
    assert r.get(f"{key}:missing") is None
    assert r.mget([f"{key}:a", f"{key}:missing", f"{key}:a"]) == ["25", None, "25"]
    # A counter may go below zero, as in Redis.
    assert r.decrby(f"{key}:b", 7) == -7
    assert r.get(f"{key}:b") == "-7"


def pipelines(r, key):
    # Without MULTI: commands sent in one write, replies read in order.
    pipe = r.pipeline(transaction=False)
    for _ in range(200):
        pipe.incr(f"{key}:p")
    replies = pipe.execute()
    assert replies == list(range(1, 201)), f"200 pipelined INCRs answered {replies}"
    pipe = r.pipeline(transaction=False)
    pipe.incrby(f"{key}:q", 10).get(f"{key}:q").decr(f"{key}:q").mget(f"{key}:p", f"{key}:q")
    pipe.incrby(f"{key}:q", "nope")
    pipe.get(f"{key}:q")
    replies = pipe.execute(raise_on_error=False)
    assert replies[:4] == [10, "10", 9, ["200", "9"]], replies
    assert isinstance(replies[4], ResponseError), replies
    assert "not an integer" in str(replies[4]), replies
    assert replies[5] == "9", replies
    # Many keys in one pipeline, then every one read back with MGET.
    keys = [f"{key}:many:{i}" for i in range(100)]
    pipe = r.pipeline(transaction=False)
    for i, k in enumerate(keys):
        pipe.incrby(k, i + 1)
    replies = pipe.execute()
    assert replies == [i + 1 for i in range(100)], replies
    assert r.mget(keys) == [str(i + 1) for i in range(100)]


def uniques(r, key):
    assert r.pfadd(f"{key}:u", "a", "b", "c") == 1
    assert r.pfadd(f"{key}:u", "a", "b") == 0
    assert r.pfcount(f"{key}:u") == 3
    items = [f"item-{i}" for i in range(2000)]
    for start in range(0, len(items), 500):
        r.pfadd(f"{key}:v", *items[start:start + 500])
    estimate = r.pfcount(f"{key}:v")
    assert abs(estimate - 2000) <= 2000 * 0.03, estimate
    assert r.pfcount(f"{key}:none") == 0


def lifecycle(r, key):
    r.incrby(f"{key}:d", 5)
    r.incrby(f"{key}:e", 5)
    assert r.delete(f"{key}:d") == 1
    assert r.get(f"{key}:d") is None
    assert r.unlink(f"{key}:e") == 1
    assert r.get(f"{key}:e") is None
    # Written again after DEL, a counter starts from zero.
    assert r.incr(f"{key}:d") == 1
    assert r.expire(f"{key}:d", 100) is True
    assert 98 <= r.ttl(f"{key}:d") <= 100
    assert 98_000 <= r.pttl(f"{key}:d") <= 100_000
    assert r.pexpire(f"{key}:d", 200_000) is True
    assert 198 <= r.ttl(f"{key}:d") <= 200
    assert r.persist(f"{key}:d") is True
    assert r.ttl(f"{key}:d") == -1
    assert r.persist(f"{key}:d") is False
    assert r.ttl(f"{key}:missing") == -2
    assert r.expire(f"{key}:missing", 100) is False
    # An expiry in the past deletes at once.
    assert r.expire(f"{key}:d", -1) is True
    assert r.get(f"{key}:d") is None


def errors(r, key):
    raises(lambda: r.incrby(f"{key}:x", "abc"), ["value is not an integer or out of range"])
    raises(lambda: r.incrby(f"{key}:x", "1.5"), ["value is not an integer or out of range"])
    raises(lambda: r.execute_command("NOSUCHCOMMAND", "a"), ["unknown command", "NOSUCHCOMMAND"])
    raises(lambda: r.execute_command("INCR"), ["wrong number of arguments for 'incr' command"])
    raises(lambda: r.execute_command("GET", "a", "b"), ["wrong number of arguments"])
    assert r.incrby(f"{key}:max", I64_MAX) == I64_MAX
    raises(lambda: r.incr(f"{key}:max"), ["increment or decrement would overflow"])
    assert r.get(f"{key}:max") == str(I64_MAX)
    # A counter of the other kind: Redis and geocount both refuse (in their own words).
    r.pfadd(f"{key}:kind", "x")
    raises(lambda: r.incr(f"{key}:kind"), [])
    r.incr(f"{key}:sum")
    raises(lambda: r.pfadd(f"{key}:sum", "x"), ["WRONGTYPE"])
    # An error leaves the connection usable.
    assert r.incr(f"{key}:after") == 1


def access(args, protocol, key):
    anonymous = client(args, protocol, setinfo=False)
    # RESP3 clients start with HELLO 3, refused with NOAUTH in words of its own.
    words = ["Authentication required"] if protocol == 2 else []
    raises(lambda: anonymous.incr(f"{key}:auth"), words, AuthenticationError)
    raises(lambda: anonymous.get(f"{key}:auth"), words, AuthenticationError)
    wrong = client(args, protocol, password="not-" + args.token)
    raises(lambda: wrong.ping(), [], (AuthenticationError, ResponseError))
    wrong.close()
    if protocol == 2:
        # AUTH on an open connection, then the same connection works.
        assert anonymous.execute_command("AUTH", args.token) in (True, "OK")
        assert anonymous.incr(f"{key}:auth") == 1
    else:
        # HELLO 3 AUTH default <token>, as the client sends it.
        assert client(args, protocol, password=args.token).incr(f"{key}:auth") == 1
    anonymous.close()
    if args.reader_token:
        reader = client(args, protocol, password=args.reader_token)
        assert reader.get(f"{key}:auth") == "1"
        raises(lambda: reader.incr(f"{key}:auth"), [])
        assert reader.get(f"{key}:auth") == "1"
        reader.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("addr", help="HOST:PORT of the RESP listener")
    parser.add_argument("--token", help="with [auth]: a token with every right")
    parser.add_argument("--reader-token", help="with [auth]: a token with the read right only")
    parser.add_argument("--tls-ca", help="speak TLS, trusting this CA file")
    parser.add_argument("--protocol", type=int, choices=[2, 3], action="append")
    args = parser.parse_args()
    run = f"py{random.randrange(16**6):06x}"
    for protocol in args.protocol or [2, 3]:
        key = f"{run}:{protocol}"
        if args.token:
            access(args, protocol, key)
        r = client(args, protocol, password=args.token)
        for check in (counters, pipelines, uniques, lifecycle, errors):
            check(r, f"{key}:{check.__name__}")
        r.close()
        print(f"clients.py: redis-py {redis.__version__} over RESP{protocol} against "
              f"{args.addr}: every check passed")


if __name__ == "__main__":
    main()
