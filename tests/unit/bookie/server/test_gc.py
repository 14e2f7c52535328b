"""Garbage collection: which ledgers a round deletes, and every way it must not.

The bookie is a real `BookieServer` over `MemoryLedgerStorage`; metadata lives
in the in-memory store, wrapped where a test needs a listing or a read to fail
or to race with a new ledger.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.client.bookie_conn import BookieConnection
from bookie.core.metadata import LedgerMetadata
from bookie.errors import Fenced, MetadataUnavailable, StorageIOError
from bookie.meta.api import Versioned
from bookie.meta.ledgers import LedgerManager
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore
from bookie.server.gc import GarbageCollector, deletion_candidates
from bookie.storage.compaction import CompactionReport
from bookie.storage.memory import MemoryLedgerStorage
from bookie.wire.packet import DigestType
from tests.unit.bookie.server.support import KEY, packet, running_server

pytestmark = pytest.mark.anyio

ROOT = "/ledgers"
LONG_INTERVAL_MS = 3_600_000
WAIT_S = 10


def metadata(ledger_id: int) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ensembles=((0, ("bookie-1",)),),
    )


class Store(MemoryMetadataStore):
    """The in-memory store, with hooks that run before `children` and `get`."""

    def __init__(self, server: MemoryMetadataServer) -> None:
        super().__init__(server.session())
        self.before_children: Callable[[str], Awaitable[None]] | None = None
        self.before_get: Callable[[str], Awaitable[None]] | None = None
        self.hidden: set[str] = set()
        """Child names that listings leave out, as if the walk raced with them."""

    async def children(self, path: str) -> list[str]:
        if self.before_children is not None:
            await self.before_children(path)
        return [name for name in await super().children(path) if name not in self.hidden]

    async def get(self, path: str) -> Versioned:
        if self.before_get is not None:
            await self.before_get(path)
        return await super().get(path)


class FakeCompactor:
    def __init__(self, errors: tuple[str, ...] = ()) -> None:
        self.calls = 0
        self.errors = errors

    async def compact(self) -> CompactionReport:
        self.calls += 1
        return CompactionReport(logs_compacted=1, bytes_removed=1000, errors=self.errors)


def bookie_storage(ledger_ids: list[int], fenced: tuple[int, ...] = ()) -> MemoryLedgerStorage:
    """A bookie's storage holding two entries of each ledger, everything synced."""
    storage = MemoryLedgerStorage()
    for ledger_id in ledger_ids:
        storage.set_master_key(ledger_id, KEY)
        for entry_id in range(2):
            storage.add_entry(ledger_id, entry_id, packet(ledger_id, entry_id))
        if ledger_id in fenced:
            storage.fence(ledger_id)
    storage.sync()
    return storage


async def create_ledgers(ledgers: LedgerManager, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        ledger_id = await ledgers.allocate_id()
        await ledgers.create(metadata(ledger_id))
        ids.append(ledger_id)
    return ids


@asynccontextmanager
async def collector(
    storage: MemoryLedgerStorage,
    store: Store,
    *,
    interval_ms: int = LONG_INTERVAL_MS,
    compactor: FakeCompactor | None = None,
) -> AsyncIterator[GarbageCollector]:
    async with (
        running_server(storage) as server,
        GarbageCollector(
            server, storage, store, root=ROOT, interval_ms=interval_ms, compactor=compactor
        ) as gc,
    ):
        yield gc


@pytest.fixture
def metadata_server() -> MemoryMetadataServer:
    return MemoryMetadataServer()


@pytest.fixture
def store(metadata_server: MemoryMetadataServer) -> Store:
    return Store(metadata_server)


@pytest.fixture
def ledgers(store: Store) -> LedgerManager:
    return LedgerManager(store, ROOT)


# --- the rule -----------------------------------------------------------------------------------


@given(st.sets(st.integers(0, 200)), st.sets(st.integers(0, 200)), st.integers(0, 250))
def test_candidates_are_held_unlisted_and_below_the_counter(
    held: set[int], listed: set[int], next_ledger_id: int
) -> None:
    candidates = deletion_candidates(held, listed, next_ledger_id)
    assert candidates == sorted(candidates)
    assert set(candidates) == {
        ledger_id for ledger_id in held - listed if ledger_id < next_ledger_id
    }


# --- rounds -------------------------------------------------------------------------------------


async def test_a_round_deletes_the_ledgers_whose_metadata_is_gone(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 5)
    for ledger_id in (ids[1], ids[3]):
        await ledgers.delete(ledger_id)
    storage = bookie_storage(ids)
    compactor = FakeCompactor()
    async with collector(storage, store, compactor=compactor) as gc:
        report = await gc.run_once()
    assert report.deleted == (ids[1], ids[3])
    assert report.kept == ()
    assert report.error is None
    assert (report.held, report.listed) == (5, 3)
    assert storage.ledger_ids() == [ids[0], ids[2], ids[4]]
    assert compactor.calls == 1
    assert gc.metrics.ledgers_deleted == 2
    assert gc.metrics.logs_compacted == 1
    assert gc.metrics.bytes_reclaimed == 1000
    assert gc.metrics.last_run_time_ms is not None
    assert gc.metrics.last_error is None


async def test_a_ledger_whose_id_was_not_handed_out_yet_is_kept(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 2)
    beyond_the_counter = ids[-1] + 1
    storage = bookie_storage([*ids, beyond_the_counter])
    async with collector(storage, store) as gc:
        report = await gc.run_once()
    assert report.deleted == ()
    assert beyond_the_counter in storage.ledger_ids()


async def test_a_round_does_nothing_when_the_listing_fails_part_way(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 3)
    storage = bookie_storage([*ids, 100])
    await ledgers.delete(ids[0])
    calls = 0

    async def fail_on_the_second_directory(path: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise MetadataUnavailable(f"{path}: connection lost")

    store.before_children = fail_on_the_second_directory
    compactor = FakeCompactor()
    async with collector(storage, store, compactor=compactor) as gc:
        report = await gc.run_once()
    assert calls == 2
    assert report.listed is None
    assert report.error is not None
    assert "connection lost" in report.error
    assert report.deleted == ()
    assert storage.ledger_ids() == [*ids, 100]
    assert compactor.calls == 0
    assert gc.metrics.rounds_skipped == 1
    assert gc.metrics.last_error == report.error


async def test_a_ledger_the_listing_missed_is_kept_when_its_metadata_exists(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 3)
    storage = bookie_storage(ids)
    store.hidden.add(ledgers.layout.ledger(ids[1]).rsplit("/", 1)[1])
    async with collector(storage, store) as gc:
        report = await gc.run_once()
    assert report.kept == (ids[1],)
    assert report.deleted == ()
    assert storage.ledger_ids() == ids


async def test_a_ledger_that_appears_during_the_listing_is_not_a_candidate(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 2)
    late = await ledgers.allocate_id()  # handed out, metadata never created
    storage = bookie_storage(ids)

    async def add_late_ledger(path: str) -> None:
        if late not in storage.ledger_ids():
            storage.set_master_key(late, KEY)
            storage.add_entry(late, 0, packet(late, 0))
            storage.sync()

    store.before_children = add_late_ledger
    async with collector(storage, store) as gc:
        first = await gc.run_once()
        assert first.deleted == ()
        assert late in storage.ledger_ids()
        # By the next round it was held before the listing began: its missing
        # metadata now means it must go.
        second = await gc.run_once()
    assert second.deleted == (late,)
    assert storage.ledger_ids() == ids


async def test_a_failed_metadata_check_stops_the_round(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 4)
    for ledger_id in ids[1:]:
        await ledgers.delete(ledger_id)
    storage = bookie_storage(ids)
    checks = 0

    async def fail_the_second_check(path: str) -> None:
        nonlocal checks
        if path != ledgers.layout.idgen:
            checks += 1
            if checks == 2:
                raise MetadataUnavailable(f"{path}: timed out")

    store.before_get = fail_the_second_check
    async with collector(storage, store) as gc:
        report = await gc.run_once()
    assert report.deleted == (ids[1],)
    assert report.error is not None
    assert "timed out" in report.error
    assert storage.ledger_ids() == [ids[0], ids[2], ids[3]]


async def test_a_deleted_fenced_ledger_keeps_refusing_its_old_writer(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 2)
    await ledgers.delete(ids[0])
    storage = bookie_storage(ids, fenced=(ids[0],))
    async with (
        running_server(storage) as server,
        GarbageCollector(server, storage, store, root=ROOT, interval_ms=LONG_INTERVAL_MS) as gc,
        BookieConnection.connect("127.0.0.1", server.port) as connection,
    ):
        report = await gc.run_once()
        assert report.deleted == (ids[0],)
        assert list(storage.fenced_tombstones()) == [ids[0]]
        with pytest.raises(Fenced):
            await connection.add(ids[0], 2, KEY, packet(ids[0], 2))
    assert ids[0] not in storage.ledger_ids()


async def test_compaction_errors_are_reported(store: Store, ledgers: LedgerManager) -> None:
    await create_ledgers(ledgers, 1)
    storage = bookie_storage([])
    compactor = FakeCompactor(errors=("entry log 00000003.log kept: damaged",))
    async with collector(storage, store, compactor=compactor) as gc:
        report = await gc.run_once()
    assert report.error == "compaction: entry log 00000003.log kept: damaged"
    assert gc.metrics.errors == 1
    assert gc.metrics.rounds_skipped == 0


class RaisingCompactor(FakeCompactor):
    """A compactor that breaks its promise to report errors rather than raise them."""

    async def compact(self) -> CompactionReport:
        self.calls += 1
        raise StorageIOError("index /data/index.sqlite: damaged row")


async def test_a_storage_error_raised_by_compaction_ends_the_round_not_the_collector(
    store: Store, ledgers: LedgerManager
) -> None:
    await create_ledgers(ledgers, 1)
    storage = bookie_storage([])
    compactor = RaisingCompactor()
    async with collector(storage, store, compactor=compactor) as gc:
        gc.trigger()
        with anyio.fail_after(WAIT_S):
            report = await gc.next_round()
        assert report.error == "compaction: StorageIOError: index /data/index.sqlite: damaged row"
        assert report.compaction is None
        assert (await gc.run_once()).error == report.error
    assert compactor.calls == 2
    assert gc.metrics.errors == 2


async def test_rounds_run_every_interval_and_on_request(
    store: Store, ledgers: LedgerManager
) -> None:
    ids = await create_ledgers(ledgers, 2)
    storage = bookie_storage(ids)
    async with collector(storage, store, interval_ms=10) as gc:
        with anyio.fail_after(WAIT_S):
            for _ in range(3):
                await gc.next_round()
        assert gc.metrics.rounds >= 3
    async with collector(storage, store) as gc:
        await ledgers.delete(ids[0])
        gc.trigger()
        with anyio.fail_after(WAIT_S):
            report = await gc.next_round()
        assert report.deleted == (ids[0],)
        assert gc.metrics.rounds == 1
    assert storage.ledger_ids() == [ids[1]]
