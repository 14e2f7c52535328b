"""The `LedgerStorage` contract (bookie/storage/api.py), run against both implementations.

Each implementation comes with a small harness that knows how to open it, wait
until everything issued is synced, restart it cleanly, and take the state a
power cut would leave *now*.  For `MemoryLedgerStorage` that is `crash()`; for
`FileLedgerStorage` it is a copy of its directories taken while it runs with no
checkpoint in progress (the periodic one is effectively off here): exactly the
bytes a SIGKILL would leave in the page cache, torn journal tail included.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bookie.errors import DiskFull, StorageBusy
from bookie.storage.api import LedgerRecord, LedgerStorage
from bookie.storage.file import FileLedgerStorage, StorageConfig
from bookie.storage.memory import MemoryLedgerStorage
from bookie.wire.packet import Digest, DigestType

pytestmark = pytest.mark.anyio

KEY = b"k" * 32
DIGEST = Digest(DigestType.CRC32C, b"password")
TOMBSTONES_MAX = 3
UNSYNCED_BYTES_MAX = 64 * 1024
WAIT_S = 10


def packet(ledger_id: int, entry_id: int, lac: int | None = None, size: int = 100) -> bytes:
    lac = entry_id - 1 if lac is None else lac
    return DIGEST.build_entry(ledger_id, entry_id, lac, 0, bytes([entry_id % 251]) * size)


class MemoryHarness:
    loses_unsynced = True

    def __init__(self, tmp_path: Path) -> None:
        del tmp_path

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[MemoryLedgerStorage]:
        yield MemoryLedgerStorage(
            unsynced_bytes_max=UNSYNCED_BYTES_MAX, tombstones_max=TOMBSTONES_MAX
        )

    async def sync(self, storage: Any) -> None:
        storage.sync()

    @contextlib.asynccontextmanager
    async def reopen(self, storage: Any) -> AsyncIterator[MemoryLedgerStorage]:
        storage.sync()
        yield storage.crash()

    @contextlib.asynccontextmanager
    async def crash(self, storage: Any) -> AsyncIterator[MemoryLedgerStorage]:
        yield storage.crash()

    def inject_sync_failure(self, storage: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        del monkeypatch
        storage.fail(DiskFull("injected"))


class FileHarness:
    loses_unsynced = False

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "bookie"
        self.copies = 0

    def config(self, root: Path) -> StorageConfig:
        return StorageConfig(
            journal_dir=root / "journal",
            ledger_dirs=(root / "ledgers0", root / "ledgers1"),
            checkpoint_interval_ms=3_600_000,
            group_bytes=16 * 1024,
            journal_buffer_bytes_max=UNSYNCED_BYTES_MAX,
            tombstones_max=TOMBSTONES_MAX,
        )

    @contextlib.asynccontextmanager
    async def open(self, root: Path | None = None) -> AsyncIterator[FileLedgerStorage]:
        async with FileLedgerStorage.open(self.config(root or self.root)) as storage:
            yield storage

    async def sync(self, storage: Any) -> None:
        target = storage.last_ticket
        synced = anyio.Event()

        def listener(ticket: int) -> None:
            if ticket >= target:
                synced.set()

        unsubscribe = storage.add_sync_listener(listener)
        try:
            with anyio.fail_after(WAIT_S):
                if storage.synced_ticket < target:
                    await synced.wait()
        finally:
            unsubscribe()

    @contextlib.asynccontextmanager
    async def reopen(self, storage: Any) -> AsyncIterator[FileLedgerStorage]:
        del storage
        async with self.open() as reopened:
            yield reopened

    @contextlib.asynccontextmanager
    async def crash(self, storage: Any) -> AsyncIterator[FileLedgerStorage]:
        del storage
        self.copies += 1
        image = self.root.parent / f"crash-image-{self.copies}"
        shutil.copytree(self.root, image)
        async with self.open(image) as restarted:
            yield restarted

    def inject_sync_failure(self, storage: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        del storage

        def fdatasync(fd: int) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "fdatasync", fdatasync)


Harness = MemoryHarness | FileHarness


@pytest.fixture(params=["memory", "file"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    return MemoryHarness(tmp_path) if request.param == "memory" else FileHarness(tmp_path)


def records(storage: LedgerStorage) -> dict[int, LedgerRecord]:
    return {record.ledger_id: record for record in storage.recovered_ledgers()}


# --- basic reads and writes -------------------------------------------------------------------


async def test_unknown_ledger_reads_as_absent(harness: Harness) -> None:
    async with harness.open() as storage:
        assert storage.read_entry(7, 0) is None
        assert storage.last_entry_id(7) == -1
        assert storage.entry_ranges(7) == []
        assert storage.ledger_ids() == []
        assert list(storage.recovered_ledgers()) == []
        assert list(storage.fenced_tombstones()) == []


async def test_add_then_read_back_at_once(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(5):
            storage.add_entry(1, entry_id, packet(1, entry_id))
        assert [storage.read_entry(1, e) for e in range(5)] == [packet(1, e) for e in range(5)]
        assert storage.read_entry(1, 5) is None
        assert storage.last_entry_id(1) == 4
        assert storage.entry_ranges(1) == [(0, 4)]
        assert storage.ledger_ids() == [1]


async def test_entry_ranges_show_gaps(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(2, KEY)
        for entry_id in (0, 1, 2, 5, 9, 10):
            storage.add_entry(2, entry_id, packet(2, entry_id))
        assert storage.entry_ranges(2) == [(0, 2), (5, 5), (9, 10)]
        assert storage.last_entry_id(2) == 10
        assert storage.read_entry(2, 3) is None


async def test_overwrite_keeps_the_latest_packet(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        storage.add_entry(1, 0, packet(1, 0, size=10))
        storage.add_entry(1, 0, packet(1, 0, size=20))
        assert storage.read_entry(1, 0) == packet(1, 0, size=20)
        await harness.sync(storage)
        async with harness.reopen(storage) as reopened:
            assert reopened.read_entry(1, 0) == packet(1, 0, size=20)


async def test_ledgers_are_independent(harness: Harness) -> None:
    async with harness.open() as storage:
        for ledger_id in (1, 2, 3):
            storage.set_master_key(ledger_id, KEY)
            storage.add_entry(ledger_id, 0, packet(ledger_id, 0, size=ledger_id))
        assert storage.ledger_ids() == [1, 2, 3]
        for ledger_id in (1, 2, 3):
            assert storage.read_entry(ledger_id, 0) == packet(ledger_id, 0, size=ledger_id)


# --- ledger state -----------------------------------------------------------------------------


async def test_state_survives_a_clean_restart(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        storage.set_master_key(2, b"other key")
        storage.add_entry(1, 0, packet(1, 0))
        storage.add_entry(1, 1, packet(1, 1, lac=0))
        storage.fence(2)
        await harness.sync(storage)
        async with harness.reopen(storage) as reopened:
            state = records(reopened)
            assert state[1] == LedgerRecord(1, KEY, False, 0, None, 1)
            assert state[2] == LedgerRecord(2, b"other key", True, -1, None, -1)
            assert reopened.read_entry(1, 1) == packet(1, 1, lac=0)
            assert reopened.entry_ranges(1) == [(0, 1)]


async def test_lac_is_the_highest_seen_in_entries_and_explicit_lacs(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        storage.add_entry(1, 5, packet(1, 5, lac=3))
        storage.add_entry(1, 4, packet(1, 4, lac=2))
        assert records(storage)[1].lac == 3
        lac_packet = DIGEST.build_lac(1, 7)
        storage.set_explicit_lac(1, 7, lac_packet)
        storage.set_explicit_lac(1, 6, DIGEST.build_lac(1, 6))
        await harness.sync(storage)
        async with harness.reopen(storage) as reopened:
            record = records(reopened)[1]
            assert record.lac == 7
            assert record.explicit_lac_packet == lac_packet
            assert record.last_entry_id == 5


async def test_fence_is_durable(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        ticket = storage.fence(1)
        await harness.sync(storage)
        assert storage.synced_ticket >= ticket
        async with harness.crash(storage) as restarted:
            assert records(restarted)[1].fenced


# --- deletion and tombstones ------------------------------------------------------------------


async def test_delete_drops_entries_and_state(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        storage.add_entry(1, 0, packet(1, 0))
        storage.delete_ledger(1)
        assert storage.read_entry(1, 0) is None
        assert storage.ledger_ids() == []
        assert storage.entry_ranges(1) == []
        assert list(storage.fenced_tombstones()) == []
        await harness.sync(storage)
        async with harness.reopen(storage) as reopened:
            assert reopened.ledger_ids() == []
            assert reopened.read_entry(1, 0) is None


async def test_delete_of_a_fenced_ledger_leaves_a_tombstone(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        storage.fence(1)
        storage.delete_ledger(1)
        assert list(storage.fenced_tombstones()) == [1]
        await harness.sync(storage)
        async with harness.crash(storage) as restarted:
            assert list(restarted.fenced_tombstones()) == [1]
            assert restarted.ledger_ids() == []


async def test_tombstones_are_bounded_oldest_first(harness: Harness) -> None:
    async with harness.open() as storage:
        for ledger_id in range(1, TOMBSTONES_MAX + 3):
            storage.set_master_key(ledger_id, KEY)
            storage.fence(ledger_id)
            storage.delete_ledger(ledger_id)
        expected = list(range(3, TOMBSTONES_MAX + 3))
        assert list(storage.fenced_tombstones()) == expected
        await harness.sync(storage)
        async with harness.reopen(storage) as reopened:
            assert list(reopened.fenced_tombstones()) == expected


async def test_a_deleted_ledger_created_again_starts_empty(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        storage.add_entry(1, 0, packet(1, 0))
        storage.add_entry(1, 1, packet(1, 1))
        await harness.sync(storage)
        async with harness.reopen(storage) as second:
            second.delete_ledger(1)
            second.set_master_key(1, KEY)
            second.add_entry(1, 1, packet(1, 1, size=7))
            assert second.read_entry(1, 0) is None
            assert second.entry_ranges(1) == [(1, 1)]
            await harness.sync(second)
            async with harness.crash(second) as third:
                assert third.read_entry(1, 0) is None
                assert third.read_entry(1, 1) == packet(1, 1, size=7)
                assert third.entry_ranges(1) == [(1, 1)]


# --- tickets and listeners --------------------------------------------------------------------


async def test_tickets_grow_with_every_mutation(harness: Harness) -> None:
    async with harness.open() as storage:
        tickets = [
            storage.set_master_key(1, KEY),
            storage.add_entry(1, 0, packet(1, 0)),
            storage.set_explicit_lac(1, 0, DIGEST.build_lac(1, 0)),
            storage.fence(1),
            storage.delete_ledger(1),
        ]
        assert tickets == sorted(set(tickets))
        assert storage.synced_ticket < tickets[0]


async def test_listeners_see_synced_ticket_advance(harness: Harness) -> None:
    async with harness.open() as storage:
        seen: list[int] = []
        unsubscribe = storage.add_sync_listener(seen.append)
        storage.set_master_key(1, KEY)
        last = storage.add_entry(1, 0, packet(1, 0))
        await harness.sync(storage)
        assert seen
        assert seen == sorted(seen)
        assert seen[-1] >= last
        assert storage.synced_ticket >= last
        unsubscribe()
        calls = len(seen)
        storage.add_entry(1, 1, packet(1, 1))
        await harness.sync(storage)
        assert len(seen) == calls


# --- crashes ----------------------------------------------------------------------------------


async def test_crash_keeps_what_was_synced(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(50):
            storage.add_entry(1, entry_id, packet(1, entry_id))
        await harness.sync(storage)
        for entry_id in range(50, 60):
            storage.add_entry(1, entry_id, packet(1, entry_id))
        storage.fence(1)
        async with harness.crash(storage) as restarted:
            for entry_id in range(50):
                assert restarted.read_entry(1, entry_id) == packet(1, entry_id)
            if harness.loses_unsynced:
                assert restarted.read_entry(1, 50) is None
                assert restarted.last_entry_id(1) == 49
                assert not records(restarted)[1].fenced
            else:
                # Unsynced mutations may survive, but only as a prefix of the journal.
                survivors = [restarted.read_entry(1, e) for e in range(50, 60)]
                present = [entry is not None for entry in survivors]
                assert present == sorted(present, reverse=True)


async def test_restarted_storage_accepts_new_mutations(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        storage.add_entry(1, 0, packet(1, 0))
        await harness.sync(storage)
        async with harness.crash(storage) as restarted:
            ticket = restarted.add_entry(1, 1, packet(1, 1))
            await harness.sync(restarted)
            assert restarted.synced_ticket >= ticket
            assert restarted.entry_ranges(1) == [(0, 1)]


# --- back-pressure and failure ----------------------------------------------------------------


async def test_too_many_unsynced_bytes_refuse_mutations(harness: Harness) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        accepted = 0
        refused: StorageBusy | None = None
        for entry_id in range(1000):
            try:
                storage.add_entry(1, entry_id, packet(1, entry_id, size=1024))
            except StorageBusy as error:
                refused = error
                break
            accepted += 1
        assert refused is not None
        assert 0 < accepted < 1000
        assert storage.last_entry_id(1) == accepted - 1
        assert storage.read_entry(1, accepted) is None
        await harness.sync(storage)
        storage.add_entry(1, accepted, packet(1, accepted))
        assert storage.read_entry(1, accepted) == packet(1, accepted)


async def test_failure_stops_the_storage(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    async with harness.open() as storage:
        storage.set_master_key(1, KEY)
        await harness.sync(storage)
        synced = storage.synced_ticket
        calls: list[int] = []
        failed = anyio.Event()

        def listener(ticket: int) -> None:
            calls.append(ticket)
            if storage.failure is not None:
                failed.set()

        storage.add_sync_listener(listener)
        storage.add_entry(1, 0, packet(1, 0))
        harness.inject_sync_failure(storage, monkeypatch)
        with anyio.fail_after(WAIT_S):
            await failed.wait()
        assert isinstance(storage.failure, DiskFull)
        assert storage.synced_ticket == synced
        assert calls == [synced]
        with pytest.raises(DiskFull):
            storage.add_entry(1, 1, packet(1, 1))
        with pytest.raises(DiskFull):
            storage.fence(1)
        assert storage.synced_ticket == synced
