"""BookieConnection against scripted peers on real loopback sockets (and the real
server where the answer matters): request ids, out-of-order answers, the
timeout sweep, connection loss, the in-flight bound, send coalescing, a
stalled send.  Tests that take `open_connection` run with both drivers: TCP
as an asyncio protocol (`connect`) and a TCP stream with tasks (`over`)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute

from bookie import limits
from bookie.client.bookie_conn import BookieConnection
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    ClientTimeout,
    Fenced,
    LocalProtocolError,
    TooManyRequests,
    Unauthorized,
)
from bookie.storage.memory import MemoryLedgerStorage
from bookie.wire.codec import FrameDecoder, decode_request, encode_response
from bookie.wire.messages import (
    AddRequest,
    GetBookieInfoRequest,
    ReadLacRequest,
    ReadLacResponse,
    Request,
    Response,
)
from bookie.wire.packet import master_key
from tests.unit.bookie.server.support import KEY, packet, running_server, wait_for

pytestmark = pytest.mark.anyio

Peer = Callable[[anyio.abc.SocketStream], Awaitable[None]]
Opener = Callable[..., AbstractAsyncContextManager[BookieConnection]]


@asynccontextmanager
async def over_tcp_stream(port: int, **options: Any) -> AsyncIterator[BookieConnection]:
    stream = await anyio.connect_tcp("127.0.0.1", port)
    async with BookieConnection.over(stream, f"127.0.0.1:{port}", **options) as connection:
        yield connection


@pytest.fixture(params=["protocol", "stream"])
def open_connection(request: pytest.FixtureRequest) -> Opener:
    """Opens a connection to a loopback port with one driver or the other."""
    if request.param == "stream":
        return over_tcp_stream
    return lambda port, **options: BookieConnection.connect("127.0.0.1", port, **options)


@asynccontextmanager
async def scripted_bookie(peer: Peer) -> AsyncIterator[int]:
    """A TCP server on a free loopback port running `peer` for each connection.

    A peer that is still reading when the client leaves simply ends."""

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await peer(stream)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as task_group:
        task_group.start_soon(listener.serve, serve)
        yield listener.extra(SocketAttribute.local_port)
        task_group.cancel_scope.cancel()


async def receive_requests(stream: anyio.abc.SocketStream, count: int) -> list[Request]:
    decoder = FrameDecoder()
    requests: list[Request] = []
    while len(requests) < count:
        requests.extend(decode_request(body) for body in decoder.feed(await stream.receive()))
    return requests


def lac_response(request_id: int, ledger_id: int) -> bytes:
    return encode_response(ReadLacResponse(request_id, 0, None, ledger_id))


class Collector:
    def __init__(self) -> None:
        self.outcomes: list[Response | BookieError] = []

    def __call__(self, outcome: Response | BookieError) -> None:
        self.outcomes.append(outcome)


# --- connecting -------------------------------------------------------------------------------


async def test_connecting_to_a_closed_port_raises_bookie_unavailable() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    await listener.aclose()
    with pytest.raises(BookieUnavailable):
        async with BookieConnection.connect("127.0.0.1", port, connect_timeout_ms=2_000):
            pass


async def test_an_error_in_the_block_comes_out_unwrapped() -> None:
    async def idle(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 1)

    async with scripted_bookie(idle) as port:
        with pytest.raises(KeyError):
            async with BookieConnection.connect("127.0.0.1", port):
                raise KeyError("mine")


# --- request ids and matching -----------------------------------------------------------------


async def test_answers_in_any_order_reach_the_callback_of_their_request(
    open_connection: Opener,
) -> None:
    async def reverse(stream: anyio.abc.SocketStream) -> None:
        requests = await receive_requests(stream, 5)
        assert len({request.request_id for request in requests}) == 5
        for request in reversed(requests):
            assert isinstance(request, ReadLacRequest)
            await stream.send(lac_response(request.request_id, request.ledger_id))
        await receive_requests(stream, 1)

    async with (
        scripted_bookie(reverse) as port,
        open_connection(port) as connection,
    ):
        collectors = [Collector() for _ in range(5)]
        for ledger_id, collector in enumerate(collectors):
            connection.submit(ReadLacRequest(999, ledger_id), collector, 5_000)
            assert collector.outcomes == [], "never answered from inside submit"
        await wait_for(lambda: all(collector.outcomes for collector in collectors))
        for ledger_id, collector in enumerate(collectors):
            (outcome,) = collector.outcomes
            assert isinstance(outcome, ReadLacResponse)
            assert outcome.ledger_id == ledger_id
        assert connection.inflight == 0


async def test_submit_returns_distinct_request_ids_replacing_the_given_one(
    open_connection: Opener,
) -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 3)
        await receive_requests(stream, 1)

    async with (
        scripted_bookie(silent) as port,
        open_connection(port) as connection,
    ):
        ids = [connection.submit(GetBookieInfoRequest(7), Collector(), 5_000) for _ in range(3)]
        assert len(set(ids)) == 3
        assert connection.inflight == 3


# --- timeouts ---------------------------------------------------------------------------------


async def test_a_request_without_answer_times_out_once_and_a_late_answer_is_dropped(
    open_connection: Opener,
) -> None:
    late_answer_sent = anyio.Event()

    async def slow(stream: anyio.abc.SocketStream) -> None:
        (request,) = await receive_requests(stream, 1)
        answer_now = await receive_requests(stream, 1)
        await stream.send(lac_response(request.request_id, 1))
        await stream.send(lac_response(answer_now[0].request_id, 2))
        late_answer_sent.set()
        await receive_requests(stream, 1)

    async with (
        scripted_bookie(slow) as port,
        open_connection(port) as connection,
    ):
        timed_out = Collector()
        connection.submit(ReadLacRequest(0, 1), timed_out, 30)
        await wait_for(lambda: bool(timed_out.outcomes))
        (outcome,) = timed_out.outcomes
        assert isinstance(outcome, ClientTimeout)
        assert connection.inflight == 0
        answered = Collector()
        connection.submit(ReadLacRequest(0, 2), answered, 5_000)
        await wait_for(lambda: bool(answered.outcomes))
        # The late answer went out before this one, on the same stream: it was dropped.
        with anyio.fail_after(5):
            await late_answer_sent.wait()
        assert len(timed_out.outcomes) == 1
        assert connection.is_usable


async def test_awaitable_api_raises_client_timeout(open_connection: Opener) -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 2)

    async with (
        scripted_bookie(silent) as port,
        open_connection(port) as connection,
    ):
        with pytest.raises(ClientTimeout):
            await connection.read_lac(1, timeout_ms=20)


async def test_requests_with_different_timeouts_each_expire_on_their_own(
    open_connection: Opener,
) -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 3)

    async with (
        scripted_bookie(silent) as port,
        open_connection(port) as connection,
    ):
        long_wait, short_wait = Collector(), Collector()
        connection.submit(ReadLacRequest(0, 1), long_wait, 60_000)
        connection.submit(ReadLacRequest(0, 2), short_wait, 20)
        await wait_for(lambda: bool(short_wait.outcomes))
        assert long_wait.outcomes == []
        assert connection.inflight == 1


# --- connection loss --------------------------------------------------------------------------


async def test_connection_loss_fails_every_request_in_flight_exactly_once(
    open_connection: Opener,
) -> None:
    async def hang_up(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 10)
        await stream.aclose()

    async with (
        scripted_bookie(hang_up) as port,
        open_connection(port) as connection,
    ):
        collectors = [Collector() for _ in range(10)]
        for ledger_id, collector in enumerate(collectors):
            connection.submit(ReadLacRequest(0, ledger_id), collector, 60_000)
        await wait_for(lambda: not connection.is_usable)
        for collector in collectors:
            (outcome,) = collector.outcomes
            assert isinstance(outcome, BookieUnavailable)
        with pytest.raises(BookieUnavailable):
            connection.submit(ReadLacRequest(0, 1), Collector(), 1_000)
        with pytest.raises(BookieUnavailable):
            await connection.read_lac(1)


async def test_leaving_the_block_fails_requests_still_in_flight(open_connection: Opener) -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 2)

    collector = Collector()
    async with scripted_bookie(silent) as port:
        async with open_connection(port) as connection:
            connection.submit(ReadLacRequest(0, 1), collector, 60_000)
        (outcome,) = collector.outcomes
        assert isinstance(outcome, BookieUnavailable)


async def test_undecodable_bytes_from_the_bookie_fail_the_connection(
    open_connection: Opener,
) -> None:
    async def garbage(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 1)
        await stream.send(b"\x00\x00\x00\x02\xff\xff")
        await receive_requests(stream, 1)

    async with (
        scripted_bookie(garbage) as port,
        open_connection(port) as connection,
    ):
        collector = Collector()
        connection.submit(ReadLacRequest(0, 1), collector, 60_000)
        await wait_for(lambda: bool(collector.outcomes))
        assert isinstance(collector.outcomes[0], BookieUnavailable)
        assert not connection.is_usable


# --- bounds and coalescing --------------------------------------------------------------------


async def test_submit_past_the_in_flight_bound_raises_and_sends_nothing(
    open_connection: Opener,
) -> None:
    received: list[Request] = []

    async def record(stream: anyio.abc.SocketStream) -> None:
        received.extend(await receive_requests(stream, 2))
        await receive_requests(stream, 1)

    async with (
        scripted_bookie(record) as port,
        open_connection(port, inflight_max=2) as connection,
    ):
        rejected = Collector()
        connection.submit(ReadLacRequest(0, 1), Collector(), 60_000)
        connection.submit(ReadLacRequest(0, 2), Collector(), 60_000)
        with pytest.raises(TooManyRequests):
            connection.submit(ReadLacRequest(0, 3), rejected, 60_000)
        await wait_for(lambda: len(received) == 2)
        assert rejected.outcomes == []
        assert [request.ledger_id for request in received] == [1, 2]  # type: ignore[union-attr]


async def test_a_field_out_of_range_is_refused_by_submit(open_connection: Opener) -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        await receive_requests(stream, 1)

    async with (
        scripted_bookie(silent) as port,
        open_connection(port) as connection,
    ):
        with pytest.raises(LocalProtocolError):
            connection.submit(ReadLacRequest(0, -5), Collector(), 1_000)
        assert connection.inflight == 0


class RecordingStream(anyio.abc.ByteStream):
    """Passes everything to a real stream and counts the `send` calls."""

    def __init__(self, inner: anyio.abc.SocketStream) -> None:
        self.inner = inner
        self.sends = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.inner.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        self.sends += 1
        await self.inner.send(item)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_requests_queued_in_one_turn_of_the_loop_go_out_in_one_send() -> None:
    received: list[Request] = []

    async def record(stream: anyio.abc.SocketStream) -> None:
        received.extend(await receive_requests(stream, 100))
        await receive_requests(stream, 1)

    async with scripted_bookie(record) as port:
        recorder = RecordingStream(await anyio.connect_tcp("127.0.0.1", port))
        async with BookieConnection.over(recorder, f"127.0.0.1:{port}") as connection:
            for ledger_id in range(100):
                connection.submit(ReadLacRequest(0, ledger_id), Collector(), 60_000)
            await wait_for(lambda: len(received) == 100)
            assert recorder.sends == 1


async def test_a_send_that_stalls_past_the_send_timeout_fails_the_connection(
    open_connection: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "socket_send_timeout_ms", 300)
    stop_reading = anyio.Event()

    async def deaf(stream: anyio.abc.SocketStream) -> None:
        # A small receive buffer, and never a read: the client's sends back up.
        stream.extra(SocketAttribute.raw_socket).setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVBUF, 4096
        )
        await stop_reading.wait()

    async with scripted_bookie(deaf) as port, open_connection(port) as connection:
        collector = Collector()
        payload = b"x" * 1_000_000
        for entry_id in range(20):  # more than the socket buffers hold
            connection.submit(AddRequest(0, 1, entry_id, KEY, 0, payload), collector, 60_000)
        await wait_for(lambda: not connection.is_usable, timeout_s=10)
        # As a protocol the sweep finds the writing paused; a stream's send times out.
        assert any(word in (connection.failure or "") for word in ("stalled", "TimeoutError"))
        assert len(collector.outcomes) == 20
        assert all(isinstance(outcome, BookieUnavailable) for outcome in collector.outcomes)
        stop_reading.set()


# --- against the real server ------------------------------------------------------------------


async def test_awaitable_api_raises_the_status_error_of_the_answer() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        async with anyio.create_task_group() as task_group:

            async def first_add() -> None:
                response = await connection.add(5, 0, KEY, packet(5, 0))
                assert response.status == 0

            task_group.start_soon(first_add)
            await wait_for(lambda: server.pending_requests == 1)
            storage.sync()
        with pytest.raises(Unauthorized):
            await connection.add(5, 1, master_key(b"wrong"), packet(5, 1))
        async with anyio.create_task_group() as task_group:

            async def fence() -> None:
                response = await connection.read(5, -1, fence=True, master_key=KEY)
                assert (response.entry_id, response.packet) == (0, packet(5, 0))

            task_group.start_soon(fence)
            await wait_for(lambda: server.pending_requests == 1)
            storage.sync()
        with pytest.raises(Fenced):
            await connection.add(5, 1, KEY, packet(5, 1))
