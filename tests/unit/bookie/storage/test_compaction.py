"""Entry-log compaction on real files: which logs it picks, what it moves, what it
deletes, and what it must never lose (concurrent changes, tombstones, damage)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import threading
from collections import namedtuple
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie.errors import EntryLogCorrupt
from bookie.storage import compaction
from bookie.storage.compaction import CompactionReport, LogUsage, select_logs
from bookie.storage.entry_log import EntryLogs, entry_log_ids, entry_log_path
from bookie.storage.file import FileLedgerStorage, StorageConfig
from bookie.storage.format import FILE_HEADER_BYTES
from bookie.storage.index import INDEX_FILE_NAME, LedgerIndex

from .helpers import KEY, WAIT_S, make_config, make_packet, wait_synced

PACKET_BYTES = 400
LOG_BYTES = 64 * 1024


def compaction_config(root: Path, **overrides: Any) -> StorageConfig:
    """Small entry logs (so a few hundred entries fill several), compaction unthrottled."""
    settings: dict[str, Any] = {
        "entry_log_size_bytes_max": LOG_BYTES,
        "entry_log_write_buffer_bytes": 8 * 1024,
        "compaction_rate_bytes_per_s": 1 << 30,
        "compaction_free_bytes_reserve": 0,
    }
    settings.update(overrides)
    return make_config(root, **settings)


def packet(ledger_id: int, entry_id: int, version: int = 0) -> bytes:
    return make_packet(ledger_id, entry_id + 1000 * version, size=PACKET_BYTES)


def fill(storage: FileLedgerStorage, ledger_ids: list[int], entries: int) -> None:
    """Entries 0..entries-1 of each ledger, interleaved, so every log holds every ledger."""
    for ledger_id in ledger_ids:
        storage.set_master_key(ledger_id, KEY)
    for entry_id in range(entries):
        for ledger_id in ledger_ids:
            storage.add_entry(ledger_id, entry_id, packet(ledger_id, entry_id))


def log_ids(config: StorageConfig) -> list[int]:
    return entry_log_ids(config.ledger_dirs[0])


def index_rows(config: StorageConfig) -> dict[tuple[int, int], int]:
    """(ledger_id, entry_id) -> log_id, read straight from the index file."""
    path = config.ledger_dirs[0] / INDEX_FILE_NAME
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = connection.execute("SELECT ledger_id, entry_id, log_id FROM entries").fetchall()
    finally:
        connection.close()
    return {(ledger_id, entry_id): log_id for ledger_id, entry_id, log_id in rows}


def assert_entries(storage: FileLedgerStorage, ledger_ids: list[int], entries: int) -> None:
    for ledger_id in ledger_ids:
        assert storage.entry_ranges(ledger_id) == [(0, entries - 1)]
        for entry_id in range(entries):
            assert storage.read_entry(ledger_id, entry_id) == packet(ledger_id, entry_id)


# --- choosing logs ------------------------------------------------------------------------------


def test_empty_logs_come_first_then_the_emptiest() -> None:
    record_bytes = 1000
    usages = [
        LogUsage(log_id, live_bytes, FILE_HEADER_BYTES + record_bytes)
        for log_id, live_bytes in [(1, 400), (2, 0), (3, 900), (4, 100), (5, 499), (6, 500)]
    ]
    chosen = select_logs(usages, 0.5)
    assert [usage.log_id for usage in chosen] == [2, 4, 1, 5]


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(FILE_HEADER_BYTES, 20_000)),
        max_size=30,
    ),
    st.floats(0.0, 1.0),
)
def test_selection_is_exactly_the_logs_under_the_threshold_emptiest_first(
    sizes: list[tuple[int, int]], threshold: float
) -> None:
    usages = [
        LogUsage(log_id, min(live, file_bytes - FILE_HEADER_BYTES), file_bytes)
        for log_id, (live, file_bytes) in enumerate(sizes)
    ]
    chosen = select_logs(usages, threshold)
    expected = {u.log_id for u in usages if u.live_bytes == 0 or u.live_fraction < threshold}
    assert {usage.log_id for usage in chosen} == expected
    fractions = [usage.live_fraction for usage in chosen]
    assert fractions == sorted(fractions)


def test_a_rolled_log_stays_open_until_every_byte_is_written(tmp_path: Path) -> None:
    # Compaction only takes closed logs, so "closed" must mean "all in the file".
    logs = EntryLogs(
        tmp_path, first_log_id=0, log_size_bytes_max=16 * 1024, write_buffer_bytes=4096
    )
    entry_id = 0
    while logs.current_log_id == 0:
        logs.append(1, entry_id, make_packet(1, entry_id, size=PACKET_BYTES))
        entry_id += 1
    chunks = logs.sealed_chunks()
    logs.write_chunks(chunks[:1])
    logs.chunks_written(chunks[:1])
    assert logs.open_logs()[1] == []
    logs.write_chunks(chunks[1:])
    logs.chunks_written(chunks[1:])
    assert [log.log_id for log in logs.open_logs()[1]] == [0]
    logs.close()


def test_a_log_rolls_at_its_size_limit_when_checkpoints_seal_it_first(tmp_path: Path) -> None:
    # Under a light load checkpoints seal the buffer long before it fills; the
    # log must roll anyway, or it stays current, and uncompactable, for ever.
    logs = EntryLogs(tmp_path, first_log_id=0, log_size_bytes_max=16 * 1024)
    for entry_id in range(100):
        logs.append(1, entry_id, make_packet(1, entry_id, size=PACKET_BYTES))
        logs.seal()
    assert logs.current_log_id >= 2
    logs.close()


# --- passes -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_sparse_logs_are_copied_and_deleted_and_reads_stay_identical(
    tmp_path: Path,
) -> None:
    config = compaction_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1, 2, 3, 4], 150)
        await wait_synced(storage)
        await storage.checkpoint()
        current = storage._directories[0].logs.current_log_id
        closed = [log_id for log_id in log_ids(config) if log_id != current]
        before_bytes = storage.data_bytes()
        assert len(closed) >= 3
        for ledger_id in (1, 2, 3):
            storage.delete_ledger(ledger_id)
        report = await storage.compact()
        after_logs = log_ids(config)
        assert report.errors == ()
        assert report.logs_compacted == len(closed)
        assert report.entries_moved > 0
        assert report.bytes_reclaimed > 0
        assert not set(closed) & set(after_logs)
        assert current in after_logs  # the current log is never touched
        assert_entries(storage, [4], 150)
        rows = index_rows(config)
        assert {ledger_id for ledger_id, _ in rows} == {4}
        assert set(rows.values()) <= set(after_logs)
        assert storage.data_bytes() < before_bytes
    async with FileLedgerStorage.open(config) as reopened:
        assert_entries(reopened, [4], 150)
        assert reopened.ledger_ids() == [4]


@pytest.mark.anyio
async def test_logs_without_live_bytes_are_deleted_without_copying(tmp_path: Path) -> None:
    config = compaction_config(tmp_path / "bookie", compaction_live_fraction_threshold=0.0)
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1], 300)
        fill(storage, [2], 300)
        await wait_synced(storage)
        await storage.checkpoint()
        rows = index_rows(config)
        only_ledger_1 = {rows[1, e] for e in range(300)} - {rows[2, e] for e in range(300)}
        storage.delete_ledger(1)
        report = await storage.compact()
        assert report.logs_deleted == len(only_ledger_1)
        assert report.logs_compacted == 0
        assert report.entries_moved == 0
        assert not only_ledger_1 & set(log_ids(config))
        assert_entries(storage, [2], 300)


@pytest.mark.anyio
async def test_logs_above_the_threshold_are_left_alone(tmp_path: Path) -> None:
    config = compaction_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1, 2, 3, 4], 150)
        storage.delete_ledger(1)
        await storage.checkpoint()
        before = log_ids(config)
        assert await storage.compact() == CompactionReport()
        assert log_ids(config) == before
        assert_entries(storage, [2, 3, 4], 150)


@pytest.mark.anyio
async def test_a_full_disk_still_deletes_empty_logs_and_skips_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = compaction_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1], 300)
        fill(storage, [2, 3], 150)
        await wait_synced(storage)
        storage.delete_ledger(1)
        storage.delete_ledger(2)
        usage = shutil.disk_usage(tmp_path)
        monkeypatch.setattr(
            compaction.shutil,
            "disk_usage",
            lambda _path: type(usage)(usage.total, usage.total, 0),
        )
        report = await storage.compact()
        assert report.logs_deleted > 0
        assert report.logs_compacted == 0
        assert report.logs_skipped_no_space > 0
        assert_entries(storage, [3], 150)
        monkeypatch.undo()
        report = await storage.compact()
        assert report.logs_compacted > 0
        assert_entries(storage, [3], 150)


@pytest.mark.anyio
async def test_changes_committed_during_a_copy_win_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = compaction_config(tmp_path / "bookie")
    copied = threading.Event()
    proceed = threading.Event()
    sync = compaction._Output.sync

    def paused_sync(output: Any) -> None:
        copied.set()
        assert proceed.wait(WAIT_S)
        sync(output)

    monkeypatch.setattr(compaction._Output, "sync", paused_sync)
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1, 2, 3, 4, 5], 150)
        await wait_synced(storage)
        for ledger_id in (1, 2, 5):
            storage.delete_ledger(ledger_id)
        result: list[CompactionReport] = []

        async def compact() -> None:
            result.append(await storage.compact())

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(compact)
            with anyio.fail_after(WAIT_S):
                await anyio.to_thread.run_sync(copied.wait)
            # The copy holds entry 3:5 and ledger 4; now entry 3:5 is written again
            # and ledger 4 deleted, both checkpointed before the copy commits.
            storage.add_entry(3, 5, packet(3, 5, version=1))
            storage.delete_ledger(4)
            await wait_synced(storage)
            await storage.checkpoint()
            proceed.set()
        assert result[0].errors == ()
        assert result[0].entries_moved > 0
        assert storage.read_entry(3, 5) == packet(3, 5, version=1)
        assert storage.ledger_ids() == [3]
    async with FileLedgerStorage.open(config) as reopened:
        assert reopened.read_entry(3, 5) == packet(3, 5, version=1)
        assert reopened.read_entry(3, 6) == packet(3, 6)
        assert reopened.ledger_ids() == [3]
        assert {ledger_id for ledger_id, _ in index_rows(config)} == {3}


@pytest.mark.anyio
async def test_tombstones_of_fenced_deleted_ledgers_survive_compaction(tmp_path: Path) -> None:
    config = compaction_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1, 2, 3], 150)
        storage.fence(1)
        storage.delete_ledger(1)
        storage.delete_ledger(2)
        await wait_synced(storage)
        report = await storage.compact()
        assert report.logs_compacted > 0
        assert list(storage.fenced_tombstones()) == [1]
    async with FileLedgerStorage.open(config) as reopened:
        assert list(reopened.fenced_tombstones()) == [1]
        assert_entries(reopened, [3], 150)


@pytest.mark.anyio
async def test_a_damaged_log_is_kept_and_reported_never_deleted(tmp_path: Path) -> None:
    config = compaction_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1, 2, 3, 4], 150)
        storage.delete_ledger(1)
        storage.delete_ledger(2)
        storage.delete_ledger(3)
        await wait_synced(storage)
        await storage.checkpoint()
        # Damage a dead record (ledger 1's entry 3) in the first log: the walk
        # stops there, so ledger 4's later records in that log are not copied.
        damaged_log = entry_log_path(config.ledger_dirs[0], log_ids(config)[0])
        data = bytearray(damaged_log.read_bytes())
        position = data.index(packet(1, 3))
        data[position] ^= 0xFF
        damaged_log.write_bytes(bytes(data))
        report = await storage.compact()
        assert len(report.errors) == 1
        assert damaged_log.name in report.errors[0]
        assert damaged_log.exists()
        assert storage.failure is None
        assert_entries(storage, [4], 150)
        # Known damaged: later passes leave it alone instead of failing again.
        assert (await storage.compact()).errors == ()
    async with FileLedgerStorage.open(config) as reopened:
        assert_entries(reopened, [4], 150)


@pytest.mark.anyio
async def test_start_up_deletes_marked_logs_that_nothing_points_into(tmp_path: Path) -> None:
    config = compaction_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1, 2], 150)
    directory = config.ledger_dirs[0]
    referenced = log_ids(config)[0]
    orphan = log_ids(config)[-1] + 1
    shutil.copyfile(entry_log_path(directory, referenced), entry_log_path(directory, orphan))
    index = LedgerIndex(directory)
    index.doom(orphan)
    index.doom(referenced)
    index.close()
    async with FileLedgerStorage.open(config) as reopened:
        assert not entry_log_path(directory, orphan).exists()
        assert entry_log_path(directory, referenced).exists()
        assert_entries(reopened, [1, 2], 150)
    index = LedgerIndex(directory)
    assert index.doomed_logs() == []
    index.close()


# --- a model check ------------------------------------------------------------------------------

Op = namedtuple("Op", "kind ledger_id count")

OPS = st.lists(
    st.one_of(
        st.builds(Op, st.just("add"), st.integers(1, 5), st.integers(1, 60)),
        st.builds(Op, st.just("rewrite"), st.integers(1, 5), st.integers(0, 59)),
        st.builds(Op, st.just("delete"), st.integers(1, 5), st.just(0)),
        st.builds(Op, st.just("compact"), st.just(0), st.just(0)),
        st.builds(Op, st.just("reopen"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(OPS)
def test_compaction_never_changes_what_reads_return(tmp_path: Path, ops: list[Op]) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    config = compaction_config(
        root,
        ledger_dirs=(root / "l0", root / "l1"),
        entry_log_size_bytes_max=16 * 1024,
        entry_log_write_buffer_bytes=2 * 1024,
    )
    model: dict[int, dict[int, bytes]] = {}

    def check(storage: FileLedgerStorage) -> None:
        assert storage.ledger_ids() == sorted(model)
        for ledger_id, entries in model.items():
            for entry_id, expected in entries.items():
                assert storage.read_entry(ledger_id, entry_id) == expected

    def apply(storage: FileLedgerStorage, op: Op) -> None:
        entries = model.get(op.ledger_id)
        if op.kind == "add":
            if entries is None:
                storage.set_master_key(op.ledger_id, KEY)
                entries = model[op.ledger_id] = {}
            first = len(entries)
            for entry_id in range(first, first + op.count):
                entries[entry_id] = make_packet(op.ledger_id, entry_id, size=150)
                storage.add_entry(op.ledger_id, entry_id, entries[entry_id])
        elif op.kind == "rewrite" and entries and op.count in entries:
            entries[op.count] = make_packet(op.ledger_id, op.count, size=90)
            storage.add_entry(op.ledger_id, op.count, entries[op.count])
        elif op.kind == "delete" and entries is not None:
            storage.delete_ledger(op.ledger_id)
            del model[op.ledger_id]

    async def run() -> None:
        pending = list(ops)
        while True:
            async with FileLedgerStorage.open(config) as storage:
                check(storage)
                while pending:
                    op = pending.pop(0)
                    if op.kind == "reopen":
                        await wait_synced(storage)
                        break
                    if op.kind == "compact":
                        assert (await storage.compact()).errors == ()
                        check(storage)
                    else:
                        apply(storage, op)
                else:
                    assert (await storage.compact()).errors == ()
                    check(storage)
                    return

    anyio.run(run)


@pytest.mark.anyio
async def test_a_damaged_index_row_ends_the_pass_with_an_error_not_a_crash(
    tmp_path: Path,
) -> None:
    config = compaction_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        fill(storage, [1, 2], 300)
        storage.delete_ledger(1)
        await wait_synced(storage)
        await storage.checkpoint()
        logs_before = log_ids(config)
        # Damage that `PRAGMA integrity_check` cannot see: a cell of the wrong type.
        index_path = config.ledger_dirs[0] / INDEX_FILE_NAME
        connection = sqlite3.connect(index_path)
        with connection:
            connection.execute(
                "UPDATE entries SET log_id = 'junk' WHERE ledger_id = 2 AND entry_id = 7"
            )
        connection.close()
        report = await storage.compact()
        assert len(report.errors) == 1
        assert str(index_path) in report.errors[0]
        assert "damaged row: 'junk' where an integer belongs" in report.errors[0]
        assert report.logs_deleted == report.logs_compacted == 0
        assert log_ids(config) == logs_before
        assert storage.failure is None
        with pytest.raises(EntryLogCorrupt, match="lookup of entry 2:7"):
            storage.read_entry(2, 7)
        assert storage.read_entry(2, 8) == packet(2, 8)
