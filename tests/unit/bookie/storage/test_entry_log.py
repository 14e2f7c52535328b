"""Entry logs over real files: reads from buffer, chunk and file; rolling; corruption."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.errors import EntryLogCorrupt
from bookie.storage.entry_log import (
    EntryLogs,
    entry_log_ids,
    entry_log_path,
    pack_location,
    unpack_location,
)
from bookie.storage.format import FILE_HEADER_BYTES

from .helpers import make_packet


def logs_in(directory: Path, **overrides: int) -> EntryLogs:
    directory.mkdir(parents=True, exist_ok=True)
    settings = {"first_log_id": 0, "log_size_bytes_max": 1 << 20, "write_buffer_bytes": 4096}
    settings.update(overrides)
    return EntryLogs(directory, **settings)


def write_everything(logs: EntryLogs) -> None:
    logs.seal()
    chunks = logs.sealed_chunks()
    logs.write_chunks(chunks)
    logs.chunks_written(chunks)


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**40 - 1), st.integers(1, 2**24 - 1))
def test_locations_round_trip(log_id: int, offset: int, size: int) -> None:
    assert unpack_location(pack_location(log_id, offset, size)) == (log_id, offset, size)


def test_an_entry_is_readable_from_buffer_chunk_and_file(tmp_path: Path) -> None:
    logs = logs_in(tmp_path)
    first = logs.append(1, 0, make_packet(1, 0))
    assert logs.read(first, 1, 0) == make_packet(1, 0)
    logs.seal()
    second = logs.append(1, 1, make_packet(1, 1))
    assert logs.read(first, 1, 0) == make_packet(1, 0)  # from the sealed chunk
    chunks = logs.sealed_chunks()
    logs.write_chunks(chunks)
    logs.chunks_written(chunks)
    assert logs.read(first, 1, 0) == make_packet(1, 0)  # from the file
    assert logs.read(second, 1, 1) == make_packet(1, 1)  # still buffered
    assert logs.unwritten_bytes > 0
    logs.close()


def test_full_buffers_are_sealed_for_the_writer(tmp_path: Path) -> None:
    logs = logs_in(tmp_path, write_buffer_bytes=1000)
    sealed: list[int] = []
    logs.on_sealed = lambda: sealed.append(1)
    for entry_id in range(20):
        logs.append(1, entry_id, make_packet(1, entry_id))
    assert sealed
    assert logs.sealed_chunks()
    write_everything(logs)
    assert not logs.has_chunks
    assert logs.unwritten_bytes == 0
    logs.close()


def test_logs_roll_at_their_size_limit(tmp_path: Path) -> None:
    logs = logs_in(tmp_path, log_size_bytes_max=2000, write_buffer_bytes=500)
    locations = [logs.append(1, e, make_packet(1, e)) for e in range(40)]
    write_everything(logs)
    all_logs, rolled = logs.open_logs()
    logs.sync_files(all_logs, rolled)
    logs.logs_closed(rolled)
    assert len(entry_log_ids(tmp_path)) > 2
    assert {unpack_location(location)[0] for location in locations} == set(entry_log_ids(tmp_path))
    for entry_id, location in enumerate(locations):
        assert logs.read(location, 1, entry_id) == make_packet(1, entry_id)
    logs.close()


def test_a_header_without_records_creates_no_file(tmp_path: Path) -> None:
    logs = logs_in(tmp_path)
    write_everything(logs)
    assert entry_log_ids(tmp_path) == []
    logs.close()


def test_a_damaged_record_raises_entry_log_corrupt(tmp_path: Path) -> None:
    logs = logs_in(tmp_path)
    location = logs.append(4, 9, make_packet(4, 9))
    write_everything(logs)
    path = entry_log_path(tmp_path, 0)
    data = bytearray(path.read_bytes())
    data[FILE_HEADER_BYTES + 40] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(EntryLogCorrupt, match="checksum"):
        logs.read(location, 4, 9)
    logs.close()


def test_a_missing_log_raises_entry_log_corrupt(tmp_path: Path) -> None:
    logs = logs_in(tmp_path)
    with pytest.raises(EntryLogCorrupt, match="cannot read"):
        logs.read(pack_location(7, FILE_HEADER_BYTES, 100), 1, 0)
    logs.close()
