"""The write handle of a ledger as a pure state machine: appends in; adds, confirmations out.

Pure (docs/ledgers.md, "Writing").  The shell feeds inputs
through methods (`append`, `on_add_response`, `on_add_timeout`,
`on_ensemble_changed`, ..., `tick(now_ms)`) and carries out the effects it
pulls with `take_effects()`, in order.  Effects name bookies by id; the shell
builds the wire requests (`AddRequest`, `WriteLacRequest`) from them, assigns
request ids, and reports every answer back, or a timeout when none came.

Two layers.  `AddPipeline` is the add protocol proper, shared with recovery
(which re-adds the entries it finds through one): pending adds, ack sets,
ordered confirmation and ensemble changes.  `Writer` puts a write handle on
top: it numbers and frames payloads, bounds the outstanding window, publishes
the last add confirmed (LAC) when idle, and closes the ledger.

Rules of the pipeline:

1. Entry e is sent to the bookies of its write set (quorum rule 1) with the
   handle's add flags, in one `SendAdd`.
2. Ordered confirmation.  Entry e is confirmed when Qa members of its write
   set acknowledged it AND every earlier entry is confirmed; the LAC is then
   e.  Confirmations go out as `AddsConfirmed(first, last)` ranges, so the
   LAC only grows and never passes the last entry pushed.
3. Fatal answers.  EFENCED or EUA from any bookie means another client owns
   the ledger now: every pending add fails with `LedgerFenced` (their outcome
   is unknown) and the pipeline stops.
4. Other errors and timeouts mark the bookie's ensemble index as failed:
   entries pushed from then on skip it.  Its replacement (`ChangeEnsemble`,
   from LAC + 1) starts at once when some pending add can no longer reach Qa
   (quorum rule 2).  Otherwise, in a writer, it starts once the add that saw
   the error is confirmed, at once if it already is: a delayed ensemble
   change, so the error does not fail the add (even one that had its Qa acks
   before the error came) and the confirmations the other bookies can give
   are not held back.  Recovery replaces a bookie only when an add can no
   longer reach Qa: Qa copies is all it needs.
5. While an ensemble change is in flight, confirmations are held back, so the
   new segment starts exactly at LAC + 1; new adds go to the bookies that
   did not fail.  When it succeeds, every pending add whose write set holds a
   replaced index forgets the replaced bookie's ack and is re-sent to the
   replacement, which is then the only copy the metadata points readers to.
6. A failed ensemble change fails every pending add with its error;
   `LedgerFenced` when the metadata says a recovery took the ledger.  One
   exception: when no replacement bookie exists (`NotEnoughBookies`) and
   every write set still has Qa bookies that did not fail, nothing fails.
   The change is *deferred*: the failed bookies stay skipped, the
   confirmations held back go out, entries keep being confirmed by the
   bookies left (as BookKeeper's `delayEnsembleChange` does), and
   `retry_deferred_change` (the writer's `tick`, every
   `change_retry_interval_ms`) asks for the change again, since a bookie may
   have joined since.  Entries written meanwhile have fewer than Qw copies,
   never fewer than Qa.

The writer adds:

7. `append` numbers entries densely from 0 and frames each with its LAC and
   the running ledger length; at most `outstanding_adds_max` adds are pending
   (`capacity` says how many more may be appended now).
8. Explicit LAC: `tick(now_ms)` sends the LAC to every bookie of the ensemble
   when it is newer than the LAC the last add carried, at most once per
   `explicit_lac_interval_ms`, so tailing readers see the last entry.  It
   also retries a deferred ensemble change (rule 6) once
   `change_retry_interval_ms` passed.
9. `close()` stops appends, waits for the pending adds, then asks for the
   metadata CAS to CLOSED at the LAC (`CloseLedger`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from bookie import limits
from bookie.core.metadata import LedgerMetadata, LedgerState
from bookie.core.quorum import Quorum, changed_indices, ensemble_indices, index_mask
from bookie.errors import (
    BookieError,
    LedgerClosed,
    LedgerFenced,
    LocalProtocolError,
    NotEnoughBookies,
    Status,
    TooManyEnsembleChanges,
)
from bookie.wire.packet import Digest

# --- effects ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendAdd:
    """Send ADD of `packet` as entry `entry_id` to each of `bookie_ids`."""

    entry_id: int
    packet: bytes
    bookie_ids: tuple[str, ...]
    flags: int
    """`bookie.wire.messages.ADD_FLAG_RECOVERY` for recovery adds, else 0."""


@dataclass(frozen=True, slots=True)
class AddsConfirmed:
    """Entries `first_entry_id` .. `last_entry_id` are confirmed, in order; the LAC is the last."""

    first_entry_id: int
    last_entry_id: int


@dataclass(frozen=True, slots=True)
class AddsFailed:
    """Entries `first_entry_id` .. `last_entry_id` failed: their outcome is unknown."""

    first_entry_id: int
    last_entry_id: int
    error: BookieError


@dataclass(frozen=True, slots=True)
class ChangeEnsemble:
    """Replace the `failed` bookies (index -> bookie id) from `first_entry_id` on.

    `ensemble` is the last ensemble as the pipeline knows it.  A writer's
    shell chooses replacements (`placement.choose_replacements`) and runs the
    CAS loop with `metadata.writer_ensemble_change_transform`; then it calls
    `on_ensemble_changed` or `on_ensemble_change_failed`.
    """

    first_entry_id: int
    ensemble: tuple[str, ...]
    failed: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class SendExplicitLac:
    """Send WRITE_LAC of `lac` (digest-framed in `packet`) to each of `bookie_ids`."""

    lac: int
    packet: bytes
    bookie_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CloseLedger:
    """Run the CAS loop with `metadata.writer_close_transform(last_entry_id, length)`.

    Then call `on_closed` or `on_close_failed`.
    """

    last_entry_id: int
    length: int


@dataclass(frozen=True, slots=True)
class CloseFailed:
    """The close asked for cannot happen: the ledger was fenced while adds drained."""

    error: BookieError


PipelineEffect = SendAdd | AddsConfirmed | AddsFailed | ChangeEnsemble
WriterEffect = PipelineEffect | SendExplicitLac | CloseLedger | CloseFailed

_EOK = int(Status.EOK)
_FATAL_STATUSES = frozenset({int(Status.EFENCED), int(Status.EUA)})


class _PendingAdd:
    """One add not yet confirmed.  Mutable and slotted: one per entry on the hot path."""

    __slots__ = ("entry_id", "packet", "length", "write_mask", "acked", "ack_count")

    def __init__(self, entry_id: int, packet: bytes, length: int, write_mask: int) -> None:
        self.entry_id = entry_id
        self.packet = packet
        self.length = length
        self.write_mask = write_mask
        self.acked = 0
        """Ensemble indices that acknowledged, as a bit mask."""
        self.ack_count = 0


# --- the add protocol -------------------------------------------------------------------------


class AddPipeline:
    """Pending adds of one ledger, their ack sets, ordered confirmation, ensemble changes.

    Effects are appended to the `effects` list given at construction (shared
    with the owner, which hands them to its shell).  Rules 1-6 of the module
    docstring.
    """

    __slots__ = (
        "last_add_confirmed",
        "last_add_pushed",
        "confirmed_length",
        "pushed_length",
        "error",
        "_effects",
        "_flags",
        "_quorum",
        "_ack_quorum",
        "_ensemble",
        "_index_of",
        "_write_set_bookies",
        "_pending",
        "_failed",
        "_failed_mask",
        "_changing",
        "_change_due",
        "_change_after",
        "_replace_after_ack_quorum",
        "_ensemble_changes",
        "_ensemble_changes_max",
        "change_deferred",
    )

    def __init__(
        self,
        metadata: LedgerMetadata,
        effects: list[WriterEffect],
        *,
        flags: int,
        last_add_confirmed: int,
        length: int,
        replace_after_ack_quorum: bool,
        ensemble_changes_max: int,
    ) -> None:
        assert last_add_confirmed >= -1
        assert metadata.ensembles[-1][0] <= last_add_confirmed + 1
        self.last_add_confirmed = last_add_confirmed
        self.last_add_pushed = last_add_confirmed
        self.confirmed_length = length
        """Ledger length up to and including the LAC."""
        self.pushed_length = length
        """Ledger length up to and including the last entry pushed."""
        self.error: BookieError | None = None
        """Set once the pipeline has failed (rules 3 and 6); it then does nothing more."""
        self._effects = effects
        self._flags = flags
        self._quorum = metadata.quorum
        self._ack_quorum = metadata.ack_quorum
        self._ensemble: tuple[str, ...] = ()
        self._index_of: dict[str, int] = {}
        self._write_set_bookies: tuple[tuple[str, ...], ...] = ()
        self._use_ensemble(metadata.current_ensemble)
        self._pending: dict[int, _PendingAdd] = {}
        self._failed: dict[int, str] = {}
        """Failed indices waiting for an ensemble change that has not started."""
        self._failed_mask = 0
        """Every failed index not yet replaced (waiting or in the change in flight)."""
        self._changing: dict[int, str] | None = None
        self._change_due = False
        self._change_after: int | None = None
        self._replace_after_ack_quorum = replace_after_ack_quorum
        self._ensemble_changes = 0
        self._ensemble_changes_max = ensemble_changes_max
        self.change_deferred = False
        """A change found no replacement and waits for `retry_deferred_change` (rule 6)."""

    def _use_ensemble(self, ensemble: tuple[str, ...]) -> None:
        self._ensemble = ensemble
        self._index_of = ensemble_indices(ensemble)
        self._write_set_bookies = tuple(
            tuple(ensemble[index] for index in members) for members in self._quorum.write_sets
        )

    # --- state --------------------------------------------------------------------------------

    @property
    def ensemble(self) -> tuple[str, ...]:
        """The last ensemble as the pipeline writes to it."""
        return self._ensemble

    @property
    def outstanding(self) -> int:
        """Adds pushed and neither confirmed nor failed."""
        return len(self._pending)

    @property
    def idle(self) -> bool:
        """Nothing pending and no ensemble change in flight."""
        return not self._pending and self._changing is None

    @property
    def changing_ensemble(self) -> bool:
        """An ensemble change is in flight: the metadata may already name another ensemble."""
        return self._changing is not None

    @property
    def quorum(self) -> Quorum:
        return self._quorum

    # --- inputs -------------------------------------------------------------------------------

    def push(self, entry_id: int, packet: bytes, length: int) -> None:
        """Send the next entry (rule 1); `length` is the ledger length including it."""
        assert self.error is None
        assert entry_id == self.last_add_pushed + 1, "entries are pushed densely, in order"
        assert length >= self.pushed_length
        position = entry_id % self._quorum.ensemble_size
        write_mask = self._quorum.write_masks[position]
        self._pending[entry_id] = _PendingAdd(entry_id, packet, length, write_mask)
        self.last_add_pushed = entry_id
        self.pushed_length = length
        failed_mask = self._failed_mask
        if not write_mask & failed_mask:
            self._effects.append(
                SendAdd(entry_id, packet, self._write_set_bookies[position], self._flags)
            )
            return
        # Rule 5: a failed bookie gets nothing more; its replacement receives
        # this entry when the change succeeds.
        bookie_ids = self._live_members(entry_id, write_mask & ~failed_mask)
        if bookie_ids:
            self._effects.append(SendAdd(entry_id, packet, bookie_ids, self._flags))
        if self._failed and self._quorum.ack_failed((write_mask & failed_mask).bit_count()):
            # Born unable to reach Qa, and a failed bookie waits for a change.
            self._change_due = True
            self._maybe_start_change()

    def on_add_response(self, bookie_id: str, entry_id: int, status: int) -> None:
        """A bookie answered the ADD of `entry_id` with `status`."""
        if self.error is not None:
            return
        index = self._index_of.get(bookie_id)
        if index is None:
            # Replaced already: its answer changes nothing the metadata points to.
            return
        if status != _EOK:
            self._on_error(index, bookie_id, entry_id, status)
            return
        record = self._pending.get(entry_id)
        bit = 1 << index
        if record is None or not record.write_mask & bit or record.acked & bit:
            return
        record.acked |= bit
        record.ack_count += 1
        if entry_id == self.last_add_confirmed + 1 and record.ack_count >= self._ack_quorum:
            self._confirm()

    def on_add_timeout(self, bookie_id: str, entry_id: int) -> None:
        """The ADD of `entry_id` to `bookie_id` got no answer in time (or its connection broke)."""
        if self.error is not None:
            return
        index = self._index_of.get(bookie_id)
        if index is not None:
            self._on_error(index, bookie_id, entry_id, int(Status.EIO))

    def on_ensemble_changed(self, metadata: LedgerMetadata) -> None:
        """The change asked for by `ChangeEnsemble` is done; `metadata` has the new ensemble."""
        if self.error is not None:
            return
        changing = self._changing
        assert changing is not None, "no ensemble change in flight"
        first_entry_id, ensemble = metadata.ensembles[-1]
        assert first_entry_id == self.last_add_confirmed + 1, "confirmations were held back"
        replaced = changed_indices(self._ensemble, ensemble)
        assert replaced.keys() == changing.keys(), "exactly the failed bookies are replaced"
        replaced_mask = index_mask(replaced)
        self._use_ensemble(ensemble)
        self._failed_mask &= ~replaced_mask
        self._changing = None
        self._ensemble_changes += 1
        if not self._failed:
            self._change_due = False
        write_set = self._quorum.write_set
        for record in self._pending.values():
            hit = record.write_mask & replaced_mask
            if not hit:
                continue
            if record.acked & hit:
                record.acked &= ~hit
                record.ack_count = record.acked.bit_count()
            targets = tuple(ensemble[i] for i in write_set(record.entry_id) if hit & (1 << i))
            self._effects.append(SendAdd(record.entry_id, record.packet, targets, self._flags))
        self._confirm()
        self._maybe_start_change()

    def on_ensemble_change_failed(self, error: BookieError) -> None:
        """The change asked for by `ChangeEnsemble` cannot happen (rule 6)."""
        changing = self._changing
        assert self.error is not None or changing is not None
        if self.error is not None or changing is None:
            return
        if isinstance(error, NotEnoughBookies) and self._writes_can_complete():
            self._failed.update(changing)
            self._changing = None
            self.change_deferred = True
            self._confirm()
            return
        self.fail(error)

    def retry_deferred_change(self) -> None:
        """Ask again for the change that found no replacement (rule 6)."""
        if self.change_deferred and self.error is None:
            self._change_due = True
            self._maybe_start_change()

    def fail(self, error: BookieError) -> None:
        """Fail every pending add with `error` and stop."""
        if self.error is not None:
            return
        self.error = error
        if self._pending:
            first = self.last_add_confirmed + 1
            self._effects.append(AddsFailed(first, self.last_add_pushed, error))
        self._pending.clear()
        self._failed.clear()
        self._changing = None

    # --- rules --------------------------------------------------------------------------------

    def _live_members(self, entry_id: int, mask: int) -> tuple[str, ...]:
        ensemble = self._ensemble
        return tuple(ensemble[i] for i in self._quorum.write_set(entry_id) if mask & (1 << i))

    def _on_error(self, index: int, bookie_id: str, entry_id: int, status: int) -> None:
        if status in _FATAL_STATUSES:
            self.fail(
                LedgerFenced(
                    f"bookie {bookie_id} answered {Status(status).name} to entry {entry_id}: "
                    "another client owns the ledger"
                )
            )
            return
        bit = 1 << index
        if entry_id > self.last_add_pushed or entry_id < 0:
            return
        if self._failed_mask & bit or not self._quorum.write_mask(entry_id) & bit:
            return
        record = self._pending.get(entry_id)
        if record is not None and record.acked & bit:
            return
        self._failed[index] = bookie_id
        self._failed_mask |= bit
        if self._an_add_cannot_complete():
            self._change_due = True
        elif self._replace_after_ack_quorum:
            # Rule 4, delayed: replace once the add is confirmed (now, if it is).
            if record is None:
                self._change_due = True
            else:
                after = self._change_after
                self._change_after = entry_id if after is None else min(after, entry_id)
        self._maybe_start_change()

    def _writes_can_complete(self) -> bool:
        """Whether every write set keeps at least Qa bookies that have not failed."""
        failed_mask = self._failed_mask
        ack_failed = self._quorum.ack_failed
        return not any(
            ack_failed((mask & failed_mask).bit_count()) for mask in self._quorum.write_masks
        )

    def _an_add_cannot_complete(self) -> bool:
        """Whether some pending add lost so many bookies that it cannot reach Qa (rule 4)."""
        failed_mask = self._failed_mask
        quorum = self._quorum
        return any(
            not quorum.ack_complete(record.ack_count)
            and quorum.ack_failed((record.write_mask & failed_mask & ~record.acked).bit_count())
            for record in self._pending.values()
        )

    def _confirm(self) -> None:
        """Confirm the longest run of complete adds after the LAC (rule 2)."""
        if self._changing is not None:
            return
        pending = self._pending
        first = lac = self.last_add_confirmed + 1
        ack_quorum = self._ack_quorum
        length = self.confirmed_length
        record = pending.get(lac)
        while record is not None and record.ack_count >= ack_quorum:
            del pending[lac]
            length = record.length
            lac += 1
            record = pending.get(lac)
        if lac == first:
            return
        self.last_add_confirmed = lac - 1
        self.confirmed_length = length
        self._effects.append(AddsConfirmed(first, lac - 1))
        after = self._change_after
        if after is not None and lac > after:
            self._change_after = None
            self._change_due = True
            self._maybe_start_change()

    def _maybe_start_change(self) -> None:
        if self._changing is not None or not self._failed or not self._change_due:
            return
        if self.error is not None:
            return
        if self._ensemble_changes >= self._ensemble_changes_max:
            self.fail(TooManyEnsembleChanges(f"{self._ensemble_changes} ensemble changes already"))
            return
        self._changing = dict(self._failed)
        self._failed.clear()
        self._change_due = False
        self._change_after = None
        self.change_deferred = False
        self._effects.append(
            ChangeEnsemble(self.last_add_confirmed + 1, self._ensemble, dict(self._changing))
        )


# --- the write handle -------------------------------------------------------------------------


class WriterState(enum.Enum):
    WRITABLE = "writable"
    CLOSING = "closing"
    """`close()` was called: adds drain, then the metadata CAS runs."""
    CLOSED = "closed"
    FENCED = "fenced"
    """Another client (a recovery) owns the ledger: nothing more can be acknowledged."""
    BROKEN = "broken"
    """Adds failed for another reason (no replacement bookie, ...): only `close()` is left."""


class Writer:
    """The write handle of one ledger: rules 7-9 on top of an `AddPipeline`."""

    __slots__ = (
        "_metadata",
        "_digest",
        "_effects",
        "_pipeline",
        "_state",
        "_close_requested",
        "_close_sent",
        "_outstanding_adds_max",
        "_explicit_lac_interval_ms",
        "_explicit_lac_due_ms",
        "_lac_published",
        "_change_retry_interval_ms",
        "_change_retry_ms",
    )

    def __init__(
        self,
        metadata: LedgerMetadata,
        digest: Digest,
        *,
        outstanding_adds_max: int = limits.outstanding_adds_max_default,
        explicit_lac_interval_ms: int = limits.explicit_lac_interval_ms_default,
        ensemble_changes_max: int = limits.ensemble_changes_max_default,
        change_retry_interval_ms: int = limits.ensemble_change_retry_interval_ms_default,
    ) -> None:
        assert metadata.state is LedgerState.OPEN
        assert outstanding_adds_max >= 1
        assert explicit_lac_interval_ms >= 0
        assert change_retry_interval_ms > 0
        self._metadata = metadata
        self._digest = digest
        self._effects: list[WriterEffect] = []
        self._pipeline = AddPipeline(
            metadata,
            self._effects,
            flags=0,
            last_add_confirmed=-1,
            length=0,
            replace_after_ack_quorum=True,
            ensemble_changes_max=ensemble_changes_max,
        )
        self._state = WriterState.WRITABLE
        self._close_requested = False
        self._close_sent = False
        self._outstanding_adds_max = outstanding_adds_max
        self._explicit_lac_interval_ms = explicit_lac_interval_ms
        self._explicit_lac_due_ms = 0
        self._lac_published = -1
        """The newest LAC sent to bookies, in an add's header or explicitly."""
        self._change_retry_interval_ms = change_retry_interval_ms
        self._change_retry_ms: int | None = None
        """When a deferred ensemble change is asked for again (None: not scheduled yet)."""

    # --- state --------------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._metadata.ledger_id

    @property
    def state(self) -> WriterState:
        return self._state

    @property
    def failure(self) -> BookieError | None:
        """Why this writer can take no more adds when it is FENCED or BROKEN, else None."""
        if self._state is WriterState.FENCED or self._state is WriterState.BROKEN:
            return self._refusal()
        return None

    @property
    def last_add_confirmed(self) -> int:
        return self._pipeline.last_add_confirmed

    @property
    def last_add_pushed(self) -> int:
        return self._pipeline.last_add_pushed

    @property
    def length(self) -> int:
        """Ledger length in bytes up to and including the LAC."""
        return self._pipeline.confirmed_length

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self._pipeline.ensemble

    @property
    def changing_ensemble(self) -> bool:
        return self._pipeline.changing_ensemble

    @property
    def quorum(self) -> Quorum:
        return self._pipeline.quorum

    @property
    def capacity(self) -> int:
        """How many more entries `append` accepts now (rule 7); 0 means wait for confirmations."""
        if self._state is not WriterState.WRITABLE:
            return 0
        return max(0, self._outstanding_adds_max - self._pipeline.outstanding)

    @property
    def change_deferred(self) -> bool:
        """An ensemble change found no replacement; writes go on without it (rule 6)."""
        return self._pipeline.change_deferred

    @property
    def next_tick_ms(self) -> int | None:
        """When `tick` has work next (explicit LAC, a deferred change), or None when it
        never will."""
        if self._state is not WriterState.WRITABLE:
            return None
        due_ms = None if self._explicit_lac_interval_ms == 0 else self._explicit_lac_due_ms
        if self._pipeline.change_deferred:
            # Not scheduled yet: tick now, which schedules it.
            retry_ms = 0 if self._change_retry_ms is None else self._change_retry_ms
            due_ms = retry_ms if due_ms is None else min(due_ms, retry_ms)
        return due_ms

    def take_effects(self) -> list[WriterEffect]:
        """Every effect produced since the last call, in the order to carry them out."""
        effects = self._effects[:]
        self._effects.clear()
        return effects

    # --- inputs -------------------------------------------------------------------------------

    def append(self, payload: bytes) -> int:
        """Frame `payload` as the next entry and send it; return its entry id.

        Raises `LedgerFenced`, `LedgerClosed` or the error that broke the
        handle when it is no longer writable, and `LocalProtocolError` for a
        payload over `limits.entry_payload_bytes_max`.  The caller must respect
        `capacity` (a programmer error otherwise).
        """
        if self._state is not WriterState.WRITABLE:
            raise self._refusal()
        if len(payload) > limits.entry_payload_bytes_max:
            raise LocalProtocolError(
                f"entry payload of {len(payload)} bytes exceeds {limits.entry_payload_bytes_max}"
            )
        pipeline = self._pipeline
        assert pipeline.outstanding < self._outstanding_adds_max, "append beyond capacity"
        entry_id = pipeline.last_add_pushed + 1
        lac = pipeline.last_add_confirmed
        length = pipeline.pushed_length + len(payload)
        packet = self._digest.build_entry(self._metadata.ledger_id, entry_id, lac, length, payload)
        self._lac_published = lac
        pipeline.push(entry_id, packet, length)
        if pipeline.error is not None:
            self._settle()
        return entry_id

    def on_add_response(self, bookie_id: str, entry_id: int, status: int) -> None:
        self._pipeline.on_add_response(bookie_id, entry_id, status)
        if self._state is not WriterState.WRITABLE or self._pipeline.error is not None:
            self._settle()

    def on_add_timeout(self, bookie_id: str, entry_id: int) -> None:
        self._pipeline.on_add_timeout(bookie_id, entry_id)
        self._settle()

    def on_ensemble_changed(self, metadata: LedgerMetadata) -> None:
        """The CAS for `ChangeEnsemble` succeeded (or found it done); `metadata` is the result."""
        assert metadata.state is LedgerState.OPEN
        assert metadata.ledger_id == self._metadata.ledger_id
        self._metadata = metadata
        self._pipeline.on_ensemble_changed(metadata)
        self._settle()

    def on_ensemble_change_failed(self, error: BookieError) -> None:
        """The CAS for `ChangeEnsemble` failed: `LedgerFenced` when a recovery took the ledger."""
        self._pipeline.on_ensemble_change_failed(error)
        self._settle()

    def tick(self, now_ms: int) -> None:
        """Timer input: publish the LAC explicitly when adds stopped carrying it, retry a
        deferred ensemble change (rule 8)."""
        if self._state is not WriterState.WRITABLE:
            return
        self._retry_deferred_change(now_ms)
        interval = self._explicit_lac_interval_ms
        if interval == 0 or self._state is not WriterState.WRITABLE:
            return
        if now_ms < self._explicit_lac_due_ms:
            return
        self._explicit_lac_due_ms = now_ms + interval
        lac = self._pipeline.last_add_confirmed
        if lac > self._lac_published:
            self._lac_published = lac
            packet = self._digest.build_lac(self._metadata.ledger_id, lac)
            self._effects.append(SendExplicitLac(lac, packet, self._pipeline.ensemble))

    def close(self) -> None:
        """Stop appends; close at the LAC once pending adds are done (rule 9).

        Raises `LedgerFenced` when fenced, `LedgerClosed` when already closing
        or closed.  A handle broken by another error closes at its LAC.
        """
        if self._state is WriterState.FENCED:
            raise self._refusal()
        if self._close_requested:
            raise LedgerClosed(f"ledger {self._metadata.ledger_id} is already closed or closing")
        self._close_requested = True
        self._state = WriterState.CLOSING
        self._settle()

    def on_closed(self, metadata: LedgerMetadata) -> None:
        """The close CAS succeeded (or found it done)."""
        assert self._state is WriterState.CLOSING
        assert metadata.state is LedgerState.CLOSED
        assert metadata.last_entry_id == self._pipeline.last_add_confirmed
        self._metadata = metadata
        self._state = WriterState.CLOSED

    def on_close_failed(self, error: BookieError) -> None:
        """The close CAS failed: `LedgerFenced` when a recovery took the ledger."""
        assert self._state is WriterState.CLOSING
        self._pipeline.fail(error)
        self._state = WriterState.FENCED if isinstance(error, LedgerFenced) else WriterState.BROKEN

    # --- rules --------------------------------------------------------------------------------

    def _retry_deferred_change(self, now_ms: int) -> None:
        pipeline = self._pipeline
        if not pipeline.change_deferred:
            self._change_retry_ms = None
        elif self._change_retry_ms is None:
            self._change_retry_ms = now_ms + self._change_retry_interval_ms
        elif now_ms >= self._change_retry_ms:
            self._change_retry_ms = None
            pipeline.retry_deferred_change()
            self._settle()

    def _refusal(self) -> BookieError:
        error = self._pipeline.error
        if self._state is WriterState.FENCED:
            return error if isinstance(error, LedgerFenced) else LedgerFenced("fenced")
        if self._close_requested:
            return LedgerClosed(f"ledger {self._metadata.ledger_id} is closed or closing")
        assert error is not None
        return error

    def _settle(self) -> None:
        """Move the handle state after the pipeline moved."""
        pipeline = self._pipeline
        error = pipeline.error
        if self._state is WriterState.WRITABLE:
            if error is not None:
                fenced = isinstance(error, LedgerFenced)
                self._state = WriterState.FENCED if fenced else WriterState.BROKEN
            return
        if self._state is not WriterState.CLOSING or self._close_sent:
            return
        if isinstance(error, LedgerFenced):
            self._state = WriterState.FENCED
            self._effects.append(CloseFailed(error))
            return
        if error is None and not pipeline.idle:
            return
        self._close_sent = True
        self._effects.append(CloseLedger(pipeline.last_add_confirmed, pipeline.confirmed_length))
