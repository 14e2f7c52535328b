"""Fencing on a real bookie process: it survives a restart, recovery adds still go in,
and a wrong master key is refused (EUA) for adds and fencing reads alike."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import Fenced, Unauthorized
from bookie.local.zookeeper import LocalZooKeeper
from bookie.wire.packet import master_key

from .support.entries import KEY, check_durable, expect_status, packet
from .support.processes import HOST, BookieCluster

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

LEDGER = 5
WRONG_KEY = master_key(b"not the password")


async def test_fence_survives_restart_and_recovery_adds_pass(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = cluster.add_bookie()
        bookie = await cluster.start(setup)
        async with BookieConnection.connect(HOST, setup.port) as connection:
            for entry_id in range(3):
                await connection.add(LEDGER, entry_id, KEY, packet(LEDGER, entry_id))
            await expect_status(
                connection.add(LEDGER, 3, WRONG_KEY, packet(LEDGER, 3)), Unauthorized
            )
            await expect_status(
                connection.read(LEDGER, -1, fence=True, master_key=WRONG_KEY), Unauthorized
            )
            fenced = await connection.read(LEDGER, -1, fence=True, master_key=KEY)
            assert fenced.entry_id == 2
            await expect_status(connection.add(LEDGER, 3, KEY, packet(LEDGER, 3)), Fenced)
        bookie.send(signal.SIGTERM)
        assert await bookie.wait_exit() == 0

        await cluster.start(setup)
        async with BookieConnection.connect(HOST, setup.port) as connection:
            await check_durable(connection, {LEDGER: [0, 1, 2]})
            await expect_status(connection.add(LEDGER, 3, KEY, packet(LEDGER, 3)), Fenced)
            await expect_status(
                connection.add(LEDGER, 3, WRONG_KEY, packet(LEDGER, 3), recovery=True),
                Unauthorized,
            )
            recovered = await connection.add(LEDGER, 3, KEY, packet(LEDGER, 3), recovery=True)
            assert recovered.entry_id == 3
            await check_durable(connection, {LEDGER: [0, 1, 2, 3]})
