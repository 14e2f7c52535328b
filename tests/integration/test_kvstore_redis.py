"""redis-py (and redis-cli, redis-benchmark) against a running store: three replica processes.

Every supported command, with its edge cases and errors, is compared with
what a real redis-server answers to the same redis-py call (Debian's
redis-server, which `make test` installs), in RESP2 and RESP3, through a
follower and through the leader.  Then the rest of the product: pipelines
with and without MULTI, WATCH across replicas, concurrent clients
(exactly-once INCRs), READONLY reads, bad clients and size limits,
redis-cli and redis-benchmark unchanged.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions

from bookie.local.zookeeper import LocalZooKeeper
from tests.integration.support.tools import required_tool
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

FAR_UNIX_S = 4_102_444_800
"""2100-01-01: an absolute expiry both servers accept and neither reaches."""


@pytest.fixture(scope="module")
def store(zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = f"/kvredis-{os.getpid()}"
    with running_store(zookeeper, root, tmp_path_factory.mktemp("store")) as running:
        yield running


def follower(store: Store) -> str:
    leader = store.leader()
    return next(name for name in store.running() if name != leader)


# --- the same calls, compared with redis-server ---------------------------------------------

Call = Callable[[redis.Redis], Any]


def cmd(client: redis.Redis, *words: str) -> Any:
    """A raw command: for those redis-py deprecates (SETNX, SETEX, PSETEX, GETSET), and
    for calls its typed methods would refuse (errors on purpose)."""
    return client.execute_command(*words)  # type: ignore[no-untyped-call]


CALLS: list[tuple[str, Call]] = [
    # SET and its options
    ("set", lambda r: r.set("s:k", "v")),
    ("get", lambda r: r.get("s:k")),
    ("get missing", lambda r: r.get("s:missing")),
    ("set nx on existing", lambda r: r.set("s:k", "v2", nx=True)),
    ("set xx on existing", lambda r: r.set("s:k", "v2", xx=True)),
    ("set xx on missing", lambda r: r.set("s:none", "v", xx=True)),
    ("set get", lambda r: r.set("s:k", "v3", get=True)),
    ("set get missing", lambda r: r.set("s:new", "n", get=True)),
    ("set ex", lambda r: r.set("s:ex", "v", ex=100)),
    ("ttl after ex", lambda r: r.ttl("s:ex")),
    ("set keepttl", lambda r: r.set("s:ex", "w", keepttl=True)),
    ("ttl after keepttl", lambda r: r.ttl("s:ex")),
    ("set drops ttl", lambda r: r.set("s:ex", "x")),
    ("ttl after set", lambda r: r.ttl("s:ex")),
    ("set exat", lambda r: r.set("s:at", "v", exat=FAR_UNIX_S)),
    ("expiretime", lambda r: r.expiretime("s:at")),
    ("set pxat", lambda r: r.set("s:pat", "v", pxat=FAR_UNIX_S * 1000 + 5)),
    ("pexpiretime", lambda r: cmd(r, "PEXPIRETIME", "s:pat")),
    ("set ex 0", lambda r: cmd(r, "SET", "s:k", "v", "EX", "0")),
    ("set ex -5", lambda r: cmd(r, "SET", "s:k", "v", "EX", "-5")),
    ("set ex not a number", lambda r: cmd(r, "SET", "s:k", "v", "EX", "ten")),
    ("set nx xx", lambda r: cmd(r, "SET", "s:k", "v", "NX", "XX")),
    ("set ex px", lambda r: cmd(r, "SET", "s:k", "v", "EX", "1", "PX", "1")),
    ("set bad option", lambda r: cmd(r, "SET", "s:k", "v", "FOREVER")),
    ("set arity", lambda r: cmd(r, "SET", "s:k")),
    ("setnx", lambda r: [cmd(r, "SETNX", "s:nx", "1"), cmd(r, "SETNX", "s:nx", "2")]),
    ("setex", lambda r: [cmd(r, "SETEX", "s:sx", "50", "v"), r.ttl("s:sx")]),
    ("setex 0", lambda r: cmd(r, "SETEX", "s:sx", "0", "v")),
    ("psetex", lambda r: [cmd(r, "PSETEX", "s:psx", "50000", "v"), r.ttl("s:psx")]),
    ("getset", lambda r: [cmd(r, "GETSET", "s:gs", "a"), cmd(r, "GETSET", "s:gs", "b")]),
    ("getdel", lambda r: [r.getdel("s:gs"), r.getdel("s:gs"), r.exists("s:gs")]),
    ("getex ex", lambda r: [r.set("s:gx", "v"), r.getex("s:gx", ex=30), r.ttl("s:gx")]),
    ("getex persist", lambda r: [r.getex("s:gx", persist=True), r.ttl("s:gx")]),
    ("getex exat", lambda r: [r.getex("s:gx", exat=FAR_UNIX_S), r.expiretime("s:gx")]),
    ("getex missing", lambda r: r.getex("s:missing", ex=5)),
    ("getex bad", lambda r: cmd(r, "GETEX", "s:gx", "EX", "1", "PERSIST")),
    # several keys
    ("mset", lambda r: r.mset({"m:a": "1", "m:b": "2"})),
    ("mget", lambda r: r.mget("m:a", "m:missing", "m:b")),
    ("mset odd", lambda r: cmd(r, "MSET", "m:a", "1", "m:b")),
    ("msetnx blocked", lambda r: [r.msetnx({"m:a": "9", "m:c": "9"}), r.get("m:c")]),
    ("msetnx", lambda r: [r.msetnx({"m:c": "3", "m:d": "4"}), r.mget("m:c", "m:d")]),
    # strings
    ("append", lambda r: [r.append("t:a", "hello"), r.append("t:a", " world"), r.get("t:a")]),
    ("strlen", lambda r: [r.strlen("t:a"), r.strlen("t:missing")]),
    ("setrange", lambda r: [r.setrange("t:r", 5, "x"), r.get("t:r")]),
    ("setrange in", lambda r: [r.setrange("t:a", 6, "WORLD"), r.get("t:a")]),
    ("setrange negative", lambda r: cmd(r, "SETRANGE", "t:a", "-1", "x")),
    ("setrange empty", lambda r: [r.setrange("t:empty", 3, ""), r.exists("t:empty")]),
    ("getrange", lambda r: [r.getrange("t:a", 0, 4), r.getrange("t:a", -5, -1)]),
    ("getrange out", lambda r: [r.getrange("t:a", 5, 1), r.getrange("t:a", -100, 100)]),
    ("getrange missing", lambda r: r.getrange("t:missing", 0, -1)),
    # numbers
    ("incr", lambda r: [r.incr("n:a"), r.incr("n:a"), r.decr("n:a"), r.get("n:a")]),
    ("incrby", lambda r: [r.incrby("n:a", 100), r.decrby("n:a", 1000)]),
    ("incr not a number", lambda r: [r.set("n:s", "x"), r.incr("n:s")]),
    ("incr spaces", lambda r: [r.set("n:s", " 1"), r.incr("n:s")]),
    ("incr overflow", lambda r: [r.set("n:max", str(2**63 - 1)), r.incr("n:max")]),
    ("decrby min", lambda r: cmd(r, "DECRBY", "n:a", str(-(2**63)))),
    ("incrby not a number", lambda r: cmd(r, "INCRBY", "n:a", "1.5")),
    ("incrbyfloat", lambda r: [r.incrbyfloat("n:f", 10.5), r.incrbyfloat("n:f", 0.1)]),
    ("incrbyfloat exp", lambda r: [r.set("n:e", "5.0e3"), r.incrbyfloat("n:e", 2.0e2)]),
    ("incrbyfloat precision", lambda r: [r.set("n:p", "12345.6789"), r.incrbyfloat("n:p", 0.1)]),
    ("incrbyfloat inf", lambda r: cmd(r, "INCRBYFLOAT", "n:f", "inf")),
    ("incrbyfloat text", lambda r: [r.set("n:t", "abc"), r.incrbyfloat("n:t", 1)]),
    # keys
    ("del", lambda r: [r.mset({"d:a": 1, "d:b": 2}), r.delete("d:a", "d:a", "d:missing")]),
    ("unlink", lambda r: r.unlink("d:b", "d:c")),
    ("exists", lambda r: [r.set("d:x", 1), r.exists("d:x", "d:x", "d:missing")]),
    ("touch", lambda r: r.touch("d:x", "d:x", "d:missing")),
    (
        "rename",
        lambda r: [
            r.set("r:a", "1", ex=100),
            r.set("r:b", "2", ex=50),
            r.rename("r:a", "r:b"),
            r.exists("r:a"),
            r.get("r:b"),
            r.ttl("r:b"),
        ],
    ),
    ("rename same", lambda r: [r.rename("r:b", "r:b"), r.renamenx("r:b", "r:b")]),
    ("rename missing", lambda r: r.rename("r:missing", "r:x")),
    ("renamenx missing", lambda r: r.renamenx("r:missing", "r:missing")),
    (
        "renamenx",
        lambda r: [
            r.set("r:c", "3"),
            r.renamenx("r:b", "r:c"),
            r.renamenx("r:b", "r:d"),
            r.mget("r:b", "r:c", "r:d"),
        ],
    ),
    ("rename arity", lambda r: cmd(r, "RENAME", "r:c")),
    ("copy", lambda r: [r.set("c:a", "1", ex=100), r.copy("c:a", "c:b"), r.ttl("c:b")]),
    (
        "copy onto existing",
        lambda r: [
            r.set("c:c", "3"),
            r.copy("c:a", "c:c"),
            r.copy("c:a", "c:c", replace=True),
            r.get("c:c"),
            r.ttl("c:c"),
        ],
    ),
    ("copy replace drops ttl", lambda r: [r.copy("c:c", "c:b", replace=True), r.ttl("c:b")]),
    ("copy missing", lambda r: r.copy("c:missing", "c:x")),
    ("copy same", lambda r: cmd(r, "COPY", "c:a", "c:a")),
    ("copy db 0", lambda r: [cmd(r, "COPY", "c:a", "c:d", "DB", "0"), r.get("c:d")]),
    ("copy db not a number", lambda r: cmd(r, "COPY", "c:a", "c:e", "DB", "x")),
    ("copy db negative", lambda r: cmd(r, "COPY", "c:a", "c:e", "DB", "-1")),
    ("copy db missing", lambda r: cmd(r, "COPY", "c:a", "c:e", "DB")),
    ("copy bad option", lambda r: cmd(r, "COPY", "c:a", "c:e", "NOW")),
    ("type", lambda r: [r.type("d:x"), r.type("d:missing")]),
    ("keys", lambda r: sorted(r.keys("m:*"))),
    ("keys class", lambda r: sorted(r.keys("m:[a-c]"))),
    ("scan", lambda r: sorted(r.scan_iter(match="n:*", count=2))),
    (
        "scan type",
        lambda r: [sorted(r.scan_iter(_type="string", match="m:*")), r.scan(0, _type="hash")[1]],
    ),
    ("scan bad cursor", lambda r: cmd(r, "SCAN", "x")),
    ("scan bad count", lambda r: cmd(r, "SCAN", "0", "COUNT", "0")),
    # TTLs
    ("expire", lambda r: [r.set("e:a", 1), r.expire("e:a", 100), r.ttl("e:a")]),
    ("expire nx", lambda r: [r.expire("e:a", 50, nx=True), r.ttl("e:a")]),
    ("expire xx", lambda r: [r.expire("e:a", 50, xx=True), r.ttl("e:a")]),
    ("expire gt", lambda r: [r.expire("e:a", 10, gt=True), r.expire("e:a", 90, gt=True)]),
    ("expire lt", lambda r: [r.expire("e:a", 95, lt=True), r.expire("e:a", 20, lt=True)]),
    ("expire nx xx", lambda r: cmd(r, "EXPIRE", "e:a", "5", "NX", "XX")),
    ("expire gt lt", lambda r: cmd(r, "EXPIRE", "e:a", "5", "GT", "LT")),
    ("expire bad", lambda r: cmd(r, "EXPIRE", "e:a", "5", "SOON")),
    ("expire missing", lambda r: r.expire("e:missing", 10)),
    ("expire past", lambda r: [r.set("e:p", 1), r.expire("e:p", -1), r.exists("e:p")]),
    ("pexpire", lambda r: [r.set("e:b", 1), r.pexpire("e:b", 100_000), r.ttl("e:b")]),
    ("expireat", lambda r: [r.expireat("e:b", FAR_UNIX_S), r.expiretime("e:b")]),
    ("pexpireat", lambda r: [r.pexpireat("e:b", FAR_UNIX_S * 1000 + 1), r.pexpiretime("e:b")]),
    ("persist", lambda r: [r.persist("e:b"), r.persist("e:b"), r.ttl("e:b")]),
    ("ttl missing", lambda r: [r.ttl("e:missing"), r.pttl("e:missing")]),
    ("ttl none", lambda r: [r.ttl("e:b"), r.pttl("e:b"), r.expiretime("e:b")]),
    ("expire overflow", lambda r: cmd(r, "EXPIRE", "e:b", str(2**63 - 1))),
    # connection
    ("ping", lambda r: [r.ping(), cmd(r, "PING", "hi")]),
    ("echo", lambda r: r.echo("hello")),
    ("select 0", lambda r: cmd(r, "SELECT", "0")),
    ("client name", lambda r: [r.client_setname("me"), r.client_getname()]),
    ("client bad name", lambda r: cmd(r, "CLIENT", "SETNAME", "a b")),
    ("unknown command", lambda r: cmd(r, "NOSUCH", "a", "b")),
    ("unknown subcommand", lambda r: cmd(r, "CLIENT", "NOPE")),
    ("get arity", lambda r: cmd(r, "GET")),
    ("dbsize", lambda r: r.dbsize() > 0),
]


def outcome(call: Call, client: redis.Redis) -> tuple[str, Any]:
    try:
        return ("ok", call(client))
    except redis.exceptions.ResponseError as error:
        return ("error", f"{type(error).__name__}: {error}")


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("where", ["follower", "leader"])
def test_every_command_answers_as_redis_does(
    store: Store, real_redis: int, protocol: int, where: str
) -> None:
    name = store.leader() if where == "leader" else follower(store)
    with (
        store.client(name, protocol=protocol) as ours,
        redis.Redis(port=real_redis, protocol=protocol) as theirs,
    ):
        ours.flushall()
        theirs.flushall()
        differences = []
        for description, call in CALLS:
            expected = outcome(call, theirs)
            got = outcome(call, ours)
            if got != expected:
                differences.append(f"{description}: redis {expected!r}, kvstore {got!r}")
        assert not differences, "\n".join(differences)


# --- the rest, on our store only -------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
def test_basic_commands_on_every_replica(store: Store, protocol: int) -> None:
    for number, name in enumerate(store.running()):
        with store.client(name, protocol=protocol) as client:
            key = f"basic:{protocol}:{number}"
            assert client.set(key, "v", ex=100)
            assert client.get(key) == b"v"
            assert client.incr(f"{key}:n") == 1
            assert cmd(client, "CAS", key, "v", "x") == 1
            assert cmd(client, "CAS", key, "nope", "y") == 0
            assert client.get(key) == b"x"
            info = client.info("replication")
            assert info["role"] == "master"
            assert info["rsm_role"] in ("leader", "follower")


def test_pipelines_with_and_without_multi(store: Store) -> None:
    with store.client(follower(store)) as client:
        pipe = client.pipeline(transaction=False)
        for i in range(500):
            pipe.set(f"pipe:{i}", i)
        for i in range(500):
            pipe.incr(f"pipe:{i}")
        results = pipe.execute()
        assert results == [True] * 500 + [i + 1 for i in range(500)]
        with client.pipeline(transaction=True) as transaction:
            transaction.set("tx:a", "1")
            transaction.incr("tx:a")
            transaction.incr("tx:text-is-not-a-number") if False else transaction.get("tx:a")
            transaction.set("tx:b", "x")
            transaction.incr("tx:b")
            transaction.get("tx:b")
            assert transaction.execute(raise_on_error=False)[:3] == [True, 2, b"2"]
        assert client.get("tx:b") == b"x"


def test_a_pipelines_reads_see_its_earlier_writes_on_every_replica(store: Store) -> None:
    # As Redis answers a pipeline: each command after the ones before it.
    for name in store.running():
        with store.client(name) as client:
            pipe = client.pipeline(transaction=False)
            key = f"ordered:{name}"
            pipe.set(key, "v").get(key).incr(f"{key}:n").get(f"{key}:n")
            pipe.delete(key).exists(key).set(key, "w").get(key)
            assert pipe.execute() == [True, b"v", 1, b"1", 1, 0, True, b"w"], name


def test_watch_sees_writes_made_through_another_replica(store: Store) -> None:
    leader = store.leader()
    with store.client(follower(store)) as alice, store.client(leader) as bob:
        alice.set("acct", 100)
        with alice.pipeline() as pipe:
            pipe.watch("acct")
            balance = int(pipe.get("acct") or 0)
            bob.incrby("acct", 1)
            pipe.multi()
            pipe.set("acct", balance - 10)
            with pytest.raises(redis.exceptions.WatchError):
                pipe.execute()

        def withdraw(pipe: Any) -> None:
            balance = int(pipe.get("acct") or 0)
            pipe.multi()
            pipe.set("acct", balance - 10)

        alice.transaction(withdraw, "acct")
        assert bob.get("acct") == b"91"


def test_concurrent_clients_on_every_replica_apply_each_increment_once(store: Store) -> None:
    names = store.running()
    failures: list[BaseException] = []

    def increment(name: str) -> None:
        try:
            with store.client(name) as client:
                for _ in range(150):
                    client.incr("concurrent")
                    client.incrby("concurrent:by", 2)
        except BaseException as error:  # collected and reported by the test
            failures.append(error)

    threads = [threading.Thread(target=increment, args=(name,)) for name in names * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not failures
    with store.client(names[0]) as client:
        assert int(client.get("concurrent") or 0) == 150 * len(threads)
        assert int(client.get("concurrent:by") or 0) == 2 * 150 * len(threads)


def test_readonly_reads_come_from_the_local_replica(store: Store) -> None:
    name = follower(store)
    with store.client(store.leader()) as writer:
        writer.set("ro", "1")
    target = store.applied(store.leader())
    wait_for(lambda: store.applied(name) >= target)
    with store.client(name) as reader:
        assert cmd(reader, "READONLY")
        assert reader.get("ro") == b"1"
        assert cmd(reader, "READWRITE")


def test_info_shows_a_followers_lag_fall_to_zero_once_it_applied_the_writes(store: Store) -> None:
    name = follower(store)
    leader = store.leader()
    with store.client(leader) as writer:
        for i in range(20):
            writer.set(f"lag:{i}", i)
    assert int(store.info(leader)["rsm_lag_entries"]) == 0, "a leader is never behind"
    target = store.applied(leader)
    wait_for(
        lambda: store.applied(name) >= target and int(store.info(name)["rsm_lag_entries"]) == 0
    )


def test_garbage_disconnects_only_that_client(store: Store) -> None:
    name = follower(store)
    with store.client(name) as bystander:
        bystander.set("bystander", "here")
        with socket.create_connection(("127.0.0.1", store.port(name)), timeout=WAIT_S) as raw:
            raw.sendall(b"PING\r\n*1\r\n$-7\r\nmore garbage\r\n")
            answer = _read_until_closed(raw)
        assert answer == b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"
        assert bystander.get("bystander") == b"here"


def _read_until_closed(raw: socket.socket) -> bytes:
    received = b""
    while chunk := raw.recv(65536):
        received += chunk
    return received


def test_size_limits(store: Store) -> None:
    name = follower(store)
    with store.client(name) as client:
        with pytest.raises(redis.exceptions.ResponseError, match="key exceeds maximum"):
            client.set("k" * (64 * 1024 + 1), "v")
        with pytest.raises(redis.exceptions.ResponseError, match="string exceeds maximum"):
            client.set("big", "v" * (512 * 1024 + 1))
        assert client.set("big", "v" * (512 * 1024))
        assert client.strlen("big") == 512 * 1024
        # Past the request bound: a protocol error, then the server closes the connection
        # (announced lengths are checked before the bytes arrive).
        with socket.create_connection(("127.0.0.1", store.port(name)), timeout=WAIT_S) as raw:
            raw.sendall(b"*3\r\n$3\r\nSET\r\n$4\r\nhuge\r\n$2097152\r\n")
            assert _read_until_closed(raw) == b"-ERR Protocol error: invalid bulk length\r\n"
        assert client.ping(), "the server goes on"


def test_redis_cli_works_unchanged(store: Store) -> None:
    cli = required_tool("redis-cli")
    port = str(store.port(follower(store)))
    with store.client(store.leader()) as client:
        client.mset({f"cli:{i}": i for i in range(30)})

    def run(*args: str) -> str:
        return subprocess.run(
            [cli, "-p", port, *args],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=True,
        ).stdout

    assert run("SET", "cli:x", "hello") == "OK\n"
    assert run("-3", "GET", "cli:x") == "hello\n"
    assert run("GET", "cli:nothing") == "\n"
    scanned = run("--scan", "--pattern", "cli:*").split()
    assert sorted(scanned) == sorted([f"cli:{i}" for i in range(30)] + ["cli:x"])


def test_redis_benchmark_works_unchanged(store: Store) -> None:
    result = subprocess.run(
        [
            required_tool("redis-benchmark"),
            "-p",
            str(store.port(follower(store))),
            "-t",
            "set,get",
            "-n",
            "2000",
            "-c",
            "10",
            "-P",
            "4",
            "--csv",
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
        check=True,
    )
    rows = [line for line in result.stdout.splitlines() if line.startswith(('"SET"', '"GET"'))]
    assert len(rows) == 2, result.stdout + result.stderr
    assert "WARNING" not in result.stderr


def test_data_dir_layout(store: Store) -> None:
    data_dir: Path = store.cluster.data_dir
    assert (data_dir / "kvstore.toml").exists()
    for name in store.names:
        assert (data_dir / name / "replica.log").stat().st_size > 0
