"""`SyncLedgerClient`: the ledger client for scripts and tools that are not async.

A thin blocking facade: one anyio blocking portal (an event loop in a thread
of its own, started and stopped with the `with` block) runs a `LedgerClient`,
and every method is one call into it.  Not for the simulation or the RSM
framework, which use the async client directly; nothing here decides anything.

    with SyncLedgerClient.connect("127.0.0.1:2181") as client:
        with client.create_ledger(password=b"pw") as ledger:
            ledger.append_many([b"a", b"b", b"c"])
        print(client.open_ledger(ledger.ledger_id, b"pw").read(0, 2))

Handles returned here must only be used inside the `with` block of the client
that made them; their calls block the calling thread, never the portal's loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType

from anyio.from_thread import BlockingPortal, start_blocking_portal

from bookie import limits
from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import LedgerEntry, ReadHandle
from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerMetadata
from bookie.meta.api import MetadataStore
from bookie.meta.zk import ZkMetadataStore
from bookie.wire.packet import DigestType

StoreFactory = Callable[[], AbstractAsyncContextManager[MetadataStore]]


@contextlib.asynccontextmanager
async def _opened(
    store_factory: StoreFactory, root: str, config: ClientConfig | None
) -> AsyncIterator[LedgerClient]:
    async with (
        store_factory() as store,
        LedgerClient.open(store, root=root, config=config) as client,
    ):
        yield client


async def _append_many(handle: WriteHandle, payloads: Sequence[bytes]) -> list[int]:
    """Pipelined appends: as many in flight as the window allows, one wait at the end."""
    entry_ids: list[int] = []
    for payload in payloads:
        await handle.wait_for_capacity()
        entry_ids.append(handle.append_nowait(payload))
    if entry_ids:
        await handle.wait_confirmed(entry_ids[-1])
    return entry_ids


class SyncWriteHandle:
    """Blocking form of `WriteHandle`."""

    def __init__(self, portal: BlockingPortal, handle: WriteHandle) -> None:
        self._portal = portal
        self._handle = handle

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        return self._handle.metadata

    def append(self, payload: bytes) -> int:
        """Append one entry and wait until it is confirmed; return its id."""
        return self._portal.call(self._handle.append, payload)

    def append_many(self, payloads: Sequence[bytes]) -> list[int]:
        """Append entries pipelined and wait until all are confirmed; return their ids."""
        return self._portal.call(_append_many, self._handle, payloads)

    def close(self) -> None:
        self._portal.call(self._handle.close)

    def __enter__(self) -> SyncWriteHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._portal.call(self._handle.__aexit__, exc_type, exc, traceback)


class SyncReadHandle:
    """Blocking form of `ReadHandle` (no `tail`: follow a ledger with the async client)."""

    def __init__(self, portal: BlockingPortal, handle: ReadHandle) -> None:
        self._portal = portal
        self._handle = handle

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._handle.metadata

    @property
    def is_closed(self) -> bool:
        return self._handle.is_closed

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    def read(self, first: int, last: int, *, allow_unconfirmed: bool = False) -> list[bytes]:
        return self._portal.call(
            lambda: self._handle.read(first, last, allow_unconfirmed=allow_unconfirmed)
        )

    def read_entries(
        self, first: int, last: int, *, allow_unconfirmed: bool = False
    ) -> list[LedgerEntry]:
        return self._portal.call(
            lambda: self._handle.read_entries(first, last, allow_unconfirmed=allow_unconfirmed)
        )

    def read_last_add_confirmed(self) -> int:
        return self._portal.call(self._handle.read_last_add_confirmed)


class SyncLedgerClient:
    """Blocking form of `LedgerClient`; open it with `connect` or `open`."""

    def __init__(self, portal: BlockingPortal, client: LedgerClient) -> None:
        self._portal = portal
        self._client = client

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        store_factory: StoreFactory,
        *,
        root: str = limits.metadata_root_default,
        config: ClientConfig | None = None,
    ) -> Iterator[SyncLedgerClient]:
        """A client over the metadata store `store_factory()` opens (inside the portal)."""
        with (
            start_blocking_portal() as portal,
            portal.wrap_async_context_manager(_opened(store_factory, root, config)) as client,
        ):
            yield cls(portal, client)

    @classmethod
    @contextlib.contextmanager
    def connect(
        cls,
        zookeeper_hosts: str,
        *,
        root: str = limits.metadata_root_default,
        config: ClientConfig | None = None,
    ) -> Iterator[SyncLedgerClient]:
        """A client of the cluster at `root` in the ZooKeeper at `zookeeper_hosts`."""
        with cls.open(
            lambda: ZkMetadataStore.connect(zookeeper_hosts), root=root, config=config
        ) as client:
            yield client

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        digest_type: DigestType = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> SyncWriteHandle:
        handle = self._portal.call(
            lambda: self._client.create_ledger(
                ensemble_size,
                write_quorum,
                ack_quorum,
                digest_type=digest_type,
                password=password,
                custom_metadata=custom_metadata,
            )
        )
        return SyncWriteHandle(self._portal, handle)

    def open_ledger(
        self, ledger_id: int, password: bytes = b"", *, recovery: bool = True
    ) -> SyncReadHandle:
        handle = self._portal.call(
            lambda: self._client.open_ledger(ledger_id, password, recovery=recovery)
        )
        return SyncReadHandle(self._portal, handle)

    def delete_ledger(self, ledger_id: int) -> None:
        self._portal.call(self._client.delete_ledger, ledger_id)

    def list_ledgers(self) -> list[int]:
        return self._portal.call(self._client.list_ledgers)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._portal.call(self._client.ledger_metadata, ledger_id)
