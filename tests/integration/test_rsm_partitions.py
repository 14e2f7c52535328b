"""An old leader cut off from the others cannot acknowledge anything once a successor took
over: real `rsm run` processes, real bookies, a real ZooKeeper.

* SIGSTOP of the leader is a partition from everything (and a stall): ZooKeeper expires its
  session, a successor fences its ledger and serves; resumed, the old leader steps down, and
  the calls that waited for it all fail.
* A ZooKeeper proxy cut partitions the leader from ZooKeeper only: it keeps leading
  (SUSPENDED changes nothing) until its session expires and a successor fences its ledger;
  the calls sent to it then find the ledger fenced and fail, it steps down, and once the
  proxy heals it follows the new one and catches up.

Under client load throughout; afterwards every acknowledged add is applied exactly once and
the history is linearizable.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bookie.local.zookeeper import LocalZooKeeper
from rsm.client import Client
from rsm.errors import RsmError
from rsm.testing.linearizability import check
from rsm.testing.models import Counter

from .support.rsm_processes import (
    CounterLoad,
    RsmProcesses,
    ZkProxy,
    check_exactly_once,
    wait_for,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

PINNED = "pinned"
PINNED_CALLS = 5
PINNED_OPTIONS = {"attempt_timeout_ms": 1_000, "deadline_ms": 7_000}
"""Long enough for the calls sent to a stalled leader to be retried after it resumes."""
PINNED_OPTIONS_SHORT = {"attempt_timeout_ms": 1_000, "deadline_ms": 3_000}
LOAD_OPTIONS = {"attempt_timeout_ms": 1_000, "deadline_ms": 30_000}


async def call_pinned(client: Client, outcomes: list[object]) -> None:
    """Send `PINNED_CALLS` adds at once; record each answer, or the error it ended with."""

    async def one(seq: int) -> None:
        try:
            outcomes.append(await client.call("add", PINNED, seq))
        except RsmError as error:
            outcomes.append(error)

    async with anyio.create_task_group() as task_group:
        for seq in range(1, PINNED_CALLS + 1):
            task_group.start_soon(one, seq)


async def check_after(cluster: RsmProcesses, load: CounterLoad) -> dict[str, object]:
    async with cluster.client() as client:
        audit: dict[str, object] = await client.query("audit")
    check_exactly_once(audit, load)  # type: ignore[arg-type]
    result = check(load.recorder.history(), Counter())
    assert result.linearizable, result.explain()
    return audit


@pytest.mark.slow  # 15-35 s on a busy machine: a session expiry, a takeover and 7 s of calls
async def test_a_paused_leader_is_replaced_and_acknowledges_nothing_after(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await cluster.start_bookies()
        await cluster.start_replicas(["r1", "r2", "r3"])
        old, old_epoch = await cluster.wait_leader()
        load = CounterLoad(cluster, 3, **LOAD_OPTIONS)
        pinned_outcomes: list[object] = []
        async with load.running(), cluster.pinned_client(old.address, **PINNED_OPTIONS) as pinned:
            await load.wait_acknowledged(20)
            await pinned.query("get")  # connected to the old leader before it stalls
            since = len(old.events)
            old.pause()
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(call_pinned, pinned, pinned_outcomes)
                successor, epoch = await cluster.wait_leader(above_epoch=old_epoch)
                assert successor is not old
                await load.wait_acknowledged(load.total_acknowledged + 20)
                old.resume()
                step_down = await old.wait_event("rsm.step_down", since=since)
            assert step_down["epoch"] == old_epoch
        assert len(pinned_outcomes) == PINNED_CALLS
        acknowledged = [outcome for outcome in pinned_outcomes if not isinstance(outcome, RsmError)]
        assert not acknowledged, f"the old leader acknowledged {acknowledged} after epoch {epoch}"
        audit = await check_after(cluster, load)
        assert PINNED not in audit["seqs"]  # type: ignore[operator]


async def test_a_leader_cut_from_zookeeper_leads_until_fenced_and_catches_up_after(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        RsmProcesses(zookeeper, zk_root, tmp_path) as cluster,
        ZkProxy(zookeeper).running() as proxy,
    ):
        await cluster.start_bookies()
        old = await cluster.start_replica("r1", zk=proxy.address)
        _, old_epoch = await cluster.wait_leader()
        await cluster.start_replicas(["r2", "r3"])
        load = CounterLoad(cluster, 3, **LOAD_OPTIONS)
        pinned_outcomes: list[object] = []
        async with (
            load.running(),
            cluster.pinned_client(old.address, **PINNED_OPTIONS_SHORT) as pinned,
        ):
            await load.wait_acknowledged(20)
            await pinned.query("get")
            since = len(old.events)
            proxy.cut()
            await old.wait_event("rsm.session", since=since)  # SUSPENDED
            # It keeps leading while its session may live; once the session expired, a
            # successor fences its ledger and serves.  The calls sent to it after that
            # find its ledger fenced: it steps down and acknowledges none of them.
            _successor, epoch = await cluster.wait_leader(above_epoch=old_epoch)
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(call_pinned, pinned, pinned_outcomes)
                await load.wait_acknowledged(load.total_acknowledged + 20)
                step_down = await old.wait_event("rsm.step_down", since=since)
            assert "session" not in step_down["reason"], step_down
            proxy.heal()
            assert len(pinned_outcomes) == PINNED_CALLS
            assert all(isinstance(outcome, RsmError) for outcome in pinned_outcomes)
            # Back in touch, it learns its session expired, follows the new leader and,
            # once caught up, stands for election again.
            await old.wait_event("rsm.candidacy", since=since)
            # Its status shows the log's epoch as of its last look at the election,
            # which comes just after standing.
            async with cluster.client() as client:

                async def follows_the_new_epoch() -> bool:
                    status = await client.status(old.address)
                    return (status["role"], status["epoch"]) == ("follower", epoch)

                await wait_for(follows_the_new_epoch)
        audit = await check_after(cluster, load)
        assert PINNED not in audit["seqs"]  # type: ignore[operator]


async def test_a_dropped_zookeeper_connection_costs_the_leader_nothing(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """The connection breaks and comes back at once (a ZooKeeper server restarting, a
    connection reset): the session lives, so the leader keeps leading, in the same epoch."""
    async with (
        RsmProcesses(zookeeper, zk_root, tmp_path) as cluster,
        ZkProxy(zookeeper).running() as proxy,
    ):
        await cluster.start_bookies()
        leader = await cluster.start_replica("r1", zk=proxy.address)
        _, epoch = await cluster.wait_leader()
        await cluster.start_replicas(["r2", "r3"])
        load = CounterLoad(cluster, 3, **LOAD_OPTIONS)
        async with load.running():
            await load.wait_acknowledged(20)
            since = len(leader.events)
            proxy.cut()
            proxy.heal()
            await leader.wait_event("rsm.session", since=since, state="suspended")
            await load.wait_acknowledged(load.total_acknowledged + 50)
            async with cluster.client() as client:
                status = await client.status(leader.address)
        assert (status["role"], status["epoch"]) == ("leader", epoch)
        assert not leader.named("rsm.step_down")
        await check_after(cluster, load)


BRIEF_PAUSE_S = 0.3
"""A stop well under the replicas' default detection time (1 s)."""


async def test_a_leader_paused_briefly_keeps_its_leadership(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await cluster.start_bookies()
        await cluster.start_replicas(["r1", "r2", "r3"])
        leader, epoch = await cluster.wait_leader()
        load = CounterLoad(cluster, 3, **LOAD_OPTIONS)
        async with load.running():
            await load.wait_acknowledged(20)
            for _ in range(3):
                leader.pause()
                await anyio.sleep(BRIEF_PAUSE_S)  # the fault's length, not a synchronisation
                leader.resume()
                await load.wait_acknowledged(load.total_acknowledged + 20)
            async with cluster.client() as client:
                status = await client.status(leader.address)
        assert (status["role"], status["epoch"]) == ("leader", epoch)
        assert not leader.named("rsm.step_down")
        await check_after(cluster, load)
