"""`LedgerClient.bookie_info`: a bookie's disk use asked through the client's own
connections, against real bookie servers on loopback."""

from __future__ import annotations

from contextlib import suppress

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute

from bookie.errors import BookieUnavailable, ClientClosed
from bookie.meta.bookies import BookieInfo, register
from tests.unit.bookie.client.cluster import fast_config, memory_cluster
from tests.unit.bookie.server.support import wait_for

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


async def test_a_bookie_that_never_answers_is_unavailable_after_the_read_timeout() -> None:
    """A registered bookie that accepts the connection and reads every request but never
    answers: the ask fails once the connection's IDENTIFY goes unanswered for the read
    timeout, and the next one at once (the link backs off), instead of waiting for good."""

    async def silent(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while await stream.receive():
                    pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    config = fast_config()
    async with (
        memory_cluster(1) as cluster,
        listener,
        anyio.create_task_group() as task_group,
    ):
        task_group.start_soon(listener.serve, silent)
        address = f"127.0.0.1:{listener.extra(SocketAttribute.local_port)}"
        async with (
            cluster.store_factory() as store,
            register(store, address, BookieInfo(address), root=cluster.root),
            cluster.client(config) as client,
        ):
            await wait_for(lambda: address in client.writable_bookies)
            with anyio.fail_after(config.read_timeout_ms / 1000 + 2):
                with pytest.raises(BookieUnavailable, match="cannot connect: ClientTimeout"):
                    await client.bookie_info(address, timeout_ms=200)
            with anyio.fail_after(1), pytest.raises(BookieUnavailable, match="next attempt"):
                await client.bookie_info(address)
            assert (await client.bookie_info(cluster.bookie_ids[0])).read_only is False
        task_group.cancel_scope.cancel()
