"""`LedgerClient.bookie_info`: a bookie's disk use asked through the client's own
connections, against real bookie servers on loopback."""

from __future__ import annotations

import pytest

from bookie.errors import BookieUnavailable, ClientClosed
from tests.unit.bookie.client.cluster import memory_cluster

pytestmark = pytest.mark.anyio


async def test_each_registered_bookie_answers_on_the_connection_the_client_keeps() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        for bookie_id in cluster.bookie_ids:
            info = await client.bookie_info(bookie_id)
            assert info.read_only is False
            assert info.total_bytes is not None
            assert info.free_bytes is not None
        first = cluster.bookie(cluster.bookie_ids[0])
        assert first.server is not None
        first.server.read_only = True
        for _ in range(3):
            assert (await client.bookie_info(first.bookie_id)).read_only is True
        assert first.server.connection_count == 1  # the client's own, not one per ask


async def test_a_stopped_or_unknown_bookie_is_unavailable() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        stopped = cluster.bookie_ids[0]
        await client.bookie_info(stopped)
        await cluster.stop_bookie(stopped)
        with pytest.raises(BookieUnavailable):
            await client.bookie_info(stopped)
        with pytest.raises(BookieUnavailable, match="not registered"):
            await client.bookie_info("127.0.0.1:1")
        await cluster.restart_bookie(stopped)


async def test_a_closed_client_refuses() -> None:
    async with memory_cluster(1) as cluster:
        async with cluster.client() as client:
            pass
        with pytest.raises(ClientClosed):
            await client.bookie_info(cluster.bookie_ids[0])
