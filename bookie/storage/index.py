"""The durable index of one ledger directory, in sqlite.

One database per ledger directory, `<dir>/index.sqlite`, in WAL mode with
`synchronous=FULL`, so a commit is durable when it returns.  It holds what the
entry logs cannot tell cheaply:

* `entries(ledger_id, entry_id) -> (log_id, offset, size)`: where each
  checkpointed entry's record lies.  Per-log live bytes, which pick the logs
  to compact, are `SUM(size) GROUP BY log_id` (`log_usage`).
* `ledgers`: per-ledger state (master key, fenced, LAC, explicit LAC, last
  entry id).
* `tombstones`: ledgers deleted while fenced, with a sequence number that
  orders them across directories (the oldest is forgotten first).
* `mark`: the journal position the directory is checkpointed up to.
* `doomed_logs`: entry logs that compaction is creating or emptying; start-up
  deletes each one no entry points into (bookie/storage/compaction.py).

Invariant: a checkpoint changes the first four in ONE transaction (`commit`),
and only after the entry-log bytes its rows point to are fsynced; so the index
never points at bytes a crash could lose, and the mark never moves past
mutations the index does not hold.  Compaction's `repoint` keeps the same
promise: the copies it points entries at are fsynced first.

Threads.  `commit`, `load` and compaction's writes run in worker threads on
the writer connection, one at a time (the storage's checkpoint lock).  Reads
(`lookup`, `entry_ranges`) run on the event loop on a second, read-only
connection: WAL lets them proceed while a checkpoint commits, and a point
lookup by primary key costs less than a thread hop would.  Compaction's
queries (`log_usage`, `live_offsets`, `referenced_logs`) run in worker threads
on a third, read-only connection, so a scan of the whole table never holds up
a lookup on the loop.

Damage.  Opening runs `PRAGMA integrity_check` (it reads every page; its cost
at start-up is in docs/storage-format.md, "Index") and refuses with
`StorageIOError`, naming the file and sqlite's first complaint, when the file
is damaged: a lost or zeroed page would otherwise read as entries absent.
Damage a read meets later (a sqlite error, or a value of the wrong type such as
a NULL where an integer belongs) is a `StorageError` too, never an absent row
or a `TypeError`.

Why no secondary index on `log_id`: it would make every checkpoint insert
slower and the index larger, to speed up queries that compaction runs once
per pass in a worker thread (docs/storage-format.md, "Index", has the numbers).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bookie.errors import DiskFull, EntryLogCorrupt, StorageError, StorageIOError, preview
from bookie.storage.entry_log import pack_location, unpack_location
from bookie.storage.journal import JournalMark

_T = TypeVar("_T")

Move = tuple[int, int, int, int, int, int]
"""One entry compaction moved: (output_log_id, output_offset, ledger_id, entry_id,
source_log_id, source_offset)."""

INDEX_FILE_NAME = "index.sqlite"
SCHEMA_VERSION = 2
"""Version 2 added `doomed_logs`; a version-1 index gains the table when opened."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    ledger_id INTEGER NOT NULL,
    entry_id INTEGER NOT NULL,
    log_id INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    size INTEGER NOT NULL,
    PRIMARY KEY (ledger_id, entry_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledgers (
    ledger_id INTEGER PRIMARY KEY,
    master_key BLOB NOT NULL,
    fenced INTEGER NOT NULL,
    lac INTEGER NOT NULL,
    explicit_lac INTEGER NOT NULL,
    explicit_lac_packet BLOB,
    last_entry_id INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (
    ledger_id INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS mark (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    file_id INTEGER NOT NULL,
    offset INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS doomed_logs (
    log_id INTEGER PRIMARY KEY
);
"""

_RANGES = """
SELECT MIN(entry_id), MAX(entry_id) FROM (
    SELECT entry_id, entry_id - ROW_NUMBER() OVER (ORDER BY entry_id) AS island
    FROM entries WHERE ledger_id = ?
) GROUP BY island ORDER BY 1
"""


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One ledger's state as the index stores it."""

    ledger_id: int
    master_key: bytes
    fenced: bool
    lac: int
    explicit_lac: int
    explicit_lac_packet: bytes | None
    last_entry_id: int


@dataclass(frozen=True, slots=True)
class IndexContents:
    """What `load` finds: the mark, the ledgers, the tombstones as (seq, ledger_id)."""

    mark: JournalMark | None
    ledgers: list[LedgerRow]
    tombstones: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class CheckpointBatch:
    """Everything one checkpoint writes to one directory's index, in one transaction."""

    mark: JournalMark
    deleted_ledgers: list[int]
    """Applied first, so a ledger deleted and created again keeps only its new rows."""
    ledgers: list[LedgerRow]
    entries: list[tuple[int, dict[int, int]]]
    """(ledger_id, {entry_id: packed location}) of entries added since the last checkpoint."""
    tombstones_added: list[tuple[int, int]]
    """(ledger_id, seq)."""
    tombstones_removed: list[int]


def read_checkpoint_mark(directory: Path) -> JournalMark | None:
    """The directory's mark, read without changing any file (None: never checkpointed).

    Replay reads the mark this way, checks the journal, and only then opens the
    index for writing, so that a start refused for corruption changes nothing.
    """
    path = directory / INDEX_FILE_NAME
    if not path.exists():
        return None
    # Without a WAL file the database is whole and no bookie is writing it: opened
    # as immutable, sqlite creates no -wal/-shm files.  With one (a running bookie,
    # or a crash), a read-only connection reads through it and leaves it in place.
    wal = path.with_name(path.name + "-wal").exists()
    mode = "mode=ro" if wal else "mode=ro&immutable=1"
    try:
        connection = sqlite3.connect(f"file:{path}?{mode}", uri=True)
        try:
            row = connection.execute("SELECT file_id, offset FROM mark").fetchone()
        finally:
            connection.close()
        return None if row is None else JournalMark(_int(row[0]), _int(row[1]))
    except (sqlite3.Error, _BadRow) as error:
        raise _storage_error(error, f"reading the mark of index {path}") from error


class _BadRow(Exception):
    """A value read from the index is not of its column's type (a NULL, text or real
    where an integer belongs): the index is damaged.  Readers turn it into a
    `StorageError`; it never leaves this module."""


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise _BadRow(f"damaged row: {preview(value)} where an integer belongs")
    return value


def _blob(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise _BadRow(f"damaged row: {preview(value)} where a blob belongs")
    return value


def _first_problem(problems: list[object]) -> str:
    """The first line of what `PRAGMA integrity_check` reported, without its "*** in
    database main ***" heading."""
    for problem in problems:
        for line in str(problem).splitlines():
            if line.strip() and not line.startswith("***"):
                return line.strip()[:200]
    return "no result"


def _storage_error(error: sqlite3.Error | _BadRow, doing: str) -> StorageError:
    full = getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    failure: StorageError = (DiskFull if full else StorageIOError)(f"{doing}: {error}")
    failure.__cause__ = error
    return failure


class LedgerIndex:
    """The sqlite index of one ledger directory."""

    def __init__(self, directory: Path) -> None:
        """Open (or create) the index; raises `StorageIOError` when it is damaged."""
        self.path = directory / INDEX_FILE_NAME
        connections: list[sqlite3.Connection] = []
        try:
            self._writer = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            connections.append(self._writer)
            # Before anything is written to it (module docstring, "Damage").
            problems = [row[0] for row in self._writer.execute("PRAGMA integrity_check(1)")]
            if problems != ["ok"]:
                raise StorageIOError(
                    f"{self.path}: the index is damaged (sqlite integrity_check:"
                    f" {_first_problem(problems)})"
                )
            self._writer.execute("PRAGMA journal_mode=WAL")
            self._writer.execute("PRAGMA synchronous=FULL")
            version = self._writer.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, 1, SCHEMA_VERSION):
                raise StorageIOError(f"{self.path}: index schema {version} is not {SCHEMA_VERSION}")
            if version != SCHEMA_VERSION:
                # Every statement is CREATE ... IF NOT EXISTS: a new index gets every
                # table, a version-1 index the ones it lacks.
                self._writer.executescript(_SCHEMA)
                self._writer.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._reader = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, check_same_thread=False
            )
            connections.append(self._reader)
            self._scanner = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, check_same_thread=False
            )
        except BaseException as error:
            for connection in connections:
                connection.close()
            if isinstance(error, sqlite3.Error):
                raise _storage_error(error, f"opening index {self.path}") from error
            raise

    def load(self) -> IndexContents:
        """Everything but the entry locations (blocking)."""
        try:
            row = self._writer.execute("SELECT file_id, offset FROM mark").fetchone()
            mark = None if row is None else JournalMark(_int(row[0]), _int(row[1]))
            ledgers = [
                LedgerRow(
                    ledger_id=_int(ledger_id),
                    master_key=_blob(master_key),
                    fenced=bool(_int(fenced)),
                    lac=_int(lac),
                    explicit_lac=_int(explicit_lac),
                    explicit_lac_packet=None if packet is None else _blob(packet),
                    last_entry_id=_int(last_entry_id),
                )
                for ledger_id, master_key, fenced, lac, explicit_lac, packet, last_entry_id in (
                    self._writer.execute("SELECT * FROM ledgers ORDER BY ledger_id")
                )
            ]
            tombstones = [
                (_int(seq), _int(ledger_id))
                for ledger_id, seq in self._writer.execute(
                    "SELECT ledger_id, seq FROM tombstones ORDER BY seq"
                )
            ]
        except (sqlite3.Error, _BadRow) as error:
            raise _storage_error(error, f"loading index {self.path}") from error
        return IndexContents(mark=mark, ledgers=ledgers, tombstones=tombstones)

    def lookup(self, ledger_id: int, entry_id: int) -> int | None:
        """The packed location of a checkpointed entry, or None."""
        try:
            row = self._reader.execute(
                "SELECT log_id, offset, size FROM entries WHERE ledger_id = ? AND entry_id = ?",
                (ledger_id, entry_id),
            ).fetchone()
            return None if row is None else pack_location(_int(row[0]), _int(row[1]), _int(row[2]))
        except (sqlite3.Error, _BadRow) as error:
            raise EntryLogCorrupt(
                f"index {self.path}: lookup of entry {ledger_id}:{entry_id} failed: {error}"
            ) from error

    def entry_ranges(self, ledger_id: int) -> list[tuple[int, int]]:
        """The checkpointed entry ids of a ledger as ascending inclusive ranges."""
        try:
            return [
                (_int(first), _int(last))
                for first, last in self._reader.execute(_RANGES, (ledger_id,))
            ]
        except (sqlite3.Error, _BadRow) as error:
            raise EntryLogCorrupt(
                f"index {self.path}: listing the entries of ledger {ledger_id} failed: {error}"
            ) from error

    def commit(self, batch: CheckpointBatch) -> None:
        """Apply one checkpoint batch in one durable transaction (blocking)."""
        self._transaction(
            f"checkpoint of index {self.path}", lambda connection: self._apply(connection, batch)
        )

    @staticmethod
    def _apply(connection: sqlite3.Connection, batch: CheckpointBatch) -> None:
        deleted = [(ledger_id,) for ledger_id in batch.deleted_ledgers]
        connection.executemany("DELETE FROM entries WHERE ledger_id = ?", deleted)
        connection.executemany("DELETE FROM ledgers WHERE ledger_id = ?", deleted)
        connection.executemany(
            "INSERT OR REPLACE INTO ledgers VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    row.ledger_id,
                    row.master_key,
                    int(row.fenced),
                    row.lac,
                    row.explicit_lac,
                    row.explicit_lac_packet,
                    row.last_entry_id,
                )
                for row in batch.ledgers
            ],
        )
        connection.executemany(
            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?)", _entry_rows(batch.entries)
        )
        connection.executemany(
            "DELETE FROM tombstones WHERE ledger_id = ?",
            [(ledger_id,) for ledger_id in batch.tombstones_removed],
        )
        connection.executemany(
            "INSERT OR REPLACE INTO tombstones VALUES (?, ?)", batch.tombstones_added
        )
        connection.execute(
            "INSERT OR REPLACE INTO mark VALUES (0, ?, ?)",
            (batch.mark.file_id, batch.mark.offset),
        )

    # --- compaction (worker threads) ----------------------------------------------------------

    def log_usage(self) -> dict[int, int]:
        """Live bytes per entry log: the size of the records entries point to.

        A log no entry points into is absent.  Scans the whole table (scanner
        connection, blocking)."""
        try:
            return {
                _int(log_id): _int(live_bytes)
                for log_id, live_bytes in self._scanner.execute(
                    "SELECT log_id, SUM(size) FROM entries GROUP BY log_id"
                )
            }
        except (sqlite3.Error, _BadRow) as error:
            raise _storage_error(error, f"measuring the entry logs of index {self.path}") from error

    def live_offsets(self, log_id: int, spans: Iterable[tuple[int, int, int]]) -> set[int]:
        """Offsets in log `log_id` that entries point to, among the entries of the
        given (ledger_id, first_entry_id, last_entry_id) spans (scanner, blocking)."""
        offsets: set[int] = set()
        try:
            for ledger_id, first, last in spans:
                offsets.update(
                    _int(offset)
                    for (offset,) in self._scanner.execute(
                        "SELECT offset FROM entries WHERE ledger_id = ?"
                        " AND entry_id BETWEEN ? AND ? AND log_id = ?",
                        (ledger_id, first, last, log_id),
                    )
                )
        except (sqlite3.Error, _BadRow) as error:
            raise _storage_error(error, f"looking up live entries in {self.path}") from error
        return offsets

    def referenced_logs(self, log_ids: Iterable[int]) -> set[int]:
        """Those of `log_ids` that some entry still points into (scanner, full scan)."""
        wanted = sorted(set(log_ids))
        if not wanted:
            return set()
        marks = ", ".join("?" * len(wanted))
        try:
            return {
                _int(log_id)
                for (log_id,) in self._scanner.execute(
                    f"SELECT DISTINCT log_id FROM entries WHERE log_id IN ({marks})", wanted
                )
            }
        except (sqlite3.Error, _BadRow) as error:
            raise _storage_error(error, f"checking entry logs in index {self.path}") from error

    def doomed_logs(self) -> list[int]:
        """Logs compaction marked for deletion, ascending (writer connection, blocking)."""
        try:
            return [
                _int(log_id)
                for (log_id,) in self._writer.execute(
                    "SELECT log_id FROM doomed_logs ORDER BY log_id"
                )
            ]
        except (sqlite3.Error, _BadRow) as error:
            raise _storage_error(error, f"reading doomed logs of index {self.path}") from error

    def doom(self, log_id: int) -> None:
        """Durably mark a compaction output about to be created (writer, blocking)."""
        self._transaction(
            f"marking entry log {log_id:08x} in index {self.path}",
            lambda connection: connection.execute(
                "INSERT OR IGNORE INTO doomed_logs VALUES (?)", (log_id,)
            ),
        )

    def forget_doomed(self, log_ids: Iterable[int]) -> None:
        """Drop the marks of logs that are deleted or kept for good (writer, blocking)."""
        rows = [(log_id,) for log_id in log_ids]
        self._transaction(
            f"unmarking entry logs in index {self.path}",
            lambda connection: connection.executemany(
                "DELETE FROM doomed_logs WHERE log_id = ?", rows
            ),
        )

    def repoint(self, output_log_id: int, moves: Iterable[Move], sources: Iterable[int]) -> int:
        """Compaction's commit, ONE durable transaction (writer, blocking): point each
        moved entry at its copy in `output_log_id` if it still points at the record
        compaction copied, keep the output (unmark it) and mark the `sources`, whose
        live records are all copied, for deletion.  Returns how many entries moved.

        The condition makes the commit safe against the index changing under a
        compaction: an entry deleted or written again since it was copied keeps
        its newer state, and its copy is simply garbage in the output.
        """
        source_rows = [(log_id,) for log_id in sources]

        def apply(connection: sqlite3.Connection) -> int:
            before = connection.total_changes
            connection.executemany(
                "UPDATE entries SET log_id = ?, offset = ?"
                " WHERE ledger_id = ? AND entry_id = ? AND log_id = ? AND offset = ?",
                moves,
            )
            moved = connection.total_changes - before
            connection.execute("DELETE FROM doomed_logs WHERE log_id = ?", (output_log_id,))
            connection.executemany("INSERT OR IGNORE INTO doomed_logs VALUES (?)", source_rows)
            return moved

        return self._transaction(f"compaction commit of index {self.path}", apply)

    def _transaction(self, doing: str, apply: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `apply` in one durable transaction on the writer connection (blocking)."""
        connection = self._writer
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = apply(connection)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            raise _storage_error(error, doing) from error
        return result

    def close(self) -> None:
        self._scanner.close()
        self._reader.close()
        self._writer.close()


def _entry_rows(
    entries: list[tuple[int, dict[int, int]]],
) -> Iterator[tuple[int, int, int, int, int]]:
    for ledger_id, locations in entries:
        for entry_id, location in locations.items():
            log_id, offset, size = unpack_location(location)
            yield ledger_id, entry_id, log_id, offset, size
