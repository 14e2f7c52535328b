"""Graceful handover: the leader drains, closes its ledger and names a caught-up successor,
which takes over without fencing anything."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence

import anyio
import pytest

from bookie.logs import record_fields
from bookie.meta.api import Delete, Op
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_log
from rsm.core.log_state import Log, SegmentState
from rsm.core.roles import Role
from rsm.errors import BadRequest, NotLeader
from rsm.runtime.election import ElectionView, Leadership
from rsm.runtime.log import LogStore
from tests.unit.bookie.client.cluster import WAIT_S
from tests.unit.rsm.runtime.harness import APP, Replicas, replica_cluster, wait_until
from tests.unit.rsm.runtime.test_failover import NAMES, all_converge_to, fenced_on, start_three

pytestmark = pytest.mark.anyio


async def read_log(replicas: Replicas) -> Log:
    async with replicas.cluster.store_factory() as store:
        return decode_log((await store.get(AppLayout.of(APP).log)).value)


async def everyone_stands(replicas: Replicas) -> None:
    """A replica stands for election once caught up; only candidates can be handed over to."""
    await wait_until(
        lambda: all(r.replica.status()["candidate"] for r in replicas.running.values())
    )


async def test_transfer_to_a_chosen_replica() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        await everyone_stands(replicas)
        target = next(name for name in ("a", "b", "c") if name != leader.replica_id)
        term = leader.term
        assert term is not None
        old_ledger, old_epoch = term.segment.ledger_id, term.epoch
        async with replicas.client() as client:
            for _ in range(5):
                await client.call("add", 1)
            result = await client.transfer_leadership(target)
            assert result["target"] == target
            assert result["epoch"] == old_epoch + 1
            assert isinstance(result["window_ms"], int)
            assert result["window_ms"] >= 0
            assert await client.call("add", 1) == 6
        successor = await replicas.wait_leader()
        assert successor.replica_id == target
        assert leader.last_transfer_window_ms == result["window_ms"]
        assert not fenced_on(replicas, old_ledger), "the successor had nothing to recover"
        log = await read_log(replicas)
        [old] = [s for s in log.segments if s.ledger_id == old_ledger]
        assert (old.state, old.last_index) == (SegmentState.CLOSED, 6)
        assert successor.epoch == old_epoch + 1
        await all_converge_to(replicas, 6)
        # The old leader is a follower and stands again.
        await everyone_stands(replicas)
        assert not leader.is_leader


async def test_transfer_to_any_replica() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        await everyone_stands(replicas)
        term = leader.term
        assert term is not None
        old_ledger = term.segment.ledger_id
        assert await leader.call("add", 2) == 2
        result = await leader.transfer_leadership()
        assert result["target"] != leader.replica_id
        assert result["window_ms"] is not None
        successor = await replicas.wait_leader()
        assert successor.replica_id == result["target"]
        assert not fenced_on(replicas, old_ledger)
        assert await successor.call("add", 1) == 3
        await all_converge_to(replicas, 3)


async def test_transfer_to_a_replica_that_is_not_a_candidate_is_refused() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        await everyone_stands(replicas)
        with pytest.raises(BadRequest):
            await leader.transfer_leadership("nobody")
        follower = next(r.replica for r in replicas.running.values() if r.replica is not leader)
        with pytest.raises(NotLeader):
            await follower.transfer_leadership()
        assert leader.is_leader, "a refused transfer changes nothing"
        assert await leader.call("add", 1) == 1


async def test_a_leader_stopping_gracefully_hands_over_without_fencing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rsm")
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        await everyone_stands(replicas)
        term = leader.term
        assert term is not None
        old_ledger, old_epoch = term.segment.ledger_id, term.epoch
        async with replicas.client() as client:
            for _ in range(4):
                await client.call("add", 1)
            await replicas.stop(leader.replica_id)
            assert await client.call("add", 1) == 5
        successor = await replicas.wait_leader()
        assert successor.epoch == old_epoch + 1
        assert not fenced_on(replicas, old_ledger)
        await all_converge_to(replicas, 5)
    # The stopping leader says to whom it handed over.
    [handed_over] = [
        fields for event, fields in map(record_fields, caplog.records) if event == "rsm.handed_over"
    ]
    assert handed_over == {
        "epoch": old_epoch,
        "target": successor.replica_id,
        "address": successor.address,
    }


async def test_the_last_replica_stopping_closes_its_segment_for_the_next_one() -> None:
    async with replica_cluster() as replicas:
        leader = await replicas.start("a")
        await replicas.wait_leader()
        assert await leader.call("add", 7) == 7
        term = leader.term
        assert term is not None
        old_ledger = term.segment.ledger_id
        await replicas.stop("a")
        log = await read_log(replicas)
        assert log.open_segment is None, "a graceful stop closes the segment"
        restarted = await replicas.start("b")
        await replicas.wait_leader()
        assert await restarted.call("add", 1) == 8
        assert not fenced_on(replicas, old_ledger)


async def test_on_role_reports_each_change_of_role() -> None:
    """What rsm/runtime/cpu_priority.py relies on: each replica that takes over, leads, or hands
    over and follows again says so, once per change."""
    roles: dict[str, list[Role]] = {name: [] for name in NAMES}
    async with replica_cluster() as replicas:
        for name in NAMES:
            await replicas.start(name, on_role=roles[name].append)
        leader = await replicas.wait_leader()
        assert roles[leader.replica_id] == [Role.TAKING_OVER, Role.LEADER]
        await everyone_stands(replicas)
        async with replicas.client() as client:
            await client.transfer_leadership()
        successor = await replicas.wait_leader(exclude=leader.replica_id)
        await wait_until(lambda: leader.role is Role.FOLLOWER)
        assert roles[leader.replica_id] == [Role.TAKING_OVER, Role.LEADER, Role.FOLLOWER]
        assert roles[successor.replica_id][-2:] == [Role.TAKING_OVER, Role.LEADER]
        await replicas.kill(successor.replica_id)
        third = await replicas.wait_leader(exclude=successor.replica_id)
        assert roles[third.replica_id][-2:] == [Role.TAKING_OVER, Role.LEADER]
        for name, running in replicas.running.items():
            changes = roles[name]
            assert all(a is not b for a, b in itertools.pairwise(changes))
            assert (changes[-1] if changes else Role.FOLLOWER) is running.replica.role


async def test_a_leader_stands_again_after_handing_over_while_its_election_was_evaluated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ZooKeeper may deliver the handover CAS's watch events before its answer: the old
    leader's election loop then evaluates while its candidacy is still named, and sees the
    settled election (the successor serving) only after the handover has forgotten that
    candidacy.  It must still stand again, though being caught up since before its term,
    it learns nothing new from following."""
    async with replica_cluster() as replicas:
        old = await replicas.start("a")
        await replicas.wait_leader()
        successor = await replicas.start("b")
        await wait_until(lambda: successor.status()["candidate"])
        assert old.status()["caught_up"]
        candidacies = AppLayout.of(APP).election
        handed_over = anyio.Event()
        evaluating = anyio.Event()
        cas, evaluate = LogStore.cas, Leadership.evaluate

        async def late_answer(
            self: LogStore, ops: Sequence[Op], took_effect: Callable[[Log], bool]
        ) -> bool:
            done = await cas(self, ops, took_effect)
            if any(isinstance(op, Delete) and op.path.startswith(candidacies) for op in ops):
                handed_over.set()
                with anyio.fail_after(WAIT_S):
                    await evaluating.wait()
            return done

        async def slow_evaluation(self: Leadership) -> ElectionView:
            if self.replica_id == old.replica_id and handed_over.is_set():
                evaluating.set()
                await wait_until(lambda: successor.is_leader)
            return await evaluate(self)

        monkeypatch.setattr(LogStore, "cas", late_answer)
        monkeypatch.setattr(Leadership, "evaluate", slow_evaluation)
        await old.transfer_leadership(successor.replica_id)
        assert evaluating.is_set(), "the election was evaluated while the handover waited"
        await wait_until(lambda: old.role is Role.FOLLOWER and old.status()["candidate"])
        assert old.status()["caught_up"]
