"""Entry-log compaction: give back the disk space of deleted and overwritten entries.

Entry logs are append-only and shared by every ledger of a directory, so
deleting a ledger (garbage collection) or writing an entry again frees no
space by itself: it only makes records *dead*, records no index row points
at.  `DirectoryCompactor.run` reclaims that space in one ledger directory:

1. Measure.  Live bytes per log come from the index (`LedgerIndex.log_usage`,
   one scan); a log's live fraction is its live bytes over its record bytes
   (file size minus the header).  Only *compactable* logs are considered:
   closed (every byte written and synced, `EntryLogs.is_open` false) and out
   of reach of the entry locations held in memory, i.e. older than the log that
   was current when the last completed checkpoint began (`hot_log_id_min`),
   or written by compaction itself.
2. Delete every log with no live byte, first.  That needs no free space, so it
   works on a full disk, and after ledgers are deleted it is most of the gain.
3. Copy the logs whose live fraction is under the threshold, emptiest first.
   A source is read in pieces of `read_bytes` in a worker thread, and each
   record the index still points at (same log, same offset) is appended
   verbatim (it carries its own ids and CRC) to an *output* log.  When the
   output is full, or the pass ends:
   a. fdatasync the output and fsync the directory;
   b. ONE index transaction (`LedgerIndex.repoint`): point every copied entry
      at its copy if it still points at the record copied, unmark the output,
      mark the sources whose every live record is now copied;
   c. check that no entry points into those sources any more, delete their
      files, and unmark them.

Crash safety: a kill -9 at any instant loses nothing live.  Before the commit
(b) the sources are authoritative and untouched; after it the output is, and
it was made durable first (a).  What a crash can leave behind is marked in the
index's `doomed_logs`: an output is marked, durably, before its file is
created, and unmarked by its commit; sources are marked by the commit.  At
start-up, before the first new log id is chosen, `sweep_doomed_logs` deletes
every marked log that no entry points into (an output whose commit never
happened, a source whose deletion did not) and clears the marks.

Concurrency.  Entries only ever *leave* a compactable log: adds and journal
replay write to the current log, checkpoints insert locations of logs no older
than `hot_log_id_min`, and compaction points entries at its outputs.  So the
live records of a source can only become fewer while it is copied; the
condition in (b) keeps any newer state (a ledger deleted, an entry written
again: its copy is simply garbage in the output); and the check in (c) can
fail only when a record could not be read (damage), and then the log is kept
and reported, never deleted.  Index writes happen under the storage's
checkpoint lock, so never at the same time as a checkpoint's.  Reads go on
throughout: `read_entry` looks up and reads in one step on the event loop, so
a read that found an old location has finished before the commit returns, and
the old file is deleted only after that.

Full disk.  Step 2 comes first because it needs no space.  A source is copied
only if `free_bytes_reserve` bytes stay free after copying its live bytes;
otherwise it is skipped and counted (`logs_skipped_no_space`), and the
emptiest logs, which need the least room and free the most, come first.
Failures while copying (ENOSPC included) abandon the output, which nothing
points at, and end the pass with an error in the report; the storage goes on.
A failed index *write* stops the storage, like a failed checkpoint: what is
durable is no longer known.  A failed index *read* (a damaged index: the index
raises it as a `StorageError`) ends the pass with an error in the report, like
a failed copy; a log is only deleted after a read that succeeded said nothing
points into it.

Rate.  Between pieces the pass yields to the event loop and sleeps as needed
to stay under `rate_bytes_per_s` of source bytes read, so adds keep the disk
and the interpreter.  Blocking work (reads, writes, fsyncs, sqlite) runs in
worker threads, one at a time.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from bookie import limits
from bookie.errors import StorageError
from bookie.storage.entry_log import EntryLogs, entry_log_ids, entry_log_path
from bookie.storage.failures import storage_error
from bookie.storage.format import (
    ENTRY_LOG_MAGIC,
    FILE_HEADER_BYTES,
    RECORD_PREFIX_BYTES,
    decode_entry_log_record_at,
    decode_file_header,
    encode_file_header,
    entry_log_record_size_at,
)
from bookie.storage.index import LedgerIndex, Move
from bookie.storage.journal import fsync_directory

logger = logging.getLogger(__name__)

Fail = Callable[[StorageError], None]
"""Stops the whole storage (the journal's `fail`): called when an index write fails."""

_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """How compaction behaves; every default comes from `bookie.limits`."""

    live_fraction_threshold: float = limits.compaction_live_fraction_threshold_default
    rate_bytes_per_s: int = limits.compaction_rate_bytes_per_s_default
    free_bytes_reserve: int = limits.compaction_free_bytes_reserve_default
    output_bytes_max: int = limits.entry_log_size_bytes_max_default
    read_bytes: int = limits.compaction_read_bytes
    moved_entries_max: int = limits.compaction_moved_entries_max

    def __post_init__(self) -> None:
        assert 0.0 <= self.live_fraction_threshold <= 1.0
        assert self.rate_bytes_per_s > 0
        assert self.free_bytes_reserve >= 0
        assert self.output_bytes_max > FILE_HEADER_BYTES
        assert self.read_bytes > RECORD_PREFIX_BYTES
        assert self.moved_entries_max > 0


@dataclass(frozen=True, slots=True)
class LogUsage:
    """How much of one entry log is still live."""

    log_id: int
    live_bytes: int
    file_bytes: int

    @property
    def live_fraction(self) -> float:
        """Live bytes over record bytes (the header is not counted); 0.0 for an empty log."""
        record_bytes = self.file_bytes - FILE_HEADER_BYTES
        if record_bytes <= 0:
            return 0.0
        return min(1.0, self.live_bytes / record_bytes)


def select_logs(usages: list[LogUsage], live_fraction_threshold: float) -> list[LogUsage]:
    """The logs worth compacting, emptiest first: those with no live byte, then those
    whose live fraction is under the threshold (ties: fewer live bytes, then older)."""
    chosen = [
        usage
        for usage in usages
        if usage.live_bytes == 0 or usage.live_fraction < live_fraction_threshold
    ]
    chosen.sort(key=lambda usage: (usage.live_fraction, usage.live_bytes, usage.log_id))
    return chosen


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one compaction pass did (summed over directories with `+`)."""

    logs_deleted: int = 0
    """Logs with no live byte, deleted without copying."""
    logs_compacted: int = 0
    """Logs whose live entries were copied to an output, then deleted."""
    entries_moved: int = 0
    bytes_removed: int = 0
    """Sizes of the log files deleted."""
    bytes_written: int = 0
    """Sizes of the output logs kept."""
    logs_skipped_no_space: int = 0
    errors: tuple[str, ...] = ()

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_removed - self.bytes_written

    def __add__(self, other: CompactionReport) -> CompactionReport:
        return CompactionReport(
            logs_deleted=self.logs_deleted + other.logs_deleted,
            logs_compacted=self.logs_compacted + other.logs_compacted,
            entries_moved=self.entries_moved + other.entries_moved,
            bytes_removed=self.bytes_removed + other.bytes_removed,
            bytes_written=self.bytes_written + other.bytes_written,
            logs_skipped_no_space=self.logs_skipped_no_space + other.logs_skipped_no_space,
            errors=self.errors + other.errors,
        )


class _Tally:
    """The report of a pass while it runs."""

    __slots__ = (
        "logs_deleted",
        "logs_compacted",
        "entries_moved",
        "bytes_removed",
        "bytes_written",
        "logs_skipped_no_space",
        "errors",
    )

    def __init__(self) -> None:
        self.logs_deleted = 0
        self.logs_compacted = 0
        self.entries_moved = 0
        self.bytes_removed = 0
        self.bytes_written = 0
        self.logs_skipped_no_space = 0
        self.errors: list[str] = []

    def error(self, message: str) -> None:
        logger.error("compaction: %s", message)
        self.errors.append(message)

    def report(self) -> CompactionReport:
        return CompactionReport(
            logs_deleted=self.logs_deleted,
            logs_compacted=self.logs_compacted,
            entries_moved=self.entries_moved,
            bytes_removed=self.bytes_removed,
            bytes_written=self.bytes_written,
            logs_skipped_no_space=self.logs_skipped_no_space,
            errors=tuple(self.errors),
        )


# --- start-up -----------------------------------------------------------------------------------


def sweep_doomed_logs(directory: Path, index: LedgerIndex) -> list[int]:
    """Delete the logs a crash left marked (module docstring) and clear every mark.

    Runs at start-up, before any new log id is chosen, so a mark never names a
    log of the new process (blocking).  Returns the ids of the files deleted.
    A marked log that entries still point into is kept, with a warning.
    """
    doomed = index.doomed_logs()
    if not doomed:
        return []
    referenced = index.referenced_logs(doomed)
    deleted = []
    for log_id in doomed:
        if log_id in referenced:
            logger.warning(
                "entry log %08x in %s was marked for deletion but entries still point"
                " into it: kept",
                log_id,
                directory,
            )
            continue
        path = entry_log_path(directory, log_id)
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as error:
            raise storage_error(error, f"deleting compacted entry log {path}") from error
        deleted.append(log_id)
    index.forget_doomed(doomed)
    return deleted


# --- reading a source (worker threads) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Piece:
    """A piece of a source log and the valid records in it."""

    offset: int
    """Of the piece in the source file."""
    data: memoryview
    records: list[tuple[int, int, int, int]]
    """(offset in the piece, size, ledger_id, entry_id) of each record, in order."""


@dataclass(frozen=True, slots=True)
class _Record:
    """One live record found in a source piece."""

    offset: int
    """In the source file."""
    data: memoryview
    """The whole record, prefix included, as it is copied."""
    ledger_id: int
    entry_id: int


class _SourceReader:
    """Walks the records of one closed log, piece by piece."""

    __slots__ = ("log_id", "fd", "file_bytes", "offset", "finished")

    def __init__(self, directory: Path, log_id: int) -> None:
        self.log_id = log_id
        self.fd = os.open(entry_log_path(directory, log_id), os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.file_bytes = os.fstat(self.fd).st_size
            header = os.pread(self.fd, FILE_HEADER_BYTES, 0)
        except BaseException:
            os.close(self.fd)
            raise
        self.offset = FILE_HEADER_BYTES
        # A log whose header is not its own holds nothing this reader trusts;
        # if entries point into it, the check after the commit keeps it.
        self.finished = decode_file_header(ENTRY_LOG_MAGIC, header) != log_id

    def read_piece(self, bytes_max: int) -> _Piece:
        """The next piece of the log and the records in it.

        Stops at the first offset that does not hold a valid record: the end
        of the file, a torn tail left by a crash (nothing points there), or
        damage (the check after the commit finds what still points there).
        """
        assert not self.finished
        base = self.offset
        want = min(bytes_max, self.file_bytes - base)
        data = memoryview(os.pread(self.fd, want, base)) if want > 0 else memoryview(b"")
        records: list[tuple[int, int, int, int]] = []
        position = 0
        while True:
            size = entry_log_record_size_at(data, position)
            if size is not None and position + size > len(data):
                if base + position + size > self.file_bytes:
                    self.finished = True  # cut short by the end of the file: a torn tail
                elif position == 0:
                    # One record larger than a piece: read exactly it.
                    data = memoryview(os.pread(self.fd, size, base))
                    continue
                break
            record = None if size is None else decode_entry_log_record_at(data, position)
            if record is None:
                cut_by_piece = position + RECORD_PREFIX_BYTES > len(data)
                if not cut_by_piece or base + len(data) >= self.file_bytes:
                    self.finished = True
                break
            records.append((position, record.end - position, record.ledger_id, record.entry_id))
            position = record.end
        self.offset = base + position
        if self.offset >= self.file_bytes:
            self.finished = True
        # Every piece either holds a record or ends the walk: no pass loops for ever.
        assert records or self.finished
        return _Piece(base, data, records)

    def close(self) -> None:
        os.close(self.fd)


# --- writing an output (worker threads) ---------------------------------------------------------


class _Output:
    """A compaction output log being written, and the moves its commit will make."""

    __slots__ = (
        "log_id",
        "directory",
        "fd",
        "buffer",
        "written",
        "bytes_max",
        "entries_max",
        "write_bytes",
        "ledger_ids",
        "entry_ids",
        "source_log_ids",
        "source_offsets",
        "offsets",
        "sources",
    )

    def __init__(self, directory: Path, log_id: int, settings: CompactionSettings) -> None:
        self.log_id = log_id
        self.directory = directory
        self.fd = os.open(
            entry_log_path(directory, log_id),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
            0o644,
        )
        self.buffer = bytearray(encode_file_header(ENTRY_LOG_MAGIC, log_id))
        self.written = 0
        self.bytes_max = settings.output_bytes_max
        self.entries_max = settings.moved_entries_max
        self.write_bytes = settings.read_bytes
        # Five flat arrays instead of a tuple per entry: an output may move a
        # million entries, and 40 bytes each is what this costs.
        self.ledger_ids = array("q")
        self.entry_ids = array("q")
        self.source_log_ids = array("q")
        self.source_offsets = array("q")
        self.offsets = array("q")
        self.sources: list[int] = []
        """Sources whose every live record is in this output or an earlier committed one."""

    @property
    def size(self) -> int:
        return self.written + len(self.buffer)

    @property
    def entries(self) -> int:
        return len(self.offsets)

    @property
    def full(self) -> bool:
        return self.size >= self.bytes_max or self.entries >= self.entries_max

    def append(self, source_log_id: int, record: _Record) -> None:
        self.offsets.append(self.size)
        self.ledger_ids.append(record.ledger_id)
        self.entry_ids.append(record.entry_id)
        self.source_log_ids.append(source_log_id)
        self.source_offsets.append(record.offset)
        self.buffer += record.data
        if len(self.buffer) >= self.write_bytes:
            self.flush()

    def flush(self) -> None:
        view = memoryview(self.buffer)
        while view:
            count = os.pwrite(self.fd, view, self.written)
            view = view[count:]
            self.written += count
        self.buffer = bytearray()

    def sync(self) -> None:
        """Step (a): every byte written and durable, and the file's name too."""
        self.flush()
        os.fdatasync(self.fd)
        self.close()
        fsync_directory(self.directory)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def moves(self) -> Iterator[Move]:
        return zip(
            itertools.repeat(self.log_id, self.entries),
            self.offsets,
            self.ledger_ids,
            self.entry_ids,
            self.source_log_ids,
            self.source_offsets,
            strict=True,
        )


class _Pacer:
    """Keeps a pass under its byte rate by sleeping between pieces."""

    __slots__ = ("rate_bytes_per_s", "start_s", "bytes")

    def __init__(self, rate_bytes_per_s: int) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self.start_s = anyio.current_time()
        self.bytes = 0

    async def pace(self, count: int) -> None:
        self.bytes += count
        delay_s = self.start_s + self.bytes / self.rate_bytes_per_s - anyio.current_time()
        if delay_s > 0:
            await anyio.sleep(delay_s)
        else:
            await anyio.lowlevel.checkpoint()


# --- the pass -----------------------------------------------------------------------------------


class DirectoryCompactor:
    """Compaction of one ledger directory (module docstring); one pass at a time."""

    def __init__(
        self, directory: Path, logs: EntryLogs, index: LedgerIndex, settings: CompactionSettings
    ) -> None:
        self.directory = directory
        self.settings = settings
        self.logs = logs
        self.index = index
        self.hot_log_id_min = logs.current_log_id
        """Logs from this id on may have entry locations held in memory (the storage
        raises it each time a checkpoint completes)."""
        self.outputs: set[int] = set()
        """Output logs of this process still on disk: compactable although not old."""
        self.kept: set[int] = set()
        """Logs found damaged: never compacted again by this process."""

    def compactable(self, log_id: int) -> bool:
        if self.logs.is_open(log_id) or log_id in self.kept:
            return False
        return log_id < self.hot_log_id_min or log_id in self.outputs

    async def run(self, lock: anyio.Lock, fail: Fail) -> CompactionReport:
        """One pass: measure, delete empty logs, copy sparse ones.

        `lock` is the storage's checkpoint lock (index writes take it); `fail`
        stops the storage when an index write fails.  Never raises for an
        operating error: errors are logged and listed in the report."""
        tally = _Tally()
        try:
            names = await anyio.to_thread.run_sync(entry_log_ids, self.directory)
        except OSError as error:
            tally.error(f"listing entry logs of {self.directory}: {error}")
            return tally.report()
        candidates = [log_id for log_id in names if self.compactable(log_id)]
        if not candidates:
            return tally.report()
        try:
            usages = await anyio.to_thread.run_sync(self._measure, candidates)
        except (OSError, StorageError) as error:
            tally.error(f"measuring entry logs of {self.directory}: {error}")
            return tally.report()
        chosen = select_logs(usages, self.settings.live_fraction_threshold)
        for usage in chosen:
            if usage.live_bytes == 0 and await self.remove(usage.log_id, tally):
                tally.logs_deleted += 1
                tally.bytes_removed += usage.file_bytes
        sparse = [usage for usage in chosen if usage.live_bytes > 0]
        if sparse:
            await _Pass(self, lock, fail, tally).copy(sparse)
        return tally.report()

    def _measure(self, candidates: list[int]) -> list[LogUsage]:
        live_bytes = self.index.log_usage()
        return [
            LogUsage(
                log_id=log_id,
                live_bytes=live_bytes.get(log_id, 0),
                file_bytes=entry_log_path(self.directory, log_id).stat().st_size,
            )
            for log_id in candidates
        ]

    async def remove(self, log_id: int, tally: _Tally) -> bool:
        """Delete the file of a log no entry points into; False (error reported) if it fails."""
        path = entry_log_path(self.directory, log_id)
        try:
            await anyio.to_thread.run_sync(path.unlink)
        except OSError as error:
            tally.error(f"deleting entry log {path}: {error}")
            return False
        self.logs.forget(log_id)
        self.outputs.discard(log_id)
        return True


class _Pass:
    """Step 3 of one pass: copying sparse logs into outputs, committing, deleting."""

    def __init__(
        self, compactor: DirectoryCompactor, lock: anyio.Lock, fail: Fail, tally: _Tally
    ) -> None:
        self.compactor = compactor
        self.directory = compactor.directory
        self.settings = compactor.settings
        self.index = compactor.index
        self.lock = lock
        self.fail = fail
        self.tally = tally
        self.output: _Output | None = None
        self.walked: list[int] = []
        """Sources walked to their end while no output was open."""
        self.file_bytes: dict[int, int] = {}

    async def copy(self, sparse: list[LogUsage]) -> None:
        pacer = _Pacer(self.settings.rate_bytes_per_s)
        try:
            for usage in sparse:
                self.file_bytes[usage.log_id] = usage.file_bytes
                if await self._room_for(usage):
                    await self._copy_source(usage.log_id, pacer)
                else:
                    self.tally.logs_skipped_no_space += 1
            if self.output is not None:
                output, self.output = self.output, None
                await self._finish(output)
            walked, self.walked = self.walked, []
            await self._delete_sources(walked, marked=False)
        except (OSError, StorageError) as error:
            self.tally.error(f"compaction of {self.directory} stopped: {error}")
        finally:
            if self.output is not None:
                with anyio.CancelScope(shield=True):
                    await self._abandon(self.output)

    async def _room_for(self, usage: LogUsage) -> bool:
        try:
            free_bytes = (await anyio.to_thread.run_sync(shutil.disk_usage, self.directory)).free
        except OSError as error:
            raise storage_error(error, f"measuring free space of {self.directory}") from error
        return free_bytes >= usage.live_bytes + self.settings.free_bytes_reserve

    async def _copy_source(self, log_id: int, pacer: _Pacer) -> None:
        source = await anyio.to_thread.run_sync(_SourceReader, self.directory, log_id)
        try:
            while not source.finished:
                piece = await anyio.to_thread.run_sync(source.read_piece, self.settings.read_bytes)
                live = await anyio.to_thread.run_sync(self._live_records, log_id, piece)
                while live:
                    output = self.output if self.output is not None else await self._open_output()
                    live = await anyio.to_thread.run_sync(_append, output, log_id, live)
                    if output.full:
                        self.output = None
                        await self._finish(output)
                await pacer.pace(len(piece.data))
        finally:
            source.close()
        if self.output is not None:
            self.output.sources.append(log_id)
        else:
            self.walked.append(log_id)

    def _live_records(self, log_id: int, piece: _Piece) -> list[_Record]:
        """The records of a piece that the index still points at (worker thread)."""
        if not piece.records:
            return []
        spans: dict[int, tuple[int, int]] = {}
        for _, _, ledger_id, entry_id in piece.records:
            first, last = spans.get(ledger_id, (entry_id, entry_id))
            spans[ledger_id] = (min(first, entry_id), max(last, entry_id))
        live_offsets = self.index.live_offsets(
            log_id, [(ledger_id, first, last) for ledger_id, (first, last) in spans.items()]
        )
        data, base = piece.data, piece.offset
        return [
            _Record(base + position, data[position : position + size], ledger_id, entry_id)
            for position, size, ledger_id, entry_id in piece.records
            if base + position in live_offsets
        ]

    async def _open_output(self) -> _Output:
        """Mark a new output durably, then create its file."""
        assert self.output is None
        log_id = self.compactor.logs.reserve_log_id()
        await self._write_index(self.index.doom, log_id)
        try:
            output = await anyio.to_thread.run_sync(_Output, self.directory, log_id, self.settings)
        except OSError:
            with anyio.CancelScope(shield=True):
                await self._write_index(self.index.forget_doomed, [log_id])
            raise
        # Sources finished since the last commit are emptied by this output's.
        output.sources.extend(self.walked)
        self.walked = []
        self.output = output
        return output

    async def _finish(self, output: _Output) -> None:
        """Steps (a), (b) and (c) for one output."""
        assert self.output is not output
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(output.sync)
            except OSError:
                await self._abandon(output)
                raise
            moved = await self._write_index(
                self.index.repoint, output.log_id, output.moves(), output.sources
            )
            self.tally.entries_moved += moved
            if moved:
                self.compactor.outputs.add(output.log_id)
                self.tally.bytes_written += output.size
            elif not await self.compactor.remove(output.log_id, self.tally):
                # Every copied entry was deleted or written again meanwhile, so
                # nothing points into the output; a later pass deletes it.
                self.compactor.outputs.add(output.log_id)
            await self._delete_sources(output.sources, marked=True)

    async def _delete_sources(self, sources: list[int], *, marked: bool) -> None:
        """Step (c): delete the sources no entry points into any more, then unmark them."""
        if not sources:
            return
        referenced = await anyio.to_thread.run_sync(self.index.referenced_logs, sources)
        for log_id in sources:
            if log_id in referenced:
                self.compactor.kept.add(log_id)
                self.tally.error(
                    f"entry log {entry_log_path(self.directory, log_id)} kept: entries still"
                    " point into it after its live records were copied (a record could not"
                    " be read)"
                )
            elif await self.compactor.remove(log_id, self.tally):
                self.tally.logs_compacted += 1
                self.tally.bytes_removed += self.file_bytes[log_id]
        if marked:
            await self._write_index(self.index.forget_doomed, sources)

    async def _abandon(self, output: _Output) -> None:
        """Remove an output whose commit did not happen: nothing points into it."""
        if self.output is output:
            self.output = None
        path = entry_log_path(self.directory, output.log_id)
        try:
            output.close()
            await anyio.to_thread.run_sync(_unlink_if_present, path)
        except OSError as error:
            self.tally.error(f"removing abandoned output {path}: {error} (start-up removes it)")
            return
        await self._write_index(self.index.forget_doomed, [output.log_id])

    async def _write_index(self, write: Callable[..., _R], *args: object) -> _R:
        """An index write, under the checkpoint lock; its failure stops the storage."""
        async with self.lock:
            try:
                return await anyio.to_thread.run_sync(write, *args)
            except StorageError as error:
                self.fail(error)
                raise


def _append(output: _Output, source_log_id: int, live: list[_Record]) -> list[_Record]:
    """Copy records into the output until it is full; returns those left (worker thread)."""
    for index, record in enumerate(live):
        if output.full:
            return live[index:]
        output.append(source_log_id, record)
    return []


def _unlink_if_present(path: Path) -> None:
    path.unlink(missing_ok=True)
