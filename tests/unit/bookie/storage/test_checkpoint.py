"""Checkpoints: entry logs + index + mark, old journals removed, crashes at any step."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bookie.storage.file import FileLedgerStorage
from bookie.storage.index import read_checkpoint_mark
from bookie.storage.journal import journal_files

from .helpers import KEY, crash_image, make_config, make_packet, wait_synced
from .storage_child import LEDGERS, entry_packet

REPOSITORY = Path(__file__).resolve().parents[4]
CHILD_TIMEOUT_S = 60


@pytest.mark.anyio
async def test_checkpoint_removes_journal_files_before_the_mark(tmp_path: Path) -> None:
    config = make_config(
        tmp_path / "bookie", journal_file_size_bytes_max=4096, journal_files_kept=1
    )
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(200):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
            if entry_id % 10 == 0:
                await wait_synced(storage)
        await wait_synced(storage)
        before = [file_id for file_id, _ in journal_files(config.journal_dir)]
        assert len(before) > 3
        await storage.checkpoint()
        mark = read_checkpoint_mark(config.ledger_dirs[0])
        assert mark is not None
        after = [file_id for file_id, _ in journal_files(config.journal_dir)]
        assert after == [file_id for file_id in before if file_id >= mark.file_id - 1]
        assert [storage.read_entry(1, e) for e in range(200)] == [
            make_packet(1, e) for e in range(200)
        ]


@pytest.mark.anyio
async def test_restart_replays_only_what_follows_the_mark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(30):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
        await wait_synced(storage)
        await storage.checkpoint()
        for entry_id in range(30, 37):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
        storage.fence(1)
        await wait_synced(storage)
        image = crash_image(tmp_path / "bookie", tmp_path / "image")
    with caplog.at_level(logging.INFO, logger="bookie.storage.file"):
        async with FileLedgerStorage.open(make_config(image)) as restarted:
            assert "replayed 8 journal records" in caplog.text
            assert [restarted.read_entry(1, e) for e in range(37)] == [
                make_packet(1, e) for e in range(37)
            ]
            assert next(iter(restarted.recovered_ledgers())).fenced
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bookie.storage.file"):
        async with FileLedgerStorage.open(make_config(image)) as clean:
            assert "replayed" not in caplog.text
            assert clean.entry_ranges(1) == [(0, 36)]


@pytest.mark.anyio
async def test_entries_stay_readable_while_a_checkpoint_runs(tmp_path: Path) -> None:
    config = make_config(
        tmp_path / "bookie", ledger_dirs=(tmp_path / "l0", tmp_path / "l1", tmp_path / "l2")
    )
    async with FileLedgerStorage.open(config) as storage:
        for ledger_id in range(6):
            storage.set_master_key(ledger_id, KEY)
            for entry_id in range(50):
                storage.add_entry(ledger_id, entry_id, make_packet(ledger_id, entry_id))
        # The checkpoint's steps, run one by one so that mutations land between
        # step (1), which took the batch, and step (4), which drops it.
        plan = storage._checkpoint_begin()
        storage.delete_ledger(0)
        storage.set_master_key(0, KEY)
        storage.add_entry(0, 7, make_packet(0, 7, size=5))
        storage.add_entry(1, 50, make_packet(1, 50))
        for ledger_id in range(1, 6):
            assert storage.read_entry(ledger_id, 49) == make_packet(ledger_id, 49)
        await storage._checkpoint_flush(plan)
        await anyio.to_thread.run_sync(storage._checkpoint_commit, plan)
        assert storage.read_entry(0, 1) is None
        assert storage.entry_ranges(0) == [(7, 7)]
        storage._checkpoint_end(plan)
        assert storage.entry_ranges(0) == [(7, 7)]
        assert storage.read_entry(0, 1) is None
        await storage.checkpoint()
        assert storage.entry_ranges(0) == [(7, 7)]
        assert storage.entry_ranges(1) == [(0, 50)]
    async with FileLedgerStorage.open(config) as reopened:
        assert reopened.entry_ranges(0) == [(7, 7)]
        assert reopened.read_entry(0, 7) == make_packet(0, 7, size=5)
        assert reopened.entry_ranges(1) == [(0, 50)]
        for ledger_id in range(2, 6):
            assert reopened.read_entry(ledger_id, 0) == make_packet(ledger_id, 0)
        for directory in config.ledger_dirs:
            assert any(path.suffix == ".log" for path in directory.iterdir())


def run_child(root: Path, mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.unit.bookie.storage.storage_child", str(root), mode],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
    )


def test_a_kill_between_entry_log_fsync_and_index_commit_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "bookie"
    child = run_child(root, "kill-in-commit")
    output, _ = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert output == b"synced\n"
    assert child.returncode == -signal.SIGKILL
    # The first directory committed the checkpoint; the second died before it.
    assert read_checkpoint_mark(root / "ledgers0") is not None
    assert read_checkpoint_mark(root / "ledgers1") is None

    async def check() -> None:
        config = make_config(root, ledger_dirs=(root / "ledgers0", root / "ledgers1"))
        async with FileLedgerStorage.open(config) as storage:
            for ledger_id in LEDGERS:
                assert storage.entry_ranges(ledger_id) == [(0, 99)]
                for entry_id in range(100):
                    assert storage.read_entry(ledger_id, entry_id) == entry_packet(
                        ledger_id, entry_id
                    )

    anyio.run(check)
