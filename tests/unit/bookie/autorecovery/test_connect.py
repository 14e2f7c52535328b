"""Autorecovery's connections reach the bookie meant, of this cluster, or fail; over TCP or
a connector's streams."""

from __future__ import annotations

import contextlib

import anyio.abc
import pytest

from bookie.autorecovery.connect import cluster_instance_id, connect_checked
from bookie.client.connections import tcp_connector
from bookie.core.bookie_handler import BookieIdentity
from bookie.errors import BookieUnavailable
from bookie.meta.bookies import init_cluster
from bookie.meta.memory import MemoryMetadataServer
from bookie.storage.memory import MemoryLedgerStorage
from tests.unit.bookie.server.support import running_server

pytestmark = pytest.mark.anyio

TIMEOUT_MS = 2_000


async def test_only_the_bookie_meant_is_connected() -> None:
    identity = BookieIdentity("b1", "cluster-1")
    async with running_server(MemoryLedgerStorage(), identity=identity) as server:
        address = f"127.0.0.1:{server.port}"
        async with contextlib.AsyncExitStack() as stack:
            connection = await connect_checked(stack, "b1", address, "cluster-1", TIMEOUT_MS)
            assert connection.is_usable
            await connect_checked(stack, "b1", address, None, TIMEOUT_MS)
            with pytest.raises(BookieUnavailable, match="bookie b1 listens there, not b2"):
                await connect_checked(stack, "b2", address, "cluster-1", TIMEOUT_MS)
            with pytest.raises(BookieUnavailable, match="cluster cluster-1 listens there"):
                await connect_checked(stack, "b1", address, "cluster-2", TIMEOUT_MS)


async def test_the_instance_id_is_none_before_the_cluster_exists() -> None:
    server = MemoryMetadataServer()
    async with server.client() as store:
        assert await cluster_instance_id(store, "/c") is None
        await init_cluster(store, "/c", instance_id="cluster-1")
        assert await cluster_instance_id(store, "/c") == "cluster-1"


async def test_a_connector_opens_the_stream_and_its_failure_is_unavailable() -> None:
    identity = BookieIdentity("b1", "cluster-1")
    opened: list[str] = []

    async def connector(address: str) -> anyio.abc.ByteStream:
        opened.append(address)
        return await tcp_connector(address)

    async def refusing(address: str) -> anyio.abc.ByteStream:
        raise OSError(f"connection to {address} refused")

    async with running_server(MemoryLedgerStorage(), identity=identity) as server:
        address = f"127.0.0.1:{server.port}"
        async with contextlib.AsyncExitStack() as stack:
            connection = await connect_checked(
                stack, "b1", address, "cluster-1", TIMEOUT_MS, connector=connector
            )
            assert connection.is_usable
            assert opened == [address]
            with pytest.raises(BookieUnavailable, match="refused"):
                await connect_checked(
                    stack, "b1", address, "cluster-1", TIMEOUT_MS, connector=refusing
                )
