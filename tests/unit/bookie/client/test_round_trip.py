"""Create, append, read back, close: the ledger client against real bookies on loopback."""

from __future__ import annotations

import anyio
import pytest

from bookie.errors import (
    AppendWindowFull,
    DigestMismatch,
    InvalidEntryRange,
    InvalidLedgerConfig,
    LedgerClosed,
    NoSuchLedgerError,
    NotEnoughBookies,
    ReadBeyondLastAddConfirmed,
    UnauthorizedLedgerAccess,
)
from bookie.wire.packet import DigestType
from tests.unit.bookie.client.cluster import WAIT_S, fast_config, memory_cluster

pytestmark = pytest.mark.anyio


def payloads(count: int, prefix: str = "entry") -> list[bytes]:
    return [f"{prefix} {index}".encode() * (1 + index % 7) for index in range(count)]


@pytest.mark.parametrize(
    ("ensemble_size", "write_quorum", "ack_quorum"),
    [(1, 1, 1), (3, 3, 2), (3, 2, 2), (3, 3, 3), (4, 3, 2), (5, 2, 1)],
)
async def test_round_trip_with_each_quorum(
    ensemble_size: int, write_quorum: int, ack_quorum: int
) -> None:
    expected = payloads(25)
    async with memory_cluster(5) as cluster, cluster.client() as client:
        writer = await client.create_ledger(ensemble_size, write_quorum, ack_quorum, password=b"pw")
        for index, payload in enumerate(expected):
            assert await writer.append(payload) == index
        assert writer.last_add_confirmed == 24
        await writer.close()
        assert writer.is_closed

        metadata = await client.ledger_metadata(writer.ledger_id)
        assert metadata.is_closed
        assert metadata.last_entry_id == 24
        assert metadata.length == sum(len(payload) for payload in expected)
        ensemble = metadata.current_ensemble
        assert len(ensemble) == ensemble_size
        for entry_id in range(25):
            # Striping: each entry is on exactly its write set.
            holders = cluster.holders(writer.ledger_id, entry_id)
            wanted = {ensemble[(entry_id + i) % ensemble_size] for i in range(write_quorum)}
            assert set(holders) == wanted

        reader = await client.open_ledger(writer.ledger_id, b"pw")
        assert reader.is_closed
        assert reader.last_add_confirmed == 24
        assert await reader.read(0, 24) == expected
        assert [entry.entry_id for entry in await reader.read_entries(3, 5)] == [3, 4, 5]


async def test_hmac_digest_round_trip() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(digest_type=DigestType.HMAC_SHA256, password=b"k")
        for payload in payloads(5):
            await writer.append(payload)
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, b"k")
        assert await reader.read(0, 4) == payloads(5)


async def test_pipelined_appends_confirm_in_order() -> None:
    count = 2_000
    expected = payloads(count)
    seen: list[int] = []
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)

        async def watch_confirmations() -> None:
            # Bulk waits: one waiter at a time, released in ranges.
            while writer.last_add_confirmed < count - 1:
                await writer.wait_confirmed(max(writer.last_add_confirmed + 1, 0))
                seen.append(writer.last_add_confirmed)

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                ids = [writer.append_nowait(expected[0])]
                task_group.start_soon(watch_confirmations)
                for payload in expected[1:]:
                    await writer.wait_for_capacity()
                    ids.append(writer.append_nowait(payload))
        assert ids == list(range(count))
        assert seen == sorted(seen)
        assert seen[-1] == count - 1
        assert len(seen) < count, "confirmations are released in ranges"
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id)
        assert await reader.read(0, count - 1) == expected


async def test_the_window_bounds_appends_in_flight() -> None:
    async with (
        memory_cluster(3) as cluster,
        cluster.client(fast_config(outstanding_adds_max=4)) as client,
    ):
        writer = await client.create_ledger()
        for payload in payloads(4):
            writer.append_nowait(payload)
        assert writer.capacity == 0
        with pytest.raises(AppendWindowFull):
            writer.append_nowait(b"one too many")
        with anyio.fail_after(WAIT_S):
            await writer.wait_for_capacity()
        assert writer.capacity > 0
        entry_id = writer.append_nowait(b"fits now")
        with anyio.fail_after(WAIT_S):
            await writer.wait_confirmed(entry_id)
        await writer.close()
        assert (await client.ledger_metadata(writer.ledger_id)).last_entry_id == 4


async def test_reads_fall_back_to_another_replica_on_a_corrupt_copy() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2, password=b"pw")
        for payload in payloads(6):
            await writer.append(payload)
        await writer.close()
        ensemble = writer.metadata.current_ensemble
        ledger_id = writer.ledger_id
        # Entry 2 is read from ensemble[2] first (its write set starts there):
        # corrupt that copy, keeping its length.
        first_replica = cluster.storage(ensemble[2])
        packet = first_replica.read_entry(ledger_id, 2)
        assert packet is not None
        first_replica.add_entry(ledger_id, 2, packet[:-1] + bytes([packet[-1] ^ 0xFF]))

        reader = await client.open_ledger(ledger_id, b"pw")
        assert await reader.read(0, 5) == payloads(6)

        for bookie_id in ensemble:
            storage = cluster.storage(bookie_id)
            good = storage.read_entry(ledger_id, 4)
            assert good is not None
            storage.add_entry(ledger_id, 4, good[:40] + b"junk" + good[44:])
        with pytest.raises(DigestMismatch):
            await reader.read(4, 4)


async def test_wrong_password_is_refused_before_any_bookie_is_asked() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(password=b"right")
        await writer.append(b"x")
        for recovery in (True, False):
            with pytest.raises(UnauthorizedLedgerAccess):
                await client.open_ledger(writer.ledger_id, b"wrong", recovery=recovery)
        # Nothing was fenced: the writer goes on.
        assert await writer.append(b"y") == 1
        assert not (await client.ledger_metadata(writer.ledger_id)).is_closed
        await writer.close()


async def test_reads_stop_at_the_last_add_confirmed() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger()
        for payload in payloads(3):
            await writer.append(payload)
        reader = await client.open_ledger(writer.ledger_id, recovery=False)
        # Entry 2 is acknowledged, but only the next add or an explicit LAC
        # tells the bookies so: the LAC they know is 1.
        assert reader.last_add_confirmed == 1
        with pytest.raises(ReadBeyondLastAddConfirmed):
            await reader.read(0, 2)
        assert await reader.read(0, 2, allow_unconfirmed=True) == payloads(3)
        with pytest.raises(InvalidEntryRange):
            await reader.read(2, 1)
        await writer.close()
        closed = await client.open_ledger(writer.ledger_id)
        with pytest.raises(ReadBeyondLastAddConfirmed):
            await closed.read(0, 3, allow_unconfirmed=True)


async def test_create_validates_its_arguments() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        with pytest.raises(InvalidLedgerConfig):
            await client.create_ledger(3, 2, 3)
        with pytest.raises(NotEnoughBookies):
            await client.create_ledger(4, 3, 2)
        assert await client.list_ledgers() == []


async def test_list_delete_and_metadata() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        handles = [
            await client.create_ledger(custom_metadata={"app": b"test", "n": bytes([n])})
            for n in range(3)
        ]
        ids = [handle.ledger_id for handle in handles]
        assert await client.list_ledgers() == sorted(ids)
        metadata = await client.ledger_metadata(ids[1])
        assert metadata.custom == {"app": b"test", "n": b"\x01"}
        assert metadata.ctime_ms > 0
        for handle in handles:
            await handle.close()
        await client.delete_ledger(ids[1])
        assert await client.list_ledgers() == [ids[0], ids[2]]
        with pytest.raises(NoSuchLedgerError):
            await client.open_ledger(ids[1])
        with pytest.raises(NoSuchLedgerError):
            await client.delete_ledger(ids[1])


async def test_a_closed_handle_refuses_appends_and_closes_idempotently() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        async with await client.create_ledger() as writer:
            await writer.append(b"only")
        assert writer.is_closed
        with pytest.raises(LedgerClosed):
            await writer.append(b"late")
        await writer.close()
        assert (await client.ledger_metadata(writer.ledger_id)).last_entry_id == 0


async def test_an_empty_ledger_closes_at_minus_one() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger()
        await writer.close()
        metadata = await client.ledger_metadata(writer.ledger_id)
        assert (metadata.last_entry_id, metadata.length) == (-1, 0)
        reader = await client.open_ledger(writer.ledger_id)
        assert reader.last_add_confirmed == -1
