"""Reading the log's ledgers: finding where to go on by index, replaying from there, and
following the log (when a follower counts as caught up)."""

from __future__ import annotations

import anyio
import pytest

from rsm.applier import Applier
from rsm.config import ReplicaConfig
from rsm.core.commands import AppliedPosition, prepare_command
from rsm.core.entry_format import encode_batch, encode_log
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.errors import MalformedValue
from rsm.layout import AppLayout
from rsm.log import LogFollower, LogStore, SegmentReader, replay_log
from tests.unit.ledger_client.cluster import memory_cluster
from tests.unit.rsm.counter import Counter
from tests.unit.runtime.harness import wait_until

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
        log_store = LogStore(store, AppLayout.of("app"))
        await log_store.ensure_layout()
        _log, version = await log_store.read()
        still_open = Log(1, (Segment(writer.ledger_id, 1, 1, SegmentState.OPEN, -1),))
        await store.set(log_store.layout.log, encode_log(still_open), version)
        applier = Applier(Counter(), ReplicaConfig())
        progress: list[bool] = []
        follower = LogFollower(
            log_store,
            SegmentReader(client, PASSWORD),
            applier,
            lag_entries_max=0,
            retry_delay_ms=10,
            on_progress=progress.append,
        )
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follower.run)
            await wait_until(lambda: bool(progress) and progress[-1])
            tasks.cancel_scope.cancel()
        assert applier.applied_index == LAST_INDEX
        assert (await log_store.read())[0] == still_open, "caught up without the log moving"
