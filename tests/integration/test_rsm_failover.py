"""kill -9 of the leader, again and again, under client load: real `rsm run` processes on real
bookie processes and a real ZooKeeper.  Every acknowledged command must be applied exactly
once afterwards, and the clients' history must be linearizable."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from rsm.testing.linearizability import check
from rsm.testing.models import Counter

from .support.rsm_processes import CounterLoad, RsmProcesses, check_exactly_once

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

NAMES = ["r1", "r2", "r3"]
CLIENTS = 4
ADDS_BETWEEN_KILLS = 20


async def kill_leader_in_a_loop(cluster: RsmProcesses, kills: int) -> None:
    await cluster.start_bookies()
    await cluster.start_replicas(NAMES)
    _leader, epoch = await cluster.wait_leader()
    load = CounterLoad(cluster, CLIENTS, attempt_timeout_ms=1_000, deadline_ms=30_000)
    async with load.running():
        for _ in range(kills):
            await load.wait_acknowledged(load.total_acknowledged + ADDS_BETWEEN_KILLS)
            leader, _ = await cluster.wait_leader(above_epoch=epoch - 1)
            leader.kill()
            assert await leader.process.wait() == -9
            _successor, epoch = await cluster.wait_leader(above_epoch=epoch)
            await cluster.start_replica(leader.name)
        await load.wait_acknowledged(load.total_acknowledged + ADDS_BETWEEN_KILLS)
    async with cluster.client() as client:
        audit = await client.query("audit")
    check_exactly_once(audit, load)
    assert load.total_acknowledged >= (kills + 1) * ADDS_BETWEEN_KILLS
    result = check(load.recorder.history(), Counter())
    assert result.linearizable, result.explain()


async def test_killing_the_leader_three_times_loses_and_doubles_nothing(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await kill_leader_in_a_loop(cluster, kills=3)


@pytest.mark.slow
async def test_killing_the_leader_six_times_loses_and_doubles_nothing(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await kill_leader_in_a_loop(cluster, kills=6)
