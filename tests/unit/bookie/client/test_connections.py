"""The connection pool: lazy connections through the injected connector, requests queued
while connecting, fast failure during the backoff after a loss, reconnection."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from bookie.address import Address
from bookie.client.bookie_conn import BookieConnection
from bookie.client.config import ClientConfig
from bookie.client.connections import ConnectionPool, bookie_address, tcp_connector
from bookie.core.bookie_handler import BookieIdentity
from bookie.errors import BookieError, BookieUnavailable, ClientClosed
from bookie.storage.memory import MemoryLedgerStorage
from bookie.wire.codec import encode_request
from bookie.wire.messages import (
    LAC_NONE,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    Response,
    WriteLacRequest,
)
from tests.unit.bookie.client.cluster import WAIT_S
from tests.unit.bookie.server.support import DIGEST, KEY, packet, running_server, wait_for

pytestmark = pytest.mark.anyio

CONFIG = ClientConfig(
    connect_timeout_ms=1_000, reconnect_delay_ms_min=200, reconnect_delay_ms_max=400
)


class CountingConnector:
    """TCP, counting attempts; refuses while `refuse` is set."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self.refuse = False

    async def __call__(self, address: str) -> anyio.abc.ByteStream:
        self.attempts.append(address)
        if self.refuse:
            raise OSError("refused by the test")
        return await tcp_connector(address)


class Answers:
    def __init__(self) -> None:
        self.outcomes: list[Response | BookieError] = []

    def __call__(self, outcome: Response | BookieError) -> None:
        self.outcomes.append(outcome)


@asynccontextmanager
async def pool_of(
    connector: CountingConnector, *, instance_id: str | None = None
) -> AsyncIterator[ConnectionPool]:
    async with anyio.create_task_group() as task_group:
        pool = ConnectionPool(connector, CONFIG, task_group, instance_id=instance_id)
        yield pool
        pool.close()
        task_group.cancel_scope.cancel()


def ask(pool: ConnectionPool, bookie_id: str, answers: Answers) -> None:
    pool.submit(bookie_id, GetBookieInfoRequest(0), answers, 1_000)


async def test_connects_on_first_use_and_sends_what_queued_meanwhile() -> None:
    connector = CountingConnector()
    async with running_server(MemoryLedgerStorage()) as server, pool_of(connector) as pool:
        pool.set_address("b1", f"127.0.0.1:{server.port}")
        assert connector.attempts == []
        answers = Answers()
        for _ in range(5):
            ask(pool, "b1", answers)
        assert answers.outcomes == [], "never answered from inside submit"
        await wait_for(lambda: len(answers.outcomes) == 5, WAIT_S)
        assert all(isinstance(outcome, GetBookieInfoResponse) for outcome in answers.outcomes)
        assert connector.attempts == [f"127.0.0.1:{server.port}"]
        assert pool.is_connected("b1")


async def test_fails_fast_during_backoff_then_reconnects() -> None:
    connector = CountingConnector()
    async with running_server(MemoryLedgerStorage()) as server, pool_of(connector) as pool:
        pool.set_address("b1", f"127.0.0.1:{server.port}")
        connector.refuse = True
        first = Answers()
        ask(pool, "b1", first)
        await wait_for(lambda: len(first.outcomes) == 1, WAIT_S)
        assert isinstance(first.outcomes[0], BookieUnavailable)
        assert len(connector.attempts) == 1

        connector.refuse = False
        during = Answers()
        ask(pool, "b1", during)
        await wait_for(lambda: len(during.outcomes) == 1, WAIT_S)
        assert isinstance(during.outcomes[0], BookieUnavailable)
        assert len(connector.attempts) == 1, "no attempt during the backoff"

        after = Answers()
        with anyio.fail_after(WAIT_S):
            while not after.outcomes or not isinstance(after.outcomes[-1], GetBookieInfoResponse):
                # The backoff is the timer under test: let it run out.
                await anyio.sleep(CONFIG.reconnect_delay_ms_min / 1000)
                ask(pool, "b1", after)
                await wait_for(lambda: len(after.outcomes) > 0, WAIT_S)
        assert len(connector.attempts) == 2


async def test_a_lost_connection_fails_its_requests_and_a_new_address_reconnects() -> None:
    connector = CountingConnector()
    async with pool_of(connector) as pool:
        async with running_server(MemoryLedgerStorage()) as first:
            pool.set_address("b1", f"127.0.0.1:{first.port}")
            answers = Answers()
            ask(pool, "b1", answers)
            await wait_for(lambda: len(answers.outcomes) == 1, WAIT_S)
        await wait_for(lambda: not pool.is_connected("b1"), WAIT_S)
        lost = Answers()
        ask(pool, "b1", lost)
        await wait_for(lambda: len(lost.outcomes) == 1, WAIT_S)
        assert isinstance(lost.outcomes[0], BookieUnavailable)

        async with running_server(MemoryLedgerStorage()) as second:
            # A new registration ends the backoff at once.
            pool.set_address("b1", f"127.0.0.1:{second.port}")
            again = Answers()
            ask(pool, "b1", again)
            await wait_for(lambda: len(again.outcomes) == 1, WAIT_S)
            assert isinstance(again.outcomes[0], GetBookieInfoResponse)
            assert connector.attempts[-1] == f"127.0.0.1:{second.port}"


async def test_a_bookie_registered_anew_at_the_same_address_is_tried_at_once() -> None:
    """A restarted bookie keeps its address: its new registration must end the backoff its
    death started, or the first requests to it fail as if it were still dead."""
    connector = CountingConnector()
    slow = ClientConfig(
        connect_timeout_ms=1_000, reconnect_delay_ms_min=60_000, reconnect_delay_ms_max=60_000
    )
    async with (
        running_server(MemoryLedgerStorage()) as server,
        anyio.create_task_group() as task_group,
    ):
        pool = ConnectionPool(connector, slow, task_group)
        pool.set_address("b1", f"127.0.0.1:{server.port}")
        connector.refuse = True
        dead = Answers()
        ask(pool, "b1", dead)
        await wait_for(lambda: len(dead.outcomes) == 1, WAIT_S)
        connector.refuse = False
        pool.end_backoff("b1")
        back = Answers()
        ask(pool, "b1", back)
        await wait_for(lambda: len(back.outcomes) == 1, WAIT_S)
        assert isinstance(back.outcomes[0], GetBookieInfoResponse)
        assert len(connector.attempts) == 2
        pool.close()
        task_group.cancel_scope.cancel()


async def test_unknown_bookies_and_a_closed_pool_answer_with_errors() -> None:
    connector = CountingConnector()
    async with pool_of(connector) as pool:
        unknown = Answers()
        ask(pool, "nobody", unknown)
        await wait_for(lambda: len(unknown.outcomes) == 1, WAIT_S)
        assert isinstance(unknown.outcomes[0], BookieUnavailable)
        pool.set_address("b1", "127.0.0.1:1")
        pool.close()
        closed = Answers()
        ask(pool, "b1", closed)
        await wait_for(lambda: len(closed.outcomes) == 1, WAIT_S)
        assert isinstance(closed.outcomes[0], ClientClosed)
        assert connector.attempts == []


def test_a_bookie_address_that_is_not_host_and_port_makes_the_bookie_unavailable() -> None:
    assert bookie_address("bookie-1.example:3181") == Address("bookie-1.example", 3181)
    for bad in ("nohost", ":3181", "host:", "host:http", "host:0", "host:70000"):
        with pytest.raises(BookieUnavailable, match="is not host:port"):
            bookie_address(bad)


async def test_one_frame_goes_to_two_bookies_under_a_shared_request_id() -> None:
    request_ids = itertools.count(1)
    answers = Answers()
    async with (
        running_server(MemoryLedgerStorage()) as first,
        running_server(MemoryLedgerStorage()) as second,
        BookieConnection.connect("127.0.0.1", first.port, request_ids=request_ids) as one,
        BookieConnection.connect("127.0.0.1", second.port, request_ids=request_ids) as two,
    ):
        assert one.submit(GetBookieInfoRequest(0), answers, 1_000) == 1
        request_id = next(request_ids)
        frame = encode_request(GetBookieInfoRequest(request_id))
        one.submit_frame(request_id, frame, answers, 1_000)
        two.submit_frame(request_id, frame, answers, 1_000)
        await wait_for(lambda: len(answers.outcomes) == 3, WAIT_S)
        responses = [o for o in answers.outcomes if isinstance(o, GetBookieInfoResponse)]
        assert sorted(response.request_id for response in responses) == [1, 2, 2]
        assert two.submit(GetBookieInfoRequest(0), answers, 1_000) == 3
    with anyio.fail_after(WAIT_S):
        await one.wait_failed()
    assert one.failure is not None


async def test_a_bookie_of_another_cluster_at_a_known_address_gets_nothing() -> None:
    """The port of a bookie that died was taken by a bookie of another cluster on the same
    machine, holding a ledger of the same id under the same master key.  An explicit LAC
    sent there would give that ledger a LAC its own writer never reached, and its readers
    would look for entries nobody wrote (`NoSuchEntry`): the pool must not send it."""
    connector = CountingConnector()
    storage = MemoryLedgerStorage()
    storage.set_master_key(0, KEY)
    storage.add_entry(0, 0, packet(0, 0, lac=LAC_NONE))
    storage.sync()
    theirs = BookieIdentity("b1", "cluster-b")
    async with (
        running_server(storage, identity=theirs) as server,
        BookieConnection.connect("127.0.0.1", server.port) as owner,
        pool_of(connector, instance_id="cluster-a") as pool,
    ):
        pool.set_address("b1", f"127.0.0.1:{server.port}")
        answers = Answers()
        pool.submit("b1", WriteLacRequest(0, 0, KEY, 57, DIGEST.build_lac(0, 57)), answers, 1_000)
        await wait_for(lambda: len(answers.outcomes) == 1, WAIT_S)
        [outcome] = answers.outcomes
        assert isinstance(outcome, BookieUnavailable)
        assert "cluster-b" in str(outcome)
        assert not pool.is_connected("b1")
        entry = await owner.read(0, 0)
        assert entry.lac == LAC_NONE, "the other cluster's bookie kept its own LAC"


async def test_a_connection_is_used_once_the_bookie_states_the_expected_identity() -> None:
    connector = CountingConnector()
    async with (
        running_server(MemoryLedgerStorage(), identity=BookieIdentity("b1", "c")) as server,
        pool_of(connector, instance_id="c") as pool,
    ):
        pool.set_address("b1", f"127.0.0.1:{server.port}")
        pool.set_address("b2", f"127.0.0.1:{server.port}")
        served, other = Answers(), Answers()
        ask(pool, "b1", served)
        ask(pool, "b2", other)
        await wait_for(lambda: len(served.outcomes) == len(other.outcomes) == 1, WAIT_S)
        assert isinstance(served.outcomes[0], GetBookieInfoResponse)
        assert isinstance(other.outcomes[0], BookieUnavailable)
        assert "bookie b1 listens there, not b2" in str(other.outcomes[0])
