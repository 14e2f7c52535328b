"""The storage contract of a bookie: journal + ledger storage behind one interface.

Two implementations obey it, checked by one contract suite
(`tests/conformance/test_ledger_storage.py`):

* `bookie.storage.file.FileLedgerStorage`: journal files with group commit,
  entry logs and an index on disk (docs/storage-format.md);
* `bookie.storage.memory.MemoryLedgerStorage`: for unit tests and the seeded
  simulation; `crash()` drops everything not yet synced, as a power cut would.

Durability model.  Every mutation is applied to the in-memory view at once
(reads see it immediately) and returns a *sync ticket*, an int that grows with
each mutation.  The mutation is durable once `synced_ticket >= ticket`; the
bookie answers a request only then.  Listeners registered with
`add_sync_listener` are called (on the caller's event loop / thread) each time
`synced_ticket` advances, with the new value; group commit means one call
covers many tickets.

Tickets are ordered: a durable ticket implies every smaller one is durable.

Failure.  If a journal write or fsync fails (full disk, I/O error), what is
durable can no longer be known, so the storage stops: `failure` is set to the
error (a `StorageError`, `DiskFull` for ENOSPC), `synced_ticket` never
advances again, sync listeners are called once more so waiters can notice,
and every later mutation raises that error.  Tickets not synced before the
failure were never acknowledged; the bookie answers them EIO.  Restarting the
process replays the journal and resumes.

After a crash, recovery yields exactly the mutations whose tickets were synced
(plus, possibly, some that were not: an unsynced write may survive, it is just
not promised).  Mutations are idempotent, so replaying one twice is harmless.

Reads never invent data: `read_entry` returns None only when the entry was
never stored (or its ledger deleted); a record that cannot be read back intact
raises `EntryLogCorrupt` (the bookie answers EIO, so a recovery never counts a
lost entry as absent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from bookie.errors import StorageError


@dataclass(slots=True)
class LedgerRecord:
    """What a bookie knows about one ledger, as recovered from its storage."""

    ledger_id: int
    master_key: bytes
    fenced: bool
    lac: int
    """Highest LAC seen in stored entry headers and explicit LACs; -1 if none."""
    explicit_lac_packet: bytes | None
    last_entry_id: int
    """Highest entry id stored; -1 if none."""


class LedgerStorage(Protocol):
    """Durable per-ledger state and entries of one bookie."""

    # --- recovered state ----------------------------------------------------------------------

    def recovered_ledgers(self) -> Iterable[LedgerRecord]:
        """Every ledger present after start-up (journal replay included)."""
        ...

    def fenced_tombstones(self) -> Iterable[int]:
        """Ledgers deleted while fenced: a late add for one must get EFENCED, not re-create it."""
        ...

    # --- mutations (each returns its sync ticket) ---------------------------------------------

    def set_master_key(self, ledger_id: int, master_key: bytes) -> int:
        """Create the ledger on this bookie with its master key (first add or fence)."""
        ...

    def add_entry(self, ledger_id: int, entry_id: int, packet: bytes) -> int:
        """Store (or overwrite) one entry packet.  The ledger must exist (master key set)."""
        ...

    def fence(self, ledger_id: int) -> int:
        """Mark the ledger fenced.  The ledger must exist."""
        ...

    def set_explicit_lac(self, ledger_id: int, lac: int, packet: bytes) -> int:
        """Record an explicit LAC packet.  The ledger must exist."""
        ...

    def delete_ledger(self, ledger_id: int) -> int:
        """Drop the ledger's entries and state (garbage collection).  A fenced ledger
        leaves a tombstone (see `fenced_tombstones`)."""
        ...

    # --- durability ---------------------------------------------------------------------------

    @property
    def synced_ticket(self) -> int:
        """Every mutation with a ticket up to this one is durable."""
        ...

    def add_sync_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call `listener(synced_ticket)` whenever it advances (and once on failure);
        returns an unsubscribe."""
        ...

    @property
    def failure(self) -> StorageError | None:
        """The error that stopped the storage, or None while it works."""
        ...

    # --- reads --------------------------------------------------------------------------------

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The stored packet, or None when never stored.  Raises `EntryLogCorrupt`."""
        ...

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id stored for the ledger; -1 when none."""
        ...

    def entry_ranges(self, ledger_id: int) -> list[tuple[int, int]]:
        """The stored entry ids as ascending inclusive (first, last) ranges."""
        ...

    def ledger_ids(self) -> list[int]:
        """Every ledger with any state on this bookie, ascending."""
        ...
