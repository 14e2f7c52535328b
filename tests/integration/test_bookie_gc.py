"""Garbage collection end to end: ledgers deleted in ZooKeeper leave the bookies' disks.

Three bookies in this process, each a real `BookieServer` over a real
`FileLedgerStorage` in its own directories, registered in a real ZooKeeper and
running a `GarbageCollector` with a short interval.  A ledger client writes
ledgers through them, then deletes most of them in metadata; the bookies'
disk usage must fall by itself, and what was kept must read back intact.

(The `bookie serve` process does not run a collector yet; this drives the same
components it would wire together.)
"""

from __future__ import annotations

import random
import shutil
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.bookies import BookieInfo, init_cluster, register
from bookie.meta.zk import ZkMetadataStore
from bookie.server.gc import GarbageCollector
from bookie.server.server import BookieServer
from bookie.storage.entry_log import entry_log_ids, entry_log_path
from bookie.storage.file import FileLedgerStorage, StorageConfig
from tests.unit.bookie.client.cluster import fast_config

from .support.disk import file_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper]

BOOKIES = 3
GROUPS = 5
GROUP_LEDGERS = 4
"""Ledgers written together, so that their entries share entry logs."""
KEPT_GROUPS = (0, 2)
"""The first ledger of these groups is kept: their logs become sparse, not empty."""
ENTRIES = 150
PAYLOAD_BYTES = 1024
GC_INTERVAL_MS = 100
WAIT_S = 60


@dataclass
class Bookie:
    bookie_id: str
    config: StorageConfig
    storage: FileLedgerStorage
    gc: GarbageCollector

    def entry_log_bytes(self) -> int:
        directory = self.config.ledger_dirs[0]
        return file_bytes(entry_log_path(directory, log_id) for log_id in entry_log_ids(directory))


def storage_config(directory: Path) -> StorageConfig:
    # Small journal files and entry logs, so that checkpoints drop old journals
    # and most entry logs are closed, i.e. compactable, when the ledgers go.
    return StorageConfig(
        journal_dir=directory / "journal",
        ledger_dirs=(directory / "ledgers",),
        journal_file_size_bytes_max=256 * 1024,
        journal_files_kept=0,
        entry_log_size_bytes_max=256 * 1024,
        checkpoint_interval_ms=100,
        compaction_free_bytes_reserve=0,
    )


def disk_space() -> tuple[int, int]:
    usage = shutil.disk_usage("/")
    return usage.free, usage.total


@asynccontextmanager
async def bookie(zookeeper: LocalZooKeeper, root: str, directory: Path) -> AsyncIterator[Bookie]:
    config = storage_config(directory)
    async with (
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
        FileLedgerStorage.open(config) as storage,
        BookieServer(storage, disk_space, host="127.0.0.1", port=0) as server,
    ):
        bookie_id = f"127.0.0.1:{server.port}"
        info = BookieInfo(address=bookie_id, rack=None)
        async with (
            register(store, bookie_id, info, root=root),
            GarbageCollector(
                server, storage, store, root=root, interval_ms=GC_INTERVAL_MS, compactor=storage
            ) as gc,
        ):
            yield Bookie(bookie_id, config, storage, gc)


def payload(ledger_id: int, entry_id: int) -> bytes:
    return f"{ledger_id}:{entry_id}:".encode().ljust(PAYLOAD_BYTES, b"x")


async def test_deleted_ledgers_leave_the_bookies_disks(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with ZkMetadataStore.connect(zookeeper.connect_string) as store:
        await init_cluster(store, zk_root, instance_id="gc-test")
    async with AsyncExitStack() as stack:
        bookies = [
            await stack.enter_async_context(bookie(zookeeper, zk_root, tmp_path / f"b{index}"))
            for index in range(BOOKIES)
        ]
        client_store = await stack.enter_async_context(
            ZkMetadataStore.connect(zookeeper.connect_string)
        )
        client = await stack.enter_async_context(
            LedgerClient.open(
                client_store, root=zk_root, rng=random.Random(7), config=fast_config()
            )
        )
        groups = []
        with anyio.fail_after(WAIT_S):
            for _ in range(GROUPS):
                writers = [
                    await client.create_ledger(3, 2, 2, password=b"pw")
                    for _ in range(GROUP_LEDGERS)
                ]
                for entry_id in range(ENTRIES):
                    for writer in writers:
                        writer.append_nowait(payload(writer.ledger_id, entry_id))
                for writer in writers:
                    await writer.close()
                groups.append([writer.ledger_id for writer in writers])
            for each in bookies:
                await each.storage.checkpoint()
        before = {each.bookie_id: each.storage.data_bytes() for each in bookies}
        logs_before = {each.bookie_id: each.entry_log_bytes() for each in bookies}
        kept = [groups[index][0] for index in KEPT_GROUPS]
        deleted = [ledger_id for group in groups for ledger_id in group if ledger_id not in kept]
        for ledger_id in deleted:
            await client.delete_ledger(ledger_id)

        with anyio.fail_after(WAIT_S):
            for each in bookies:
                # A round that began before the deletions may miss some of them.
                while set(deleted) & set(each.storage.ledger_ids()) or (
                    each.entry_log_bytes() * 2 > logs_before[each.bookie_id]
                ):
                    await each.gc.next_round()
            for each in bookies:
                # The state above can be seen in the middle of a round that is
                # deleting; its metrics count once that round has ended.
                await each.gc.next_round()

        for each in bookies:
            after = each.storage.data_bytes()
            assert after * 2 < before[each.bookie_id], (each.bookie_id, before, after)
            assert set(each.storage.ledger_ids()) <= set(kept)
            metrics = each.gc.metrics
            assert metrics.ledgers_deleted > 0
            assert metrics.logs_compacted > 0  # sparse logs were copied, not only dropped
            assert metrics.bytes_reclaimed > 0
            assert metrics.last_error is None
        with anyio.fail_after(WAIT_S):
            for ledger_id in kept:
                reader = await client.open_ledger(ledger_id, b"pw")
                assert await reader.read(0, ENTRIES - 1) == [
                    payload(ledger_id, entry_id) for entry_id in range(ENTRIES)
                ]
        assert await client.list_ledgers() == kept
