"""The ledger-metadata manager over the in-memory store: ids, CAS, the retry loop, listing."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import anyio
import pytest

from bookie import limits
from bookie.core.metadata import LedgerMetadata, LedgerState
from bookie.errors import (
    BadMetadata,
    MetadataError,
    MetadataUnavailable,
    MetadataVersionConflict,
    NodeExists,
    NoSuchLedgerError,
)
from bookie.meta import ledger_format
from bookie.meta.ledgers import LedgerManager
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore
from bookie.wire.packet import DigestType

pytestmark = pytest.mark.anyio


def metadata(ledger_id: int) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ensembles=((0, ("b1", "b2", "b3")),),
    )


def closed(current: LedgerMetadata, last_entry_id: int = 9) -> LedgerMetadata:
    return dataclasses.replace(
        current, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=100
    )


@pytest.fixture
def server() -> MemoryMetadataServer:
    return MemoryMetadataServer()


@pytest.fixture
async def store(server: MemoryMetadataServer) -> AsyncIterator[MemoryMetadataStore]:
    async with server.client() as opened:
        yield opened


@pytest.fixture
def manager(store: MemoryMetadataStore) -> LedgerManager:
    return LedgerManager(store)


# --- ids --------------------------------------------------------------------------------------


async def test_ids_start_at_zero_and_increase(manager: LedgerManager) -> None:
    assert [await manager.allocate_id() for _ in range(4)] == [0, 1, 2, 3]


async def test_concurrent_allocations_are_unique(server: MemoryMetadataServer) -> None:
    allocated: list[int] = []

    async def allocate(client: MemoryMetadataStore) -> None:
        manager = LedgerManager(client)
        for _ in range(10):
            allocated.append(await manager.allocate_id())

    clients = [server.client() for _ in range(5)]
    async with anyio.create_task_group() as task_group:
        for client in clients:
            task_group.start_soon(allocate, client)
    assert sorted(allocated) == list(range(50))


async def test_allocation_continues_from_the_counter(
    store: MemoryMetadataStore, manager: LedgerManager
) -> None:
    await store.create(manager.layout.idgen, b"10000000000", make_parents=True)
    assert await manager.allocate_id() == 10**10
    assert (await store.get(manager.layout.idgen)).value == b"10000000001"


async def test_an_empty_counter_counts_as_zero(
    store: MemoryMetadataStore, manager: LedgerManager
) -> None:
    await store.create(manager.layout.idgen, b"", make_parents=True)
    assert await manager.allocate_id() == 0


async def test_junk_counter_is_reported(store: MemoryMetadataStore, manager: LedgerManager) -> None:
    await store.create(manager.layout.idgen, b"12ab", make_parents=True)
    with pytest.raises(BadMetadata, match="not a decimal number"):
        await manager.allocate_id()


async def test_exhausted_ids_are_reported(
    store: MemoryMetadataStore, manager: LedgerManager
) -> None:
    await store.create(manager.layout.idgen, str(limits.ledger_id_max).encode(), make_parents=True)
    assert await manager.allocate_id() == limits.ledger_id_max
    with pytest.raises(MetadataError, match="every ledger id has been handed out"):
        await manager.allocate_id()


# --- create / read / cas / delete -------------------------------------------------------------


async def test_create_read_cas_delete(manager: LedgerManager, store: MemoryMetadataStore) -> None:
    original = metadata(7)
    assert await manager.create(original) == 0
    assert await store.exists("/ledgers/00/0000/L0007") == 0
    assert await manager.read(7) == (original, 0)
    assert await manager.cas(7, closed(original), 0) == 1
    with pytest.raises(MetadataVersionConflict):
        await manager.cas(7, closed(original, 5), 0)
    assert await manager.read(7) == (closed(original), 1)
    with pytest.raises(MetadataVersionConflict):
        await manager.delete(7, 0)
    await manager.delete(7, 1)
    with pytest.raises(NoSuchLedgerError):
        await manager.read(7)
    with pytest.raises(NoSuchLedgerError):
        await manager.delete(7)
    with pytest.raises(NoSuchLedgerError):
        await manager.cas(7, original, 1)


async def test_create_refuses_an_existing_ledger(manager: LedgerManager) -> None:
    await manager.create(metadata(7))
    with pytest.raises(NodeExists):
        await manager.create(metadata(7))


async def test_read_refuses_metadata_of_another_ledger(
    manager: LedgerManager, store: MemoryMetadataStore
) -> None:
    await store.create(
        manager.layout.ledger(8), ledger_format.encode(metadata(9)), make_parents=True
    )
    with pytest.raises(BadMetadata, match="records ledger id 9"):
        await manager.read(8)


async def test_read_names_the_ledger_in_decoding_errors(
    manager: LedgerManager, store: MemoryMetadataStore
) -> None:
    await store.create(manager.layout.ledger(8), b"junk", make_parents=True)
    with pytest.raises(BadMetadata, match=r"^ledger 8 metadata at /ledgers/00/0000/L0008: "):
        await manager.read(8)


# --- update -----------------------------------------------------------------------------------


async def test_update_retries_on_concurrent_changes(
    server: MemoryMetadataServer, manager: LedgerManager
) -> None:
    await manager.create(metadata(7))
    intruder = server.session()
    path = manager.layout.ledger(7)
    seen_versions: list[int] = []

    def transform(current: LedgerMetadata) -> LedgerMetadata | None:
        version = intruder.get(path).version
        seen_versions.append(version)
        if len(seen_versions) <= 2:
            # Someone else changes the ledger between our read and our CAS.
            intruder.set(path, ledger_format.encode(current), version)
        return closed(current)

    assert await manager.update(7, transform) == (closed(metadata(7)), 3)
    assert seen_versions == [0, 1, 2]


async def test_update_with_nothing_to_do_writes_nothing(manager: LedgerManager) -> None:
    await manager.create(metadata(7))
    assert await manager.update(7, lambda current: None) == (metadata(7), 0)
    assert (await manager.read(7))[1] == 0


async def test_update_gives_up_after_the_attempt_bound(
    server: MemoryMetadataServer, manager: LedgerManager
) -> None:
    await manager.create(metadata(7))
    intruder = server.session()
    path = manager.layout.ledger(7)
    calls = 0

    def transform(current: LedgerMetadata) -> LedgerMetadata:
        nonlocal calls
        calls += 1
        intruder.set(path, ledger_format.encode(current), intruder.get(path).version)
        return closed(current)

    with pytest.raises(MetadataVersionConflict, match="still contended"):
        await manager.update(7, transform)
    assert calls == limits.metadata_cas_attempts_max


async def test_update_propagates_the_transform_s_refusal(manager: LedgerManager) -> None:
    await manager.create(metadata(7))

    def refuse(current: LedgerMetadata) -> LedgerMetadata:
        raise MetadataError("not allowed")

    with pytest.raises(MetadataError, match="not allowed"):
        await manager.update(7, refuse)


async def test_update_of_a_missing_ledger(manager: LedgerManager) -> None:
    with pytest.raises(NoSuchLedgerError):
        await manager.update(7, closed)


# --- watch ------------------------------------------------------------------------------------


async def test_watch_wakes_on_change(manager: LedgerManager) -> None:
    await manager.create(metadata(7))
    with anyio.fail_after(1):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(manager.watch, 7, 0)
            await anyio.wait_all_tasks_blocked()
            await manager.cas(7, closed(metadata(7)), 0)


# --- listing ----------------------------------------------------------------------------------


async def test_list_of_an_empty_cluster(manager: LedgerManager) -> None:
    assert await manager.list_ledgers() == []


async def test_list_finds_short_and_long_ids_and_nothing_else(
    manager: LedgerManager, store: MemoryMetadataStore
) -> None:
    ids = [0, 1, 9_999, 10_000, 123_456_789, 10**10 - 1, 10**10, 10**15 + 3, limits.ledger_id_max]
    for ledger_id in reversed(ids):
        await manager.create(metadata(ledger_id))
    await manager.allocate_id()
    await store.create("/ledgers/available/b1", make_parents=True)
    await store.create("/ledgers/00/0000/not-a-ledger")
    await store.create("/ledgers/000/0000/0000/0000/L0005", make_parents=True)
    assert await manager.list_ledgers() == ids


async def test_list_does_not_see_other_roots(store: MemoryMetadataStore) -> None:
    await LedgerManager(store, "/one").create(metadata(1))
    await LedgerManager(store, "/two").create(metadata(2))
    assert await LedgerManager(store, "/one").list_ledgers() == [1]


class FailingChildren:
    """A store whose listing of one directory fails (as a timeout would)."""

    def __init__(self, store: MemoryMetadataStore, failing_directory: str) -> None:
        self._store = store
        self._failing_directory = failing_directory

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def children(self, path: str) -> list[str]:
        if path == self._failing_directory:
            raise MetadataUnavailable(f"children {path}: timed out")
        return await self._store.children(path)


@pytest.mark.parametrize("failing_directory", ["/ledgers", "/ledgers/00", "/ledgers/00/0001"])
async def test_a_listing_that_fails_part_way_raises(
    manager: LedgerManager, store: MemoryMetadataStore, failing_directory: str
) -> None:
    for ledger_id in (1, 10_001, 20_001):
        await manager.create(metadata(ledger_id))
    failing = LedgerManager(FailingChildren(store, failing_directory))  # type: ignore[arg-type]
    with pytest.raises(MetadataUnavailable):
        await failing.list_ledgers()


async def test_a_directory_vanishing_mid_listing_raises(
    manager: LedgerManager, store: MemoryMetadataStore
) -> None:
    await manager.create(metadata(10_001))

    class Vanishing(FailingChildren):
        async def children(self, path: str) -> list[str]:
            names = await self._store.children(path)
            if path == "/ledgers/00":
                await self._store.delete("/ledgers/00/0001/L0001")
                await self._store.delete("/ledgers/00/0001")
            return names

    with pytest.raises(MetadataError, match="vanished"):
        await LedgerManager(Vanishing(store, "")).list_ledgers()  # type: ignore[arg-type]
