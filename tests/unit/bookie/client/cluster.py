"""An in-process bookie cluster for ledger-client tests, reusable from tests/integration.

Real `BookieServer`s on free loopback ports over `MemoryLedgerStorage`, each
registered in the metadata store under its own session, as a bookie process
would be.  A bookie can be stopped abruptly (its connections drop, its
registration vanishes) and restarted on a new port from what its storage had
synced, as after `kill -9`.

Storage syncs happen every `SYNC_INTERVAL_S`, standing in for the journal's
group commit: a bookie acknowledges an add only after the sync that covers it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc

from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.core.bookie_handler import BookieIdentity
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import BookieInfo, Registration, init_cluster, register
from bookie.meta.memory import MemoryMetadataServer
from bookie.server.server import BookieServer
from bookie.storage.memory import MemoryLedgerStorage
from tests.unit.bookie.server.support import running_server

ROOT = "/ledgers"
SYNC_INTERVAL_S = 0.001
WAIT_S = 10.0
"""Bound on any wait in these tests: far above what a passing run needs."""

StoreFactory = Callable[[], AbstractAsyncContextManager[MetadataStore]]
"""Opens a metadata-store session (one per bookie and one per client)."""


def fast_config(**overrides: int) -> ClientConfig:
    """Client knobs for tests: short timeouts, so a failure shows in a second, not five."""
    values = {
        "add_timeout_ms": 2_000,
        "read_timeout_ms": 2_000,
        "speculative_read_timeout_ms": 500,
        "connect_timeout_ms": 1_000,
        "explicit_lac_interval_ms": 0,
        "long_poll_timeout_ms": 2_000,
        "tail_retry_delay_ms": 50,
        "metadata_retry_delay_ms": 50,
    }
    values.update(overrides)
    return ClientConfig(**values)


@dataclass(eq=False)
class LocalBookie:
    bookie_id: str
    rack: str | None
    storage: MemoryLedgerStorage = field(default_factory=MemoryLedgerStorage)
    server: BookieServer | None = None
    registration: Registration | None = None
    scope: anyio.CancelScope | None = None
    stopped: anyio.Event = field(default_factory=anyio.Event)

    @property
    def address(self) -> str:
        assert self.server is not None, f"bookie {self.bookie_id} is not running"
        return f"127.0.0.1:{self.server.port}"


class LocalCluster:
    """Bookies of one cluster; open it with `LocalCluster.start`."""

    def __init__(
        self,
        store_factory: StoreFactory,
        root: str,
        task_group: anyio.abc.TaskGroup,
        instance_id: str,
    ) -> None:
        self.store_factory = store_factory
        self.root = root
        self.instance_id = instance_id
        """The cluster's INSTANCEID, which its bookies state to every client."""
        self._task_group = task_group
        self._bookies: dict[str, LocalBookie] = {}
        self._numbers = itertools.count(1)

    @classmethod
    @asynccontextmanager
    async def start(
        cls,
        store_factory: StoreFactory,
        *,
        bookies: int = 3,
        racks: list[str | None] | None = None,
        root: str = ROOT,
        instance_id: str = "test-cluster",
    ) -> AsyncIterator[LocalCluster]:
        """`bookies` running bookies (with the given racks, if any) for the block."""
        async with store_factory() as store:
            instance_id = await init_cluster(store, root, instance_id=instance_id)
        async with anyio.create_task_group() as task_group:
            cluster = cls(store_factory, root, task_group, instance_id)
            for index in range(bookies):
                await cluster.add_bookie(rack=racks[index] if racks else None)
            yield cluster
            task_group.cancel_scope.cancel()

    # --- bookies ------------------------------------------------------------------------------

    @property
    def bookie_ids(self) -> list[str]:
        return sorted(self._bookies)

    def bookie(self, bookie_id: str) -> LocalBookie:
        return self._bookies[bookie_id]

    def storage(self, bookie_id: str) -> MemoryLedgerStorage:
        return self._bookies[bookie_id].storage

    def holders(self, ledger_id: int, entry_id: int) -> list[str]:
        """The bookies whose storage holds the entry."""
        return [
            bookie_id
            for bookie_id, bookie in sorted(self._bookies.items())
            if bookie.storage.read_entry(ledger_id, entry_id) is not None
        ]

    async def add_bookie(self, rack: str | None = None) -> str:
        """Start and register a new bookie; return its id."""
        bookie = LocalBookie(f"bookie-{next(self._numbers)}", rack)
        self._bookies[bookie.bookie_id] = bookie
        await self._task_group.start(self._run, bookie)
        return bookie.bookie_id

    async def stop_bookie(self, bookie_id: str) -> None:
        """Stop abruptly: connections drop at once, the registration goes away."""
        bookie = self._bookies[bookie_id]
        assert bookie.scope is not None, f"bookie {bookie_id} is not running"
        bookie.scope.cancel()
        with anyio.fail_after(WAIT_S):
            await bookie.stopped.wait()

    async def restart_bookie(self, bookie_id: str) -> None:
        """Start a stopped bookie again, on a new port, from what its storage had synced."""
        bookie = self._bookies[bookie_id]
        assert bookie.server is None, f"bookie {bookie_id} is running"
        bookie.storage = bookie.storage.crash()
        bookie.stopped = anyio.Event()
        await self._task_group.start(self._run, bookie)

    async def set_read_only(self, bookie_id: str) -> None:
        """Register a running bookie as read-only (what a full disk makes it)."""
        registration = self._bookies[bookie_id].registration
        assert registration is not None, f"bookie {bookie_id} is not running"
        await registration.set_read_only(True)

    async def _run(self, bookie: LocalBookie, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.CancelScope() as scope:
            bookie.scope = scope
            async with (
                self.store_factory() as store,
                running_server(
                    bookie.storage, identity=BookieIdentity(bookie.bookie_id, self.instance_id)
                ) as server,
                anyio.create_task_group() as syncing,
            ):
                syncing.start_soon(_sync_forever, bookie.storage)
                info = BookieInfo(f"127.0.0.1:{server.port}", bookie.rack)
                async with register(
                    store, bookie.bookie_id, info, root=self.root
                ) as bookie.registration:
                    bookie.server = server
                    task_status.started()
                    await anyio.sleep_forever()
        bookie.server = None
        bookie.registration = None
        bookie.scope = None
        bookie.stopped.set()

    # --- clients ------------------------------------------------------------------------------

    @asynccontextmanager
    async def client(
        self, config: ClientConfig | None = None, *, seed: int = 1
    ) -> AsyncIterator[LedgerClient]:
        """A ledger client of this cluster, with its own metadata session and seeded placement."""
        async with (
            self.store_factory() as store,
            LedgerClient.open(
                store,
                root=self.root,
                rng=random.Random(seed),
                config=fast_config() if config is None else config,
            ) as client,
        ):
            yield client


async def _sync_forever(storage: MemoryLedgerStorage) -> None:
    # The journal's group commit, simulated: everything written so far becomes
    # durable together, a moment later.
    while True:
        await anyio.sleep(SYNC_INTERVAL_S)
        storage.sync()


@asynccontextmanager
async def memory_cluster(
    bookies: int = 3, racks: list[str | None] | None = None, instance_id: str = "test-cluster"
) -> AsyncIterator[LocalCluster]:
    """A cluster whose metadata lives in one in-memory metadata server."""
    server = MemoryMetadataServer()
    async with LocalCluster.start(
        server.client, bookies=bookies, racks=racks, instance_id=instance_id
    ) as cluster:
        yield cluster
