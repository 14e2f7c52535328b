"""The journal: the bookie's write-ahead log and its durability point.

Every mutation is appended, encoded (bookie/storage/format.py), to an
in-memory buffer on the event loop and gets a *ticket*.  One background task,
`Journal.run`, owns all journal I/O: it takes the whole buffer as one *group*,
writes it with one `os.write` and makes it durable with one `os.fdatasync`,
then advances `synced_ticket` to the group's last ticket and calls the sync
listeners.  While one group is being synced the next one fills, so groups
grow with the load by themselves.

Where a group is written.  On a fast disk, on the event loop itself, as
Redis's `appendfsync always` does: the loop stops for the sync (requests
arriving meanwhile wait in the socket buffers and make the next group), and
no thread is woken.  On a slow one, in the journal's own thread (`IoThread`),
so the loop keeps serving reads while the disk works.  The rule: a group goes
on the loop when the last *plain* group (one write and one sync into space
already allocated, no new file) took at most `sync_on_loop_us_max`; the
first group, and every group that starts a file or allocates space, goes to
the thread.  Groups in the thread are timed too, so a disk that becomes fast
again brings the groups back to the loop.  A disk that stalls without warning
stalls the loop once, for one group, before the groups move to the thread.

Group rules (BookKeeper's): a group is written as soon as the task finds the
buffer non-empty when `flush_when_queue_empty` is on (the default); otherwise
when `group_bytes` are buffered or the group has been filling for
`group_wait_ms`, whichever comes first.  "Filling since" is the later of the
previous group's write and the task waking up for the group's first record,
which is within one loop iteration of that record's arrival.

Invariants:

* Tickets are issued in journal order, so when a group is durable every
  smaller ticket is too; `synced_ticket` only grows.
* Only the `run` task writes journal files, and one group at a time.
* A failed write or fsync stops the journal for good (`fail`): `failure` is
  set, listeners are called once, later appends raise the failure.  What a
  failed group left on disk is a torn tail for the next start to truncate.
* The buffer is bounded: past `buffer_bytes_max` an append raises
  `StorageBusy` and changes nothing; the in-flight group is at most as large,
  so the journal holds at most twice the bound in memory.
* A new file is started on every open and when the current one reaches its
  size limit; a file's header is durable (file and directory fsynced) before
  any record is written to it.  Hence every file except the newest ends on a
  record boundary, and only the newest may have a torn tail.
* A file started while its predecessor exists begins with a PREVIOUS_FILE
  record, durable with its header, saying where the predecessor ended; a
  predecessor shorter or longer than that has been damaged.

Each group's write-and-sync time, records and bytes are observed in the
journal's histograms (`sync_seconds`, `group_records`, `group_bytes`), on the
loop, once per group.

Replay (`scan_journal`, `truncate_junk_tails`, `replay_journal`) reads the files
after the checkpoint mark.  A record that is not valid ends the file's valid
part; if a valid record can still be found after it in the same file, the
damage is *before* the tail and `JournalCorrupt` is raised, naming the file
and offset; otherwise it is a torn or junk tail of the newest file, which is
truncated with a warning.  A file replay needs that is missing (the mark's
own, or one between it and the newest: ids are consecutive), or that does not
end where its successor's PREVIOUS_FILE record says (cut on a record boundary,
which no record check can see), is `JournalCorrupt` too, never a replay that
starts later or skips records.  Files written before PREVIOUS_FILE existed
have no such record, and their predecessors are not checked.  Scanning happens in
full before anything is changed, so an open that fails on corruption leaves
the files as they were.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from bookie import limits
from bookie.errors import JournalCorrupt, StorageBusy, StorageError
from bookie.metrics import COUNT_BUCKETS, LATENCY_BUCKETS_S, SIZE_BUCKETS_BYTES, Histogram
from bookie.storage.failures import storage_error
from bookie.storage.format import (
    FILE_HEADER_BYTES,
    JOURNAL_MAGIC,
    JournalKind,
    append_journal_record,
    decode_file_header,
    encode_file_header,
    find_journal_record,
    is_zeros,
    iter_journal_records,
)
from bookie.storage.io_thread import IoThread

logger = logging.getLogger(__name__)

_FILE_NAME = re.compile(r"^([0-9a-f]{16})\.journal$")
_NEVER = math.inf


@dataclass(frozen=True, slots=True, order=True)
class JournalMark:
    """A position in the journal: replay starts at `offset` of file `file_id`."""

    file_id: int
    offset: int


NO_MARK = JournalMark(0, 0)
"""The mark of a bookie that never checkpointed: replay starts at the oldest file.
It names no file: journal file ids start at 1, and a real mark's offset is at
least the size of a file header."""


def journal_file_path(journal_dir: Path, file_id: int) -> Path:
    return journal_dir / f"{file_id:016x}.journal"


def journal_files(journal_dir: Path) -> list[tuple[int, Path]]:
    """Every journal file of the directory as (file id, path), ascending."""
    files = []
    for path in journal_dir.iterdir():
        match = _FILE_NAME.match(path.name)
        if match is not None:
            files.append((int(match.group(1), 16), path))
    return sorted(files)


def fsync_directory(directory: Path) -> None:
    """Make a file creation, rename or removal in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- replay -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalFileScan:
    """What replay found in one journal file at or after the mark."""

    path: Path
    file_id: int
    start: int
    """Offset where replay begins (the mark's offset in the mark's file)."""
    valid_end: int
    """End of the last valid record; 0 when the file has no valid header."""
    size_bytes: int
    zero_tail: bool
    """Every byte after `valid_end` is zero: space allocated ahead and never written
    (or a torn tail that the disk left zeroed), rather than junk."""
    previous_bytes: int | None = None
    """Where the predecessor ended, by this file's PREVIOUS_FILE record (None: no
    record was scanned: none written, or the file is the mark's own)."""


def scan_journal(journal_dir: Path, mark: JournalMark) -> list[JournalFileScan]:
    """Check every file from the mark on, changing nothing; raise `JournalCorrupt`
    on damage before a tail (see the module docstring for the rules)."""
    files = [
        (file_id, path) for file_id, path in journal_files(journal_dir) if file_id >= mark.file_id
    ]
    _check_complete(journal_dir, mark, [file_id for file_id, _ in files])
    scans = []
    for position, (file_id, path) in enumerate(files):
        newest = position == len(files) - 1
        data = memoryview(path.read_bytes())
        header_file_id = decode_file_header(JOURNAL_MAGIC, data)
        if (
            header_file_id is None
            and newest
            and file_id != mark.file_id
            and find_journal_record(data, 0) is None
        ):
            # Created but its header never reached the disk: nothing was written to it.
            # (Not the mark's file: a mark is taken only after its file's header is durable.)
            scans.append(JournalFileScan(path, file_id, 0, 0, len(data), is_zeros(data, 0)))
            continue
        if header_file_id != file_id:
            raise JournalCorrupt(f"{path}: bad journal header at offset 0")
        start = FILE_HEADER_BYTES
        if file_id == mark.file_id:
            start = min(max(start, mark.offset), len(data))
        valid_end = start
        previous_bytes = None
        for record in iter_journal_records(data, start):
            if record.kind is JournalKind.PREVIOUS_FILE and record.offset == FILE_HEADER_BYTES:
                if record.ledger_id != file_id - 1:
                    raise JournalCorrupt(
                        f"{path}: names journal file {record.ledger_id:016x} as its predecessor"
                    )
                previous_bytes = record.argument
            valid_end = record.end
        if valid_end < len(data):
            later = find_journal_record(data, valid_end + 1)
            if later is not None:
                raise JournalCorrupt(
                    f"{path}: damaged record at offset {valid_end} before valid data"
                    f" at offset {later}"
                )
            if not newest:
                raise JournalCorrupt(
                    f"{path}: damaged record at offset {valid_end} in a journal file"
                    " that a newer file follows (only the newest file may end torn)"
                )
        scans.append(
            JournalFileScan(
                path,
                file_id,
                start,
                valid_end,
                len(data),
                is_zeros(data, valid_end),
                previous_bytes,
            )
        )
    _check_lengths(scans)
    return scans


def _check_lengths(scans: list[JournalFileScan]) -> None:
    """Raise `JournalCorrupt` when a file does not end where its successor's
    PREVIOUS_FILE record says it did."""
    for previous, scan in itertools.pairwise(scans):
        if scan.previous_bytes is None or scan.previous_bytes == previous.valid_end:
            continue
        what = "lost its end" if previous.valid_end < scan.previous_bytes else "grew"
        raise JournalCorrupt(
            f"{previous.path}: {what}: its records end at byte {previous.valid_end}, but"
            f" {scan.path.name} was started when it ended at byte {scan.previous_bytes}"
        )


def _check_complete(journal_dir: Path, mark: JournalMark, file_ids: list[int]) -> None:
    """Raise `JournalCorrupt` unless the files from the mark on are all there: the
    mark's own file (a mark names one unless it is `NO_MARK`) and no id skipped up
    to the newest.  Ids are consecutive by construction (a roll-over adds one, a
    start takes the newest plus one, deletion takes the oldest first), so a gap or
    a missing mark file is a file lost, and replay would skip what it held."""
    if mark != NO_MARK and (not file_ids or file_ids[0] != mark.file_id):
        path = journal_file_path(journal_dir, mark.file_id)
        raise JournalCorrupt(
            f"{path}: missing, yet the checkpoint mark {mark.file_id:016x}:{mark.offset}"
            " says replay starts in it (records after the mark would be skipped)"
        )
    for previous, file_id in itertools.pairwise(file_ids):
        if file_id != previous + 1:
            path = journal_file_path(journal_dir, previous + 1)
            raise JournalCorrupt(
                f"{path}: missing between journal files {previous:016x} and {file_id:016x}"
                " (its records would be skipped)"
            )


def truncate_junk_tails(journal_dir: Path, scans: list[JournalFileScan]) -> None:
    """Cut the torn or junk tail found by `scan_journal` (only the newest file has one)."""
    for scan in scans:
        if scan.valid_end == scan.size_bytes:
            continue
        if scan.valid_end == 0:
            logger.warning("removing journal file %s: its header never reached the disk", scan.path)
            scan.path.unlink()
            fsync_directory(journal_dir)
            continue
        if scan.zero_tail:
            logger.info(
                "trimming journal file %s from %d to %d bytes: unused space after its last record",
                scan.path,
                scan.size_bytes,
                scan.valid_end,
            )
        else:
            logger.warning(
                "truncating journal file %s from %d to %d bytes: torn or junk tail",
                scan.path,
                scan.size_bytes,
                scan.valid_end,
            )
        fd = os.open(scan.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, scan.valid_end)
            os.fsync(fd)
        finally:
            os.close(fd)


def replay_journal(
    scans: list[JournalFileScan], apply: Callable[[JournalKind, int, int, bytes], None]
) -> int:
    """Call `apply(kind, ledger_id, argument, payload)` for every valid record after
    the mark, in journal order; returns how many records were applied."""
    applied = 0
    for scan in scans:
        if scan.valid_end <= scan.start:
            continue
        data = memoryview(scan.path.read_bytes())[: scan.valid_end]
        for record in iter_journal_records(data, scan.start):
            if record.kind is JournalKind.PREVIOUS_FILE:
                continue
            apply(record.kind, record.ledger_id, record.argument, bytes(record.payload))
            applied += 1
    return applied


def delete_journal_files_before(journal_dir: Path, file_id: int, kept: int) -> list[Path]:
    """Remove journal files wholly before file `file_id`, except the newest `kept` of them."""
    assert kept >= 0
    older = [path for other_id, path in journal_files(journal_dir) if other_id < file_id]
    doomed = older[: max(0, len(older) - kept)]
    for path in doomed:
        path.unlink()
    if doomed:
        fsync_directory(journal_dir)
    return doomed


# --- writing ----------------------------------------------------------------------------------


class JournalWriter:
    """Blocking writes of journal files; used by the journal's thread only.

    Space is allocated ahead of the records (`limits.journal_preallocation_bytes`
    at a time) by writing zeros: a group written there overwrites blocks the
    file already has, so its fdatasync writes the data and nothing else: not
    the file's size, and not the conversion of blocks reserved but unwritten
    (what `posix_fallocate` leaves, which ext4 must journal on the first write
    into them); docs/storage-format.md ("Journal files") has the measurements.
    A file that is finished (rolled or closed) is cut back to its last record,
    so only the newest file can end in unused zeros, which replay trims like a
    torn tail.  Allocation is an optimisation only: when the filesystem refuses
    it (full), records are appended and the write itself reports a full disk.
    """

    def __init__(
        self,
        journal_dir: Path,
        file_id: int,
        file_size_bytes_max: int,
        *,
        preallocation_bytes: int = limits.journal_preallocation_bytes,
    ) -> None:
        assert file_size_bytes_max > FILE_HEADER_BYTES
        assert preallocation_bytes > 0
        self._journal_dir = journal_dir
        self._file_size_bytes_max = file_size_bytes_max
        self._preallocation_bytes = preallocation_bytes
        self._fd = -1
        self._allocated_end = 0
        """The file's size as allocation left it: records end at `end`, zeros after."""
        self.file_id = file_id
        self.end = 0

    def create(self, previous_bytes: int | None) -> JournalMark:
        """Start file `file_id`: header written and durable, file and directory fsynced.

        `previous_bytes` is the length of file `file_id - 1`, when it exists: it
        goes into the file's PREVIOUS_FILE record, with the header."""
        assert self._fd < 0
        path = journal_file_path(self._journal_dir, self.file_id)
        start = bytearray(encode_file_header(JOURNAL_MAGIC, self.file_id))
        if previous_bytes is not None:
            append_journal_record(
                start, JournalKind.PREVIOUS_FILE, self.file_id - 1, previous_bytes, b""
            )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, start)
            os.fdatasync(fd)
            fsync_directory(self._journal_dir)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.end = self._allocated_end = len(start)
        return JournalMark(self.file_id, self.end)

    def is_plain(self, group_bytes: int) -> bool:
        """Whether a group of this size is one write and one sync: no new file, no allocation."""
        end = self.end
        return end < self._file_size_bytes_max and end + group_bytes <= self._allocated_end

    def write_group(self, group: bytearray) -> JournalMark:
        """Append one group and make it durable; returns the position after it."""
        assert self._fd >= 0
        assert group
        if self.end >= self._file_size_bytes_max:
            ended = self.end
            self.close()
            self.file_id += 1
            self.create(ended)
        group_end = self.end + len(group)
        if group_end > self._allocated_end:
            self._allocate(group_end)
        _write_all(self._fd, group)
        os.fdatasync(self._fd)
        self.end = group_end
        return JournalMark(self.file_id, self.end)

    def close(self) -> None:
        """Cut the file back to its last record (made durable) and close it.

        Raises `OSError` when the cut fails (the descriptor is closed anyway): the
        file then keeps its zeros, which the next start trims as long as no newer
        file was started after it, so a roll-over must not go on.
        """
        if self._fd < 0:
            return
        try:
            if self._allocated_end > self.end:
                os.ftruncate(self._fd, self.end)
                os.fdatasync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1

    def _allocate(self, needed_end: int) -> None:
        """Write a step of zeros after `needed_end` (the end of the group about to be written,
        which fills the space before it), within the file size bound."""
        start = max(self._allocated_end, needed_end)
        target = min(start + self._preallocation_bytes, self._file_size_bytes_max)
        try:
            for offset in range(start, target, len(_ZEROS)):
                _write_all_at(self._fd, _ZEROS[: target - offset], offset)
        except OSError as error:
            # Some zeros may have been written: the size is unknown, but `close`
            # (and replay) cut whatever follows the last record anyway.
            self._allocated_end = max(self._allocated_end, os.fstat(self._fd).st_size)
            logger.debug("journal space not allocated ahead: %s", error)
            return
        self._allocated_end = max(start, target)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_all_at(fd: int, view: memoryview, offset: int) -> None:
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


_ZEROS = memoryview(bytes(limits.journal_preallocation_bytes))
"""What allocating ahead writes (one step's worth, so one write per step)."""


# --- group commit -----------------------------------------------------------------------------


class Journal:
    """Tickets, the group-commit buffer and task, sync listeners and the failure state."""

    def __init__(
        self,
        writer: JournalWriter,
        *,
        group_wait_ms: int,
        group_bytes: int,
        flush_when_queue_empty: bool,
        buffer_bytes_max: int,
        sync_on_loop_us_max: int = limits.journal_sync_on_loop_us_default,
    ) -> None:
        assert group_wait_ms >= 0
        assert 0 < group_bytes <= buffer_bytes_max
        assert sync_on_loop_us_max >= 0
        self._writer = writer
        self._io = IoThread("bookie-journal")
        self._sync_on_loop_s_max = sync_on_loop_us_max / 1_000_000
        self._plain_sync_s = _NEVER
        """How long the last plain group took to write and sync (never: none yet)."""
        self._group_wait_s = group_wait_ms / 1000
        self._group_bytes = group_bytes
        self._flush_when_queue_empty = flush_when_queue_empty
        self._buffer_bytes_max = buffer_bytes_max
        self._buffer = bytearray()
        self._inflight_bytes = 0
        self._position = JournalMark(writer.file_id, writer.end)
        self._ticket = 0
        self._synced_ticket = 0
        self._listeners: list[Callable[[int], None]] = []
        self._failure: StorageError | None = None
        self._wakeup = anyio.Event()
        self._wake_bytes: float = _NEVER
        """`append` wakes the task once the buffer holds this many bytes."""
        self._group_started_s = 0.0
        self._closing = False
        self._running = False
        self._stopped = anyio.Event()
        self._write_s = 0.0
        """How long the last group's write and sync took (set by `_timed_write`)."""
        self.sync_seconds = Histogram(LATENCY_BUCKETS_S)
        """Per group: its write and fsync (metrics, bookie/server/metrics.py)."""
        self.group_records = Histogram(COUNT_BUCKETS)
        self.group_bytes = Histogram(SIZE_BUCKETS_BYTES)

    # --- loop side ----------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Raise what `append` would raise now; lets callers refuse before changing state."""
        if self._failure is not None:
            raise self._failure
        if len(self._buffer) > self._buffer_bytes_max:
            raise StorageBusy(
                f"journal holds {len(self._buffer)} bytes not yet written"
                f" (bound {self._buffer_bytes_max})"
            )

    def append(self, kind: JournalKind, ledger_id: int, argument: int, payload: bytes) -> int:
        """Buffer one record; returns its ticket.  Call `check_writable` first."""
        assert self._failure is None
        assert not self._closing, "the storage is closed"
        # Replay treats a longer record as junk: the wire layer bounds every payload.
        assert len(payload) <= limits.frame_size_bytes_max
        buffer = self._buffer
        append_journal_record(buffer, kind, ledger_id, argument, payload)
        self._ticket += 1
        if len(buffer) >= self._wake_bytes:
            self._wake_bytes = _NEVER
            self._wakeup.set()
        return self._ticket

    @property
    def ticket(self) -> int:
        """The last ticket issued."""
        return self._ticket

    @property
    def synced_ticket(self) -> int:
        return self._synced_ticket

    @property
    def unsynced_bytes(self) -> int:
        """Bytes appended and not yet durable: the buffer and the group being written."""
        return len(self._buffer) + self._inflight_bytes

    @property
    def failure(self) -> StorageError | None:
        return self._failure

    def add_sync_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def mark(self) -> JournalMark:
        """The position after every record appended so far.

        Conservative while a group is in flight: if that group starts a new
        file, the mark points past the end of the old file, and replay then
        simply reads the whole new file (replay is idempotent).
        """
        return JournalMark(
            self._position.file_id,
            self._position.offset + self._inflight_bytes + len(self._buffer),
        )

    def fail(self, failure: StorageError) -> None:
        """Stop for good (see the module docstring); the first failure wins."""
        if self._failure is not None:
            return
        logger.error("storage stopped: %s", failure)
        self._failure = failure
        self._wakeup.set()
        self._notify()

    def _notify(self) -> None:
        for listener in tuple(self._listeners):
            listener(self._synced_ticket)

    # --- the group-commit task ----------------------------------------------------------------

    async def run(self) -> None:
        """Write and sync groups until `close` and everything appended is synced, or a failure."""
        self._running = True
        self._group_started_s = time.monotonic()
        try:
            while self._failure is None:
                if not self._buffer:
                    if self._closing:
                        return
                    await self._wait(1, None)
                    self._group_started_s = time.monotonic()
                    continue
                if not self._flush_when_queue_empty:
                    await self._wait_for_group()
                await self._write_group()
        finally:
            self._stopped.set()

    async def _wait(self, wake_bytes: float, timeout_s: float | None) -> None:
        wakeup = self._wakeup = anyio.Event()
        self._wake_bytes = wake_bytes
        if timeout_s is None:
            # The idle wait of every group under light load: no cancel scope to
            # build and tear down (a measurable share of a lone add's CPU).
            await wakeup.wait()
        else:
            with anyio.move_on_after(timeout_s):
                await wakeup.wait()
        self._wake_bytes = _NEVER

    async def _wait_for_group(self) -> None:
        deadline_s = self._group_started_s + self._group_wait_s
        while len(self._buffer) < self._group_bytes and not self._closing:
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0 or self._failure is not None:
                return
            await self._wait(self._group_bytes, remaining_s)

    async def _write_group(self) -> None:
        group = self._buffer
        last_ticket = self._ticket
        self._buffer = bytearray()
        self._inflight_bytes = len(group)
        self._group_started_s = time.monotonic()
        try:
            plain = self._writer.is_plain(len(group))
            if plain and self._plain_sync_s <= self._sync_on_loop_s_max:
                position = self._timed_write(group, plain)
            else:
                # Shielded: a group handed to the disk is accounted for even when the
                # task is being cancelled, or its tickets would never be synced.
                with anyio.CancelScope(shield=True):
                    position = await self._io.call(self._timed_write, group, plain)
        except OSError as error:
            self.fail(storage_error(error, f"journal write to file {self._writer.file_id:016x}"))
            return
        if self._failure is not None:
            # Another part of the storage failed while this group was written:
            # the tickets stay unsynced, as promised to the listeners already.
            return
        self._position = position
        self._inflight_bytes = 0
        assert last_ticket > self._synced_ticket
        self.sync_seconds.observe(self._write_s)
        self.group_records.observe(last_ticket - self._synced_ticket)
        self.group_bytes.observe(len(group))
        self._synced_ticket = last_ticket
        self._notify()

    def _timed_write(self, group: bytearray, plain: bool) -> JournalMark:
        """Write and sync `group`; a plain group's time sets where the next one goes."""
        started_s = time.monotonic()
        position = self._writer.write_group(group)
        self._write_s = time.monotonic() - started_s
        if plain:
            self._plain_sync_s = self._write_s
        return position

    async def close(self) -> None:
        """Sync everything appended so far (unless failed) and stop `run`.

        Call it shielded from cancellation: if `run` was cancelled with records
        still buffered, they are written here, so pending tickets still get synced.
        """
        self._closing = True
        self._wakeup.set()
        if self._running:
            # A task cancelled before its first step never ran, and never stops.
            await self._stopped.wait()
        while self._buffer and self._failure is None:
            await self._write_group()
        self._io.stop()
        if self._failure is None:
            assert self._synced_ticket == self._ticket
