"""The replication worker against in-process bookies: a lost bookie's segments copied to a
spare and swapped in by compare-and-set, the sealed ones of an open ledger too; no spare,
an open ledger's last segment, deleted ledgers, the pause switch and passwords leave the
metadata untouched; a worker that died holding a lock
loses it with its session.  An open ledger whose declared writer znode exists is never
fenced; one whose writer is gone is fenced, recovered and repaired, unless no spare
bookie could take the lost one's place.  A marked bookie that is back writable but lacks
the entries written while it was away gets them copied back in place when no spare bookie
could take its place, and is replaced when one can; one that dies while it is refilled
stays marked until a later round finishes; with no spare, a gone writer's open ledger is
fenced once the bookie it lacks entries on is back, and refilled."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.autorecovery.worker import ReplicationWorker
from bookie.client.bookie_conn import BookieConnection
from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.clock import loop_clock_ms
from bookie.core.metadata import LedgerMetadata, LedgerState
from bookie.core.open_ledgers import WRITER_KEY
from bookie.core.rereplication import position_entries, segment_ranges
from bookie.errors import LedgerFenced
from bookie.meta.api import MetadataStore
from bookie.meta.underreplication import UnderReplication
from bookie.wire.packet import master_key
from tests.unit.bookie.client.cluster import ROOT, LocalCluster, memory_cluster
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio

PASSWORD = b"pw"
ENTRIES = 20


def settings(**overrides: object) -> AutoRecoverySettings:
    values: dict[str, object] = {
        "owner": "worker-1",
        "root": ROOT,
        "passwords": (b"other", PASSWORD),
        "timeout_ms": 2_000,
        "retry_delay_ms_min": 1,
        "retry_delay_ms_max": 1,
    }
    values.update(overrides)
    return AutoRecoverySettings(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def session(cluster: LocalCluster) -> AsyncIterator[tuple[MetadataStore, UnderReplication]]:
    async with cluster.store_factory() as store:
        yield store, UnderReplication(store, ROOT)


async def closed_ledger(client: LedgerClient, entries: int = ENTRIES) -> LedgerMetadata:
    async with await client.create_ledger(3, 2, 2, password=PASSWORD) as ledger:
        for index in range(entries):
            await ledger.append(f"entry {index}".encode())
    return await client.ledger_metadata(ledger.ledger_id)


def assert_fully_replicated(cluster: LocalCluster, metadata: LedgerMetadata) -> None:
    """Every entry is on every bookie its write set names in the metadata."""
    for first, last, ensemble in segment_ranges(metadata):
        for entry_id in range(first, last + 1):
            expected = sorted(ensemble[index] for index in metadata.quorum.write_set(entry_id))
            holders = set(cluster.holders(metadata.ledger_id, entry_id))
            assert set(expected) <= holders, (entry_id, expected, holders)


async def test_a_lost_bookies_segments_move_to_a_spare() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        ledgers = [await closed_ledger(client) for _ in range(3)]
        spare = await cluster.add_bookie()
        lost = cluster.bookie_ids[0]
        await cluster.stop_bookie(lost)
        async with session(cluster) as (store, marks):
            for metadata in ledgers:
                await marks.mark(metadata.ledger_id, [lost])
            repaired = await ReplicationWorker(store, settings(), random.Random(1)).run_once()
            assert repaired == 3
            assert await marks.list_marks() == []
            for before in ledgers:
                after = await client.ledger_metadata(before.ledger_id)
                assert after.ensembles == tuple(
                    (first, tuple(spare if b == lost else b for b in ensemble))
                    for first, ensemble in before.ensembles
                )
                assert (after.last_entry_id, after.length) == (before.last_entry_id, before.length)
                assert_fully_replicated(cluster, after)
                assert not cluster.storage(spare).read_entry(before.ledger_id, ENTRIES), (
                    "nothing past the ledger's end"
                )
                reader = await client.open_ledger(before.ledger_id, PASSWORD, recovery=False)
                payloads = await reader.read(0, ENTRIES - 1)
                assert payloads == [f"entry {index}".encode() for index in range(ENTRIES)]


async def test_without_a_spare_bookie_the_mark_stays_and_nothing_changes() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client)
        lost = cluster.bookie_ids[0]
        await cluster.stop_bookie(lost)
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, [lost])
            worker = ReplicationWorker(store, settings(), random.Random(1))
            assert await worker.run_once() == 0
            failed_ms = loop_clock_ms()
            assert await marks.list_marks() == [metadata.ledger_id]
            assert await marks.lock_owner(metadata.ledger_id) is None, "the lock was released"
            assert await client.ledger_metadata(metadata.ledger_id) == metadata
            spare = await cluster.add_bookie()
            # The failed repair is tried again once its retry delay (1 ms here) ran out,
            # which what came since may not have taken.
            await wait_for(lambda: loop_clock_ms() >= failed_ms + 1)
            assert await worker.run_once() == 1, "retried once a spare registered"
            after = await client.ledger_metadata(metadata.ledger_id)
            assert spare in after.ensembles[0][1]
            assert_fully_replicated(cluster, after)


async def test_a_ledger_with_an_unknown_password_is_left_alone() -> None:
    async with memory_cluster(4) as cluster, cluster.client() as client:
        other = await client.create_ledger(3, 2, 2, password=b"unknown")
        await other.append(b"entry")
        await other.close()
        async with session(cluster) as (store, marks):
            before = await client.ledger_metadata(other.ledger_id)
            await cluster.stop_bookie(before.ensembles[0][1][0])
            await marks.mark(other.ledger_id, [before.ensembles[0][1][0]])
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 0
            assert await marks.list_marks() == [other.ledger_id]
            assert await client.ledger_metadata(other.ledger_id) == before


async def test_a_deleted_ledgers_mark_is_removed_and_a_paused_worker_does_nothing() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client, entries=2)
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, ["gone"])
            worker = ReplicationWorker(store, settings(), random.Random(1))
            await marks.set_enabled(False)
            await client.delete_ledger(metadata.ledger_id)
            assert await worker.run_once() == 0
            assert await marks.list_marks() == [metadata.ledger_id], "paused"
            await marks.set_enabled(True)
            await worker.run_once()
            assert await marks.list_marks() == []


async def test_a_ledger_locked_by_another_worker_is_skipped() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client, entries=2)
        await cluster.add_bookie()
        lost = metadata.ensembles[0][1][0]
        await cluster.stop_bookie(lost)
        async with session(cluster) as (store, marks), session(cluster) as (_, other):
            await marks.mark(metadata.ledger_id, [lost])
            assert await other.try_lock(metadata.ledger_id, "worker-2")
            worker = ReplicationWorker(store, settings(), random.Random(1))
            assert await worker.run_once() == 0
            assert await marks.lock_owner(metadata.ledger_id) == "worker-2"
            await other.unlock(metadata.ledger_id)
            assert await worker.run_once() == 1


async def test_a_worker_that_died_mid_copy_loses_its_lock_and_another_finishes() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client)
        ledger_id = metadata.ledger_id
        spare = await cluster.add_bookie()
        lost = metadata.ensembles[0][1][0]
        survivor = metadata.ensembles[0][1][1]
        await cluster.stop_bookie(lost)
        async with session(cluster) as (store, marks):
            await marks.mark(ledger_id, [lost])
            worker = ReplicationWorker(store, settings(), random.Random(1))
            async with cluster.store_factory() as dead_store:
                assert await UnderReplication(dead_store, ROOT).try_lock(ledger_id, "dead")
                # What the dead worker had copied: the survivor's first entries, verbatim.
                host, port = cluster.bookie(spare).address.split(":")
                async with BookieConnection.connect(host, int(port)) as connection:
                    for entry_id in range(3):
                        packet = cluster.storage(survivor).read_entry(ledger_id, entry_id)
                        if packet is not None:
                            await connection.add(
                                ledger_id, entry_id, master_key(PASSWORD), packet, recovery=True
                            )
                assert await worker.run_once() == 0, "locked by the dead worker's session"
                dead_store.expire_session()
                assert await marks.lock_owner(ledger_id) is None
            assert await worker.run_once() == 1
            after = await client.ledger_metadata(ledger_id)
            assert spare in after.ensembles[0][1]
            assert_fully_replicated(cluster, after)
            assert await marks.list_marks() == []


async def test_two_lost_bookies_of_one_ensemble_are_replaced_together() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        async with await client.create_ledger(3, 3, 2, password=PASSWORD) as ledger:
            for index in range(ENTRIES):
                await ledger.append(f"entry {index}".encode())
        metadata = await client.ledger_metadata(ledger.ledger_id)
        spares = {await cluster.add_bookie(), await cluster.add_bookie()}
        lost = set(metadata.ensembles[0][1][:2])
        for bookie_id in lost:
            await cluster.stop_bookie(bookie_id)
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, lost)
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 1
            after = await client.ledger_metadata(metadata.ledger_id)
            ensemble = after.ensembles[0][1]
            assert set(ensemble) == spares | {metadata.ensembles[0][1][2]}
            assert_fully_replicated(cluster, after)


async def test_copies_are_throttled() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client)
        await cluster.add_bookie()
        lost = metadata.ensembles[0][1][0]
        await cluster.stop_bookie(lost)
        held = len(list(position_entries(metadata.quorum, 0, ENTRIES - 1, 0)))
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, [lost])
            worker = ReplicationWorker(store, settings(rate_entries_per_s=200), random.Random(1))
            started = anyio.current_time()
            assert await worker.run_once() == 1
            assert anyio.current_time() - started >= (held - 1) / 200


async def test_an_open_ledgers_sealed_segments_are_repaired_and_its_writer_goes_on() -> None:
    async with memory_cluster(4) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 2, 2, password=PASSWORD)
        for index in range(10):
            await writer.append(f"entry {index}".encode())
        first = (await client.ledger_metadata(writer.ledger_id)).ensembles[0][1]
        lost = first[0]
        await cluster.stop_bookie(lost)
        for index in range(10, 15):  # the writer replaces the lost bookie: a second segment
            await writer.append(f"entry {index}".encode())
        before = await client.ledger_metadata(writer.ledger_id)
        assert len(before.ensembles) == 2
        assert lost not in before.current_ensemble
        async with session(cluster) as (store, marks):
            await marks.mark(writer.ledger_id, [lost])
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 1
            assert await marks.list_marks() == []
            after = await client.ledger_metadata(writer.ledger_id)
            replacement = after.ensembles[0][1][0]
            assert replacement not in first
            assert after.ensembles[0][1][1:] == first[1:]
            assert after.ensembles[1] == before.ensembles[1]
        for index in range(15, 20):
            await writer.append(f"entry {index}".encode())
        await writer.close()
        closed = await client.ledger_metadata(writer.ledger_id)
        assert closed.ensembles[0][1] == after.ensembles[0][1], "the writer kept the repair"
        assert closed.last_entry_id == 19
        assert_fully_replicated(cluster, closed)


async def test_an_open_ledgers_last_segment_is_left_to_its_writer() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 2, 2, password=PASSWORD)
        await writer.append(b"open")
        await cluster.add_bookie()
        lost = (await client.ledger_metadata(writer.ledger_id)).current_ensemble[0]
        await cluster.stop_bookie(lost)
        async with session(cluster) as (store, marks):
            await marks.mark(writer.ledger_id, [lost])
            before = await client.ledger_metadata(writer.ledger_id)
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 0
            assert await marks.list_marks() == [writer.ledger_id]
            assert await client.ledger_metadata(writer.ledger_id) == before


WRITER_ZNODE = "/rsm/app/replicas/r1"


async def open_ledger_missing_a_bookie(
    cluster: LocalCluster, client: LedgerClient, custom: dict[str, bytes]
) -> tuple[WriteHandle, str]:
    """An open ledger of 5 entries whose last segment names a stopped bookie, and that
    bookie; a spare is registered."""
    writer = await client.create_ledger(3, 2, 2, password=PASSWORD, custom_metadata=custom)
    for index in range(5):
        await writer.append(f"entry {index}".encode())
    lost = (await client.ledger_metadata(writer.ledger_id)).current_ensemble[0]
    await cluster.add_bookie()
    await cluster.stop_bookie(lost)
    return writer, lost


async def writer_gone(cluster: LocalCluster, store: MetadataStore) -> None:
    """WRITER_ZNODE as a dead writer leaves it: created by a session that has ended, so
    the znode is gone and its parent stays."""
    async with session(cluster) as (writers, _):
        await writers.create(WRITER_ZNODE, b"", ephemeral=True, make_parents=True)
    assert await store.exists(WRITER_ZNODE) is None


async def test_an_open_ledger_whose_writer_znode_exists_is_never_fenced() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer, lost = await open_ledger_missing_a_bookie(
            cluster, client, {WRITER_KEY: WRITER_ZNODE.encode()}
        )
        async with session(cluster) as (store, marks), session(cluster) as (writers, _):
            await writers.create(WRITER_ZNODE, b"", ephemeral=True, make_parents=True)
            await marks.mark(writer.ledger_id, [lost])
            before = await client.ledger_metadata(writer.ledger_id)
            worker = ReplicationWorker(store, settings(open_ledger_grace_ms=0), random.Random(1))
            for _ in range(2):
                assert await worker.run_once() == 0
                # Time itself is the input: the worker's retry schedule holds the ledger back
                # for 1 ms (by the loop's clock) after a round that left it marked.
                await anyio.sleep(0.002)
            assert await marks.list_marks() == [writer.ledger_id]
            assert await client.ledger_metadata(writer.ledger_id) == before
        await writer.append(b"still the writer's")


async def test_an_open_ledger_whose_writer_is_gone_is_fenced_recovered_and_repaired() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer, lost = await open_ledger_missing_a_bookie(
            cluster, client, {WRITER_KEY: WRITER_ZNODE.encode()}
        )
        async with session(cluster) as (store, marks):
            await writer_gone(cluster, store)
            await marks.mark(writer.ledger_id, [lost])
            worker = ReplicationWorker(store, settings(open_ledger_grace_ms=0), random.Random(1))
            assert await worker.run_once() == 1
            assert await marks.list_marks() == []
        after = await client.ledger_metadata(writer.ledger_id)
        assert after.is_closed
        assert after.last_entry_id == 4, "closed at its last acknowledged entry"
        assert all(lost not in ensemble for _, ensemble in after.ensembles)
        assert_fully_replicated(cluster, after)
        for bookie_id in cluster.bookie_ids:
            if bookie_id != lost:
                assert not cluster.storage(bookie_id).read_entry(after.ledger_id, 5)
        with pytest.raises(LedgerFenced):
            await writer.append(b"too late")
        reader = await client.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
        assert await reader.read(0, 4) == [f"entry {index}".encode() for index in range(5)]


async def test_a_ledger_naming_no_writer_is_fenced_only_after_the_grace() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer, lost = await open_ledger_missing_a_bookie(cluster, client, {})
        async with session(cluster) as (store, marks):
            await marks.mark(writer.ledger_id, [lost])
            worker = ReplicationWorker(
                store, settings(open_ledger_grace_ms=60_000), random.Random(1)
            )
            assert await worker.run_once() == 0
            assert not (await client.ledger_metadata(writer.ledger_id)).is_closed
            assert await marks.list_marks() == [writer.ledger_id]


async def test_a_gone_writers_ledger_is_not_fenced_without_a_spare_bookie() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 2, 2, password=PASSWORD)
        await writer.append(b"entry")
        lost = (await client.ledger_metadata(writer.ledger_id)).current_ensemble[0]
        await cluster.stop_bookie(lost)
        async with session(cluster) as (store, marks):
            await marks.mark(writer.ledger_id, [lost])
            worker = ReplicationWorker(store, settings(open_ledger_grace_ms=0), random.Random(1))
            assert await worker.run_once() == 0
            metadata = await client.ledger_metadata(writer.ledger_id)
            assert metadata.state is LedgerState.OPEN, "not fenced"
            assert await marks.list_marks() == [writer.ledger_id]


async def test_a_marked_bookie_that_is_back_with_its_share_is_not_replaced() -> None:
    async with memory_cluster(4) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client)
        back = metadata.ensembles[0][1][0]
        await cluster.stop_bookie(back)
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, [back])
            await cluster.restart_bookie(back)  # back with its disk, before any repair
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 1
            assert await marks.list_marks() == []
            assert await client.ledger_metadata(metadata.ledger_id) == metadata, "no copy made"


async def write_with_a_bookie_away(
    cluster: LocalCluster, client: LedgerClient, ledger: WriteHandle
) -> str:
    """Write ENTRIES entries, the first bookie of the ensemble down for the second half
    (restarted after); return that bookie."""
    away = (await client.ledger_metadata(ledger.ledger_id)).ensembles[0][1][0]
    for index in range(ENTRIES):
        if index == ENTRIES // 2:
            await cluster.stop_bookie(away)
        await ledger.append(f"entry {index}".encode())
    await cluster.restart_bookie(away)
    return away


async def ledger_written_while_a_bookie_was_away(
    cluster: LocalCluster, client: LedgerClient
) -> tuple[LedgerMetadata, str]:
    """A closed ledger (E3 Qw3 Qa2) whose first bookie was down for its second half: with
    no spare bookie its writer deferred the ensemble change, so that bookie, back now,
    lacks those entries."""
    async with await client.create_ledger(3, 3, 2, password=PASSWORD) as ledger:
        away = await write_with_a_bookie_away(cluster, client, ledger)
    metadata = await client.ledger_metadata(ledger.ledger_id)
    assert len(metadata.ensembles) == 1, "no ensemble change: there was no spare"
    lacking = [e for e in range(ENTRIES) if away not in cluster.holders(metadata.ledger_id, e)]
    assert lacking == list(range(ENTRIES // 2, ENTRIES))
    return metadata, away


async def test_with_no_spare_a_bookie_back_without_some_entries_gets_them_in_place() -> None:
    """The entries it lacks are copied to it from the other members, no bookie is
    replaced and the metadata stays as it was."""
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata, away = await ledger_written_while_a_bookie_was_away(cluster, client)
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, [away])
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 1
            assert await marks.list_marks() == []
        assert await client.ledger_metadata(metadata.ledger_id) == metadata
        assert_fully_replicated(cluster, metadata)
        reader = await client.open_ledger(metadata.ledger_id, PASSWORD, recovery=False)
        assert await reader.read(0, ENTRIES - 1) == [
            f"entry {index}".encode() for index in range(ENTRIES)
        ]


async def test_with_a_spare_a_bookie_back_without_some_entries_is_replaced() -> None:
    """Its disk may have lost them: with a spare it is replaced like a lost bookie."""
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata, away = await ledger_written_while_a_bookie_was_away(cluster, client)
        spare = await cluster.add_bookie()
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, [away])
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 1
        after = await client.ledger_metadata(metadata.ledger_id)
        assert after.ensembles == (
            (0, tuple(spare if b == away else b for b in metadata.ensembles[0][1])),
        )
        assert_fully_replicated(cluster, after)


async def test_a_read_only_bookie_that_lacks_entries_is_not_refilled() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata, away = await ledger_written_while_a_bookie_was_away(cluster, client)
        await cluster.set_read_only(away)
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, [away])
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 0
            assert await marks.list_marks() == [metadata.ledger_id], "no spare: it stays"
        assert await client.ledger_metadata(metadata.ledger_id) == metadata
        assert away not in cluster.holders(metadata.ledger_id, ENTRIES - 1)


async def test_a_bookie_back_in_an_open_ledgers_last_segment_stays_marked_until_it_closes() -> None:
    """What it lacks of the segment being written is known once the ledger is closed: a
    mark removed before would leave those entries on fewer bookies for good."""
    async with memory_cluster(3) as cluster, cluster.client() as client:
        ledger = await client.create_ledger(3, 3, 2, password=PASSWORD)
        away = await write_with_a_bookie_away(cluster, client, ledger)
        async with session(cluster) as (store, marks):
            await marks.mark(ledger.ledger_id, [away])
            worker = ReplicationWorker(store, settings(), random.Random(1))
            assert await worker.run_once() == 0
            assert await marks.list_marks() == [ledger.ledger_id], "left to its writer"
            await ledger.close()
            # Another worker: this one's back-off may not have passed yet.
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 1
            assert await marks.list_marks() == []
        metadata = await client.ledger_metadata(ledger.ledger_id)
        assert len(metadata.ensembles) == 1
        assert_fully_replicated(cluster, metadata)


async def test_a_bookie_that_dies_while_it_is_refilled_stays_marked_until_a_later_round() -> None:
    """A refill cut short changes nothing that says otherwise: the mark stays, and once the
    bookie is back a later round copies what it still lacks."""
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata, away = await ledger_written_while_a_bookie_was_away(cluster, client)
        lacking = range(ENTRIES // 2, ENTRIES)
        async with session(cluster) as (store, marks):
            await marks.mark(metadata.ledger_id, [away])
            slow = ReplicationWorker(store, settings(rate_entries_per_s=20), random.Random(1))
            repaired: list[int] = []

            async def round_of(worker: ReplicationWorker) -> None:
                repaired.append(await worker.run_once())

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(round_of, slow)
                await wait_for(
                    lambda: any(away in cluster.holders(metadata.ledger_id, e) for e in lacking),
                    timeout_s=10,
                )
                await cluster.stop_bookie(away)
            assert repaired == [0]
            assert await marks.list_marks() == [metadata.ledger_id]
            assert any(away not in cluster.holders(metadata.ledger_id, e) for e in lacking)
            await cluster.restart_bookie(away)
            assert await ReplicationWorker(store, settings(), random.Random(1)).run_once() == 1
            assert await marks.list_marks() == []
        assert await client.ledger_metadata(metadata.ledger_id) == metadata
        assert_fully_replicated(cluster, metadata)


async def test_a_gone_writers_ledger_is_fenced_and_refilled_when_its_bookie_is_back() -> None:
    """No spare bookie, but the one its last segment lacks entries on is back writable: the
    ledger is fenced, recovered, and those entries copied back to it in place."""
    async with memory_cluster(3) as cluster, cluster.client() as client:
        ledger = await client.create_ledger(
            3, 3, 2, password=PASSWORD, custom_metadata={WRITER_KEY: WRITER_ZNODE.encode()}
        )
        away = await write_with_a_bookie_away(cluster, client, ledger)
        async with session(cluster) as (store, marks):
            await writer_gone(cluster, store)
            await marks.mark(ledger.ledger_id, [away])
            worker = ReplicationWorker(store, settings(open_ledger_grace_ms=0), random.Random(1))
            assert await worker.run_once() == 1
            assert await marks.list_marks() == []
        metadata = await client.ledger_metadata(ledger.ledger_id)
        assert metadata.is_closed
        assert metadata.last_entry_id == ENTRIES - 1
        assert len(metadata.ensembles) == 1, "nobody replaced"
        assert_fully_replicated(cluster, metadata)
        with pytest.raises(LedgerFenced):
            await ledger.append(b"too late")
