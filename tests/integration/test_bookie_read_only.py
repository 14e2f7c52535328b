"""Read-only mode of a real bookie process, both ways, and forced.

The disk thresholds come from the config file, which `bookie serve` re-reads on
SIGHUP: a threshold far under the disk's real usage turns the bookie read-only
(registration moves to available/readonly/, adds get EREADONLY, reads and
recovery adds go on), a threshold of 1.0 turns it writable again.
`--read-only` forces the mode whatever the disks say.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import ReadOnly
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.bookies import list_bookies
from bookie.meta.zk import ZkMetadataStore

from .support.entries import KEY, check_durable, expect_status, packet
from .support.processes import HOST, BookieCluster

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

LEDGER = 3
# Any real disk is more than 0.1% and less than 99.9% full.
WRITABLE: dict[str, object] = {"disk_usage_threshold": 1.0, "disk_usage_low_water_mark": 0.999}
FULL: dict[str, object] = {"disk_usage_threshold": 0.002, "disk_usage_low_water_mark": 0.001}


async def registered_as(store: ZkMetadataStore, root: str, bookie_id: str) -> str | None:
    bookies = await list_bookies(store, root)
    places = [
        place
        for place, listed in (("writable", bookies.writable), ("read_only", bookies.read_only))
        if bookie_id in listed
    ]
    assert len(places) <= 1, f"{bookie_id} is registered twice: {places}"
    return places[0] if places else None


async def test_disk_threshold_switches_read_only_both_ways(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        BookieCluster(zookeeper, zk_root, tmp_path) as cluster,
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
    ):
        setup = cluster.add_bookie(config=WRITABLE)
        bookie = await cluster.start(setup, wait_for="bookie.ready")
        assert await registered_as(store, zk_root, setup.bookie_id) == "writable"
        async with BookieConnection.connect(HOST, setup.port) as connection:
            await connection.add(LEDGER, 0, KEY, packet(LEDGER, 0))

            cluster.write_config(setup, **FULL)
            since = len(bookie.events)
            bookie.send(signal.SIGHUP)
            event = await bookie.wait_event("bookie.read_only", since=since)
            assert event["reasons"] == ["disk_full"]
            assert await registered_as(store, zk_root, setup.bookie_id) == "read_only"
            await expect_status(connection.add(LEDGER, 1, KEY, packet(LEDGER, 1)), ReadOnly)
            assert (await connection.bookie_info()).read_only is True
            await check_durable(connection, {LEDGER: [0]})
            await connection.add(LEDGER, 1, KEY, packet(LEDGER, 1), recovery=True)

            cluster.write_config(setup, **WRITABLE)
            since = len(bookie.events)
            bookie.send(signal.SIGHUP)
            await bookie.wait_event("bookie.writable", since=since)
            assert await registered_as(store, zk_root, setup.bookie_id) == "writable"
            await connection.add(LEDGER, 2, KEY, packet(LEDGER, 2))
            await check_durable(connection, {LEDGER: [0, 1, 2]})


async def test_forced_read_only_flag(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        BookieCluster(zookeeper, zk_root, tmp_path) as cluster,
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
    ):
        setup = cluster.add_bookie(config=WRITABLE)
        bookie = await cluster.start(setup, "--read-only", wait_for="bookie.ready")
        listening = bookie.named("bookie.listening")[0]
        assert listening["read_only"] is True
        assert listening["reasons"] == ["forced"]
        assert await registered_as(store, zk_root, setup.bookie_id) == "read_only"
        async with BookieConnection.connect(HOST, setup.port) as connection:
            await expect_status(connection.add(LEDGER, 0, KEY, packet(LEDGER, 0)), ReadOnly)
            # The flag wins over a reloaded file that says nothing about read_only.
            since = len(bookie.events)
            bookie.send(signal.SIGHUP)
            reloaded = await bookie.wait_event("bookie.reloaded", since=since)
            assert reloaded["read_only"] is True
            await expect_status(connection.add(LEDGER, 0, KEY, packet(LEDGER, 0)), ReadOnly)
