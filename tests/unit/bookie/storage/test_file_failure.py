"""Write and fsync failures of FileLedgerStorage: full disk, I/O errors.

The failures are injected at the system-call functions the storage calls
(`os.write`, `os.fdatasync`, `os.pwrite`), only for the files of the kind
under test, so the rest of the process keeps working.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from bookie import limits
from bookie.errors import DiskFull, StorageError, StorageIOError
from bookie.storage.file import FileLedgerStorage

from .helpers import KEY, WAIT_S, make_config, make_packet, wait_synced

pytestmark = pytest.mark.anyio


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def failing_for(
    suffix: str, code: int, real: Callable[..., Any], threads: list[int] | None = None
) -> Callable[..., Any]:
    """`real`, except that it raises OSError(code) on files whose name ends in `suffix`
    (noting in `threads`, if given, the thread of each failed call)."""

    def call(fd: int, *args: Any) -> Any:
        if fd_path(fd).endswith(suffix):
            if threads is not None:
                threads.append(threading.get_ident())
            raise OSError(code, os.strerror(code))
        return real(fd, *args)

    return call


async def write_entry_zero(storage: FileLedgerStorage) -> None:
    """Ledger 1 with its key and entry 0, durable."""
    storage.set_master_key(1, KEY)
    storage.add_entry(1, 0, make_packet(1, 0))
    await wait_synced(storage)


async def wait_failed(storage: FileLedgerStorage) -> StorageError:
    failed = anyio.Event()
    storage.add_sync_listener(lambda _: failed.set() if storage.failure is not None else None)
    with anyio.fail_after(WAIT_S):
        if storage.failure is None:
            await failed.wait()
    assert storage.failure is not None
    return storage.failure


@pytest.mark.parametrize("on_loop", [False, True], ids=["in-thread", "on-loop"])
@pytest.mark.parametrize(
    ("function", "code", "error"),
    [
        ("write", errno.ENOSPC, DiskFull),
        ("write", errno.EIO, StorageIOError),
        ("fdatasync", errno.EIO, StorageIOError),
        ("fdatasync", errno.ENOSPC, DiskFull),
    ],
)
async def test_a_journal_failure_stops_the_storage(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    function: str,
    code: int,
    error: type[StorageError],
    on_loop: bool,
) -> None:
    # A bound of a minute: any real sync counts as fast, so the failing group (the
    # third) runs on the loop after the second, plain one, was timed; 0: in the thread.
    config = make_config(
        tmp_path / "bookie", journal_sync_on_loop_us_max=60_000_000 if on_loop else 0
    )
    async with FileLedgerStorage.open(config) as storage:
        await write_entry_zero(storage)
        storage.add_entry(1, 1, make_packet(1, 1))
        await wait_synced(storage)
        synced = storage.synced_ticket
        real = getattr(os, function)
        threads: list[int] = []
        monkeypatch.setattr(os, function, failing_for(".journal", code, real, threads))
        storage.add_entry(1, 2, make_packet(1, 2))
        failure = await wait_failed(storage)
        assert len(threads) == 1
        assert (threads[0] == threading.get_ident()) is on_loop
        assert isinstance(failure, error)
        assert isinstance(failure.__cause__, OSError)
        assert storage.synced_ticket == synced
        with pytest.raises(error):
            storage.add_entry(1, 3, make_packet(1, 3))
        # Reads go on: the bookie keeps serving what it has.
        assert storage.read_entry(1, 0) == make_packet(1, 0)
        monkeypatch.undo()
    async with FileLedgerStorage.open(config) as restarted:
        assert restarted.failure is None
        assert restarted.read_entry(1, 1) == make_packet(1, 1)
        restarted.add_entry(1, 2, make_packet(1, 2))
        await wait_synced(restarted)


async def test_an_entry_log_write_failure_stops_the_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path / "bookie", entry_log_write_buffer_bytes=4096)
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        monkeypatch.setattr(os, "pwrite", failing_for(".log", errno.ENOSPC, os.pwrite))
        for entry_id in range(100):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
        failure = await wait_failed(storage)
        assert isinstance(failure, DiskFull)
        with pytest.raises(DiskFull):
            storage.fence(1)
        monkeypatch.undo()
    async with FileLedgerStorage.open(config) as restarted:
        # The journal held the entries synced before the failure; replay restores them.
        for entry_id in range(restarted.last_entry_id(1) + 1):
            assert restarted.read_entry(1, entry_id) == make_packet(1, entry_id)


async def test_a_checkpoint_fsync_failure_stops_the_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        await write_entry_zero(storage)
        monkeypatch.setattr(os, "fdatasync", failing_for(".log", errno.EIO, os.fdatasync))
        await storage.checkpoint()
        assert isinstance(storage.failure, StorageIOError)
        monkeypatch.undo()
    async with FileLedgerStorage.open(config) as restarted:
        assert restarted.read_entry(1, 0) == make_packet(1, 0)


async def test_a_journal_that_cannot_be_trimmed_at_close_is_trimmed_by_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        await write_entry_zero(storage)
        monkeypatch.setattr(os, "ftruncate", failing_for(".journal", errno.EIO, os.ftruncate))
    # The storage closed anyway (entry logs and indexes too), saying why.
    assert "journal file not trimmed at close" in caplog.text
    monkeypatch.undo()
    journal = max(config.journal_dir.glob("*.journal"))
    # Still holding its space allocated ahead (a master key and one entry take < 1 KiB).
    assert journal.stat().st_size >= limits.journal_preallocation_bytes
    async with FileLedgerStorage.open(config) as storage:
        assert storage.read_entry(1, 0) == make_packet(1, 0)
    assert journal.stat().st_size < 1024
