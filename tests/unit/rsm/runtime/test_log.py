"""Reading the log's ledgers: finding where to go on by index, replaying from there, and
following the log (when a follower counts as caught up)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.meta.api import MetadataStore
from rsm.config import ReplicaConfig
from rsm.core.commands import AppliedPosition, prepare_command
from rsm.core.layout import AppLayout
from rsm.core.log_format import encode_batch, encode_log
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.errors import MalformedValue
from rsm.runtime.applier import Applier
from rsm.runtime.log import LogFollower, LogStore, SegmentReader, replay_log
from tests.unit.bookie.client.cluster import fast_config, memory_cluster
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.runtime.harness import wait_until

pytestmark = pytest.mark.anyio

PASSWORD = ReplicaConfig().ledger_password

# (first_index, commands) of each entry: batches, barriers (no command) in between.
ENTRIES = [(1, 3), (4, 0), (4, 1), (5, 2), (7, 0), (7, 0), (7, 3)]
LAST_INDEX = 9


def payloads(epoch: int) -> list[bytes]:
    return [
        encode_batch(
            epoch=epoch,
            first_index=first,
            timestamp_ms=1_000 + position,
            seed=position,
            items=[prepare_command(Counter, "add", [1]) for _ in range(count)],
        )
        for position, (first, count) in enumerate(ENTRIES)
    ]


async def follower_of(
    store: MetadataStore,
    client: LedgerClient,
    segment: Segment,
    *,
    lag_entries_max: int = 10,
    on_progress: Callable[[bool], None] = lambda _caught_up: None,
) -> tuple[LogFollower, Applier, LogStore]:
    """A follower of a fresh log whose one segment is `segment`, its applier, and the log's
    store."""
    log_store = LogStore(store, AppLayout.of("app"))
    await log_store.ensure_layout()
    _log, version = await log_store.read()
    await store.set(log_store.layout.log, encode_log(Log(1, (segment,))), version)
    applier = Applier(Counter(), ReplicaConfig())
    follower = LogFollower(
        log_store,
        SegmentReader(client, PASSWORD),
        applier,
        lag_entries_max=lag_entries_max,
        retry_delay_ms=10,
        on_progress=on_progress,
    )
    return follower, applier, log_store


@pytest.mark.parametrize(
    ("next_index", "entry_id"),
    [(1, 0), (4, 1), (5, 3), (7, 4), (10, len(ENTRIES))],
)
async def test_locate_finds_where_a_replica_goes_on(next_index: int, entry_id: int) -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2, password=PASSWORD)
        for payload in payloads(1):
            await writer.append(payload)
        await writer.close()
        segment = Segment(writer.ledger_id, 1, 1, SegmentState.CLOSED, LAST_INDEX)
        reader = SegmentReader(client, PASSWORD)
        handle = await reader.open(segment, recovery=False)
        assert await reader.locate(segment, handle, next_index) == entry_id


async def test_a_restored_state_replays_from_the_entry_that_holds_its_next_index() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2, password=PASSWORD)
        for payload in payloads(1):
            await writer.append(payload)
        await writer.close()
        log = Log(1, (Segment(writer.ledger_id, 1, 1, SegmentState.CLOSED, LAST_INDEX),))
        applier = Applier(Counter(), ReplicaConfig())
        # As if restored from a snapshot taken after index 4: no cursor, a position.
        applier.position = AppliedPosition(4, 1_002, 1)
        await replay_log(log, SegmentReader(client, PASSWORD), applier, None)
        assert applier.applied_index == LAST_INDEX
        assert applier.machine.value == LAST_INDEX - 4  # type: ignore[attr-defined]
        assert applier.cursor is not None
        assert applier.cursor.entry_id == len(ENTRIES) - 1


async def test_an_entry_of_another_epoch_than_its_segment_is_refused() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2, password=PASSWORD)
        for payload in payloads(2):
            await writer.append(payload)
        await writer.close()
        log = Log(2, (Segment(writer.ledger_id, 1, 1, SegmentState.CLOSED, LAST_INDEX),))
        applier = Applier(Counter(), ReplicaConfig())
        with pytest.raises(MalformedValue, match="epoch"):
            await replay_log(log, SegmentReader(client, PASSWORD), applier, None)
        assert applier.applied_index == 0, "nothing of a mislabelled entry is applied"


async def test_a_follower_that_read_a_closed_ledger_the_log_calls_open_is_caught_up() -> None:
    """Seed 20006 of the rsm simulation: the leader's ledger was closed (its writer gave up)
    and the leader died before any takeover recorded that in the log.  Replicas that read
    the whole ledger waited for the log to move before counting as caught up, so none stood
    for the election, no takeover came, and the log never moved."""
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as client,
        cluster.store_factory() as store,
    ):
        writer = await client.create_ledger(3, 3, 2, password=PASSWORD)
        for payload in payloads(1):
            await writer.append(payload)
        await writer.close()
        still_open = Segment(writer.ledger_id, 1, 1, SegmentState.OPEN, -1)
        progress: list[bool] = []
        follower, applier, log_store = await follower_of(
            store, client, still_open, lag_entries_max=0, on_progress=progress.append
        )
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follower.run)
            await wait_until(lambda: bool(progress) and progress[-1])
            tasks.cancel_scope.cancel()
        assert applier.applied_index == LAST_INDEX
        log = (await log_store.read())[0]
        assert log.segments == (still_open,), "caught up without the log moving"


async def test_a_followers_lag_counts_the_confirmed_entries_it_has_not_applied() -> None:
    """The first four entries apply; the fifth carries another epoch than its segment, which
    stops the follower there with the rest of the ledger confirmed and not applied."""
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as client,
        cluster.store_factory() as store,
    ):
        writer = await client.create_ledger(3, 3, 2, password=PASSWORD)
        for payload in payloads(1)[:4] + payloads(2)[4:]:
            await writer.append(payload)
        await writer.close()
        segment = Segment(writer.ledger_id, 1, 1, SegmentState.CLOSED, LAST_INDEX)
        follower, applier, _log_store = await follower_of(store, client, segment)
        assert follower.lag_entries == 0, "no ledger opened yet"
        with pytest.raises(MalformedValue, match="epoch"):
            await follower.run()
        assert applier.cursor is not None
        assert applier.cursor.entry_id == 3
        assert follower.lag_entries == len(ENTRIES) - 4


async def test_a_follower_tailing_the_open_ledger_has_no_lag_once_it_applied_every_entry() -> None:
    """The writer sends explicit LACs, so the tail learns that its last entry is confirmed."""
    async with (
        memory_cluster(3) as cluster,
        cluster.client(fast_config(explicit_lac_interval_ms=20)) as writer_client,
        cluster.client() as client,
        cluster.store_factory() as store,
    ):
        writer = await writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        segment = Segment(writer.ledger_id, 1, 1, SegmentState.OPEN, -1)
        follower, applier, _log_store = await follower_of(store, client, segment)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follower.run)
            for payload in payloads(1):
                await writer.append(payload)
            await wait_until(lambda: applier.applied_index == LAST_INDEX)
            assert follower.lag_entries == 0
            tasks.cancel_scope.cancel()
