"""Snapshots in running replicas (in-process bookies): start from a snapshot and replay the
tail, snapshots taken by a follower on policy, truncation and its ledgers deleted, readers in
the truncated range told to start from a snapshot, a follower left behind reloading, no
reload when current, corrupt snapshots skipped loudly, and a refusal to start when nothing
can rebuild the state."""

from __future__ import annotations

import logging
from dataclasses import replace

import anyio
import pytest

from rsm.config import ReplicaConfig
from rsm.core.log_state import Log
from rsm.errors import Truncated
from rsm.runtime.applier import Applier
from rsm.runtime.log import LogFollower, LogStore, SegmentReader
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.runtime.harness import APP, replica_cluster, wait_until
from tests.unit.rsm.snapshots.support import Gate, app_view, gated_replica, snapshot_config

pytestmark = pytest.mark.anyio


async def add(replica_call: object, count: int) -> None:
    for _ in range(count):
        await replica_call("add", 1)  # type: ignore[operator]


async def test_a_new_replica_starts_from_the_snapshot_and_replays_the_tail() -> None:
    config = snapshot_config(truncation=False)
    async with replica_cluster() as replicas:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        await add(leader.call, 40)
        manifest = await leader.take_snapshot()
        assert manifest["index"] == leader.applied_index
        await add(leader.call, 15)
        late = await replicas.start("b", config=config)
        assert late.snapshots.loaded == 1
        assert late.snapshots.last_loaded is not None
        assert late.snapshots.last_loaded["index"] == manifest["index"]
        await wait_until(lambda: late.applied_index == leader.applied_index)
        assert late.machine.value == leader.machine.value == 55  # type: ignore[attr-defined]
        assert late.machine.state_hash() == leader.machine.state_hash()
        assert late.session_table.to_plain() == leader.session_table.to_plain()


async def test_a_follower_snapshots_on_policy_and_the_leader_truncates() -> None:
    config = snapshot_config(snapshot_every_commands=30)
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        for name in ("b", "c"):
            await replicas.start(name, config=config)
        await add(leader.call, 20)
        first_segments = {s.ledger_id for s in (await view.log()).segments}
        await add(leader.call, 80)
        await wait_until(lambda: leader.snapshots.truncations > 0)
        snapshots = await view.snapshots()
        assert snapshots.newest is not None
        assert {m.replica_id for m in snapshots.snapshots} - {leader.replica_id}
        log = await view.log()
        assert log.first_index > 1
        assert log.first_index <= snapshots.newest.index + 1
        await wait_until(lambda: leader.snapshots.value.garbage == ())
        truncated = first_segments - {s.ledger_id for s in log.segments}
        assert truncated
        assert not truncated & await view.ledger_ids(), "a truncated segment's ledger remains"
        # Every replica agrees, by state hash, at the same index.
        await wait_until(
            lambda: len({r.replica.applied_index for r in replicas.running.values()}) == 1
        )
        assert len({r.replica.machine.state_hash() for r in replicas.running.values()}) == 1
        for running in replicas.running.values():
            hashes = running.replica.status()["state_hashes"]
            assert hashes["divergences"] == 0


async def test_readers_in_the_truncated_range_are_told_to_start_from_a_snapshot() -> None:
    config = snapshot_config()
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        await add(leader.call, 30)
        await leader.take_snapshot()
        await wait_until(lambda: leader.snapshots.truncations > 0)
        log = await view.log()
        with pytest.raises(Truncated, match="start from a snapshot"):
            log.segment_for(1)
        fresh = Applier(Counter(), ReplicaConfig())
        follower = LogFollower(
            LogStore(view.store, view.layout),
            SegmentReader(view.ledgers, ReplicaConfig().ledger_password),
            fresh,
            lag_entries_max=10,
            retry_delay_ms=10,
            on_progress=lambda _caught_up: None,
        )
        with anyio.fail_after(10), pytest.raises(Truncated, match="snapshot"):
            await follower.run()


async def test_a_follower_left_behind_by_truncation_reloads_a_snapshot() -> None:
    config = snapshot_config(snapshot_every_commands=0)
    gate = Gate()
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        await add(leader.call, 10)
        async with gated_replica(replicas, "b", gate, Counter, config) as behind:
            await wait_until(lambda: behind.applied_index == leader.applied_index)
            assert behind.snapshots.loaded == 0
            gate.close()
            await add(leader.call, 40)
            await leader.take_snapshot()
            await wait_until(lambda: leader.snapshots.truncations > 0)
            log = await view.log()
            assert log.first_index > behind.applied_index + 1
            await wait_until(lambda: leader.snapshots.value.garbage == ())
            gate.open()
            await wait_until(lambda: behind.applied_index == leader.applied_index, 20)
            assert behind.snapshots.loaded == 1
            assert behind.machine.value == leader.machine.value == 50  # type: ignore[attr-defined]


async def test_a_replica_whose_state_is_current_does_not_reload() -> None:
    config = snapshot_config()
    async with replica_cluster() as replicas:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        follower = await replicas.start("b", config=config)
        for _round in range(3):
            await add(leader.call, 12)
            await follower.take_snapshot()
            await leader.take_snapshot()
        await wait_until(lambda: follower.applied_index == leader.applied_index)
        assert follower.snapshots.loaded == leader.snapshots.loaded == 0
        assert leader.snapshots.truncations > 0


async def test_a_corrupt_snapshot_is_skipped_for_the_previous_one_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = snapshot_config(truncation=False)
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        await add(leader.call, 20)
        older = await leader.take_snapshot()
        await add(leader.call, 20)
        newer = await leader.take_snapshot()

        def corrupt(value):  # type: ignore[no-untyped-def]
            bad = replace(value.snapshots[-1], sha256=bytes(32))
            return replace(value, snapshots=(*value.snapshots[:-1], bad))

        await view.snapshot_store().update(corrupt)
        caplog.set_level(logging.ERROR, logger="rsm.runtime.snapshot_service")
        late = await replicas.start("b", config=config)
        assert late.snapshots.skipped == 1
        assert late.snapshots.last_loaded is not None
        assert late.snapshots.last_loaded["index"] == older["index"] < newer["index"]
        skipped = [r for r in caplog.records if "rsm.snapshot_skipped" in r.getMessage()]
        assert skipped
        assert skipped[0].levelno == logging.ERROR
        await wait_until(lambda: late.applied_index == leader.applied_index)
        assert late.machine.value == 40  # type: ignore[attr-defined]


async def test_a_replica_refuses_to_start_when_nothing_can_rebuild_the_state() -> None:
    config = snapshot_config()
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        await add(leader.call, 30)
        await leader.take_snapshot()
        await wait_until(lambda: leader.snapshots.truncations > 0)
        newest = leader.snapshots.value.newest
        assert newest is not None
        await view.ledgers.delete_ledger(newest.ledger_id)
        with pytest.raises(Truncated, match="cannot start"):
            await replicas.start("b", config=config)


async def test_the_log_still_holds_what_a_snapshot_does_not_cover() -> None:
    config = snapshot_config(retention_commands=20)
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        await add(leader.call, 25)
        early = await leader.take_snapshot()
        await add(leader.call, 25)
        newest = await leader.take_snapshot()
        await wait_until(lambda: leader.snapshots.truncations > 0)
        log: Log = await view.log()
        # The newest snapshot is within the retention window: truncation cut at the older one.
        assert 1 < log.first_index <= early["index"] + 1 < newest["index"]
        assert leader.applied_index - (log.first_index - 1) >= 20
        assert log.segments[-1].is_open
        assert view.layout.app == APP
