"""The replica's state and the one place where log entries are applied to it.

A replica's state is its `StateMachine` instance, its session table and how
far it has applied the log: the `AppliedPosition` (index, logged time, epoch)
and the cursor `(ledger_id, entry_id)` of the last entry applied.  Followers
(entries read from bookies), a leader (its own entries, once acknowledged and
decoded from the bytes it sent) and a takeover (replay) all call `apply`, and
nothing else changes the state: this is what makes I3 ("every replica applies
exactly the commands of the log, in index order, each once") a property of
one function.

`apply` refuses an entry that does not continue the log exactly (its first
index must be the next index) with `MalformedValue`: a gap or an overlap means
a corrupt log or a bug, and applying it anyway would silently diverge.  An
entry at or before the cursor in the same ledger was applied already and is
skipped: a reader that re-reads after a reconnection must not apply twice.

Queries are answered here too, from the applied state: at once (`stale`,
linearizable reads once their confirmation round succeeded) or once a given
index is applied (`read_your_writes`, through `IndexWaiters`).

State hashes (rsm/core/state_hashes.py) are recorded here, after the
batches the schedule names, and the hashes the log carries are compared
here; a divergence raises the alarm (`rsm.diverged` log line, counters in the
replica's status) and applying goes on.  `install` replaces the whole state
with one restored from a snapshot.

Invariants: the position's index never decreases and moves by exactly the
items of each applied entry; queries see the state between two entries,
never in the middle of one (apply has no await).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple, Protocol

from bookie.logs import emit
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core.commands import INITIAL_POSITION, AppliedPosition, apply_batch, run_query
from rsm.core.log_format import Batch
from rsm.core.log_state import Cursor
from rsm.core.protocol import Op
from rsm.core.reads import IndexWaiters
from rsm.core.sessions import Outcome, SessionTable
from rsm.core.state_hashes import StateHashes
from rsm.core.state_machine import Context, StateMachine
from rsm.errors import MalformedValue, StatusError

logger = logging.getLogger(__name__)


class Answerer(Protocol):
    """Whoever sent a request and waits for its answer (a connection, or an in-process call)."""

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        """Deliver the answer to request `request_id`; never raises, never blocks."""
        ...


class Read(NamedTuple):
    """A query waiting to be answered."""

    answerer: Answerer
    request_id: int
    name: str
    args: list[Any]
    kwargs: dict[str, Any]


class Applier:
    """State, position and the apply step of one replica (see the module docstring)."""

    __slots__ = (
        "machine",
        "sessions",
        "position",
        "cursor",
        "hashes",
        "log_bytes",
        "_waiters",
        "_query_context",
        "_query_context_at",
    )

    def __init__(self, machine: StateMachine, config: ReplicaConfig) -> None:
        self.machine = machine
        self.sessions = SessionTable(
            ttl_ms=config.session_ttl_ms,
            sessions_max=config.sessions_max,
            evict_idle_ms=config.session_evict_idle_ms,
            results_max=config.session_results_max,
        )
        self.position: AppliedPosition = INITIAL_POSITION
        self.cursor: Cursor | None = None
        self.hashes = StateHashes(config.state_hash_every_commands)
        self.log_bytes = 0
        """Bytes of log entries read and applied by this replica (for the snapshot policy);
        whoever reads an entry adds its size."""
        self._waiters: IndexWaiters[Read] = IndexWaiters(0)
        self._query_context: Context | None = None
        self._query_context_at: tuple[AppliedPosition, int] | None = None
        """The position and time `_query_context` was made for: reads at the same position and
        time (most of a busy leader's, between two batches) share it."""

    @property
    def applied_index(self) -> int:
        return self.position.index

    def apply(self, batch: Batch, ledger_id: int, entry_id: int) -> list[Outcome] | None:
        """Apply the entry `entry_id` of ledger `ledger_id`; its outcomes, one per item.

        None when that entry was applied already.  Raises `MalformedValue` when
        it does not continue the log (see the module docstring).
        """
        cursor = self.cursor
        if cursor is not None and cursor.ledger_id == ledger_id and entry_id <= cursor.entry_id:
            return None
        expected = self.position.index + 1
        if batch.first_index != expected:
            raise MalformedValue(
                f"entry {entry_id} of ledger {ledger_id} starts at index {batch.first_index}, "
                f"but the replica applied up to {expected - 1}: the log has a gap or an overlap"
            )
        outcomes = apply_batch(self.machine, batch, self.sessions)
        self.position = AppliedPosition.after(batch)
        self.cursor = Cursor(ledger_id, entry_id)
        if batch.items:
            index = self.position.index
            assert index == batch.next_index - 1
            label = self.hashes.due(batch.first_index, index)
            if label is not None:
                self._record_hash(label)
            for read in self._waiters.applied(index):
                self.answer_read(read)
        if batch.state_hash is not None:
            self._check_hash(batch, ledger_id, entry_id)
        return outcomes

    def _record_hash(self, index: int) -> None:
        try:
            digest = self.machine.state_hash()
            if type(digest) is not bytes or not 1 <= len(digest) <= limits.state_hash_bytes_max:
                raise TypeError(
                    f"state_hash() returned {digest!r:.40}, not 1..{limits.state_hash_bytes_max} "
                    "bytes"
                )
        except (MemoryError, RecursionError):
            raise
        except Exception as error:
            # A broken state_hash must not stop the replica: hashes only watch.
            self.hashes.failures += 1
            emit(logger, logging.WARNING, "rsm.state_hash_failed", index=index, error=repr(error))
            return
        self.hashes.record(index, digest)

    def _check_hash(self, batch: Batch, ledger_id: int, entry_id: int) -> None:
        logged = batch.state_hash
        assert logged is not None
        divergence = self.hashes.check(logged)
        if divergence is not None:
            emit(
                logger,
                logging.ERROR,
                "rsm.diverged",
                index=divergence.index,
                logged=divergence.logged.hex(),
                local=divergence.local.hex(),
                ledger_id=ledger_id,
                entry_id=entry_id,
                divergences=self.hashes.divergences,
            )

    def install(
        self,
        machine: StateMachine,
        sessions: SessionTable,
        position: AppliedPosition,
        cursor: Cursor | None,
    ) -> None:
        """Replace the whole state with one restored from a snapshot taken at `position`.

        The position only moves forward; reads waiting for an index the
        snapshot reaches are answered from the new state.
        """
        assert position.index >= self.position.index
        self.machine = machine
        self.sessions = sessions
        self.position = position
        self.cursor = cursor
        for read in self._waiters.applied(position.index):
            self.answer_read(read)

    # --- queries ------------------------------------------------------------------------------

    def query(
        self,
        name: str,
        args: list[Any],
        kwargs: dict[str, Any] | None,
        *,
        time_ms: int | None = None,
    ) -> Outcome:
        """Answer a query from the state as it is now; errors become outcomes.

        The query sees the last applied entry's time, or `time_ms` when later: a
        leader answering a linearizable read passes its own clock, so a key
        whose expiry time has passed is gone even if nothing was logged since.
        """
        position = self.position
        query_time_ms = position.time_ms
        if time_ms is not None and time_ms > query_time_ms:
            query_time_ms = time_ms
        context = self._query_context
        at = self._query_context_at
        if context is None or at is None or at[0] is not position or at[1] != query_time_ms:
            context = self._query_context = Context.for_query(
                position.index, query_time_ms, position.epoch
            )
            self._query_context_at = (position, query_time_ms)
        try:
            return run_query(self.machine, name, args, kwargs, context)
        except StatusError as error:
            return Outcome.failure(error)

    def answer_read(self, read: Read, *, time_ms: int | None = None) -> None:
        outcome = self.query(read.name, read.args, read.kwargs, time_ms=time_ms)
        read.answerer.answer(Op.QUERY, read.request_id, outcome, self.position.index)

    def read_at(self, min_index: int, read: Read) -> int | None:
        """Answer `read` once `min_index` is applied (now if it is); a ticket to cancel it, or
        None when it was answered at once.  Raises `Overloaded` at the waiter bound."""
        if min_index <= self.position.index:
            self.answer_read(read)
            return None
        return self._waiters.add(min_index, read)

    def cancel_read(self, ticket: int) -> None:
        """Forget a waiting read whose asker went away."""
        self._waiters.cancel(ticket)

    @property
    def waiting_reads(self) -> int:
        return len(self._waiters)
