"""Journal space allocated ahead (zeros written): groups are written inside it, finished
files are cut back to their last record, a crash leaves zeros that replay trims, and a
filesystem that refuses the zeros changes nothing but speed."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import struct
from pathlib import Path

import pytest

from bookie.storage.format import FILE_HEADER_BYTES, JournalKind, append_journal_record
from bookie.storage.journal import (
    JournalMark,
    JournalWriter,
    journal_file_path,
    replay_journal,
    scan_journal,
    truncate_junk_tails,
)

STEP = 64 * 1024


def group_of(*entry_ids: int, payload_bytes: int = 100) -> bytearray:
    group = bytearray()
    for entry_id in entry_ids:
        payload = bytes([entry_id % 256]) * payload_bytes
        append_journal_record(group, JournalKind.ENTRY, 7, entry_id, payload)
    return group


def replayed_entry_ids(directory: Path) -> list[int]:
    scans = scan_journal(directory, JournalMark(0, 0))
    truncate_junk_tails(directory, scans)
    entry_ids: list[int] = []
    replay_journal(scans, lambda kind, ledger_id, argument, payload: entry_ids.append(argument))
    return entry_ids


_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_FLAG_SYNC = 0x1
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_FIEMAP_HEADER = struct.Struct("=QQIIII")
_FIEMAP_EXTENT = struct.Struct("=QQQ16xI12x")


def unwritten_extents(path: Path) -> int | None:
    """How many of the file's extents are reserved but unwritten (what posix_fallocate
    leaves), by the FIEMAP ioctl; None where the filesystem does not say."""
    extents_max = 64
    request = bytearray(_FIEMAP_HEADER.size + extents_max * _FIEMAP_EXTENT.size)
    _FIEMAP_HEADER.pack_into(request, 0, 0, 2**64 - 1, _FIEMAP_FLAG_SYNC, 0, extents_max, 0)
    with path.open("rb") as file:
        try:
            fcntl.ioctl(file.fileno(), _FS_IOC_FIEMAP, request)
        except OSError:
            return None
    mapped = _FIEMAP_HEADER.unpack_from(request)[3]
    flags = [
        _FIEMAP_EXTENT.unpack_from(request, _FIEMAP_HEADER.size + i * _FIEMAP_EXTENT.size)[3]
        for i in range(mapped)
    ]
    return sum(1 for flag in flags if flag & _FIEMAP_EXTENT_UNWRITTEN)


def test_unwritten_extents_are_seen(tmp_path: Path) -> None:
    """The check below can fail: a posix_fallocate'd file shows unwritten extents."""
    path = tmp_path / "reserved"
    with path.open("wb") as file:
        os.posix_fallocate(file.fileno(), 0, STEP)
    found = unwritten_extents(path)
    if found is None:
        pytest.skip("the filesystem does not answer FIEMAP")
    assert found > 0


def test_groups_go_into_zeros_written_ahead(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, 1, 1 << 30, preallocation_bytes=STEP)
    writer.create(None)
    path = journal_file_path(tmp_path, 1)
    writer.write_group(group_of(0, 1))
    first_size = writer.end + STEP
    assert path.stat().st_size == first_size
    # Zeros written: no extent is merely reserved (a sync into one would have to journal
    # its conversion), and none is a hole.
    assert unwritten_extents(path) in (0, None)
    assert path.stat().st_blocks * 512 >= first_size
    assert not any(path.read_bytes()[writer.end :])
    # The next group fits: the size does not change.
    writer.write_group(group_of(2))
    assert path.stat().st_size == first_size
    # A group bigger than what is left gets a step of zeros after it.
    writer.write_group(group_of(3, payload_bytes=2 * STEP))
    assert path.stat().st_size == writer.end + STEP
    assert unwritten_extents(path) in (0, None)
    writer.write_group(group_of(4))
    writer.close()
    assert path.stat().st_size == writer.end
    assert replayed_entry_ids(tmp_path) == [0, 1, 2, 3, 4]


def test_a_rolled_file_ends_at_its_last_record(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, 1, FILE_HEADER_BYTES + 1000, preallocation_bytes=STEP)
    writer.create(None)
    writer.write_group(group_of(0, 1, 2, 3, 4, 5, 6, 7, 8, 9))
    first_end = writer.end
    writer.write_group(group_of(10))
    assert writer.file_id == 2
    assert journal_file_path(tmp_path, 1).stat().st_size == first_end
    # The newest file still has its space ahead, as after a crash.
    assert journal_file_path(tmp_path, 2).stat().st_size > writer.end
    newest_end = writer.end
    assert replayed_entry_ids(tmp_path) == list(range(11))
    assert journal_file_path(tmp_path, 2).stat().st_size == newest_end


def test_a_crash_leaves_zeros_that_replay_trims_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    writer = JournalWriter(live, 1, 1 << 30, preallocation_bytes=STEP)
    writer.create(None)
    writer.write_group(group_of(0, 1, 2))
    # What the disk holds if the process dies now (no close).
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    writer.close()
    assert journal_file_path(crashed, 1).stat().st_size > writer.end
    with caplog.at_level(logging.INFO):
        assert replayed_entry_ids(crashed) == [0, 1, 2]
    assert journal_file_path(crashed, 1).stat().st_size == writer.end
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_refused_allocation_only_costs_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refuse(fd: int, data: memoryview, offset: int) -> int:
        calls.append(offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", refuse)
    writer = JournalWriter(tmp_path, 1, 1 << 30, preallocation_bytes=STEP)
    writer.create(None)
    writer.write_group(group_of(0))
    writer.write_group(group_of(1))
    path = journal_file_path(tmp_path, 1)
    assert path.stat().st_size == writer.end
    assert len(calls) == 2  # tried again for the next group
    writer.close()
    assert replayed_entry_ids(tmp_path) == [0, 1]


def test_an_allocation_that_fails_after_growing_the_file_is_still_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.pwrite

    def grow_then_fail(fd: int, data: memoryview, offset: int) -> int:
        real(fd, data[: len(data) // 2], offset)  # some zeros were written before the error
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", grow_then_fail)
    writer = JournalWriter(tmp_path, 1, 1 << 30, preallocation_bytes=STEP)
    writer.create(None)
    writer.write_group(group_of(0, 1))
    path = journal_file_path(tmp_path, 1)
    assert path.stat().st_size > writer.end
    writer.close()
    assert path.stat().st_size == writer.end
    assert replayed_entry_ids(tmp_path) == [0, 1]
