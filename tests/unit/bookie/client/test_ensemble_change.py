"""A bookie that stops while a writer streams: the writer replaces it and goes on, and
nothing it had acknowledged is lost."""

from __future__ import annotations

import anyio
import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.errors import BookieError, NotEnoughBookies
from tests.unit.bookie.client.cluster import WAIT_S, LocalCluster, fast_config, memory_cluster
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio


async def test_writer_replaces_a_bookie_stopped_mid_stream() -> None:
    count = 600
    payloads = [f"entry {index}".encode() * 10 for index in range(count)]
    async with memory_cluster(4) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2, password=b"pw")
        ensemble = writer.metadata.current_ensemble
        spare = next(b for b in cluster.bookie_ids if b not in ensemble)
        with anyio.fail_after(WAIT_S):
            for payload in payloads[:300]:
                await writer.wait_for_capacity()
                writer.append_nowait(payload)
            await writer.wait_confirmed(100)
            # Adds are in flight to it as it stops.
            await cluster.stop_bookie(ensemble[1])
            for payload in payloads[300:]:
                await writer.wait_for_capacity()
                writer.append_nowait(payload)
            await writer.wait_confirmed(count - 1)
        await writer.close()

        metadata = await client.ledger_metadata(writer.ledger_id)
        assert metadata.last_entry_id == count - 1
        assert len(metadata.ensembles) == 2
        assert (client.stats.ensemble_changes, client.stats.ensemble_changes_deferred) == (1, 0)
        assert client.stats.add_seconds.count == count
        assert client.stats.pending_adds == 0
        first_entry_id, new_ensemble = metadata.ensembles[1]
        assert 100 < first_entry_id <= 300 + 1
        assert new_ensemble == (ensemble[0], spare, ensemble[2])
        # Every entry of the new segment reaches the spare (the pending ones were
        # re-sent to it), though its copy may land after Qa others confirmed it.
        spare_storage = cluster.storage(spare)
        await wait_for(
            lambda: all(
                spare_storage.read_entry(writer.ledger_id, entry_id) is not None
                for entry_id in range(first_entry_id, count)
            ),
            WAIT_S,
        )
        reader = await client.open_ledger(writer.ledger_id, b"pw")
        assert await reader.read(0, count - 1) == payloads


async def test_without_a_replacement_pending_appends_fail() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 3)
        await writer.append(b"first")
        await cluster.stop_bookie(writer.metadata.current_ensemble[0])
        await wait_for(lambda: len(client.writable_bookies) == 2, WAIT_S)
        with anyio.fail_after(WAIT_S), pytest.raises(NotEnoughBookies):
            await writer.append(b"second")
        with pytest.raises(NotEnoughBookies):
            await writer.append(b"third")
        # A broken handle still closes, at what was confirmed.
        await writer.close()
        assert (await client.ledger_metadata(writer.ledger_id)).last_entry_id == 0


async def test_without_a_replacement_a_writer_goes_on_with_the_bookies_left() -> None:
    """Three bookies, E = Qw = 3, Qa = 2: one stops and there is none to replace it.
    Every entry can still get its Qa acks, so the writer defers the change and
    goes on; everything it acknowledged is read back."""
    count = 400
    payloads = [f"entry {index}".encode() * 10 for index in range(count)]
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2, password=b"pw")
        stopped = writer.metadata.current_ensemble[1]
        failures: list[BookieError] = []
        writer.on_failure(failures.append)
        with anyio.fail_after(WAIT_S):
            for payload in payloads[:200]:
                await writer.wait_for_capacity()
                writer.append_nowait(payload)
            await writer.wait_confirmed(50)
            await cluster.stop_bookie(stopped)
            for payload in payloads[200:]:
                await writer.wait_for_capacity()
                writer.append_nowait(payload)
            await writer.wait_confirmed(count - 1)
        assert failures == []
        await writer.close()
        metadata = await client.ledger_metadata(writer.ledger_id)
        assert metadata.last_entry_id == count - 1
        assert len(metadata.ensembles) == 1, "no replacement was possible"
        reader = await client.open_ledger(writer.ledger_id, b"pw")
        assert await reader.read(0, count - 1) == payloads


async def deferred_writer(
    cluster: LocalCluster, client: LedgerClient, position: int
) -> tuple[WriteHandle, str]:
    """A writer on the three bookies of `cluster` whose bookie at `position` stopped with
    none to replace it (the change deferred), and that bookie's id."""
    writer = await client.create_ledger(3, 3, 2, password=b"pw")
    stopped = writer.metadata.current_ensemble[position]
    await writer.append(b"first")
    await cluster.stop_bookie(stopped)
    with anyio.fail_after(WAIT_S):
        await writer.append(b"second")
    await wait_for(lambda: writer.change_deferred, WAIT_S)
    return writer, stopped


async def test_a_deferred_change_takes_a_bookie_that_joins_later() -> None:
    # No explicit LAC: the retry timer must be woken by the deferral itself.
    config = fast_config(explicit_lac_interval_ms=0)
    async with memory_cluster(3) as cluster, cluster.client(config=config) as client:
        writer, _stopped = await deferred_writer(cluster, client, 0)
        assert client.stats.ensemble_changes_deferred == 1, "once per deferral, not per retry"
        joined = await cluster.add_bookie()
        await wait_for(lambda: writer.metadata.current_ensemble[0] == joined, WAIT_S)
        assert not writer.change_deferred
        assert (client.stats.ensemble_changes, client.stats.ensemble_changes_deferred) == (1, 1)
        with anyio.fail_after(WAIT_S):
            await writer.append(b"third")
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, b"pw")
        assert await reader.read(0, 2) == [b"first", b"second", b"third"]


async def test_a_handle_that_breaks_tells_its_owner() -> None:
    """Two of three bookies stop: no write set keeps Qa = 2, and there is no
    replacement, so the handle breaks and its owner hears of it once, and a
    listener added later at once."""
    failures: list[BookieError] = []
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)
        writer.on_failure(failures.append)
        await writer.append(b"first")
        for bookie_id in writer.metadata.current_ensemble[1:]:
            await cluster.stop_bookie(bookie_id)
        await wait_for(lambda: len(client.writable_bookies) == 1, WAIT_S)
        with anyio.fail_after(WAIT_S), pytest.raises(NotEnoughBookies):
            await writer.append(b"second")
        await wait_for(lambda: bool(failures), WAIT_S)
        assert len(failures) == 1
        assert isinstance(failures[0], NotEnoughBookies)
        late: list[BookieError] = []
        writer.on_failure(late.append)
        assert late == failures, "a listener added after the failure hears of it at once"


async def test_a_handle_closed_normally_never_calls_its_failure_listener() -> None:
    failures: list[BookieError] = []
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)
        writer.on_failure(failures.append)
        await writer.append(b"only")
        await writer.close()
        await cluster.stop_bookie(writer.metadata.current_ensemble[0])
    assert failures == []


async def test_rack_aware_placement_spreads_write_sets() -> None:
    racks: list[str | None] = ["r1", "r1", "r2", "r2", "r3", "r3"]
    async with memory_cluster(6, racks=racks) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)
        rack_of = dict(zip(cluster.bookie_ids, racks, strict=True))
        assert {rack_of[b] for b in writer.metadata.current_ensemble} == {"r1", "r2", "r3"}
        await writer.close()


async def test_a_deferred_writer_says_when_its_failed_bookie_has_come_back() -> None:
    """The handle never takes a bookie that failed it back, but says when it registered
    anew, so that its owner can move to a new ledger that includes it."""
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer, stopped = await deferred_writer(cluster, client, 2)
        assert not writer.failed_bookie_returned
        await cluster.restart_bookie(stopped)
        await wait_for(lambda: writer.failed_bookie_returned, WAIT_S)
        assert writer.change_deferred, "the returned bookie is not taken back"
        assert stopped in client.writable_bookies


async def test_a_degraded_ledger_is_created_on_the_bookies_there_are_never_below_qa() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        await cluster.stop_bookie(cluster.bookie_ids[0])
        await wait_for(lambda: len(client.writable_bookies) == 2, WAIT_S)
        with pytest.raises(NotEnoughBookies):
            await client.create_ledger(3, 3, 2, password=b"pw")
        writer = await client.create_ledger(3, 3, 2, password=b"pw", degraded=True)
        metadata = writer.metadata
        assert (metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum) == (2, 2, 2)
        assert set(metadata.current_ensemble) == set(cluster.bookie_ids[1:])
        assert metadata.custom["bookie.requested"] == b"3/3/2"
        payloads = [f"entry {index}".encode() for index in range(20)]
        for payload in payloads:
            await writer.append(payload)
        await writer.close()
        for entry_id in range(20):
            assert sorted(cluster.holders(writer.ledger_id, entry_id)) == sorted(
                metadata.current_ensemble
            ), "every entry on both bookies: Qa copies"
        reader = await client.open_ledger(writer.ledger_id, b"pw")
        assert await reader.read(0, 19) == payloads
        await cluster.stop_bookie(cluster.bookie_ids[1])
        await wait_for(lambda: len(client.writable_bookies) == 1, WAIT_S)
        with pytest.raises(NotEnoughBookies, match="ack quorum"):
            await client.create_ledger(3, 3, 2, password=b"pw", degraded=True)


async def test_a_ledger_with_enough_bookies_is_not_degraded() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2, password=b"pw", degraded=True)
        assert writer.metadata.ensemble_size == 3
        assert "bookie.requested" not in writer.metadata.custom
        assert len(cluster.bookie_ids) == 3
