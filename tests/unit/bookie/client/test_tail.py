"""Following a ledger as it grows: long-poll tailing, explicit LAC, the end at close."""

from __future__ import annotations

import anyio
import pytest

from bookie.client.read_handle import LedgerEntry, ReadHandle
from bookie.errors import ClientClosed, NoSuchLedgerError
from bookie.meta.bookies import BookieInfo, register
from bookie.wire.messages import LAC_NONE
from tests.unit.bookie.client.cluster import WAIT_S, fast_config, memory_cluster
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio


async def collect(reader: ReadHandle, received: list[LedgerEntry]) -> None:
    """Tail `reader` from entry 0 into `received`, until its ledger is closed."""
    async with reader.tail(0) as entries:
        async for entry in entries:
            received.append(entry)


async def test_tail_sees_entries_as_they_are_appended_and_ends_at_close() -> None:
    count = 30
    received: list[LedgerEntry] = []
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2, password=b"pw")
        await writer.append(b"before the tail opened")
        reader = await reader_client.open_ledger(writer.ledger_id, b"pw", recovery=False)
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(collect, reader, received)
                for index in range(1, count):
                    await writer.append(f"entry {index}".encode())
                    # Each entry is seen once the next add carries its LAC.
                    await wait_for(lambda index=index: len(received) >= index, WAIT_S)
                await writer.close()
        assert [entry.entry_id for entry in received] == list(range(count))
        assert received[0].payload == b"before the tail opened"
        assert received[-1].payload == f"entry {count - 1}".encode()
        assert reader.is_closed


async def test_explicit_lac_makes_the_last_entry_visible_to_a_tailer() -> None:
    received: list[LedgerEntry] = []
    config = fast_config(explicit_lac_interval_ms=20)
    async with (
        memory_cluster(3) as cluster,
        cluster.client(config) as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger()
        for index in range(5):
            await writer.append(f"entry {index}".encode())
        reader = await reader_client.open_ledger(writer.ledger_id, recovery=False)

        async def follow() -> None:
            async for entry in reader.tail(0):
                received.append(entry)

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(follow)
                # Entry 4 was the last add: only the explicit LAC publishes it.
                await wait_for(lambda: len(received) == 5, WAIT_S)
                assert await reader.read_last_add_confirmed() == 4
                await writer.close()
        assert [entry.payload for entry in received] == [f"entry {i}".encode() for i in range(5)]


async def test_without_explicit_lac_the_last_entry_stays_unconfirmed_to_readers() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger()
        for index in range(5):
            await writer.append(f"entry {index}".encode())
        reader = await client.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read_last_add_confirmed() == 3
        await writer.close()


async def test_tail_from_the_middle_of_a_closed_ledger_ends_at_its_last_entry() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger()
        for index in range(8):
            await writer.append(bytes([index]))
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id)
        with anyio.fail_after(WAIT_S):
            entries = [entry async for entry in reader.tail(5)]
        assert entries == [
            LedgerEntry(5, b"\x05"),
            LedgerEntry(6, b"\x06"),
            LedgerEntry(7, b"\x07"),
        ]


async def test_tail_of_a_deleted_ledger_raises() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger()
        await writer.append(b"x")
        await writer.append(b"y")
        reader = await client.open_ledger(writer.ledger_id, recovery=False)
        tail = reader.tail(0)
        assert await anext(tail) == LedgerEntry(0, b"x")
        await client.delete_ledger(writer.ledger_id)
        with anyio.fail_after(WAIT_S), pytest.raises(NoSuchLedgerError):
            await anext(tail)


async def test_a_tail_still_waiting_when_its_client_closes_raises_client_closed() -> None:
    outcome: list[BaseException] = []
    async with memory_cluster(3) as cluster, anyio.create_task_group() as task_group:
        async with cluster.client() as client:
            writer = await client.create_ledger()
            await writer.append(b"not yet confirmed to readers")
            reader = await client.open_ledger(writer.ledger_id, recovery=False)

            async def follow() -> None:
                try:
                    async for _entry in reader.tail(0):
                        pass
                except ClientClosed as error:
                    outcome.append(error)

            task_group.start_soon(follow)

            def parked() -> bool:
                servers = [cluster.bookie(b).server for b in cluster.bookie_ids]
                return any(server is not None and server.parked_reads for server in servers)

            await wait_for(parked, WAIT_S)
        await wait_for(lambda: bool(outcome), WAIT_S)
    assert len(outcome) == 1


async def test_a_writer_of_another_cluster_at_a_reused_address_never_moves_the_tail() -> None:
    """Two clusters on one machine: each counts ledger ids from 0 and uses the same password,
    so the master keys match too.  One of their bookies dies and ours takes its address.
    Their writer, reconnecting there, must not reach our bookie: if it did, its adds would
    carry its LAC into our ledger 0, our follower would take entries as confirmed that our
    writer never wrote, and its tail would end in `NoSuchEntry` (a follower crashed so)."""
    received: list[LedgerEntry] = []
    async with (
        memory_cluster(3, instance_id="ours") as ours,
        memory_cluster(3, instance_id="theirs") as theirs,
        ours.client() as our_client,
        ours.client(seed=2) as follower_client,
        theirs.client() as their_client,
    ):
        their_writer = await their_client.create_ledger(3, 3, 2, password=b"rsm")
        our_writer = await our_client.create_ledger(3, 3, 2, password=b"rsm")
        assert their_writer.ledger_id == our_writer.ledger_id == 0
        for _ in range(10):
            await their_writer.append(b"theirs")
        await our_writer.append(b"ours 0")

        await theirs.stop_bookie("bookie-3")
        reused = ours.bookie("bookie-3").address
        async with (
            theirs.store_factory() as store,
            register(store, "bookie-3", BookieInfo(reused), root=theirs.root),
        ):
            await wait_for(lambda: their_client.bookie_address("bookie-3") == reused, WAIT_S)
            await their_writer.append(b"theirs, once more")
            await their_writer.close()  # once every bookie it sent adds to has answered

        assert ours.storage("bookie-3").entry_ranges(0) == [(0, 0)], "nothing of theirs"
        follower = await follower_client.open_ledger(0, b"rsm", recovery=False)
        assert follower.last_add_confirmed == LAC_NONE
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(collect, follower, received)
                await our_writer.append(b"ours 1")
                await wait_for(lambda: len(received) == 1, WAIT_S)
                await our_writer.close()
        assert received == [LedgerEntry(0, b"ours 0"), LedgerEntry(1, b"ours 1")]
