"""Crashes in the middle of snapshot work lose nothing acknowledged and leave the previous
snapshot usable; what the crash left behind (a pending snapshot ledger, truncated segments'
ledgers) is found and deleted by a later round."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import anyio
import pytest

from rsm.core.state_machine import command
from rsm.errors import BadSnapshotState, RsmError
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.runtime.harness import replica_cluster, wait_until
from tests.unit.rsm.snapshots.support import app_view, snapshot_config

pytestmark = pytest.mark.anyio


class Endless(Counter):
    """A counter whose snapshot, once `stall` was applied, never ends (a writer that crashes
    before it is done, whenever the test chooses)."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = False

    @command
    def stall(self) -> None:
        self.stalled = True

    def snapshot(self) -> Iterator[bytes]:
        yield from super().snapshot()
        while self.stalled:
            yield b"x" * 1024


async def test_a_crash_during_a_snapshot_write_leaves_the_previous_one_usable() -> None:
    # No state hashes: the default one reads snapshot(), which here may never end.
    config = snapshot_config(
        snapshot_orphan_grace_ms=200, snapshot_chunk_bytes=1024, state_hash_every_commands=0
    )
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", machine=Endless, config=config)
        leader = await replicas.wait_leader()
        writer = await replicas.start("b", machine=Endless, config=config)
        for _ in range(20):
            await leader.call("add", 1)
        await wait_until(lambda: writer.applied_index == leader.applied_index)
        good = await writer.take_snapshot()
        await leader.call("stall")
        for _ in range(10):
            await leader.call("add", 1)
        await wait_until(lambda: writer.applied_index == leader.applied_index)

        async def request_snapshot() -> None:
            # Through the replica's server, so that the work runs inside the replica
            # and dies with it; the caller only sees its connection lost.
            with contextlib.suppress(RsmError):
                await client.snapshot(writer.address)

        async with replicas.client() as client, anyio.create_task_group() as task_group:
            task_group.start_soon(request_snapshot)
            await wait_until(lambda: bool(writer.snapshots.value.pending))
            (pending,) = (await view.snapshots()).pending
            await replicas.kill("b")

        value = await view.snapshots()
        assert value.newest is not None
        assert value.newest.index == good["index"]
        # The leader gives the dead writer's ledger up once the grace period is over.
        await wait_until(lambda: not leader.snapshots.value.pending)
        await wait_until(lambda: not leader.snapshots.value.garbage)
        assert pending.ledger_id not in await view.ledger_ids()
        late = await replicas.start("c", machine=Endless, config=config)
        assert late.snapshots.last_loaded is not None
        assert late.snapshots.last_loaded["index"] == good["index"]
        await wait_until(lambda: late.applied_index == leader.applied_index)
        assert late.machine.value == 30  # type: ignore[attr-defined]


async def test_a_crash_between_truncation_and_deletion_loses_nothing() -> None:
    config = snapshot_config()
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        follower = await replicas.start("b", config=config)
        for _ in range(30):
            await leader.call("add", 1)
        before = {s.ledger_id for s in (await view.log()).segments}

        deleting = anyio.Event()

        async def stuck(ledger_ids: object = None) -> int:
            deleting.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        leader.snapshots.store.collect = stuck  # type: ignore[method-assign]
        await follower.take_snapshot()
        with anyio.fail_after(10):
            await deleting.wait()
        await replicas.kill("a")

        listed = (await view.snapshots()).garbage
        log = await view.log()
        truncated = before - {s.ledger_id for s in log.segments}
        assert truncated
        assert truncated <= set(listed)
        assert truncated <= await view.ledger_ids()

        successor = await replicas.wait_leader()
        assert successor is follower
        await wait_until(lambda: not successor.snapshots.value.garbage)
        assert not truncated & await view.ledger_ids()
        assert await successor.call("add", 1) == 31
        late = await replicas.start("c", config=config)
        await wait_until(lambda: late.applied_index == successor.applied_index)
        assert late.machine.value == 31  # type: ignore[attr-defined]
        assert late.snapshots.loaded == 1


class Fragile(Counter):
    """A counter that `poison` makes impossible to snapshot (a lock in its public state)."""

    def __init__(self) -> None:
        super().__init__()
        self.guard: object = None

    @command
    def poison(self) -> None:
        self.guard = threading.Lock()


async def test_a_failed_snapshot_write_is_cleaned_up_at_once() -> None:
    config = snapshot_config(truncation=False)
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", machine=Fragile, config=config)
        leader = await replicas.wait_leader()
        for _ in range(10):
            await leader.call("add", 1)
        good = await leader.take_snapshot()
        ledgers_before = await view.ledger_ids()
        await leader.call("poison")
        with pytest.raises(BadSnapshotState, match="guard"):
            await leader.take_snapshot()
        value = await view.snapshots()
        assert value.newest is not None
        assert value.newest.index == good["index"]
        assert (value.pending, value.garbage) == ((), ())
        assert await view.ledger_ids() <= ledgers_before | {
            s.ledger_id for s in (await view.log()).segments
        }
        status = leader.status()
        assert "guard" in status["snapshots"]["last_error"]
        # The default state hash cannot be computed either: counted, not fatal.
        for _ in range(10):
            await leader.call("add", 1)
        assert leader.status()["state_hashes"]["failures"] >= 1
        assert await leader.call("add", 1) == 21
