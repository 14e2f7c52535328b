"""BookieServer over real loopback sockets and the real storages: pipelining,
acknowledgement after sync, bad input, back-pressure, long polls, shutdown."""

from __future__ import annotations

import contextlib
import socket
import struct
from pathlib import Path

import anyio
import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie import limits
from bookie.client.bookie_conn import BookieConnection
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    Fenced,
    NoSuchEntry,
    NoSuchLedger,
    ReadOnly,
    RemoteProtocolError,
    Status,
    StorageIOError,
    TooManyRequests,
)
from bookie.server.server import BookieServer
from bookie.storage.file import FileLedgerStorage, StorageConfig
from bookie.storage.memory import MemoryLedgerStorage
from bookie.wire.codec import FrameDecoder, decode_request, decode_response, encode_request
from bookie.wire.messages import (
    ENTRY_ID_LAST,
    READ_FLAG_FENCE,
    AddRequest,
    AddResponse,
    Op,
    ReadLacRequest,
    ReadRequest,
    ReadResponse,
    Response,
)
from tests.unit.bookie.server.support import (
    DIGEST,
    DISK_FREE_BYTES,
    DISK_TOTAL_BYTES,
    KEY,
    packet,
    read_bodies,
    read_until_closed,
    running_server,
    wait_for,
)

pytestmark = pytest.mark.anyio

LEDGER = 3


class Collector:
    """Callback target for `BookieConnection.submit`: keeps every outcome."""

    def __init__(self) -> None:
        self.outcomes: list[Response | BookieError] = []

    def __call__(self, outcome: Response | BookieError) -> None:
        self.outcomes.append(outcome)

    def statuses(self) -> list[int]:
        return [o.status for o in self.outcomes if not isinstance(o, BookieError)]


def add_request(entry_id: int, ledger_id: int = LEDGER, lac: int | None = None) -> AddRequest:
    return AddRequest(0, ledger_id, entry_id, KEY, 0, packet(ledger_id, entry_id, lac))


# --- pipelining and durability ----------------------------------------------------------------


async def test_pipelined_adds_are_acknowledged_after_sync_then_read_back() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        collector = Collector()
        for entry_id in range(200):
            connection.submit(add_request(entry_id), collector, 5_000)
        await wait_for(lambda: server.pending_requests == 200)
        assert collector.outcomes == [], "no add may be acknowledged before its sync"
        storage.sync()
        await wait_for(lambda: len(collector.outcomes) == 200)
        assert collector.statuses() == [Status.EOK] * 200
        entry_ids = sorted(
            o.entry_id
            for o in collector.outcomes
            if isinstance(o, AddResponse) and o.entry_id is not None
        )
        assert entry_ids == list(range(200))
        for entry_id in (0, 99, 199):
            response = await connection.read(LEDGER, entry_id)
            assert response.packet == packet(LEDGER, entry_id)
            assert response.lac == 198
        assert server.pending_requests == 0


async def test_a_read_is_answered_while_earlier_adds_wait_for_their_sync() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        collector = Collector()
        connection.submit(add_request(0), collector, 5_000)
        connection.submit(add_request(1), collector, 5_000)
        response = await connection.read(LEDGER, 1)
        assert response.packet == packet(LEDGER, 1)
        assert collector.outcomes == []
        storage.sync()
        await wait_for(lambda: len(collector.outcomes) == 2)


async def test_entry_minus_one_and_read_lac_return_the_last_entry() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        for entry_id in range(3):
            connection.submit(add_request(entry_id), Collector(), 5_000)
        await wait_for(lambda: server.pending_requests == 3)
        storage.sync()
        last = await connection.read(LEDGER, ENTRY_ID_LAST)
        assert (last.entry_id, last.packet) == (2, packet(LEDGER, 2))
        lac = await connection.read_lac(LEDGER)
        assert (lac.lac_packet, lac.last_entry_packet) == (None, packet(LEDGER, 2))
        entries = await connection.list_entries(LEDGER)
        assert entries.ranges == [[0, 2]]


async def test_unknown_ledger_and_missing_entry_raise_their_status_errors() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        with pytest.raises(NoSuchLedger):
            await connection.read(LEDGER, 0)
        connection.submit(add_request(0), Collector(), 5_000)
        await wait_for(lambda: server.pending_requests == 1)
        with pytest.raises(NoSuchEntry):
            await connection.read(LEDGER, 5)


async def test_bookie_info_reports_the_disk_numbers_and_read_only_switch() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        info = await connection.bookie_info()
        assert (info.free_bytes, info.total_bytes, info.read_only) == (
            DISK_FREE_BYTES,
            DISK_TOTAL_BYTES,
            False,
        )
        server.read_only = True
        assert (await connection.bookie_info()).read_only is True
        with pytest.raises(ReadOnly):
            await connection.add(LEDGER, 0, KEY, packet(LEDGER, 0))


async def test_fencing_read_is_answered_after_sync_and_fences_normal_adds() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        connection.submit(add_request(0), Collector(), 5_000)
        await wait_for(lambda: server.pending_requests == 1)
        storage.sync()
        await wait_for(lambda: server.pending_requests == 0)
        fence = Collector()
        connection.submit(
            ReadRequest(0, LEDGER, ENTRY_ID_LAST, READ_FLAG_FENCE, KEY, None, None), fence, 5_000
        )
        await wait_for(lambda: server.pending_requests == 1)
        assert fence.outcomes == []
        storage.sync()
        await wait_for(lambda: len(fence.outcomes) == 1)
        (answer,) = fence.outcomes
        assert isinstance(answer, ReadResponse)
        assert (answer.status, answer.entry_id) == (Status.EOK, 0)
        with pytest.raises(Fenced):
            await connection.add(LEDGER, 1, KEY, packet(LEDGER, 1))


async def test_storage_failure_answers_pending_and_later_adds_eio() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        collector = Collector()
        for entry_id in range(5):
            connection.submit(add_request(entry_id), collector, 5_000)
        await wait_for(lambda: server.pending_requests == 5)
        storage.fail(StorageIOError("fsync failed"))
        await wait_for(lambda: len(collector.outcomes) == 5)
        assert collector.statuses() == [Status.EIO] * 5
        later = Collector()
        connection.submit(add_request(5), later, 5_000)
        await wait_for(lambda: len(later.outcomes) == 1)
        assert later.statuses() == [Status.EIO]
        assert (await connection.read(LEDGER, 0)).packet == packet(LEDGER, 0)


async def test_deleted_fenced_ledger_refuses_a_late_add() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        fence = Collector()
        connection.submit(ReadRequest(0, LEDGER, 0, READ_FLAG_FENCE, KEY, None, None), fence, 5_000)
        await wait_for(lambda: server.pending_requests == 1)
        storage.sync()
        await wait_for(lambda: len(fence.outcomes) == 1)
        server.delete_ledger(LEDGER)
        with pytest.raises(Fenced):
            await connection.add(LEDGER, 0, KEY, packet(LEDGER, 0))
        assert LEDGER not in storage.ledger_ids()


# --- bad input --------------------------------------------------------------------------------


async def test_undecodable_requests_get_error_answers_and_the_connection_stays() -> None:
    storage = MemoryLedgerStorage()
    async with running_server(storage) as server:
        stream = await anyio.connect_tcp("127.0.0.1", server.port)
        async with stream:
            bad_version = cbor2.dumps([limits.protocol_version + 1, int(Op.READ_LAC), 11, 1])
            unknown_op = cbor2.dumps([limits.protocol_version, 99, 12])
            wrong_field = cbor2.dumps([limits.protocol_version, int(Op.ADD), 13, 1, 0, b"", 0, 5])
            for body in (bad_version, unknown_op, wrong_field):
                await stream.send(struct.pack(">I", len(body)) + body)
            await stream.send(encode_request(ReadLacRequest(14, LEDGER)))
            items = await read_bodies(stream, 4)
        # [version, op, request_id, status, message, ...]: the op is echoed, even unknown.
        by_id = {item[2]: (item[1], item[3]) for item in items}
        assert by_id == {
            11: (Op.READ_LAC, Status.EBADVERSION),
            12: (99, Status.EBADREQ),
            13: (Op.ADD, Status.EBADREQ),
            14: (Op.READ_LAC, Status.ENOLEDGER),
        }
        assert storage.ledger_ids() == []


async def test_unframeable_junk_closes_only_that_connection() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as good,
    ):
        stream = await anyio.connect_tcp("127.0.0.1", server.port)
        async with stream:
            await stream.send(struct.pack(">I", limits.frame_size_bytes_max + 1) + b"junk")
            assert await read_until_closed(stream) == []
        await wait_for(lambda: server.connection_count == 1)
        assert (await good.bookie_info()).status == Status.EOK


def _is_bad_request_body(body: bytes) -> bool:
    try:
        decode_request(body)
    except RemoteProtocolError:
        return True
    return False


junk_items = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(min_value=-(1 << 66), max_value=1 << 66),
    st.binary(max_size=16),
    st.text(max_size=8),
)
bad_bodies = st.one_of(
    st.binary(min_size=1, max_size=64),
    st.lists(junk_items, max_size=9).map(cbor2.dumps),
    st.tuples(st.sampled_from([int(op) for op in Op]), st.lists(junk_items, max_size=7)).map(
        lambda pair: cbor2.dumps([limits.protocol_version, pair[0], 1, *pair[1]])
    ),
).filter(_is_bad_request_body)
bad_frames = st.one_of(
    bad_bodies.map(lambda body: struct.pack(">I", len(body)) + body),
    st.integers(min_value=limits.frame_size_bytes_max + 1, max_value=(1 << 32) - 1).map(
        lambda length: struct.pack(">I", length)
    ),
    st.just(b"\x00\x00\x00\x00"),
    st.binary(min_size=1, max_size=3),  # a torn length prefix, then the peer leaves
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(st.lists(bad_frames, min_size=1, max_size=6))
def test_bad_frames_from_one_client_leave_others_served_and_storage_unchanged(
    frames: list[bytes],
) -> None:
    async def scenario() -> None:
        storage = MemoryLedgerStorage()
        async with (
            running_server(storage) as server,
            BookieConnection.connect("127.0.0.1", server.port) as good,
        ):
            collector = Collector()
            for entry_id in range(3):
                good.submit(add_request(entry_id), collector, 5_000)
            await wait_for(lambda: server.pending_requests == 3)
            stream = await anyio.connect_tcp("127.0.0.1", server.port)
            async with stream:
                await stream.send(b"".join(frames))
                await stream.send_eof()
                answers = await read_until_closed(stream)
            # [version, op, request_id, status, ...]: every answer is an error.
            assert all(answer[3] != Status.EOK for answer in answers)
            storage.sync()
            await wait_for(lambda: len(collector.outcomes) == 3)
            assert collector.statuses() == [Status.EOK] * 3
            assert (await good.read(LEDGER, 2)).packet == packet(LEDGER, 2)
            # The master key and three entries, and nothing from the bad client.
            assert storage.synced_ticket == 4
            assert (storage.ledger_ids(), storage.entry_ranges(LEDGER)) == ([LEDGER], [(0, 2)])
            assert server.pending_requests == 0

    anyio.run(scenario)


async def test_connections_over_the_maximum_are_closed_at_once() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage, connections_max=1) as server,
        BookieConnection.connect("127.0.0.1", server.port) as first,
    ):
        assert (await first.bookie_info()).status == Status.EOK
        stream = await anyio.connect_tcp("127.0.0.1", server.port)
        async with stream:
            await stream.send(encode_request(ReadLacRequest(1, LEDGER)))
            assert await read_until_closed(stream) == []
        assert server.connection_count == 1


async def test_connections_over_the_per_address_maximum_are_closed_at_once() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage, connections_max=5, connections_per_address_max=1) as server,
        BookieConnection.connect("127.0.0.1", server.port) as first,
    ):
        assert (await first.bookie_info()).status == Status.EOK
        async with await anyio.connect_tcp("127.0.0.1", server.port) as same_host:
            await same_host.send(encode_request(ReadLacRequest(1, LEDGER)))
            assert await read_until_closed(same_host) == []
        async with await anyio.connect_tcp(
            "127.0.0.1", server.port, local_host="127.0.0.2"
        ) as other_host:
            await other_host.send(encode_request(ReadLacRequest(2, LEDGER)))
            decoder = FrameDecoder()
            bodies: list[bytes] = []
            while not bodies:
                bodies = decoder.feed(await other_host.receive())
            assert decode_response(bodies[0]).request_id == 2
            assert server.connection_count == 2


# --- back-pressure ----------------------------------------------------------------------------


async def test_requests_over_the_per_connection_bound_get_etoomanyrequests() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage, pending_requests_per_connection_max=5) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        collector = Collector()
        for entry_id in range(8):
            connection.submit(add_request(entry_id), collector, 5_000)
        await wait_for(lambda: len(collector.outcomes) == 3)
        assert collector.statuses() == [Status.ETOOMANYREQUESTS] * 3
        assert server.pending_requests == 5
        assert storage.entry_ranges(LEDGER) == [(0, 4)]
        storage.sync()
        await wait_for(lambda: len(collector.outcomes) == 8)
        assert collector.statuses()[3:] == [Status.EOK] * 5


BIG_PAYLOAD_BYTES = 128 * 1024


async def _store_big_entry(server: BookieServer, storage: MemoryLedgerStorage) -> None:
    """Entry 0 of LEDGER with a 128 KiB payload, synced."""
    big = DIGEST.build_entry(LEDGER, 0, -1, BIG_PAYLOAD_BYTES, b"b" * BIG_PAYLOAD_BYTES)
    async with BookieConnection.connect("127.0.0.1", server.port) as writer:
        collector = Collector()
        writer.submit(AddRequest(0, LEDGER, 0, KEY, 0, big), collector, 5_000)
        await wait_for(lambda: server.pending_requests == 1)
        storage.sync()
        await wait_for(lambda: len(collector.outcomes) == 1)
        assert collector.statuses() == [Status.EOK]


def _big_reads(count: int) -> bytes:
    return b"".join(
        encode_request(ReadRequest(request_id, LEDGER, 0, 0, None, None, None))
        for request_id in range(1, count + 1)
    )


async def test_a_client_reading_no_answers_gets_no_more_than_the_send_bound_queued() -> None:
    # 400 reads of a 128 KiB entry: 50 MiB of answers for a client that reads none.
    reads = 400
    bound = limits.socket_send_coalesce_bytes_max
    storage = MemoryLedgerStorage()
    async with running_server(storage) as server:
        await _store_big_entry(server, storage)
        stream = await anyio.connect_tcp("127.0.0.1", server.port)
        async with stream:
            await stream.send(_big_reads(reads))
            await wait_for(lambda: server.queued_answer_bytes > bound)
            # The requests not yet answered wait unread instead of their answers
            # piling up: at most the bound in the transport's buffer, and the
            # bound plus one answer handed to it at once.
            assert server.queued_answer_bytes <= 2 * bound + 2 * BIG_PAYLOAD_BYTES
            items = await read_bodies(stream, reads, timeout_s=30)
        # [version, op, request_id, status, ...]: every read answered once, in full.
        assert sorted(item[2] for item in items) == list(range(1, reads + 1))
        assert {item[3] for item in items} == {Status.EOK}


async def test_a_client_that_stops_reading_is_disconnected_after_the_send_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "socket_send_timeout_ms", 300)
    storage = MemoryLedgerStorage()
    async with running_server(storage) as server:
        await _store_big_entry(server, storage)
        stream = await anyio.connect_tcp("127.0.0.1", server.port)
        async with stream:
            await stream.send(_big_reads(400))
            await wait_for(lambda: server.queued_answer_bytes > 0)
            await wait_for(lambda: server.connection_count == 0, timeout_s=10)
            assert server.queued_answer_bytes == 0


async def test_requests_over_the_total_bounds_get_etoomanyrequests() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage, pending_requests_total_max=3) as server,
        BookieConnection.connect("127.0.0.1", server.port) as first,
        BookieConnection.connect("127.0.0.1", server.port) as second,
    ):
        collector = Collector()
        for entry_id in range(3):
            first.submit(add_request(entry_id), collector, 5_000)
        await wait_for(lambda: server.pending_requests == 3)
        with pytest.raises(TooManyRequests):
            await second.add(LEDGER + 1, 0, KEY, packet(LEDGER + 1, 0))
        with pytest.raises(TooManyRequests):
            await second.read(LEDGER, 0)
        storage.sync()
        await wait_for(lambda: len(collector.outcomes) == 3)
        assert (await second.read(LEDGER, 0)).status == Status.EOK


async def test_requests_over_the_pending_bytes_bound_get_etoomanyrequests() -> None:
    storage = MemoryLedgerStorage()
    body_bytes = len(encode_request(add_request(0))) - 4  # the length prefix is not counted
    async with (
        running_server(storage, pending_bytes_total_max=2 * body_bytes) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        collector = Collector()
        for entry_id in range(4):
            connection.submit(add_request(entry_id), collector, 5_000)
        await wait_for(lambda: len(collector.outcomes) == 2)
        assert collector.statuses() == [Status.ETOOMANYREQUESTS] * 2


async def test_storage_busy_answers_etoomanyrequests_and_keeps_handler_and_storage_agreed() -> None:
    # One mutation per sync: the second mutation before a sync is refused.
    storage = MemoryLedgerStorage(unsynced_bytes_max=1)
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):

        async def attempt(ledger_id: int, entry_id: int = 0) -> int:
            collector = Collector()
            connection.submit(add_request(entry_id, ledger_id), collector, 5_000)
            await wait_for(lambda: bool(collector.outcomes) or server.pending_requests > 0)
            storage.sync()
            await wait_for(lambda: bool(collector.outcomes))
            (status,) = collector.statuses()
            return status

        # The master key is stored, the entry refused.
        assert await attempt(LEDGER) == Status.ETOOMANYREQUESTS
        assert (storage.ledger_ids(), storage.entry_ranges(LEDGER)) == ([LEDGER], [])
        assert await attempt(LEDGER) == Status.EOK
        # Now the master key of a new ledger is refused: the ledger stays unknown.
        pending, refused = Collector(), Collector()
        connection.submit(add_request(1), pending, 5_000)
        connection.submit(add_request(0, LEDGER + 1), refused, 5_000)
        await wait_for(lambda: bool(refused.outcomes))
        assert refused.statuses() == [Status.ETOOMANYREQUESTS]
        assert LEDGER + 1 not in storage.ledger_ids()
        with pytest.raises(NoSuchLedger):
            await connection.read(LEDGER + 1, 0)
        storage.sync()
        await wait_for(lambda: bool(pending.outcomes))
        assert pending.statuses() == [Status.EOK]
        assert await attempt(LEDGER + 1) == Status.ETOOMANYREQUESTS
        assert await attempt(LEDGER + 1) == Status.EOK
        assert storage.entry_ranges(LEDGER + 1) == [(0, 0)]


# --- long polls -------------------------------------------------------------------------------


async def test_long_poll_is_woken_by_an_add_that_passes_its_lac() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as writer,
        BookieConnection.connect("127.0.0.1", server.port) as reader,
    ):
        writer.submit(add_request(0), Collector(), 5_000)
        writer.submit(add_request(1), Collector(), 5_000)
        await wait_for(lambda: server.pending_requests == 2)
        async with anyio.create_task_group() as task_group:
            polled: list[ReadResponse] = []

            async def poll() -> None:
                polled.append(
                    await reader.read(LEDGER, 1, previous_lac=0, long_poll_timeout_ms=10_000)
                )

            task_group.start_soon(poll)
            await wait_for(lambda: server.parked_reads == 1)
            writer.submit(add_request(2), Collector(), 5_000)
            # Woken, but queued behind the sync of the add that woke it, like its answer.
            await wait_for(lambda: server.parked_reads == 0 and server.pending_requests == 4)
            assert not polled
            storage.sync()
        (response,) = polled
        assert (response.status, response.packet, response.lac) == (
            Status.EOK,
            packet(LEDGER, 1),
            1,
        )


async def test_long_poll_times_out_cleanly_with_no_packet_and_the_current_lac() -> None:
    storage = MemoryLedgerStorage()
    async with (
        running_server(storage) as server,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        connection.submit(add_request(0), Collector(), 5_000)
        connection.submit(add_request(1), Collector(), 5_000)
        await wait_for(lambda: server.pending_requests == 2)
        response = await connection.read(LEDGER, 1, previous_lac=0, long_poll_timeout_ms=50)
        assert (response.status, response.packet, response.lac) == (Status.EOK, None, 0)
        assert server.parked_reads == 0


async def test_long_poll_of_a_closed_connection_is_forgotten() -> None:
    storage = MemoryLedgerStorage()
    async with running_server(storage) as server:
        async with BookieConnection.connect("127.0.0.1", server.port) as connection:
            connection.submit(add_request(0), Collector(), 5_000)
            request = ReadRequest(0, LEDGER, 1, 0, None, 0, 10_000)
            connection.submit(request, Collector(), 20_000)
            await wait_for(lambda: server.parked_reads == 1)
        await wait_for(lambda: server.parked_reads == 0)


# --- shutdown ---------------------------------------------------------------------------------


async def _serve_until(
    stop: anyio.Event,
    storage: MemoryLedgerStorage,
    shutdown_drain_ms: int,
    *,
    task_status: anyio.abc.TaskStatus[BookieServer],
) -> None:
    async with running_server(storage, shutdown_drain_ms=shutdown_drain_ms) as server:
        task_status.started(server)
        await stop.wait()


async def test_graceful_shutdown_answers_pending_adds_once_storage_syncs() -> None:
    storage = MemoryLedgerStorage()
    collector = Collector()
    stop = anyio.Event()
    async with anyio.create_task_group() as task_group:
        server: BookieServer = await task_group.start(_serve_until, stop, storage, 5_000)
        async with BookieConnection.connect("127.0.0.1", server.port) as connection:
            for entry_id in range(10):
                connection.submit(add_request(entry_id), collector, 5_000)
            await wait_for(lambda: server.pending_requests == 10)
            stop.set()
            await wait_for(lambda: server.draining)
            assert collector.outcomes == []
            storage.sync()
            await wait_for(lambda: len(collector.outcomes) == 10)
    assert collector.statuses() == [Status.EOK] * 10


async def test_graceful_shutdown_fails_adds_not_synced_in_time_with_eio() -> None:
    storage = MemoryLedgerStorage()
    collector = Collector()
    stop = anyio.Event()
    async with anyio.create_task_group() as task_group:
        server: BookieServer = await task_group.start(_serve_until, stop, storage, 50)
        async with BookieConnection.connect("127.0.0.1", server.port) as connection:
            for entry_id in range(10):
                connection.submit(add_request(entry_id), collector, 5_000)
            await wait_for(lambda: server.pending_requests == 10)
            stop.set()
            await wait_for(lambda: len(collector.outcomes) == 10)
    assert collector.statuses() == [Status.EIO] * 10
    assert storage.synced_ticket == 0


async def test_graceful_shutdown_answers_parked_long_polls_and_refuses_new_requests() -> None:
    storage = MemoryLedgerStorage()
    poll, late = Collector(), Collector()
    stop = anyio.Event()
    async with anyio.create_task_group() as task_group:
        server: BookieServer = await task_group.start(_serve_until, stop, storage, 5_000)
        async with BookieConnection.connect("127.0.0.1", server.port) as connection:
            connection.submit(add_request(0), Collector(), 5_000)
            connection.submit(ReadRequest(0, LEDGER, 1, 0, None, 0, 10_000), poll, 20_000)
            await wait_for(lambda: server.parked_reads == 1)
            storage.sync()
            stop.set()
            await wait_for(lambda: server.draining)
            connection.submit(ReadLacRequest(0, LEDGER), late, 5_000)
            await wait_for(lambda: not connection.is_usable)
    (answer,) = poll.outcomes
    assert isinstance(answer, ReadResponse)
    assert (answer.status, answer.packet, answer.lac) == (Status.EOK, None, -1)
    (refused,) = late.outcomes
    assert isinstance(refused, BookieUnavailable)


async def _unread_answers(
    server: BookieServer, storage: MemoryLedgerStorage
) -> tuple[anyio.abc.SocketStream, bytes]:
    """A raw client that asked for a 3 MiB entry twice and reads nothing: the answers fill
    the kernel's socket buffers and the rest waits in the server's transport."""
    big = DIGEST.build_entry(LEDGER, 0, -1, 3 * 2**20, b"b" * (3 * 2**20))
    added = Collector()
    async with BookieConnection.connect("127.0.0.1", server.port) as connection:
        connection.submit(AddRequest(0, LEDGER, 0, KEY, 0, big), added, 5_000)
        await wait_for(lambda: server.pending_requests == 1)
        storage.sync()
        await wait_for(lambda: added.statuses() == [Status.EOK])
    stream = await anyio.connect_tcp("127.0.0.1", server.port)
    stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024
    )
    # One send: both requests arrive in one read, so both are taken before the first
    # answer pauses the transport's writing (a request read after that would be held).
    await stream.send(
        b"".join(
            encode_request(ReadRequest(request_id, LEDGER, 0, 0, None, None, None))
            for request_id in (1, 2)
        )
    )
    await wait_for(lambda: server.queued_answer_bytes > 0)
    return stream, big


async def test_graceful_shutdown_delivers_answers_still_queued_for_a_slow_reader() -> None:
    # Closing at once would drop what the transport holds: the client would get
    # the kernel's part of an answer and then the end of the stream, mid-frame.
    storage = MemoryLedgerStorage()
    stop = anyio.Event()
    async with anyio.create_task_group() as task_group:
        server: BookieServer = await task_group.start(_serve_until, stop, storage, 5_000)
        stream, big = await _unread_answers(server, storage)
        async with stream:
            stop.set()
            await wait_for(lambda: server.draining)
            decoder = FrameDecoder()
            answers: list[Response] = []
            with anyio.fail_after(10):
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while True:
                        answers.extend(
                            decode_response(body) for body in decoder.feed(await stream.receive())
                        )
    assert decoder.buffered_bytes == 0, "the stream ended inside an answer"
    reads = [answer for answer in answers if isinstance(answer, ReadResponse)]
    assert len(reads) == len(answers)
    assert [(read.request_id, read.status) for read in reads] == [(1, Status.EOK), (2, Status.EOK)]
    assert all(read.packet == big for read in reads)


async def test_graceful_shutdown_stops_waiting_for_a_client_that_never_reads() -> None:
    storage = MemoryLedgerStorage()
    stop = anyio.Event()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            server: BookieServer = await task_group.start(_serve_until, stop, storage, 200)
            stream, _ = await _unread_answers(server, storage)
            async with stream:
                stop.set()
                await wait_for(lambda: server.connection_count == 0)
    assert server.queued_answer_bytes == 0


async def test_a_server_going_away_fails_the_clients_requests_in_flight() -> None:
    storage = MemoryLedgerStorage()
    collector = Collector()
    crash = anyio.Event()

    async def run_until_crash(task_status: anyio.abc.TaskStatus[BookieServer]) -> None:
        async with running_server(storage) as server:
            task_status.started(server)
            await crash.wait()
            raise RuntimeError("power cut")

    async def serve(*, task_status: anyio.abc.TaskStatus[BookieServer]) -> None:
        # The body's own error comes out of the server block as it was raised.
        with pytest.raises(RuntimeError, match="power cut"):
            await run_until_crash(task_status)

    async with anyio.create_task_group() as task_group:
        server: BookieServer = await task_group.start(serve)
        async with BookieConnection.connect("127.0.0.1", server.port) as connection:
            for entry_id in range(5):
                connection.submit(add_request(entry_id), collector, 60_000)
            await wait_for(lambda: server.pending_requests == 5)
            crash.set()
            await wait_for(lambda: len(collector.outcomes) == 5)
    assert all(isinstance(outcome, BookieUnavailable) for outcome in collector.outcomes)


# --- on disk ----------------------------------------------------------------------------------


class TestOverFileLedgerStorage:
    """The same server over the journal-backed storage, with real fsyncs."""

    @staticmethod
    def config(tmp_path: Path) -> StorageConfig:
        return StorageConfig(journal_dir=tmp_path / "journal", ledger_dirs=(tmp_path / "ledgers",))

    async def test_pipelined_adds_are_acknowledged_and_read_back(self, tmp_path: Path) -> None:
        async with (
            FileLedgerStorage.open(self.config(tmp_path)) as storage,
            running_server(storage) as server,
            BookieConnection.connect("127.0.0.1", server.port) as connection,
        ):
            collector = Collector()
            for entry_id in range(500):
                connection.submit(add_request(entry_id), collector, 10_000)
            await wait_for(lambda: len(collector.outcomes) == 500, timeout_s=20)
            assert collector.statuses() == [Status.EOK] * 500
            for entry_id in (0, 250, 499):
                assert (await connection.read(LEDGER, entry_id)).packet == packet(LEDGER, entry_id)

    async def test_fence_and_entries_survive_a_restart(self, tmp_path: Path) -> None:
        async with (
            FileLedgerStorage.open(self.config(tmp_path)) as storage,
            running_server(storage) as server,
            BookieConnection.connect("127.0.0.1", server.port) as connection,
        ):
            await connection.add(LEDGER, 0, KEY, packet(LEDGER, 0))
            fenced = await connection.read(LEDGER, ENTRY_ID_LAST, fence=True, master_key=KEY)
            assert fenced.entry_id == 0
        async with (
            FileLedgerStorage.open(self.config(tmp_path)) as storage,
            running_server(storage) as server,
            BookieConnection.connect("127.0.0.1", server.port) as connection,
        ):
            assert (await connection.read(LEDGER, 0)).packet == packet(LEDGER, 0)
            with pytest.raises(Fenced):
                await connection.add(LEDGER, 1, KEY, packet(LEDGER, 1))
            recovered = await connection.add(LEDGER, 1, KEY, packet(LEDGER, 1), recovery=True)
            assert recovered.status == Status.EOK
