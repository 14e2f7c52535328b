"""Entry logs of one ledger directory: where entries live after the journal.

Entries of every ledger placed in the directory are appended to one current
log, `<dir>/<log_id:08x>.log` (layout in bookie/storage/format.py); past its
size limit a new log is started.  An append only copies the record into an
in-memory buffer and returns the record's *location*, an int packing
(log id, offset, size), which the pending index keeps until a checkpoint
moves it to sqlite.  When the buffer reaches `write_buffer_bytes` it is
*sealed* into a chunk; the storage's writer task writes sealed chunks in a
worker thread (`write_chunks`) and then, on the loop, drops them
(`chunks_written`).  Checkpoints fsync the logs (`sync_files`).

Invariants:

* Chunk boundaries are record boundaries, and a log's bytes are, in order:
  written to the file (below `written_end`), in sealed chunks, then in the
  buffer (from `buffer_start`).  A read is served from whichever holds the
  location, so an entry is readable the moment it is appended.
* Each log's file is written by one thread at a time (the writer task's),
  strictly in offset order; a log that was rolled over gets no more bytes, so
  once its chunks are written and synced its write descriptor is closed.  A
  log is *open* until then (`is_open`): a closed log's bytes are all in its
  file and synced, which is what compaction needs of a source.
* Log ids are never reused within a process: appends and compaction outputs
  (`reserve_log_id`) take them from one counter.
* Unwritten bytes (buffer plus chunks) are counted; the storage refuses
  mutations past `limits.entry_log_unwritten_bytes_max` (StorageBusy).
* Logs are never appended to after the process that wrote them stops: every
  open starts a new log, so bytes past the last checkpoint of an old log are
  garbage that nothing indexes (compaction reclaims them later).

Reads of written data use `os.pread` on the event loop: a few microseconds
from the page cache, which is where recent entries are; a bounded LRU cache
keeps read descriptors open.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bookie import limits
from bookie.errors import EntryLogCorrupt
from bookie.storage.format import (
    ENTRY_LOG_MAGIC,
    ENTRY_RECORD_HEAD_BYTES,
    FILE_HEADER_BYTES,
    append_entry_log_record,
    decode_entry_log_record,
    encode_file_header,
)
from bookie.storage.journal import fsync_directory

_FILE_NAME = re.compile(r"^([0-9a-f]{8})\.log$")

_SIZE_BITS: Final = 24
_OFFSET_BITS: Final = 40
_SIZE_MASK: Final = (1 << _SIZE_BITS) - 1
_OFFSET_MASK: Final = (1 << _OFFSET_BITS) - 1
assert ENTRY_RECORD_HEAD_BYTES + limits.frame_size_bytes_max <= _SIZE_MASK
assert 2 * limits.entry_log_size_bytes_max_default <= _OFFSET_MASK


def pack_location(log_id: int, offset: int, size: int) -> int:
    """One int for (log, offset, size): the pending index stores one object per entry."""
    assert 0 <= offset <= _OFFSET_MASK
    assert 0 < size <= _SIZE_MASK
    return (log_id << (_OFFSET_BITS + _SIZE_BITS)) | (offset << _SIZE_BITS) | size


def unpack_location(location: int) -> tuple[int, int, int]:
    """(log_id, offset, size) of a packed location."""
    return (
        location >> (_OFFSET_BITS + _SIZE_BITS),
        (location >> _SIZE_BITS) & _OFFSET_MASK,
        location & _SIZE_MASK,
    )


def entry_log_path(directory: Path, log_id: int) -> Path:
    return directory / f"{log_id:08x}.log"


def entry_log_ids(directory: Path) -> list[int]:
    """Ids of every entry log in the directory, ascending."""
    ids = []
    for path in directory.iterdir():
        match = _FILE_NAME.match(path.name)
        if match is not None:
            ids.append(int(match.group(1), 16))
    return sorted(ids)


class _Log:
    """One entry log being written by this process."""

    __slots__ = ("log_id", "location_base", "buffer", "buffer_start", "written_end", "fd")

    def __init__(self, log_id: int) -> None:
        self.log_id = log_id
        self.location_base = pack_location(log_id, 0, 1) - 1
        """The packed location of offset 0, size 0: `append` adds the rest inline."""
        self.buffer = bytearray(encode_file_header(ENTRY_LOG_MAGIC, log_id))
        self.buffer_start = 0
        self.written_end = 0
        self.fd = -1
        """Write descriptor, opened by the writer thread with the first chunk."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """Sealed bytes of one log, starting at `start`, waiting to be written."""

    log: _Log
    start: int
    data: bytearray


class EntryLogs:
    """The entry logs of one ledger directory."""

    def __init__(
        self,
        directory: Path,
        *,
        first_log_id: int,
        log_size_bytes_max: int,
        write_buffer_bytes: int = limits.entry_log_write_buffer_bytes,
        open_files_max: int = limits.entry_log_open_files_max,
    ) -> None:
        assert log_size_bytes_max <= _OFFSET_MASK // 2
        assert write_buffer_bytes > 0
        assert open_files_max > 0
        self.directory = directory
        self._log_size_bytes_max = log_size_bytes_max
        self._write_buffer_bytes = write_buffer_bytes
        self._open_files_max = open_files_max
        self._current = _Log(first_log_id)
        self._next_log_id = first_log_id + 1
        self._logs: dict[int, _Log] = {first_log_id: self._current}
        """Logs of this process not yet closed: the current one and rolled ones."""
        self._chunks: deque[Chunk] = deque()
        self.unwritten_bytes = len(self._current.buffer)
        self._read_fds: OrderedDict[int, int] = OrderedDict()
        self.on_sealed: Callable[[], None] | None = None
        """Called on the loop when a chunk is sealed (wakes the writer task); None during replay."""

    # --- loop side ----------------------------------------------------------------------------

    def append(self, ledger_id: int, entry_id: int, packet: bytes) -> int:
        """Buffer one record; returns its packed location."""
        log = self._current
        offset = log.buffer_start + len(log.buffer)
        size = append_entry_log_record(log.buffer, ledger_id, entry_id, packet)
        self.unwritten_bytes += size
        location = log.location_base | (offset << _SIZE_BITS) | size
        # The size limit is checked against the whole log, not only when the
        # buffer fills: checkpoints seal the buffer too, and under a light load
        # they always get there first, so a log would otherwise never roll, and
        # the current log is the one compaction can never reclaim.
        if offset + size >= self._log_size_bytes_max:
            self.seal()
            self._current = _Log(self.reserve_log_id())
            self._logs[self._current.log_id] = self._current
            self.unwritten_bytes += len(self._current.buffer)
        elif len(log.buffer) >= self._write_buffer_bytes:
            self.seal()
        return location

    def reserve_log_id(self) -> int:
        """A log id nobody has used in this process (the next roll-over or a compaction output)."""
        log_id = self._next_log_id
        self._next_log_id += 1
        return log_id

    @property
    def current_log_id(self) -> int:
        """The log appends go to now; every later append goes to it or to a newer one."""
        return self._current.log_id

    def is_open(self, log_id: int) -> bool:
        """True while the log may still get bytes or has bytes not yet written and synced."""
        return log_id in self._logs

    def seal(self) -> None:
        """Move the current buffer into a chunk for the writer."""
        log = self._current
        if len(log.buffer) <= (FILE_HEADER_BYTES if log.buffer_start == 0 else 0):
            return  # nothing, or a header without records: no file is needed yet
        self._chunks.append(Chunk(log, log.buffer_start, log.buffer))
        log.buffer_start += len(log.buffer)
        log.buffer = bytearray()
        if self.on_sealed is not None:
            self.on_sealed()

    @property
    def has_chunks(self) -> bool:
        return bool(self._chunks)

    def sealed_chunks(self) -> list[Chunk]:
        """The chunks waiting to be written, oldest first (they stay readable)."""
        return list(self._chunks)

    def chunks_written(self, chunks: list[Chunk]) -> None:
        """Drop chunks `write_chunks` has written (the oldest ones, in order)."""
        for chunk in chunks:
            oldest = self._chunks.popleft()
            assert oldest is chunk
            chunk.log.written_end = chunk.start + len(chunk.data)
            self.unwritten_bytes -= len(chunk.data)
        assert self.unwritten_bytes >= 0

    def written_upto(self) -> dict[int, int]:
        """For each open log, the offset up to which its bytes are sealed (checkpoint target)."""
        return {log_id: log.buffer_start for log_id, log in self._logs.items()}

    def is_written(self, targets: dict[int, int]) -> bool:
        return all(
            self._logs[log_id].written_end >= end
            for log_id, end in targets.items()
            if log_id in self._logs
        )

    def open_logs(self) -> tuple[list[_Log], list[_Log]]:
        """(every log of this process not yet closed, the rolled ones whose every byte is
        written among them).

        A rolled log gets no more bytes, so once it is written a checkpoint may
        sync and close it.  One rolled while a checkpoint was writing may still
        have chunks waiting: it stays open until a later checkpoint, because the
        writer would otherwise reopen a closed file, its last bytes would never
        be synced, and reads of its waiting chunks would miss them."""
        logs = list(self._logs.values())
        return logs, [
            log for log in logs if log is not self._current and log.written_end == log.buffer_start
        ]

    def logs_closed(self, logs: list[_Log]) -> None:
        """Forget rolled logs whose file `sync_files` has closed."""
        for log in logs:
            assert log is not self._current
            self._logs.pop(log.log_id, None)

    def read(self, location: int, ledger_id: int, entry_id: int) -> bytes:
        """The packet at `location`, which the index gives for (ledger_id, entry_id).

        Raises `EntryLogCorrupt` when the record cannot be read back intact.
        """
        log_id, offset, size = unpack_location(location)
        log = self._logs.get(log_id)
        if log is not None and offset >= log.written_end:
            if offset >= log.buffer_start:
                start = offset - log.buffer_start
                return decode_entry_log_record(
                    log.buffer[start : start + size], ledger_id, entry_id
                )
            for chunk in self._chunks:
                if chunk.log is log and chunk.start <= offset < chunk.start + len(chunk.data):
                    start = offset - chunk.start
                    return decode_entry_log_record(
                        chunk.data[start : start + size], ledger_id, entry_id
                    )
            raise AssertionError(f"location {location:#x} is in no buffer of log {log_id}")
        return decode_entry_log_record(self._pread(log_id, offset, size), ledger_id, entry_id)

    def _pread(self, log_id: int, offset: int, size: int) -> bytes:
        fd = self._read_fds.get(log_id)
        try:
            if fd is None:
                fd = os.open(entry_log_path(self.directory, log_id), os.O_RDONLY | os.O_CLOEXEC)
                self._read_fds[log_id] = fd
                if len(self._read_fds) > self._open_files_max:
                    os.close(self._read_fds.popitem(last=False)[1])
            else:
                self._read_fds.move_to_end(log_id)
            return os.pread(fd, size, offset)
        except OSError as error:
            raise EntryLogCorrupt(
                f"entry log {log_id:08x}: cannot read {size} bytes at offset {offset}: {error}"
            ) from error

    def forget(self, log_id: int) -> None:
        """Close the cached read descriptor of a closed log that is being deleted."""
        assert not self.is_open(log_id)
        fd = self._read_fds.pop(log_id, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Close every descriptor (after the final checkpoint synced the logs)."""
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        for log in self._logs.values():
            if log.fd >= 0:
                os.close(log.fd)
                log.fd = -1

    # --- worker-thread side -------------------------------------------------------------------

    def write_chunks(self, chunks: list[Chunk]) -> None:
        """Write chunks to their files (blocking; one thread at a time)."""
        for chunk in chunks:
            log = chunk.log
            if log.fd < 0:
                log.fd = os.open(
                    entry_log_path(self.directory, log.log_id),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                    0o644,
                )
            view = memoryview(chunk.data)
            position = chunk.start
            while view:
                written = os.pwrite(log.fd, view, position)
                view = view[written:]
                position += written

    def sync_files(self, logs: list[_Log], rolled: list[_Log]) -> None:
        """Make what is written to `logs` durable, then close the `rolled` ones, whose
        every byte is written (blocking)."""
        for log in logs:
            if log.fd >= 0:
                os.fdatasync(log.fd)
        fsync_directory(self.directory)
        for log in rolled:
            if log.fd >= 0:
                os.close(log.fd)
                log.fd = -1

    def flush_blocking(self) -> None:
        """Seal, write and drop every buffered byte in the calling thread (replay, start-up)."""
        self.seal()
        chunks = self.sealed_chunks()
        self.write_chunks(chunks)
        self.chunks_written(chunks)
