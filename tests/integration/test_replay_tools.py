"""The investigation commands of `rsm` against a real cluster holding a known history."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bookie.local.zookeeper import LocalZooKeeper

from .support.replay_cluster import HistoryCluster, history_cluster, rsm

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]


@pytest.fixture(scope="module")
async def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[HistoryCluster]:
    directory = tmp_path_factory.mktemp("replay")
    async with history_cluster(zookeeper, "/replay-tools", directory) as running:
        yield running


async def test_dump(cluster: HistoryCluster) -> None:
    code, out, err = await rsm("log", "dump", *cluster.source)
    print(out, err)
    assert code == 0
