"""`MemoryLedgerStorage`: the storage contract held in memory, for unit tests and
the seeded simulation.

It keeps two copies of the state: the *live* one that every mutation changes
at once (reads see it) and the *durable* one, which only `sync()` brings up to
date by re-applying the mutations made since the last sync, in order.  That is
the journal model of `FileLedgerStorage` with the disk taken out: `crash()`
returns a new storage built from the durable copy alone, as a power cut would
leave it, and the simulation restarts a bookie from it.

Invariants:

* Synchronous and deterministic: no threads, no clock, no event loop; the same
  calls give the same results and the same listener calls.
* `synced_ticket` only grows, never past the last ticket issued, and never
  again after a failure (`fail`).
* The durable copy is always the live copy as it was after some prefix of the
  mutations (the synced ones).
* Mutations are bounded like the journal's buffer: past `unsynced_bytes_max`
  bytes not yet synced, a mutation raises `StorageBusy` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bookie import limits
from bookie.errors import StorageBusy, StorageError
from bookie.storage.api import LedgerRecord
from bookie.storage.format import RECORD_BODY_MIN_BYTES, RECORD_PREFIX_BYTES, JournalKind
from bookie.storage.ranges import ranges_of
from bookie.wire.packet import packet_lac

_RECORD_OVERHEAD_BYTES = RECORD_PREFIX_BYTES + RECORD_BODY_MIN_BYTES
"""Bytes a mutation costs beyond its payload, counted as the journal would."""


@dataclass(slots=True)
class _Ledger:
    master_key: bytes
    fenced: bool = False
    lac: int = -1
    explicit_lac: int = -1
    explicit_lac_packet: bytes | None = None
    last_entry_id: int = -1
    entries: dict[int, bytes] = field(default_factory=dict)

    def copy(self) -> _Ledger:
        return _Ledger(
            master_key=self.master_key,
            fenced=self.fenced,
            lac=self.lac,
            explicit_lac=self.explicit_lac,
            explicit_lac_packet=self.explicit_lac_packet,
            last_entry_id=self.last_entry_id,
            entries=dict(self.entries),
        )


@dataclass(frozen=True, slots=True)
class _Mutation:
    """One mutation, as the journal would record it."""

    kind: JournalKind
    ledger_id: int
    argument: int
    payload: bytes


class _State:
    """Ledgers and tombstones; `apply` is the one definition of what a mutation does."""

    __slots__ = ("ledgers", "tombstones", "tombstones_max")

    def __init__(self, tombstones_max: int) -> None:
        self.ledgers: dict[int, _Ledger] = {}
        self.tombstones: dict[int, None] = {}
        """Insertion-ordered: the oldest tombstone is evicted first."""
        self.tombstones_max = tombstones_max

    def copy(self) -> _State:
        state = _State(self.tombstones_max)
        state.ledgers = {ledger_id: ledger.copy() for ledger_id, ledger in self.ledgers.items()}
        state.tombstones = dict(self.tombstones)
        return state

    def apply(self, mutation: _Mutation) -> None:
        kind = mutation.kind
        ledger_id = mutation.ledger_id
        if kind is JournalKind.MASTER_KEY:
            if ledger_id not in self.ledgers:
                self.ledgers[ledger_id] = _Ledger(master_key=mutation.payload)
            return
        if kind is JournalKind.DELETE:
            self.ledgers.pop(ledger_id, None)
            if mutation.argument:
                self.tombstones.pop(ledger_id, None)
                self.tombstones[ledger_id] = None
                if len(self.tombstones) > self.tombstones_max:
                    del self.tombstones[next(iter(self.tombstones))]
            return
        ledger = self.ledgers[ledger_id]
        if kind is JournalKind.ENTRY:
            entry_id = mutation.argument
            ledger.entries[entry_id] = mutation.payload
            ledger.last_entry_id = max(ledger.last_entry_id, entry_id)
            ledger.lac = max(ledger.lac, packet_lac(mutation.payload))
        elif kind is JournalKind.FENCE:
            ledger.fenced = True
        else:
            assert kind is JournalKind.EXPLICIT_LAC
            ledger.lac = max(ledger.lac, mutation.argument)
            if mutation.argument >= ledger.explicit_lac:
                ledger.explicit_lac = mutation.argument
                ledger.explicit_lac_packet = mutation.payload


class MemoryLedgerStorage:
    """The `LedgerStorage` contract in memory, with explicit `sync()` and `crash()`."""

    def __init__(
        self,
        *,
        unsynced_bytes_max: int = limits.journal_buffer_bytes_max,
        tombstones_max: int = limits.fenced_deleted_ledgers_remembered_max,
    ) -> None:
        assert unsynced_bytes_max > 0
        assert tombstones_max > 0
        self._unsynced_bytes_max = unsynced_bytes_max
        self._live = _State(tombstones_max)
        self._durable = _State(tombstones_max)
        self._unsynced: list[_Mutation] = []
        self._unsynced_bytes = 0
        self._ticket = 0
        self._synced_ticket = 0
        self._listeners: list[Callable[[int], None]] = []
        self._failure: StorageError | None = None

    # --- recovered state ----------------------------------------------------------------------

    def recovered_ledgers(self) -> Iterable[LedgerRecord]:
        return [
            LedgerRecord(
                ledger_id=ledger_id,
                master_key=ledger.master_key,
                fenced=ledger.fenced,
                lac=ledger.lac,
                explicit_lac_packet=ledger.explicit_lac_packet,
                last_entry_id=ledger.last_entry_id,
            )
            for ledger_id, ledger in sorted(self._live.ledgers.items())
        ]

    def fenced_tombstones(self) -> Iterable[int]:
        return list(self._live.tombstones)

    # --- mutations ----------------------------------------------------------------------------

    def _mutate(self, kind: JournalKind, ledger_id: int, argument: int, payload: bytes) -> int:
        if self._failure is not None:
            raise self._failure
        assert ledger_id >= 0
        if self._unsynced_bytes > self._unsynced_bytes_max:
            raise StorageBusy(
                f"{self._unsynced_bytes} bytes not yet synced (bound {self._unsynced_bytes_max})"
            )
        mutation = _Mutation(kind, ledger_id, argument, payload)
        self._live.apply(mutation)
        self._unsynced.append(mutation)
        self._unsynced_bytes += _RECORD_OVERHEAD_BYTES + len(payload)
        self._ticket += 1
        return self._ticket

    def set_master_key(self, ledger_id: int, master_key: bytes) -> int:
        existing = self._live.ledgers.get(ledger_id)
        if existing is not None:
            assert existing.master_key == master_key, "the handler checks keys before storing"
        return self._mutate(JournalKind.MASTER_KEY, ledger_id, 0, master_key)

    def add_entry(self, ledger_id: int, entry_id: int, packet: bytes) -> int:
        assert ledger_id in self._live.ledgers, "set_master_key comes first"
        assert entry_id >= 0
        return self._mutate(JournalKind.ENTRY, ledger_id, entry_id, packet)

    def fence(self, ledger_id: int) -> int:
        assert ledger_id in self._live.ledgers, "set_master_key comes first"
        return self._mutate(JournalKind.FENCE, ledger_id, 0, b"")

    def set_explicit_lac(self, ledger_id: int, lac: int, packet: bytes) -> int:
        assert ledger_id in self._live.ledgers, "set_master_key comes first"
        assert lac >= -1
        return self._mutate(JournalKind.EXPLICIT_LAC, ledger_id, lac, packet)

    def delete_ledger(self, ledger_id: int) -> int:
        ledger = self._live.ledgers.get(ledger_id)
        tombstone = ledger is not None and ledger.fenced
        return self._mutate(JournalKind.DELETE, ledger_id, int(tombstone), b"")

    # --- durability ---------------------------------------------------------------------------

    @property
    def synced_ticket(self) -> int:
        return self._synced_ticket

    def add_sync_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    @property
    def failure(self) -> StorageError | None:
        return self._failure

    @property
    def last_ticket(self) -> int:
        """The ticket of the latest mutation (0 before the first)."""
        return self._ticket

    def sync(self) -> int:
        """Make every mutation so far durable and tell the listeners; returns `synced_ticket`.

        Does nothing after a failure: what was not synced then never will be.
        """
        if self._failure is not None or self._synced_ticket == self._ticket:
            return self._synced_ticket
        for mutation in self._unsynced:
            self._durable.apply(mutation)
        self._unsynced.clear()
        self._unsynced_bytes = 0
        self._synced_ticket = self._ticket
        self._notify()
        assert self._synced_ticket == self._ticket
        return self._synced_ticket

    def fail(self, error: StorageError) -> None:
        """Stop as a failed journal write would: `failure` is set, listeners are called
        once, nothing more is synced and later mutations raise `error`."""
        assert self._failure is None
        self._failure = error
        self._notify()

    def crash(self, survivors: int = 0) -> MemoryLedgerStorage:
        """A new storage holding what a power cut now would leave: the synced state,
        plus the oldest `survivors` unsynced mutations (the disk may have written
        some of them, always in journal order).  This storage is left as it is."""
        assert 0 <= survivors <= len(self._unsynced)
        restarted = MemoryLedgerStorage(
            unsynced_bytes_max=self._unsynced_bytes_max,
            tombstones_max=self._durable.tombstones_max,
        )
        durable = self._durable.copy()
        for mutation in self._unsynced[:survivors]:
            durable.apply(mutation)
        restarted._durable = durable
        restarted._live = durable.copy()
        return restarted

    def _notify(self) -> None:
        for listener in tuple(self._listeners):
            listener(self._synced_ticket)

    # --- reads --------------------------------------------------------------------------------

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        ledger = self._live.ledgers.get(ledger_id)
        if ledger is None:
            return None
        return ledger.entries.get(entry_id)

    def last_entry_id(self, ledger_id: int) -> int:
        ledger = self._live.ledgers.get(ledger_id)
        return -1 if ledger is None else ledger.last_entry_id

    def entry_ranges(self, ledger_id: int) -> list[tuple[int, int]]:
        ledger = self._live.ledgers.get(ledger_id)
        return [] if ledger is None else ranges_of(ledger.entries)

    def ledger_ids(self) -> list[int]:
        return sorted(self._live.ledgers)
