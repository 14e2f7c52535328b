"""SIGTERM with adds in flight: every add the client saw acknowledged is durable, every
other one got an error (or the connection closed): none is left half-done.  The bookie
leaves the registry, exits 0, and the next start finds everything acknowledged."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import BookieUnavailable, Status
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.bookies import list_bookies
from bookie.meta.zk import ZkMetadataStore
from bookie.wire.messages import AddResponse

from .support.entries import AddStream, check_durable
from .support.processes import HOST, BookieCluster

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

LEDGERS = (31, 32)


async def test_sigterm_answers_every_add_and_keeps_the_acknowledged(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        BookieCluster(zookeeper, zk_root, tmp_path) as cluster,
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
    ):
        setup = cluster.add_bookie()
        bookie = await cluster.start(setup, wait_for="bookie.ready")
        assert setup.bookie_id in (await list_bookies(store, zk_root)).writable
        async with BookieConnection.connect(HOST, setup.port) as connection:
            stream = AddStream(connection, dict.fromkeys(LEDGERS, 0), window=4_000)
            stream.start()
            await stream.wait_acked(3_000)
            bookie.send(signal.SIGTERM)
            await stream.wait_answered()
            assert await bookie.wait_exit() == 0
        assert stream.answered == stream.submitted
        for error in stream.errors:
            if isinstance(error, AddResponse):
                assert error.status == Status.EIO, error
            else:
                assert isinstance(error, BookieUnavailable), error
        stopping = bookie.named("bookie.stopping")
        assert len(stopping) == 1
        assert bookie.named("bookie.stopped")
        bookies = await list_bookies(store, zk_root)
        assert setup.bookie_id not in bookies.writable
        assert setup.bookie_id not in bookies.read_only

        await cluster.start(setup)
        async with BookieConnection.connect(HOST, setup.port) as connection:
            await check_durable(connection, stream.acked)
