"""Group commit of the journal: batching, the byte and wait rules, file rolling, close, and
where groups are synced (the loop or the journal's thread)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import anyio
import anyio.lowlevel
import pytest

from bookie.storage import journal
from bookie.storage.file import FileLedgerStorage
from bookie.storage.inspect import JournalRecordInfo, journal_records
from bookie.storage.journal import JournalMark, JournalWriter, journal_files

from .helpers import KEY, make_config, make_packet, wait_synced

pytestmark = pytest.mark.anyio


async def test_mutations_made_together_are_synced_in_one_group(tmp_path: Path) -> None:
    async with FileLedgerStorage.open(make_config(tmp_path / "bookie")) as storage:
        calls: list[int] = []
        storage.add_sync_listener(calls.append)
        storage.set_master_key(1, KEY)
        for entry_id in range(1000):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
        await wait_synced(storage)
        assert calls == [1001]


async def test_a_group_is_written_once_it_reaches_group_bytes(tmp_path: Path) -> None:
    config = make_config(
        tmp_path / "bookie",
        flush_when_queue_empty=False,
        group_wait_ms=3_600_000,
        group_bytes=4096,
    )
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(40):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
        await wait_synced(storage)  # long before the hour of group wait


async def test_a_group_waits_group_wait_ms_for_more(tmp_path: Path) -> None:
    wait_ms = 100
    config = make_config(
        tmp_path / "bookie",
        flush_when_queue_empty=False,
        group_wait_ms=wait_ms,
        group_bytes=1 << 20,
    )
    async with FileLedgerStorage.open(config) as storage:
        started = time.monotonic()
        storage.set_master_key(1, KEY)
        await wait_synced(storage)
        assert time.monotonic() - started >= wait_ms / 1000 * 0.9


async def test_close_syncs_what_is_pending(tmp_path: Path) -> None:
    config = make_config(tmp_path / "bookie", flush_when_queue_empty=False, group_wait_ms=3_600_000)
    synced: list[int] = []
    async with FileLedgerStorage.open(config) as storage:
        storage.add_sync_listener(synced.append)
        storage.set_master_key(1, KEY)
        ticket = storage.add_entry(1, 0, make_packet(1, 0))
    assert synced == [ticket]
    async with FileLedgerStorage.open(config) as reopened:
        assert reopened.read_entry(1, 0) == make_packet(1, 0)


async def test_journal_files_roll_at_their_size_limit(tmp_path: Path) -> None:
    config = make_config(tmp_path / "bookie", journal_file_size_bytes_max=2048)
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(60):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
            await wait_synced(storage)
        files = journal_files(config.journal_dir)
        assert len(files) > 3
        entries = [
            item.argument
            for item in journal_records(config.journal_dir)
            if isinstance(item, JournalRecordInfo) and item.ledger_id == 1 and item.kind == 1
        ]
        assert entries == list(range(60))


async def test_cancelling_the_owner_still_syncs_what_is_pending(tmp_path: Path) -> None:
    config = make_config(tmp_path / "bookie")
    synced: list[int] = []
    with anyio.CancelScope() as scope:
        async with FileLedgerStorage.open(config) as storage:
            storage.add_sync_listener(synced.append)
            storage.set_master_key(1, KEY)
            ticket = storage.add_entry(1, 0, make_packet(1, 0))
            scope.cancel()
            await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert synced[-1] == ticket
    async with FileLedgerStorage.open(config) as reopened:
        assert reopened.read_entry(1, 0) == make_packet(1, 0)


async def test_groups_are_synced_on_the_loop_while_the_disk_is_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where each group is written: the thread until a plain group was timed fast, then the
    loop; after a slow group the thread again, until a group there is fast again.

    The journal's clock is a fake one that only a stalling write moves (by 0.4 s), so
    every other group takes no time by it, whatever the real disk does."""
    config = make_config(tmp_path / "bookie")  # the default bound, 1 ms
    stalling = False
    clock_s = 0.0
    where: list[str] = []
    write_group = JournalWriter.write_group

    def observed(writer: JournalWriter, group: bytearray) -> JournalMark:
        nonlocal clock_s
        where.append("loop" if threading.get_ident() == loop_thread else "thread")
        if stalling:
            clock_s += 0.4
        return write_group(writer, group)

    monkeypatch.setattr(JournalWriter, "write_group", observed)
    monkeypatch.setattr(journal, "time", SimpleNamespace(monotonic=lambda: clock_s))
    loop_thread = threading.get_ident()
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(7):
            stalling = entry_id in (3, 4)
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
            await wait_synced(storage)
    # 0: the first group allocates space, so it is not timed; 1: timed in the thread;
    # 3: stalls on the loop; 4: stalls in the thread; 5: fast in the thread.
    assert where[:7] == ["thread", "thread", "loop", "loop", "thread", "thread", "loop"]


async def test_a_zero_bound_keeps_every_group_in_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path / "bookie", journal_sync_on_loop_us_max=0)
    threads: set[int] = set()
    write_group = JournalWriter.write_group

    def observed(writer: JournalWriter, group: bytearray) -> JournalMark:
        threads.add(threading.get_ident())
        return write_group(writer, group)

    monkeypatch.setattr(JournalWriter, "write_group", observed)
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(5):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
            await wait_synced(storage)
    assert threads
    assert threading.get_ident() not in threads
