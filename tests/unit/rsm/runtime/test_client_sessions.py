"""The client when its session expires: which calls go again under a new session, which give up.

The replica is a scripted fake behind the framework's real `ReplicaServer` on
a loopback port, so every attempt crosses the real client protocol; the test
decides, per call attempt, what the "replica" answers and when.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute

from bookie.meta.memory import MemoryMetadataStore
from rsm.client import Client, ClientConfig, connect, tcp_connector
from rsm.core.layout import AppLayout
from rsm.core.log_format import LeaderInfo, encode_leader
from rsm.core.protocol import CallRequest, Op, QueryRequest
from rsm.core.sessions import Outcome
from rsm.errors import NotLeader, OutcomeUnknown, SessionExpired, StatusError, Timeout
from rsm.link import TOKEN_FILE_VARIABLE
from rsm.runtime.applier import Answerer
from rsm.runtime.server import ReplicaServer

pytestmark = pytest.mark.anyio

APP = "scripted"
WAIT_S = 10.0
HOLD = "hold"
"""A script step: keep the attempt unanswered until the test calls `release`."""
SILENT = "silent"
"""A script step: never answer the attempt (the client's attempt timeout ends it)."""


class ScriptedReplica:
    """Answers call attempts, in arrival order, from `script`; OK (with the seq) past its end."""

    def __init__(self, script: list[StatusError | str]) -> None:
        self.script = script
        self.calls: list[tuple[bytes, int, int]] = []
        """(client_id, seq, ack_seq) of every attempt, in arrival order."""
        self.held: list[tuple[CallRequest, Answerer]] = []
        self._arrived = anyio.Event()

    def handle_call(self, request: CallRequest, answerer: Answerer) -> None:
        step = self.script[len(self.calls)] if len(self.calls) < len(self.script) else None
        self.calls.append((request.client_id, request.seq, request.ack_seq))
        self._arrived.set()
        self._arrived = anyio.Event()
        if step == HOLD:
            self.held.append((request, answerer))
        elif isinstance(step, StatusError):
            answerer.answer(Op.CALL, request.request_id, Outcome.failure(step), 0)
        elif step is None:
            answerer.answer(Op.CALL, request.request_id, Outcome(value=request.seq), 1)

    def release(self, error: StatusError) -> None:
        """Answer the oldest held attempt with `error`."""
        request, answerer = self.held.pop(0)
        answerer.answer(Op.CALL, request.request_id, Outcome.failure(error), 0)

    async def wait_calls(self, count: int) -> None:
        with anyio.fail_after(WAIT_S):
            while len(self.calls) < count:
                await self._arrived.wait()

    def handle_query(self, request: QueryRequest, answerer: Answerer) -> int | None:
        raise AssertionError("no queries here")

    def cancel_read(self, ticket: int) -> None:
        raise AssertionError("no queries here")

    def flush(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        raise AssertionError("not used")

    async def transfer_leadership(self, to: str | None) -> dict[str, Any]:
        raise AssertionError("not used")

    async def take_snapshot(self) -> dict[str, Any]:
        raise AssertionError("not used")


class Connections:
    """The client's connector: TCP, except that the next `refuse` connects fail; it keeps
    the client's end of each connection so a test can cut it."""

    def __init__(self) -> None:
        self.refuse = 0
        self.streams: list[anyio.abc.ByteStream] = []

    async def __call__(self, address: str) -> anyio.abc.ByteStream:
        if self.refuse:
            self.refuse -= 1
            raise OSError("connection refused (by the test)")
        stream = await tcp_connector(address)
        self.streams.append(stream)
        return stream


@asynccontextmanager
async def scripted_client(
    script: list[StatusError | str],
    connections: Connections | None = None,
    replica: ScriptedReplica | None = None,
    **options: int,
) -> AsyncIterator[tuple[Client, ScriptedReplica]]:
    """A client whose leader znode names a `ScriptedReplica` (`replica`, or one playing
    `script`) served on a loopback port."""
    replica = ScriptedReplica(script) if replica is None else replica
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    address = f"127.0.0.1:{listener.extra(SocketAttribute.local_port)}"
    config = ClientConfig(**{"deadline_ms": 5_000, "attempt_timeout_ms": 200, **options})
    async with MemoryMetadataStore() as store, anyio.create_task_group() as task_group:
        task_group.start_soon(ReplicaServer(replica, listener).serve)
        leader = LeaderInfo("r1", address, 1)
        await store.create(AppLayout.of(APP).leader, encode_leader(leader), make_parents=True)
        connector = connections if connections is not None else tcp_connector
        async with connect(APP, store=store, config=config, connector=connector) as client:
            yield client, replica
        task_group.cancel_scope.cancel()


async def test_a_call_answered_session_expired_goes_again_under_a_new_session() -> None:
    async with scripted_client([SessionExpired("idle too long")]) as (client, replica):
        assert await client.call("add", 1) == 1
        assert await client.call("add", 1) == 2
    (old, *first), (new, *resent), (same, *second) = replica.calls
    assert (first, resent, second) == ([1, 0], [1, 0], [2, 1])
    assert new != old
    assert same == new


async def test_a_call_whose_attempt_may_be_logged_gives_up_when_its_session_expired() -> None:
    script: list[StatusError | str] = [OutcomeUnknown("leader lost"), SessionExpired("evicted")]
    async with scripted_client(script, backoff_ms_initial=1) as (client, replica):
        with pytest.raises(Timeout) as raised:
            await client.call("add", 1)
        assert isinstance(raised.value.__cause__, SessionExpired)
        assert len(replica.calls) == 2, "not sent a third time: it may be applied already"
        assert await client.call("add", 1) == 1, "the next call has a new session"
    [(old, *first), (retry, *again), (new, *fresh)] = replica.calls
    assert first == again == fresh == [1, 0]
    assert retry == old
    assert new != old


async def test_an_attempt_that_timed_out_counts_as_maybe_logged() -> None:
    script: list[StatusError | str] = [SILENT, SessionExpired("evicted")]
    async with scripted_client(script, backoff_ms_initial=1) as (client, replica):
        with pytest.raises(Timeout):
            await client.call("add", 1)
    assert len(replica.calls) == 2


async def test_an_attempt_whose_connection_broke_after_sending_counts_as_maybe_logged() -> None:
    connections = Connections()
    script: list[StatusError | str] = [HOLD, SessionExpired("evicted")]
    async with scripted_client(script, connections, backoff_ms_initial=1) as (client, replica):
        outcome: list[object] = []

        async def add() -> None:
            try:
                outcome.append(await client.call("add", 1))
            except Timeout as error:
                outcome.append(error)

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(add)
            await replica.wait_calls(1)
            await connections.streams[0].aclose()
    [error] = outcome
    assert isinstance(error, Timeout)
    assert len(replica.calls) == 2, "sent on a new connection, then not again"


class WorkingOnIt(ScriptedReplica):
    """Takes a leadership transfer or a snapshot and never answers it."""

    def __init__(self) -> None:
        super().__init__([])
        self.arrived = anyio.Event()

    async def transfer_leadership(self, to: str | None) -> dict[str, Any]:
        self.arrived.set()
        await anyio.sleep_forever()
        raise AssertionError("never answers")

    async def take_snapshot(self) -> dict[str, Any]:
        return await self.transfer_leadership(None)


@pytest.mark.parametrize("request_name", ["transfer_leadership", "snapshot"])
async def test_an_admin_request_whose_connection_broke_after_it_went_is_of_unknown_outcome(
    request_name: str,
) -> None:
    """The replica has it and is working on it: never "not applied" (`Unavailable`)."""
    connections = Connections()
    replica = WorkingOnIt()
    async with scripted_client([], connections, replica) as (client, _):
        request = getattr(client, request_name)
        outcome: list[BaseException] = []

        async def ask() -> None:
            try:
                await (request("r2") if request_name == "transfer_leadership" else request())
            except StatusError as error:
                outcome.append(error)

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(ask)
            with anyio.fail_after(WAIT_S):
                await replica.arrived.wait()
            await connections.streams[-1].aclose()
    [error] = outcome
    assert isinstance(error, OutcomeUnknown), error


async def test_a_connection_that_never_came_up_sent_nothing() -> None:
    connections = Connections()
    connections.refuse = 1
    script: list[StatusError | str] = [SessionExpired("idle too long")]
    async with scripted_client(script, connections, backoff_ms_initial=1) as (client, replica):
        assert await client.call("add", 1) == 1, "sent again under a new session"
    assert len(replica.calls) == 2
    assert replica.calls[0][0] != replica.calls[1][0]


async def test_concurrent_calls_of_an_expired_session_start_one_new_session() -> None:
    script: list[StatusError | str] = [HOLD, HOLD]
    async with scripted_client(script) as (client, replica):
        results: list[int] = []

        async def add() -> None:
            results.append(await client.call("add", 1))

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(add)
            task_group.start_soon(add)
            await replica.wait_calls(2)
            replica.release(SessionExpired("idle too long"))
            replica.release(SessionExpired("idle too long"))
    old = replica.calls[0][0]
    resent = replica.calls[2:]
    assert {client_id for client_id, _, _ in resent} != {old}
    assert len({client_id for client_id, _, _ in resent}) == 1, "one new session"
    assert sorted(seq for _, seq, _ in resent) == [1, 2]
    assert sorted(results) == [1, 2]


async def test_a_call_of_an_expired_session_moves_only_if_nothing_of_it_may_be_logged() -> None:
    """Calls still out when another call learns the session expired: the one whose attempt
    may be logged gives up without another attempt; the one refused outright moves."""
    script: list[StatusError | str] = [HOLD, HOLD, SessionExpired("idle too long")]
    async with scripted_client(script, backoff_ms_initial=1) as (client, replica):
        outcomes: dict[str, object] = {}

        async def add(name: str) -> None:
            try:
                outcomes[name] = await client.call("add", 1)
            except Timeout as error:
                outcomes[name] = error

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(add, "unknown")
            await replica.wait_calls(1)
            task_group.start_soon(add, "refused")
            await replica.wait_calls(2)
            task_group.start_soon(add, "expired")
            await replica.wait_calls(4)  # "expired" was refused, then sent again
            replica.release(OutcomeUnknown("leader lost"))
            replica.release(NotLeader("stepped down", None))
    old = replica.calls[0][0]
    assert isinstance(outcomes["unknown"], Timeout)
    assert outcomes["expired"] == 1
    assert outcomes["refused"] == 2
    assert [seq for _, seq, _ in replica.calls] == [1, 2, 3, 1, 2]
    assert [client_id == old for client_id, _, _ in replica.calls] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert replica.calls[2][2] == 0, "the old session's ack_seq: seqs 1 and 2 were open"


async def test_a_client_with_a_token_is_served_by_a_replica_that_requires_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica without client tokens answers AUTH OK (moving clients to tokens first is the
    documented migration), and the calls behind it are served."""
    token_file = tmp_path / "token"
    token_file.write_text("a-client-token-0123456789")
    monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(token_file))
    async with scripted_client([]) as (client, replica):
        assert await client.call("add", 1) == 1
        assert await client.call("add", 1) == 2
    assert len(replica.calls) == 2
