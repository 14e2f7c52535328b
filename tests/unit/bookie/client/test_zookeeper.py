"""The ledger client over a real ZooKeeper: registrations, id allocation, metadata CAS,
recovery, and the blocking `SyncLedgerClient` for scripts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import pytest
from anyio.from_thread import start_blocking_portal

from bookie.client.sync import SyncLedgerClient
from bookie.core.metadata import LedgerState
from bookie.errors import LedgerFenced, UnauthorizedLedgerAccess
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.api import MetadataStore
from bookie.meta.zk import ZkMetadataStore
from tests.unit.bookie.client.cluster import LocalCluster, fast_config

pytestmark = pytest.mark.zookeeper


def zk_factory(
    zookeeper: LocalZooKeeper,
) -> Callable[[], AbstractAsyncContextManager[MetadataStore]]:
    return lambda: ZkMetadataStore.connect(zookeeper.connect_string)


@asynccontextmanager
async def zk_cluster(zookeeper: LocalZooKeeper, root: str) -> AsyncIterator[LocalCluster]:
    async with LocalCluster.start(zk_factory(zookeeper), bookies=3, root=root) as cluster:
        yield cluster


@pytest.mark.anyio
async def test_write_recover_and_read_over_zookeeper(
    zookeeper: LocalZooKeeper, zk_root: str
) -> None:
    payloads = [f"entry {index}".encode() for index in range(20)]
    async with (
        zk_cluster(zookeeper, zk_root) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        assert sorted(writer_client.writable_bookies) == cluster.bookie_ids
        writer = await writer_client.create_ledger(3, 3, 2, password=b"pw")
        second = await writer_client.create_ledger(3, 2, 2, password=b"pw")
        assert second.ledger_id > writer.ledger_id
        for payload in payloads:
            writer.append_nowait(payload)
        with anyio.fail_after(10):
            await writer.wait_confirmed(19)

        with pytest.raises(UnauthorizedLedgerAccess):
            await reader_client.open_ledger(writer.ledger_id, b"nope")
        tailing = await reader_client.open_ledger(writer.ledger_id, b"pw", recovery=False)
        # All 20 went out before any was confirmed, so each carried LAC -1:
        # a reader that does not fence sees nothing confirmed yet.
        assert tailing.last_add_confirmed == -1
        reader = await reader_client.open_ledger(writer.ledger_id, b"pw")

        assert reader.metadata.state is LedgerState.CLOSED
        assert reader.metadata.last_entry_id == 19
        assert await reader.read(0, 19) == payloads
        with pytest.raises(LedgerFenced):
            await writer.append(b"fenced")
        await second.close()
        assert await reader_client.list_ledgers() == [writer.ledger_id, second.ledger_id]
        await reader_client.delete_ledger(second.ledger_id)
        assert await reader_client.list_ledgers() == [writer.ledger_id]


def test_sync_client_round_trip(zookeeper: LocalZooKeeper, zk_root: str) -> None:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(zk_cluster(zookeeper, zk_root)),
        SyncLedgerClient.connect(
            zookeeper.connect_string, root=zk_root, config=fast_config()
        ) as client,
    ):
        with client.create_ledger(3, 3, 2, password=b"pw") as ledger:
            assert ledger.append(b"first") == 0
            assert ledger.append_many([b"second", b"third"]) == [1, 2]
            assert ledger.last_add_confirmed == 2
        reader = client.open_ledger(ledger.ledger_id, b"pw")
        assert reader.is_closed
        assert reader.read(0, 2) == [b"first", b"second", b"third"]
        assert [entry.entry_id for entry in reader.read_entries(1, 2)] == [1, 2]
        assert reader.read_last_add_confirmed() == 2
        assert client.ledger_metadata(ledger.ledger_id).last_entry_id == 2
        assert client.list_ledgers() == [ledger.ledger_id]
        client.delete_ledger(ledger.ledger_id)
        assert client.list_ledgers() == []
