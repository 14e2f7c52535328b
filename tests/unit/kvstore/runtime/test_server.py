"""The RESP server shell on real sockets (and on another listener's streams), with redis-py and
raw bytes, over a store-backed router.

The router here applies each command to one in-memory `KVStore` at once (no
bookies, no leader): what is tested is the shell's own work: reading,
pipelining, reply order, protocol switches, transactions through redis-py,
bad clients and bounds.  The cluster's routing is tested in test_router.py
and, end to end, in tests/integration.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
import pytest
import redis.asyncio as aredis
import redis.exceptions
from anyio import wait_all_tasks_blocked
from anyio.abc import SocketAttribute
from kvstore import limits
from kvstore.connection.acl import with_default_password
from kvstore.connection.dispatch import Action
from kvstore.connection.server_commands import ClientState, ServerView
from kvstore.runtime import server as server_module
from kvstore.runtime.router import Lane, Receiver
from kvstore.runtime.server import ReplicaInfo, RespConnection, RespServer, ServerConfig
from kvstore.state_machine import KVStore

from bookie.testing.simnet import SimNetwork
from rsm.core.exactly_once import Session
from rsm.core.sessions import Outcome
from tests.unit.bookie.server.support import wait_for
from tests.unit.kvstore.replica import Replica

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


class StoreRouter:
    """Applies every command to one store at once; `hold` keeps the answers until `release`."""

    def __init__(self) -> None:
        self.replica = Replica()
        self.held: list[tuple[Receiver, int, Outcome]] | None = None
        self.requests: list[tuple[str, list[Any]]] = []
        self.lanes: list[Lane] = []
        self.reads_at_once = False
        self.reads_now = 0
        """Reads answered through `read_now`, the connection's shortest path."""
        self.round_gets: list[tuple[Receiver, int, bytes]] | None = None
        """As at a follower (`follow`): the lone GETs waiting for `answer_round`."""

    def lane(self) -> Lane:
        lane = Lane(Session(b"s" * 16))
        self.lanes.append(lane)
        return lane

    def call(self, lane: Lane, name: str, args: list[Any], receiver: Receiver, ticket: int) -> None:
        self.requests.append((name, args))
        self._answer(receiver, ticket, self.replica.command(name, *args))

    def read(
        self,
        lane: Lane,
        name: str,
        args: list[Any],
        receiver: Receiver,
        ticket: int,
        *,
        stale: bool,
    ) -> None:
        self.requests.append((name, args))
        self._answer(receiver, ticket, self.replica.query(name, *args))

    def read_now(self, lane: Lane, name: str, args: list[Any]) -> Outcome | None:
        """Like a leader under its read lease: at once, unless answers are held (and reads
        are not let through, `hold(reads_at_once=True)`)."""
        if self.held is not None and not self.reads_at_once:
            return None
        self.requests.append((name, args))
        self.reads_now += 1
        return self.replica.query(name, *args)

    def read_time_ms(self, lane: Lane) -> int | None:
        """`read_now` for the GETs the connection answers itself, from `state`, at the
        clock's time."""
        if self.held is not None and not self.reads_at_once:
            return None
        self.reads_now += 1
        return max(self.replica.time_ms, self.replica.applied.time_ms)  # the leader's clock

    def get_after_round(self, lane: Lane, key: bytes, receiver: Receiver, ticket: int) -> bool:
        if self.round_gets is None:
            return False  # as at a leader: `read` takes what `read_time_ms` does not
        self.round_gets.append((receiver, ticket, key))
        return True

    def follow(self) -> None:
        """Answer no read at once (`hold`), and hold lone GETs for `answer_round`."""
        self.hold()
        self.round_gets = []

    def answer_round(self) -> None:
        gets, self.round_gets = self.round_gets or [], []
        for receiver, ticket, key in gets:
            receiver.deliver_value(ticket, self.state.value_at(key, self.replica.time_ms))

    @property
    def state(self) -> KVStore:
        return self.replica.store

    def close_lane(self, lane: Lane) -> None:
        lane.closed = True

    def _answer(self, receiver: Receiver, ticket: int, outcome: Outcome) -> None:
        if self.held is None:
            receiver.deliver(ticket, outcome, 0)
        else:
            self.held.append((receiver, ticket, outcome))

    def hold(self, *, reads_at_once: bool = False) -> None:
        self.held = []
        self.reads_at_once = reads_at_once

    def release(self, *, reverse: bool = False) -> None:
        held, self.held = self.held or [], None
        for receiver, ticket, outcome in reversed(held) if reverse else held:
            receiver.deliver(ticket, outcome, 0)


INFO = ReplicaInfo("leader", None, 1, 0, True, 0, 0, 0)


@asynccontextmanager
async def serving(
    config: ServerConfig | None = None,
) -> AsyncIterator[tuple[StoreRouter, int]]:
    router = StoreRouter()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    server = RespServer(
        listener,
        router,
        replica_info=lambda: INFO,
        config=replace(config or ServerConfig(), port=port),
    )
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(server.serve)
        yield router, port
        task_group.cancel_scope.cancel()


@asynccontextmanager
async def redis_client(port: int, protocol: int = 2) -> AsyncIterator[aredis.Redis]:
    client = aredis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    try:
        yield client
    finally:
        await client.aclose()


async def exchange(port: int, data: bytes, expected_bytes: int) -> bytes:
    """Send `data` on a new connection; the first `expected_bytes` bytes answered."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        return await receive_exactly(stream, expected_bytes)


async def receive_exactly(stream: anyio.abc.ByteStream, size: int) -> bytes:
    received = b""
    with anyio.fail_after(WAIT_S):
        while len(received) < size:
            received += await stream.receive()
    return received


async def receive_until_closed(stream: anyio.abc.ByteStream) -> bytes:
    received = b""
    with anyio.fail_after(WAIT_S):
        try:
            while True:
                received += await stream.receive()
        except anyio.EndOfStream:
            return received


@pytest.mark.parametrize("protocol", [2, 3])
async def test_redis_py_commands_and_pipelines(protocol: int) -> None:
    async with serving() as (_, port), redis_client(port, protocol) as client:
        assert await client.ping()
        assert await client.set("k", "v")
        assert await client.get("k") == b"v"
        assert await client.get("missing") is None
        assert await client.incr("n") == 1
        assert await client.mget("k", "missing", "n") == [b"v", None, b"1"]
        assert await client.expire("k", 100)
        assert 0 < await client.ttl("k") <= 100
        assert (await client.info("replication"))["rsm_role"] == "leader"
        config = await client.config_get("save")
        assert {str(key, "ascii") if isinstance(key, bytes) else key for key in config} == {"save"}
        pipe = client.pipeline(transaction=False)
        for i in range(100):
            pipe.set(f"p{i}", i)
            pipe.incr(f"p{i}")
        results = await pipe.execute()
        assert (
            results
            == [True, 1, *[value for i in range(1, 100) for value in (True, i + 1)]][: len(results)]
        )
        assert await client.get("p99") == b"100"
        async with client.pipeline(transaction=True) as transaction:
            transaction.set("t", "1")
            transaction.incr("t")
            transaction.get("t")
            assert await transaction.execute() == [True, 2, b"2"]


async def test_commandstats_and_errorstats_as_redis_py_reads_them() -> None:
    async with serving() as (_, port), redis_client(port) as client:
        async with redis_client(port) as gone:
            assert await gone.set("k", "v")
            assert await gone.get("k") == b"v"
        await client.set("k", "v")
        with pytest.raises(redis.exceptions.ResponseError, match="not an integer"):
            await client.incr("k")
        with pytest.raises(redis.exceptions.ResponseError, match="wrong number of arguments"):
            await client.execute_command("GET")  # type: ignore[no-untyped-call]
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            await client.execute_command("NOSUCH")  # type: ignore[no-untyped-call]
        stats = await client.info("commandstats")
        assert stats["cmdstat_set"] == {"calls": 2, "rejected_calls": 0, "failed_calls": 0}
        assert stats["cmdstat_get"] == {"calls": 1, "rejected_calls": 1, "failed_calls": 0}
        # redis-py's incr() sends INCRBY.
        assert stats["cmdstat_incrby"] == {"calls": 1, "rejected_calls": 0, "failed_calls": 1}
        assert not any("nosuch" in name for name in stats)
        assert await client.info("errorstats") == {"errorstat_ERR": {"count": 3}}
        totals = await client.info("stats")
        assert totals["total_commands_processed"] >= 5
        assert totals["total_error_replies"] == 3
        everything = await client.info("everything")
        assert everything["cmdstat_incrby"]["failed_calls"] == 1


async def test_watch_through_redis_py_aborts_when_another_client_writes() -> None:
    async with serving() as (_, port), redis_client(port) as alice, redis_client(port) as bob:
        await alice.set("balance", 10)
        async with alice.pipeline() as pipe:
            await pipe.watch("balance")
            balance = int(await pipe.get("balance") or 0)
            await bob.incrby("balance", 5)
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.set("balance", balance - 10)
            with pytest.raises(redis.exceptions.WatchError):
                await pipe.execute()
        assert await alice.get("balance") == b"15"

        async def withdraw(pipe: Any) -> None:
            balance = int(await pipe.get("balance") or 0)
            pipe.multi()
            pipe.set("balance", balance - 10)

        await alice.transaction(withdraw, "balance")
        assert await alice.get("balance") == b"5"


async def test_inline_commands() -> None:
    async with serving() as (_, port):
        expected = b"+PONG\r\n+OK\r\n$3\r\nx y\r\n"
        answer = await exchange(port, b"PING\r\nSET a 'x y'\r\nGET a\r\n", len(expected))
        assert answer == expected


async def test_garbage_gets_an_error_then_the_connection_closes_others_go_on() -> None:
    async with serving() as (_, port), redis_client(port) as bystander:
        assert await bystander.set("k", "v")
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"*1\r\n$3\r\nGET\r\n*2\r\n$x\r\n")
            answer = await receive_until_closed(stream)
        assert answer == (
            b"-ERR wrong number of arguments for 'get' command\r\n"
            b"-ERR Protocol error: invalid bulk length\r\n"
        )
        assert await bystander.get("k") == b"v"


@pytest.mark.parametrize("held", [False, True], ids=["as-it-arrives", "after-a-held-answer"])
async def test_a_bug_in_handling_a_command_closes_that_connection_only(
    monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """An exception no request should cause (here put into `plan` for BOOM) closes its
    connection, whether it came up as the bytes arrived or when a held answer let the
    pipeline go on: the connection is never left open owing replies; others go on."""
    real_plan = server_module.plan

    def plan(args: list[bytes], client: ClientState, view: ServerView) -> Action:
        if args[0] == b"BOOM":
            raise RuntimeError("a bug")
        return real_plan(args, client, view)

    monkeypatch.setattr(server_module, "plan", plan)
    reported: list[BaseException | None] = []
    loop = asyncio.get_running_loop()
    test_runners_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    try:
        await talk_to_a_buggy_server(held)
    finally:
        loop.set_exception_handler(test_runners_handler)
    assert [type(error) for error in reported] == [RuntimeError], "the loop logs the bug"


async def talk_to_a_buggy_server(held: bool) -> None:
    async with serving() as (router, port), redis_client(port) as bystander:
        if held:
            router.hold()
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"WATCH k\r\nBOOM\r\nPING\r\n")
            if held:
                await wait_for(lambda: bool(router.held))
                router.release()
            with anyio.fail_after(WAIT_S):
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while True:
                        assert b"PONG" not in await stream.receive()
        assert await bystander.ping()


async def test_requests_over_the_bound_are_protocol_errors() -> None:
    async with serving(ServerConfig(request_bytes_max=100, bulk_bytes_max=100)) as (_, port):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$101\r\n" + b"v" * 101 + b"\r\n")
            assert await receive_until_closed(stream) == (
                b"-ERR Protocol error: invalid bulk length\r\n"
            )
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"*3\r\n$3\r\nSET\r\n$60\r\n" + b"k" * 60 + b"\r\n$60\r\n")
            assert await receive_until_closed(stream) == b"-ERR Protocol error: too big request\r\n"


async def test_replies_keep_the_request_order_whatever_order_answers_come_in() -> None:
    async with serving() as (router, port):
        router.hold()
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"SET a 1\r\nPING\r\nGET a\r\nINCR a\r\n")
            with anyio.fail_after(WAIT_S):
                while len(router.held or []) < 3:
                    await anyio.sleep(0.001)
            router.release(reverse=True)
            expected = b"+OK\r\n+PONG\r\n$1\r\n1\r\n:2\r\n"
            assert await receive_exactly(stream, len(expected)) == expected


async def test_a_pipelined_hello_changes_only_the_replies_after_it() -> None:
    async with serving() as (router, port):
        router.hold()
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET nothing\r\nHELLO 3\r\nGET nothing\r\n")
            with anyio.fail_after(WAIT_S):
                while len(router.held or []) < 2:
                    await anyio.sleep(0.001)
            router.release()
            received = await receive_exactly(stream, 5 + 104 + 3)
        assert received.startswith(b"$-1\r\n%7\r\n")
        assert received.endswith(b"*0\r\n_\r\n")


class RecordingTransport:
    """Keeps every write of a `RespConnection` driven by hand, to see when and how it writes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.reading = True

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, _name: str, default: object = None) -> object:
        return default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


@asynccontextmanager
async def hand_driven_connection(
    config: ServerConfig | None = None,
) -> AsyncIterator[tuple[StoreRouter, RespConnection, RecordingTransport]]:
    """A connection fed by the test itself (no socket): the loop never runs in between."""
    router = StoreRouter()
    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as listener:
        server = RespServer(
            listener, router, replica_info=lambda: INFO, config=config or ServerConfig()
        )
        connection = RespConnection(server, 1)
        transport = RecordingTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        yield router, connection, transport


async def test_a_lone_commands_reply_is_written_as_soon_as_it_is_answered() -> None:
    # Not at the next loop iteration: the client's next command overlaps the
    # rest of the leader's batch.
    async with hand_driven_connection() as (router, connection, transport):
        router.hold()
        connection.data_received(b"SET a 1\r\n")
        assert transport.writes == []
        router.release()
        assert transport.writes == [b"+OK\r\n"]


async def test_an_answer_waits_while_writing_is_paused_and_leaves_on_resume() -> None:
    async with hand_driven_connection() as (router, connection, transport):
        router.hold()
        connection.data_received(b"SET a 1\r\nSET b 2\r\n")
        connection.pause_writing()
        router.release()
        await wait_all_tasks_blocked()
        assert transport.writes == []
        connection.resume_writing()
        assert transport.writes == [b"+OK\r\n+OK\r\n"]


@pytest.mark.parametrize("reverse", [False, True])
async def test_a_pipelines_answers_leave_in_one_write(reverse: bool) -> None:
    async with hand_driven_connection() as (router, connection, transport):
        router.hold()
        connection.data_received(b"SET a 1\r\nSET b 2\r\nGET a\r\n")
        router.release(reverse=reverse)
        await wait_all_tasks_blocked()
        assert transport.writes == [b"+OK\r\n+OK\r\n$1\r\n1\r\n"]


async def test_replies_known_at_once_leave_in_one_write_without_the_routers_delivery() -> None:
    async with hand_driven_connection() as (router, connection, transport):
        router.replica.command("set", b"a", b"1")
        connection.data_received(b"GET a\r\nPING\r\nGET b\r\n")
        assert transport.writes == [b"$1\r\n1\r\n+PONG\r\n$-1\r\n"]
        assert router.reads_now == 2
        assert router.requests == [], "the GETs read the store itself, not a query"
        assert router.held is None


async def test_a_lone_get_is_answered_from_the_state_without_a_query() -> None:
    async with hand_driven_connection() as (router, connection, transport):
        router.replica.command("set", b"a", b"1")
        router.replica.command("set", b"t", b"v", b"PX", b"10")
        router.replica.advance_ms(20)  # t expired, and nothing logged since to delete it
        for key in (b"a", b"missing", b"t"):
            connection.data_received(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
        assert transport.writes == [b"$1\r\n1\r\n", b"$-1\r\n", b"$-1\r\n"]
        assert router.reads_now == 3
        assert router.requests == [], "no query went through the router"
        assert connection.client.stats.calls == {"get": 3}
        connection.data_received(b"HELLO 3\r\n")
        transport.writes.clear()
        connection.data_received(b"*2\r\n$3\r\nget\r\n$7\r\nmissing\r\n")
        assert transport.writes == [b"_\r\n"], "RESP3's null"


async def test_a_lone_get_without_the_lease_is_the_routers_read() -> None:
    async with hand_driven_connection() as (router, connection, transport):
        router.replica.command("set", b"a", b"1")
        router.hold()  # as at a follower: no read is answered at once
        connection.data_received(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
        assert router.requests == [("get", [b"a"])]
        assert transport.writes == []
        connection.data_received(b"PING\r\n")  # waits behind the GET's reply
        router.release()
        await wait_all_tasks_blocked()
        assert b"".join(transport.writes) == b"$1\r\n1\r\n+PONG\r\n"
        assert connection.client.stats.calls == {"get": 1, "ping": 1}


async def test_a_lone_get_at_a_follower_waits_for_the_round_and_keeps_its_place() -> None:
    async with hand_driven_connection() as (router, connection, transport):
        router.replica.command("set", b"a", b"1")
        router.follow()
        connection.data_received(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
        connection.data_received(b"PING\r\n")  # waits behind the GET's reply
        assert transport.writes == []
        assert router.requests == [], "no read went through the router's `read`"
        router.answer_round()
        await wait_all_tasks_blocked()
        assert b"".join(transport.writes) == b"$1\r\n1\r\n+PONG\r\n"
        transport.writes.clear()
        connection.data_received(b"*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n")
        router.answer_round()
        assert transport.writes == [b"$-1\r\n"], "written as soon as it is answered"
        connection.data_received(b"HELLO 3\r\n")
        transport.writes.clear()
        connection.data_received(b"*2\r\n$3\r\nget\r\n$7\r\nmissing\r\n")
        router.answer_round()
        assert transport.writes == [b"_\r\n"], "RESP3's null"
        assert connection.client.stats.calls == {"get": 3, "ping": 1, "hello": 1}


async def test_a_lone_get_takes_the_usual_path_in_a_transaction_or_behind_a_reply() -> None:
    get_a = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n"
    async with hand_driven_connection() as (router, connection, transport):
        connection.data_received(b"MULTI\r\n")
        connection.data_received(get_a)
        assert transport.writes == [b"+OK\r\n", b"+QUEUED\r\n"]
        connection.data_received(b"EXEC\r\n")
        assert transport.writes[-1] == b"*1\r\n$-1\r\n"
        assert router.reads_now == 0
        router.hold()
        connection.data_received(b"SET a 1\r\n")
        connection.data_received(get_a)
        assert transport.writes[3:] == [], "the GET waits behind the SET's reply"
        router.release()
        await wait_all_tasks_blocked()
        assert b"".join(transport.writes[3:]) == b"+OK\r\n$1\r\n1\r\n"


async def test_from_the_first_command_that_waits_the_rest_keeps_its_order() -> None:
    async with hand_driven_connection() as (router, connection, transport):
        router.hold(reads_at_once=True)
        connection.data_received(b"GET a\r\nSET a 1\r\nGET a\r\nPING\r\n")
        assert transport.writes == [b"$-1\r\n"], "what is ready leaves, what follows waits"
        assert router.reads_now == 1, "the GET after the SET waits behind it"
        router.release()
        await wait_all_tasks_blocked()
        assert b"".join(transport.writes) == b"$-1\r\n+OK\r\n$1\r\n1\r\n+PONG\r\n"


async def test_a_backlog_of_replies_known_at_once_goes_out_in_bounded_writes() -> None:
    value = b"v" * (64 * 1024)
    requests = limits.send_bytes_max // len(value) * 3
    async with hand_driven_connection() as (router, connection, transport):
        router.replica.command("set", b"big", value)
        connection.data_received(b"GET big\r\n" * requests)
        reply = b"$%d\r\n%s\r\n" % (len(value), value)
        assert b"".join(transport.writes) == reply * requests
        assert len(transport.writes) > 1
        assert max(map(len, transport.writes)) < limits.send_bytes_max + len(reply)


async def test_a_connection_owes_at_most_the_bound_of_reply_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "connection_reply_bytes_max", 20)
    async with hand_driven_connection() as (_, connection, transport):
        connection.pause_writing()
        connection.data_received(b"PING\r\n" * 10)
        assert transport.writes == []
        connection.resume_writing()
        await wait_all_tasks_blocked()
        assert b"".join(transport.writes) == b"+PONG\r\n" * 10
        # Taking stops once 3 replies (21 bytes) are owed: no write holds more.
        assert max(len(write) for write in transport.writes) == 21


async def test_owed_replies_go_out_at_most_send_bytes_max_per_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "send_bytes_max", 10)
    async with hand_driven_connection() as (router, connection, transport):
        router.hold()
        connection.data_received(b"SET a 1\r\n" * 5)
        router.release()
        await wait_all_tasks_blocked()
        assert transport.writes == [b"+OK\r\n" * 2, b"+OK\r\n" * 2, b"+OK\r\n"]


async def test_quit_answers_what_is_owed_then_closes() -> None:
    async with serving() as (_, port), await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"SET a 1\r\nQUIT\r\nGET a\r\n")
        assert await receive_until_closed(stream) == b"+OK\r\n+OK\r\n"


async def test_connections_past_the_bound_are_refused() -> None:
    async with serving(ServerConfig(connections_max=1)) as (_, port), redis_client(port) as first:
        assert await first.ping()
        async with await anyio.connect_tcp("127.0.0.1", port) as second:
            assert await receive_until_closed(second) == b"-ERR max number of clients reached\r\n"
        assert await first.ping()


async def test_connections_past_the_bound_per_address_are_refused() -> None:
    config = ServerConfig(connections_max=5, connections_per_address_max=1)
    async with serving(config) as (_, port), redis_client(port) as first:
        assert await first.ping()
        async with await anyio.connect_tcp("127.0.0.1", port) as second:
            assert (
                await receive_until_closed(second)
                == b"-ERR max number of clients reached for this address\r\n"
            )
        async with await anyio.connect_tcp("127.0.0.1", port, local_host="127.0.0.2") as other:
            await other.send(b"PING\r\n")
            assert await receive_exactly(other, 7) == b"+PONG\r\n"
        assert await first.ping()


@pytest.mark.parametrize("request_", [b"SET a 1\r\n", b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n"])
async def test_a_lone_command_that_reaches_the_bound_of_replies_pauses_reading(
    monkeypatch: pytest.MonkeyPatch, request_: bytes
) -> None:
    monkeypatch.setattr(limits, "connection_replies_max", 1)
    async with hand_driven_connection() as (router, connection, transport):
        router.hold()
        connection.data_received(request_)
        assert not transport.reading, "one reply owed: no more commands until it is written"
        router.release()
        await wait_all_tasks_blocked()
        assert transport.writes == [b"+OK\r\n"]
        assert transport.reading


async def test_lone_gets_and_sets_of_a_client_not_logged_in_are_refused() -> None:
    config = ServerConfig(access=with_default_password(b"s3cret"))
    async with hand_driven_connection(config) as (router, connection, transport):
        connection.data_received(b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n")
        connection.data_received(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
        assert transport.writes == [b"-NOAUTH Authentication required.\r\n"] * 2
        assert router.requests == []
        assert router.reads_now == 0


async def test_a_lone_set_goes_to_the_router_and_its_reply_keeps_its_place() -> None:
    set_a = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$2\r\n10\r\n"
    async with hand_driven_connection() as (router, connection, transport):
        router.hold()
        connection.data_received(set_a)
        assert router.requests == [("set", [b"a", b"10"])]
        connection.data_received(b"PING\r\n")  # waits behind the SET's reply
        assert transport.writes == []
        router.release()
        await wait_all_tasks_blocked()
        assert b"".join(transport.writes) == b"+OK\r\n+PONG\r\n"
        assert connection.client.stats.calls == {"set": 1, "ping": 1}
        assert router.replica.store.value_at(b"a", 0) == b"10"
        connection.data_received(b"MULTI\r\n")
        connection.data_received(set_a)
        assert transport.writes[-1] == b"+QUEUED\r\n", "in a transaction it is queued"
        assert router.requests == [("set", [b"a", b"10"])]


async def test_a_connection_owes_at_most_the_bound_of_replies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "connection_replies_max", 5)
    async with serving() as (router, port):
        router.hold()
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"".join(b"INCR n\r\n" for _ in range(12)))
            with anyio.fail_after(WAIT_S):
                while len(router.held or []) < 5:
                    await anyio.sleep(0.001)
            await wait_all_tasks_blocked()
            assert len(router.held or []) == 5, "the reader stops at the bound"
            router.release()
            router.hold()
            assert await receive_exactly(stream, 20) == b":1\r\n:2\r\n:3\r\n:4\r\n:5\r\n"
            with anyio.fail_after(WAIT_S):
                while len(router.held or []) < 5:
                    await anyio.sleep(0.001)
            router.release()
            router.held = None
            rest = b"".join(b":%d\r\n" % n for n in range(6, 13))
            assert await receive_exactly(stream, len(rest)) == rest


async def test_watch_is_answered_before_the_next_command_is_dispatched() -> None:
    async with serving() as (router, port):
        router.hold()
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"WATCH k\r\nMULTI\r\nSET k 1\r\nEXEC\r\n")
            with anyio.fail_after(WAIT_S):
                while not router.held:
                    await anyio.sleep(0.001)
            await wait_all_tasks_blocked()
            assert [name for name, _ in router.requests] == ["position"]
            router.release()
            router.held = None
            expected = b"+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"
            answer = await receive_exactly(stream, len(expected))
        assert answer == expected
        assert [name for name, _ in router.requests] == ["position", "exec"]


async def test_a_client_that_stops_reading_is_disconnected_after_the_send_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "send_timeout_ms", 300)
    value_bytes = 64 * 1024
    gets = 1024
    async with serving() as (router, port), redis_client(port) as other:
        await other.set("big", b"x" * value_bytes)
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            # Far more reply bytes than the socket buffers hold, and nobody reads them.
            await stream.send(b"GET big\r\n" * gets)
            await wait_for(lambda: len(router.lanes) == 2)
            stalled = router.lanes[1]
            # The server closes the connection (and its lane) on its own.
            await wait_for(lambda: stalled.closed, WAIT_S)
            received = 0
            with anyio.fail_after(WAIT_S):
                try:
                    while True:
                        received += len(await stream.receive())
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
        assert received < gets * value_bytes, "the stalled connection was cut, not served"
        assert await other.ping(), "other connections go on"


async def test_the_server_counts_its_connections_by_when_they_were_admitted() -> None:
    """What a follower's CPU priority looks at (rsm/runtime/cpu_priority.py)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    server = RespServer(
        listener, StoreRouter(), replica_info=lambda: INFO, config=ServerConfig(port=port)
    )
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(server.serve)
        before_s = anyio.current_time()
        async with redis_client(port) as client:
            assert await client.ping()
            assert server.connections_open_since(anyio.current_time()) == 1
            assert server.connections_open_since(before_s) == 0, "admitted after before_s"
        await wait_for(lambda: server.connection_count == 0)
        assert server.connections_open_since(anyio.current_time()) == 0
        task_group.cancel_scope.cancel()


async def test_a_listener_that_is_not_tcp_has_its_streams_served_by_the_same_connections() -> None:
    network = SimNetwork(random.Random(1))
    router = StoreRouter()
    server = RespServer(network.listen("server:6379"), router, replica_info=lambda: INFO)
    connect = network.connector("client")
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(server.serve)
        await wait_all_tasks_blocked()
        async with await connect("server:6379") as stream:
            expected = b"+PONG\r\n+OK\r\n$3\r\nx y\r\n"
            await stream.send(b"PING\r\nSET a 'x y'\r\nGET a\r\n")
            assert await receive_exactly(stream, len(expected)) == expected
        async with await connect("server:6379") as stream:
            await stream.send(b"GET a\r\nQUIT\r\nGET a\r\n")
            # QUIT: the replies owed are sent, then the server closes the connection.
            assert await receive_until_closed(stream) == b"$3\r\nx y\r\n+OK\r\n"
        await wait_for(lambda: server.connection_count == 0)
        assert [lane.closed for lane in router.lanes] == [True, True]
        task_group.cancel_scope.cancel()
