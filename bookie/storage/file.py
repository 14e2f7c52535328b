"""`FileLedgerStorage`: the storage contract on real disks.

Composition (docs/storage-format.md has the formats and the reasons):

* the journal (bookie/storage/journal.py): every mutation is appended there
  first and is durable, and its ticket synced, once its group is fsynced;
* per ledger directory, entry logs (bookie/storage/entry_log.py) holding the
  entry packets, and a sqlite index (bookie/storage/index.py) holding entry
  locations, ledger state, tombstones and the checkpoint mark.  A ledger lives
  in directory `ledger_id % len(ledger_dirs)`;
* in memory: every ledger's state, and the *pending index*, the locations of
  entries added since the last checkpoint.

Checkpoint (periodic, or early when the pending index is large):
(1) on the loop, note the journal mark P of everything appended so far, seal
the entry-log buffers and take the pending index and dirty ledger state as a
batch; (2) wait for the writer task to write the sealed bytes, then fsync the
entry logs; (3) commit the batch and P to each directory's index in one
transaction; (4) drop the batch from memory and delete journal files wholly
before P.  A crash anywhere replays the journal from the old mark, and replay
is idempotent, so nothing synced is lost.

Compaction (`compact`, run by the bookie's garbage collector): a checkpoint,
so that the index holds every deletion made so far, then one pass per ledger
directory (bookie/storage/compaction.py).  Start-up first deletes what a
compaction interrupted by a crash left behind.

Tasks (one task group, owned by the `open` lifetime): the journal's group
commit, the entry-log writer, the periodic checkpoint.  Blocking work
(writes, fsyncs, sqlite commits, replay) runs in worker threads; the event
loop only does in-memory work, sqlite point lookups and page-cache reads.

Invariants:

* Every mutation is refused (raises, changes nothing) or applied to memory
  and journaled, in that order of checks; the in-memory view is the journal
  replayed onto the last checkpoint.
* A ledger's entries are found, in order, in its pending index, in the batch
  being checkpointed, or (only if `indexed`: this incarnation of the ledger
  has been checkpointed) in the sqlite index.
* Failure of any write, fsync or commit stops the whole storage through the
  journal's `fail`; nothing is checkpointed after it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from bookie import limits
from bookie.errors import StorageBusy, StorageError
from bookie.storage.api import LedgerRecord
from bookie.storage.compaction import (
    CompactionReport,
    CompactionSettings,
    DirectoryCompactor,
    sweep_doomed_logs,
)
from bookie.storage.entry_log import Chunk, EntryLogs, entry_log_ids
from bookie.storage.failures import storage_error
from bookie.storage.format import JournalKind
from bookie.storage.index import (
    INDEX_FILE_NAME,
    CheckpointBatch,
    LedgerIndex,
    LedgerRow,
    read_checkpoint_mark,
)
from bookie.storage.journal import (
    NO_MARK,
    Journal,
    JournalMark,
    JournalWriter,
    delete_journal_files_before,
    journal_files,
    replay_journal,
    scan_journal,
    truncate_junk_tails,
)
from bookie.storage.ranges import merge_ranges, ranges_of
from bookie.wire.packet import packet_lac

logger = logging.getLogger(__name__)

_NO_LOCATIONS: dict[int, int] = {}
"""Shared empty batch of a ledger not being checkpointed; never mutated."""


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """Where and how a bookie stores its data; every default comes from `bookie.limits`.

    The server's config loader validates operator input; the assertions here
    only catch callers that skipped it.
    """

    journal_dir: Path
    ledger_dirs: tuple[Path, ...]
    group_wait_ms: int = limits.journal_group_wait_ms_default
    journal_sync_on_loop_us_max: int = limits.journal_sync_on_loop_us_default
    group_bytes: int = limits.journal_group_bytes_default
    flush_when_queue_empty: bool = limits.journal_flush_when_queue_empty_default
    journal_buffer_bytes_max: int = limits.journal_buffer_bytes_max
    journal_file_size_bytes_max: int = limits.journal_file_size_bytes_max_default
    journal_files_kept: int = limits.journal_files_kept_default
    entry_log_size_bytes_max: int = limits.entry_log_size_bytes_max_default
    entry_log_write_buffer_bytes: int = limits.entry_log_write_buffer_bytes
    entry_log_unwritten_bytes_max: int = limits.entry_log_unwritten_bytes_max
    checkpoint_interval_ms: int = limits.checkpoint_interval_ms_default
    checkpoint_pending_entries_max: int = limits.checkpoint_pending_entries_max
    tombstones_max: int = limits.fenced_deleted_ledgers_remembered_max
    compaction_live_fraction_threshold: float = limits.compaction_live_fraction_threshold_default
    compaction_rate_bytes_per_s: int = limits.compaction_rate_bytes_per_s_default
    compaction_free_bytes_reserve: int = limits.compaction_free_bytes_reserve_default

    def __post_init__(self) -> None:
        assert self.ledger_dirs
        assert len(set(self.ledger_dirs)) == len(self.ledger_dirs)
        assert 0 < self.group_bytes <= self.journal_buffer_bytes_max
        assert self.entry_log_write_buffer_bytes < self.entry_log_unwritten_bytes_max
        assert self.checkpoint_interval_ms > 0
        assert self.checkpoint_pending_entries_max > 0
        assert self.tombstones_max > 0
        assert 0.0 <= self.compaction_live_fraction_threshold <= 1.0
        assert self.compaction_rate_bytes_per_s > 0
        assert self.compaction_free_bytes_reserve >= 0

    def compaction_settings(self) -> CompactionSettings:
        return CompactionSettings(
            live_fraction_threshold=self.compaction_live_fraction_threshold,
            rate_bytes_per_s=self.compaction_rate_bytes_per_s,
            free_bytes_reserve=self.compaction_free_bytes_reserve,
            output_bytes_max=self.entry_log_size_bytes_max,
        )


class _Directory:
    """One ledger directory: its entry logs, its index, and changes not yet checkpointed."""

    __slots__ = ("path", "logs", "index", "compactor", "deleted", "tombstone_changes")

    def __init__(
        self, path: Path, logs: EntryLogs, index: LedgerIndex, compactor: DirectoryCompactor
    ) -> None:
        self.path = path
        self.logs = logs
        self.index = index
        self.compactor = compactor
        self.deleted: list[int] = []
        """Ledgers deleted since the last checkpoint began."""
        self.tombstone_changes: dict[int, int | None] = {}
        """Tombstones added (their seq) or evicted (None) since the last checkpoint began."""


class _Ledger:
    """One ledger's state in memory."""

    __slots__ = (
        "ledger_id",
        "directory",
        "master_key",
        "fenced",
        "lac",
        "explicit_lac",
        "explicit_lac_packet",
        "last_entry_id",
        "pending",
        "flushing",
        "indexed",
        "dirty",
    )

    def __init__(self, ledger_id: int, directory: _Directory, master_key: bytes) -> None:
        self.ledger_id = ledger_id
        self.directory = directory
        self.master_key = master_key
        self.fenced = False
        self.lac = -1
        self.explicit_lac = -1
        self.explicit_lac_packet: bytes | None = None
        self.last_entry_id = -1
        self.pending: dict[int, int] = {}
        """entry_id -> packed location, for entries added since the last checkpoint began."""
        self.flushing = _NO_LOCATIONS
        """The pending index of the checkpoint in progress."""
        self.indexed = False
        """True once the sqlite index may hold entries of this incarnation of the ledger."""
        self.dirty = False
        """Changed since the last checkpoint began (listed in `_dirty`)."""

    def row(self) -> LedgerRow:
        return LedgerRow(
            ledger_id=self.ledger_id,
            master_key=self.master_key,
            fenced=self.fenced,
            lac=self.lac,
            explicit_lac=self.explicit_lac,
            explicit_lac_packet=self.explicit_lac_packet,
            last_entry_id=self.last_entry_id,
        )


@dataclass(frozen=True, slots=True)
class _CheckpointPlan:
    """What step (1) of a checkpoint took from memory."""

    mark: JournalMark
    batches: list[tuple[_Directory, CheckpointBatch]]
    ledgers: list[_Ledger]
    written_targets: list[tuple[_Directory, dict[int, int]]]
    current_log_ids: list[tuple[_Directory, int]]
    """Each directory's current log at step (1): entries appended later are in it or newer."""


class FileLedgerStorage:
    """Journal + entry logs + sqlite index; see the module docstring."""

    def __init__(self, config: StorageConfig) -> None:
        self.config = config
        self._directories: list[_Directory] = []
        self._ledgers: dict[int, _Ledger] = {}
        self._dirty: list[_Ledger] = []
        self._tombstones: dict[int, int] = {}
        """ledger_id -> seq, oldest first."""
        self._tombstone_seq = 0
        self._pending_entries = 0
        self._writer: JournalWriter | None = None
        self._journal: Journal | None = None
        self._logs_wakeup: anyio.Event | None = None
        self._logs_lock: anyio.Lock | None = None
        """Held while chunks are written: one writer at a time, in order."""
        self._checkpoint_wakeup: anyio.Event | None = None
        self._checkpoint_lock: anyio.Lock | None = None
        """Held by a checkpoint from step (1) to (4), and by each compaction index write."""
        self._compaction_lock: anyio.Lock | None = None

    # --- lifetime -----------------------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, config: StorageConfig) -> AsyncIterator[FileLedgerStorage]:
        """Replay the journal, start the background tasks, and on exit sync what is
        pending, checkpoint and close.  Raises `JournalCorrupt` without changing
        any file when the journal is damaged before its tail."""
        storage = cls(config)
        replayed = await anyio.to_thread.run_sync(storage._start)
        try:
            assert storage._writer is not None
            journal = Journal(
                storage._writer,
                group_wait_ms=config.group_wait_ms,
                sync_on_loop_us_max=config.journal_sync_on_loop_us_max,
                group_bytes=config.group_bytes,
                flush_when_queue_empty=config.flush_when_queue_empty,
                buffer_bytes_max=config.journal_buffer_bytes_max,
            )
            storage._journal = journal
            storage._logs_wakeup = anyio.Event()
            storage._logs_lock = anyio.Lock()
            storage._checkpoint_wakeup = anyio.Event()
            storage._checkpoint_lock = anyio.Lock()
            storage._compaction_lock = anyio.Lock()
            for directory in storage._directories:
                directory.logs.on_sealed = storage._wake_log_writer
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(journal.run)
                tasks.start_soon(storage._write_entry_logs)
                tasks.start_soon(storage._checkpoint_periodically)
                try:
                    if replayed:
                        await storage.checkpoint()
                    yield storage
                finally:
                    with anyio.CancelScope(shield=True):
                        await journal.close()
                        await storage.checkpoint()
                        tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(storage._close_files)

    def _start(self) -> int:
        """Open the indexes, replay the journal, start a new journal file (blocking).

        Returns how many journal records were replayed."""
        config = self.config
        for path in (config.journal_dir, *config.ledger_dirs):
            path.mkdir(parents=True, exist_ok=True)
        # Directories commit one after another: after a crash between two commits
        # the smallest mark is the one every directory has reached.
        mark = min(read_checkpoint_mark(path) or NO_MARK for path in config.ledger_dirs)
        # Checked before anything is written, so a refused start changes no file.
        scans = scan_journal(config.journal_dir, mark)
        try:
            tombstones: list[tuple[int, int]] = []
            for path in config.ledger_dirs:
                index = LedgerIndex(path)
                self._directories.append(self._open_directory(path, index))
            for directory in self._directories:
                contents = directory.index.load()
                self._load_ledgers(directory, contents.ledgers)
                assert (contents.mark or NO_MARK) >= mark
                tombstones.extend(contents.tombstones)
            self._load_tombstones(tombstones)
            truncate_junk_tails(config.journal_dir, scans)
            replayed = replay_journal(scans, self._replay_record)
            if replayed:
                for directory in self._directories:
                    directory.logs.flush_blocking()
            files = journal_files(config.journal_dir)
            next_file_id = max(files[-1][0] + 1 if files else 0, mark.file_id + 1)
            self._writer = JournalWriter(
                config.journal_dir, next_file_id, config.journal_file_size_bytes_max
            )
            previous = dict(files).get(next_file_id - 1)
            self._writer.create(None if previous is None else previous.stat().st_size)
        except BaseException:
            self._close_files()
            raise
        if replayed:
            logger.info("replayed %d journal records after %s", replayed, mark)
        return replayed

    def _open_directory(self, path: Path, index: LedgerIndex) -> _Directory:
        config = self.config
        try:
            # Before the first new log id is chosen below, so that no mark of an
            # interrupted compaction can name a log of this process.
            swept = sweep_doomed_logs(path, index)
            ids = entry_log_ids(path)
        except BaseException:
            index.close()
            raise
        if swept:
            logger.info(
                "removed %d entry logs left by an interrupted compaction in %s", len(swept), path
            )
        logs = EntryLogs(
            path,
            first_log_id=(ids[-1] + 1) if ids else 0,
            log_size_bytes_max=config.entry_log_size_bytes_max,
            write_buffer_bytes=config.entry_log_write_buffer_bytes,
        )
        compactor = DirectoryCompactor(path, logs, index, config.compaction_settings())
        return _Directory(path, logs, index, compactor)

    def _load_ledgers(self, directory: _Directory, rows: list[LedgerRow]) -> None:
        for row in rows:
            if self._directory_of(row.ledger_id) is not directory:
                raise StorageError(
                    f"ledger {row.ledger_id} is stored in {directory.path}, but with"
                    f" {len(self._directories)} ledger directories it belongs in"
                    f" {self._directory_of(row.ledger_id).path}: the list of ledger"
                    " directories must not change"
                )
            ledger = _Ledger(row.ledger_id, directory, row.master_key)
            ledger.fenced = row.fenced
            ledger.lac = row.lac
            ledger.explicit_lac = row.explicit_lac
            ledger.explicit_lac_packet = row.explicit_lac_packet
            ledger.last_entry_id = row.last_entry_id
            ledger.indexed = True
            self._ledgers[row.ledger_id] = ledger

    def _load_tombstones(self, tombstones: list[tuple[int, int]]) -> None:
        """Tombstones of every directory as (seq, ledger_id), merged oldest first."""
        for seq, ledger_id in sorted(tombstones):
            self._tombstones[ledger_id] = seq
            self._tombstone_seq = max(self._tombstone_seq, seq + 1)
        while len(self._tombstones) > self.config.tombstones_max:
            self._evict_oldest_tombstone()

    def _close_files(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError as error:
                # The newest journal file keeps its space allocated ahead; the next
                # start trims it.  The other files still have to be closed.
                logger.warning("journal file not trimmed at close: %s", error)
        for directory in self._directories:
            directory.logs.close()
            directory.index.close()
        self._directories = []

    # --- recovered state ----------------------------------------------------------------------

    def recovered_ledgers(self) -> Iterable[LedgerRecord]:
        return [
            LedgerRecord(
                ledger_id=ledger.ledger_id,
                master_key=ledger.master_key,
                fenced=ledger.fenced,
                lac=ledger.lac,
                explicit_lac_packet=ledger.explicit_lac_packet,
                last_entry_id=ledger.last_entry_id,
            )
            for _, ledger in sorted(self._ledgers.items())
        ]

    def fenced_tombstones(self) -> Iterable[int]:
        return list(self._tombstones)

    # --- mutations ----------------------------------------------------------------------------

    def _journal_for(self, directory: _Directory) -> Journal:
        """The journal, once it has been checked to accept a mutation for `directory`."""
        journal = self._journal
        assert journal is not None, "the storage is not open"
        journal.check_writable()
        if directory.logs.unwritten_bytes > self.config.entry_log_unwritten_bytes_max:
            raise StorageBusy(
                f"{directory.logs.unwritten_bytes} entry-log bytes of {directory.path}"
                " not yet written"
            )
        return journal

    def set_master_key(self, ledger_id: int, master_key: bytes) -> int:
        assert ledger_id >= 0
        ledger = self._ledgers.get(ledger_id)
        if ledger is not None:
            assert ledger.master_key == master_key, "the handler checks keys before storing"
        journal = self._journal_for(self._directory_of(ledger_id))
        ticket = journal.append(JournalKind.MASTER_KEY, ledger_id, 0, master_key)
        self._apply_master_key(ledger_id, master_key)
        return ticket

    def add_entry(self, ledger_id: int, entry_id: int, packet: bytes) -> int:
        ledger = self._ledgers.get(ledger_id)
        assert ledger is not None, "set_master_key comes first"
        assert entry_id >= 0
        journal = self._journal_for(ledger.directory)
        ticket = journal.append(JournalKind.ENTRY, ledger_id, entry_id, packet)
        self._apply_entry(ledger, entry_id, packet)
        return ticket

    def fence(self, ledger_id: int) -> int:
        ledger = self._ledgers.get(ledger_id)
        assert ledger is not None, "set_master_key comes first"
        journal = self._journal_for(ledger.directory)
        ticket = journal.append(JournalKind.FENCE, ledger_id, 0, b"")
        self._apply_fence(ledger)
        return ticket

    def set_explicit_lac(self, ledger_id: int, lac: int, packet: bytes) -> int:
        ledger = self._ledgers.get(ledger_id)
        assert ledger is not None, "set_master_key comes first"
        assert lac >= -1
        journal = self._journal_for(ledger.directory)
        ticket = journal.append(JournalKind.EXPLICIT_LAC, ledger_id, lac, packet)
        self._apply_explicit_lac(ledger, lac, packet)
        return ticket

    def delete_ledger(self, ledger_id: int) -> int:
        assert ledger_id >= 0
        ledger = self._ledgers.get(ledger_id)
        tombstone = ledger is not None and ledger.fenced
        # Journaled before the ledger leaves memory, so that a crash replays the
        # deletion instead of resurrecting the ledger from the index.
        journal = self._journal_for(self._directory_of(ledger_id))
        ticket = journal.append(JournalKind.DELETE, ledger_id, int(tombstone), b"")
        self._apply_delete(ledger_id, tombstone)
        return ticket

    # --- applying mutations (live and replayed) -----------------------------------------------

    def _directory_of(self, ledger_id: int) -> _Directory:
        return self._directories[ledger_id % len(self._directories)]

    def _touch(self, ledger: _Ledger) -> None:
        if not ledger.dirty:
            ledger.dirty = True
            self._dirty.append(ledger)

    def _apply_master_key(self, ledger_id: int, master_key: bytes) -> None:
        if ledger_id not in self._ledgers:
            ledger = _Ledger(ledger_id, self._directory_of(ledger_id), master_key)
            self._ledgers[ledger_id] = ledger
            self._touch(ledger)

    def _apply_entry(self, ledger: _Ledger, entry_id: int, packet: bytes) -> None:
        ledger.pending[entry_id] = ledger.directory.logs.append(ledger.ledger_id, entry_id, packet)
        ledger.last_entry_id = max(ledger.last_entry_id, entry_id)
        lac = packet_lac(packet)
        ledger.lac = max(ledger.lac, lac)
        if not ledger.dirty:
            ledger.dirty = True
            self._dirty.append(ledger)
        self._pending_entries += 1
        if (
            self._pending_entries == self.config.checkpoint_pending_entries_max
            and self._checkpoint_wakeup is not None
        ):
            self._checkpoint_wakeup.set()

    def _apply_fence(self, ledger: _Ledger) -> None:
        ledger.fenced = True
        self._touch(ledger)

    def _apply_explicit_lac(self, ledger: _Ledger, lac: int, packet: bytes) -> None:
        ledger.lac = max(ledger.lac, lac)
        if lac >= ledger.explicit_lac:
            ledger.explicit_lac = lac
            ledger.explicit_lac_packet = packet
        self._touch(ledger)

    def _apply_delete(self, ledger_id: int, tombstone: bool) -> None:
        directory = self._directory_of(ledger_id)
        if self._ledgers.pop(ledger_id, None) is not None:
            directory.deleted.append(ledger_id)
        if tombstone:
            self._tombstones.pop(ledger_id, None)
            self._tombstones[ledger_id] = self._tombstone_seq
            directory.tombstone_changes[ledger_id] = self._tombstone_seq
            self._tombstone_seq += 1
            if len(self._tombstones) > self.config.tombstones_max:
                self._evict_oldest_tombstone()

    def _evict_oldest_tombstone(self) -> None:
        oldest = next(iter(self._tombstones))
        del self._tombstones[oldest]
        self._directory_of(oldest).tombstone_changes[oldest] = None

    def _replay_record(
        self, kind: JournalKind, ledger_id: int, argument: int, payload: bytes
    ) -> None:
        """Apply one journal record at start-up (in the start thread, nothing else running).

        A record for a ledger the state does not hold is skipped: that happens
        only when replay starts before a directory's own mark (a crash between
        two directories' commits) and the ledger's later deletion is already in
        that directory's index; the deletion itself is replayed after it.
        """
        if kind is JournalKind.MASTER_KEY:
            self._apply_master_key(ledger_id, payload)
        elif kind is JournalKind.DELETE:
            self._apply_delete(ledger_id, bool(argument))
        else:
            ledger = self._ledgers.get(ledger_id)
            if ledger is None:
                return
            if kind is JournalKind.ENTRY:
                self._apply_entry(ledger, argument, payload)
                logs = ledger.directory.logs
                if logs.unwritten_bytes >= self.config.entry_log_write_buffer_bytes:
                    logs.flush_blocking()
            elif kind is JournalKind.FENCE:
                self._apply_fence(ledger)
            else:
                assert kind is JournalKind.EXPLICIT_LAC
                self._apply_explicit_lac(ledger, argument, payload)

    # --- durability ---------------------------------------------------------------------------

    @property
    def synced_ticket(self) -> int:
        assert self._journal is not None
        return self._journal.synced_ticket

    def add_sync_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        assert self._journal is not None
        return self._journal.add_sync_listener(listener)

    @property
    def failure(self) -> StorageError | None:
        assert self._journal is not None
        return self._journal.failure

    @property
    def last_ticket(self) -> int:
        """The ticket of the latest mutation (0 before the first)."""
        assert self._journal is not None
        return self._journal.ticket

    @property
    def journal(self) -> Journal:
        """The journal (its per-group histograms are exported as metrics)."""
        assert self._journal is not None
        return self._journal

    def data_bytes(self) -> int:
        """Bytes of the storage's own files (journal files, entry logs, indexes)."""
        return sum(self.file_bytes().values())

    def file_bytes(self) -> dict[str, int]:
        """Bytes of the storage's own files by kind: `journal` (the journal directory's
        files), `index` (the sqlite index and its journal files), `entry_log` (the rest
        of the ledger directories' files)."""
        kinds = {"journal": 0, "entry_log": 0, "index": 0}
        directories = [("journal", self.config.journal_dir)]
        directories += [("entry_log", path) for path in self.config.ledger_dirs]
        for kind, directory in directories:
            with os.scandir(directory) as entries:
                for entry in entries:
                    with contextlib.suppress(FileNotFoundError):
                        if entry.is_file(follow_symlinks=False):
                            size = entry.stat(follow_symlinks=False).st_size
                            index = kind != "journal" and entry.name.startswith(INDEX_FILE_NAME)
                            kinds["index" if index else kind] += size
        return kinds

    def disk_usage(self) -> dict[Path, tuple[int, int, int]]:
        """(used_bytes, total_bytes, available_bytes) of the file system of each data
        directory (available: free to any user, root's reserve left out)."""
        usage = {}
        for path in (self.config.journal_dir, *self.config.ledger_dirs):
            total, used, available = shutil.disk_usage(path)
            usage[path] = (used, total, available)
        return usage

    # --- compaction ---------------------------------------------------------------------------

    async def compact(self) -> CompactionReport:
        """Reclaim the space of deleted and overwritten entries; one pass at a time.

        Checkpoints first, so that the index holds every deletion made so far,
        then runs one pass per ledger directory (bookie/storage/compaction.py).
        Errors are reported, not raised; a failed index write stops the storage
        (`failure`), and the pass ends there."""
        assert self._compaction_lock is not None
        assert self._checkpoint_lock is not None
        assert self._journal is not None
        report = CompactionReport()
        async with self._compaction_lock:
            await self.checkpoint()
            for directory in self._directories:
                if self._journal.failure is not None:
                    break
                report += await directory.compactor.run(self._checkpoint_lock, self._journal.fail)
        return report

    # --- background tasks ---------------------------------------------------------------------

    def _wake_log_writer(self) -> None:
        assert self._logs_wakeup is not None
        self._logs_wakeup.set()

    async def _write_entry_logs(self) -> None:
        """Write sealed entry-log chunks as they come, until cancelled or failed."""
        assert self._journal is not None
        while self._journal.failure is None:
            if not any(directory.logs.has_chunks for directory in self._directories):
                self._logs_wakeup = anyio.Event()
                await self._logs_wakeup.wait()
                continue
            try:
                await self._write_sealed_chunks()
            except StorageError as failure:
                self._journal.fail(failure)

    async def _write_sealed_chunks(self) -> None:
        """Write every chunk sealed so far, in a worker thread.

        Used by the writer task and by checkpoints; the lock keeps one writer at a
        time, so when this returns every chunk sealed before the call is written
        (a checkpoint never depends on the writer task being alive)."""
        assert self._logs_lock is not None
        async with self._logs_lock:
            work = [
                (directory, directory.logs.sealed_chunks())
                for directory in self._directories
                if directory.logs.has_chunks
            ]
            if not work:
                return

            def write(work: list[tuple[_Directory, list[Chunk]]] = work) -> None:
                for directory, chunks in work:
                    directory.logs.write_chunks(chunks)

            try:
                await anyio.to_thread.run_sync(write)
            except OSError as error:
                raise storage_error(error, "entry-log write") from error
            for directory, chunks in work:
                directory.logs.chunks_written(chunks)

    async def _checkpoint_periodically(self) -> None:
        interval_s = self.config.checkpoint_interval_ms / 1000
        assert self._journal is not None
        while self._journal.failure is None:
            assert self._checkpoint_wakeup is not None
            with anyio.move_on_after(interval_s):
                await self._checkpoint_wakeup.wait()
            self._checkpoint_wakeup = anyio.Event()
            await self.checkpoint()

    async def checkpoint(self) -> None:
        """Move everything appended so far into the entry logs and the index, and
        advance the journal mark (steps in the module docstring)."""
        assert self._checkpoint_lock is not None
        async with self._checkpoint_lock:
            # Shielded once begun: a batch taken from memory in step (1) must reach
            # the index, or the next checkpoint's mark would pass entries it lacks.
            with anyio.CancelScope(shield=True):
                await self._checkpoint_steps()

    async def _checkpoint_steps(self) -> None:
        assert self._journal is not None
        if self._journal.failure is not None:
            return
        plan = self._checkpoint_begin()
        try:
            await self._checkpoint_flush(plan)
            await anyio.to_thread.run_sync(self._checkpoint_commit, plan)
        except StorageError as failure:
            self._journal.fail(failure)
            return
        self._checkpoint_end(plan)
        try:
            deleted = await anyio.to_thread.run_sync(
                delete_journal_files_before,
                self.config.journal_dir,
                plan.mark.file_id,
                self.config.journal_files_kept,
            )
        except OSError as error:
            self._journal.fail(storage_error(error, "deleting old journal files"))
            return
        if deleted:
            logger.info("checkpoint at %s deleted %d journal files", plan.mark, len(deleted))

    def _checkpoint_begin(self) -> _CheckpointPlan:
        """Step (1), on the loop: take everything appended so far as one batch."""
        assert self._journal is not None
        mark = self._journal.mark()
        per_directory: dict[int, tuple[list[LedgerRow], list[tuple[int, dict[int, int]]]]] = {
            id(directory): ([], []) for directory in self._directories
        }
        taken = []
        for ledger in self._dirty:
            ledger.dirty = False
            if self._ledgers.get(ledger.ledger_id) is not ledger:
                continue  # deleted since: its deletion is in the directory's list
            assert ledger.flushing is _NO_LOCATIONS
            rows, entries = per_directory[id(ledger.directory)]
            rows.append(ledger.row())
            if ledger.pending:
                ledger.flushing = ledger.pending
                ledger.pending = {}
                entries.append((ledger.ledger_id, ledger.flushing))
            taken.append(ledger)
        self._dirty = []
        self._pending_entries = 0
        batches = []
        written_targets = []
        current_log_ids = []
        for directory in self._directories:
            rows, entries = per_directory[id(directory)]
            changes = directory.tombstone_changes
            batches.append(
                (
                    directory,
                    CheckpointBatch(
                        mark=mark,
                        deleted_ledgers=directory.deleted,
                        ledgers=rows,
                        entries=entries,
                        tombstones_added=[
                            (ledger_id, seq)
                            for ledger_id, seq in changes.items()
                            if seq is not None
                        ],
                        tombstones_removed=[
                            ledger_id for ledger_id, seq in changes.items() if seq is None
                        ],
                    ),
                )
            )
            directory.deleted = []
            directory.tombstone_changes = {}
            directory.logs.seal()
            written_targets.append((directory, directory.logs.written_upto()))
            current_log_ids.append((directory, directory.logs.current_log_id))
        return _CheckpointPlan(mark, batches, taken, written_targets, current_log_ids)

    async def _checkpoint_flush(self, plan: _CheckpointPlan) -> None:
        """Step (2): the sealed entry-log bytes written and fsynced."""
        await self._write_sealed_chunks()
        assert all(
            directory.logs.is_written(targets) for directory, targets in plan.written_targets
        )
        logs = [(directory, *directory.logs.open_logs()) for directory, _ in plan.written_targets]

        def sync() -> None:
            for directory, open_logs, rolled in logs:
                directory.logs.sync_files(open_logs, rolled)

        try:
            await anyio.to_thread.run_sync(sync)
        except OSError as error:
            raise storage_error(error, "entry-log fsync") from error
        for directory, _, rolled in logs:
            directory.logs.logs_closed(rolled)

    @staticmethod
    def _checkpoint_commit(plan: _CheckpointPlan) -> None:
        """Step (3), in a worker thread: one transaction per directory."""
        for directory, batch in plan.batches:
            directory.index.commit(batch)

    def _checkpoint_end(self, plan: _CheckpointPlan) -> None:
        """Step (4), on the loop: the batch is in the index, drop it from memory."""
        for ledger in plan.ledgers:
            ledger.flushing = _NO_LOCATIONS
            ledger.indexed = True
        # Every location in memory now was appended after step (1), so it lies in
        # the log that was current then or a newer one: older logs may be compacted.
        for directory, log_id in plan.current_log_ids:
            directory.compactor.hot_log_id_min = log_id

    # --- reads --------------------------------------------------------------------------------

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None or not 0 <= entry_id <= ledger.last_entry_id:
            return None
        location = ledger.pending.get(entry_id)
        if location is None:
            location = ledger.flushing.get(entry_id)
            if location is None:
                if not ledger.indexed:
                    return None
                location = ledger.directory.index.lookup(ledger_id, entry_id)
                if location is None:
                    return None
        return ledger.directory.logs.read(location, ledger_id, entry_id)

    def last_entry_id(self, ledger_id: int) -> int:
        ledger = self._ledgers.get(ledger_id)
        return -1 if ledger is None else ledger.last_entry_id

    def entry_ranges(self, ledger_id: int) -> list[tuple[int, int]]:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return []
        recent = ranges_of([*ledger.pending, *ledger.flushing])
        if not ledger.indexed:
            return recent
        return merge_ranges(ledger.directory.index.entry_ranges(ledger_id), recent)

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)
