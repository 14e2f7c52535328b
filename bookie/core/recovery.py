"""Open with recovery as a pure state machine: fence, find the end, re-replicate, close.

Pure (docs/ledgers.md, "Recovery, step by step").  Same shape as the writer
and the readers: inputs through methods, effects pulled with `take_effects()`.
The shell runs step 0 itself and everything else as the effects say.

0. Mark.  The shell CASes the record OPEN -> IN_RECOVERY
   (`metadata.mark_in_recovery_transform`) and builds a `Recovery` from the
   result.  A CLOSED record needs no recovery: `start()` finishes at once.
1. Fence and read the LAC.  A fencing READ of entry -1 (the last entry it
   holds) goes to every bookie of the last ensemble.  Valid answers: OK with
   a packet whose digest verifies, ENOENTRY, ENOLEDGER.  EUA aborts
   (`UnauthorizedLedgerAccess`); corrupt packets, other errors and timeouts do
   not count.  The step completes as soon as the valid answers cover the
   ensemble (quorum rule 3): no write set can then gather Qa acks for the old
   writer.  It fails (`RecoveryFailed`) once every bookie answered without.
2. Start point: LAC := max(highest LAC in the verified answers' headers,
   first entry of the last segment - 1); earlier segments are complete.
3. Read forward from LAC + 1 with fencing READs (fencing again: a fence
   answer lost or delayed in step 1 must not let the old writer reach Qa;
   docs/ledgers.md, section 3) to the whole write set, at most
   `recovery_read_batch_max` entries ahead of the confirmed recovery adds.
   An entry is *found* on the first verified packet, *absent* once Qw - Qa + 1
   members explicitly answered ENOENTRY/ENOLEDGER (quorum rule 4; errors and
   timeouts never count).  When every member answered and neither holds, the
   recovery fails (`RecoveryFailed`, retryable) and the ledger stays
   IN_RECOVERY.
4. Found entries are re-added, verbatim and in entry order, with the recovery
   flag (fenced bookies accept it) to their whole write set, through an
   `AddPipeline`; Qa acks confirm one.  A bookie that fails so that an add
   cannot reach Qa is replaced (`ChooseReplacements`, the shell runs
   placement); the new segment is kept here and written by the close.
5. Stop at the first absent entry A once every entry before it is found, its
   re-add confirmed, and no replacement is in flight.  Entries read past A
   are ignored: none of them was acknowledged, since A never was.
6. Close (`CloseRecovered`): the shell CASes IN_RECOVERY -> CLOSED with
   `metadata.recovery_close_transform` at A - 1, with the length from the
   header of entry A - 1.  When A - 1 is the start LAC itself and no fence
   answer carried that entry, it is read first (plain READ, first valid copy).
   A CLOSED record found there is adopted: concurrent recoverers converge
   through the CAS.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from bookie import limits
from bookie.core.metadata import LedgerMetadata, LedgerState, replace_bookies
from bookie.core.quorum import ensemble_indices
from bookie.core.reader import NO_ENTRY_STATUSES, SendRead, replicas_of
from bookie.core.writer import AddPipeline, AddsFailed, ChangeEnsemble, SendAdd, WriterEffect
from bookie.errors import (
    BookieError,
    DigestMismatch,
    RecoveryFailed,
    Status,
    TooManyEnsembleChanges,
    UnauthorizedLedgerAccess,
)
from bookie.wire.messages import ADD_FLAG_RECOVERY, ENTRY_ID_LAST, ReadResponse
from bookie.wire.packet import Digest

# --- effects ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChooseReplacements:
    """Pick a new bookie for each `failed` index of `ensemble` (`placement.choose_replacements`).

    Then call `on_replacements` or `on_replacements_failed`.  Nothing is
    written to the metadata yet: the close writes the new segment.
    """

    first_entry_id: int
    ensemble: tuple[str, ...]
    failed: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class CloseRecovered:
    """Run the CAS loop with `metadata.recovery_close_transform` and these arguments.

    Then call `on_closed` or `on_close_failed`.
    """

    started_ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    recovered_ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    last_entry_id: int
    length: int


@dataclass(frozen=True, slots=True)
class RecoveryFinished:
    """The ledger is closed; `metadata` is its final record (ours, or a concurrent recoverer's)."""

    metadata: LedgerMetadata


@dataclass(frozen=True, slots=True)
class RecoveryAborted:
    """Recovery stopped with `error`; the ledger stays IN_RECOVERY (retry when retryable)."""

    error: BookieError


RecoveryEffect = (
    SendRead | SendAdd | ChooseReplacements | CloseRecovered | RecoveryFinished | RecoveryAborted
)

_EOK = int(Status.EOK)
_EUA = int(Status.EUA)


class RecoveryPhase(enum.Enum):
    CREATED = "created"
    FENCING = "fencing"
    """Step 1: waiting for fencing LAC reads to cover the ensemble."""
    RECOVERING = "recovering"
    """Steps 3-5: reading forward and re-adding."""
    MEASURING = "measuring"
    """Step 6: reading the start LAC's entry for the ledger length."""
    CLOSING = "closing"
    FINISHED = "finished"
    ABORTED = "aborted"


class _RecoveryRead:
    """The answers to the reads of one entry."""

    __slots__ = ("entry_id", "replicas", "answered", "no_entries", "packet", "length")

    def __init__(self, entry_id: int, replicas: tuple[str, ...]) -> None:
        self.entry_id = entry_id
        self.replicas = replicas
        self.answered = 0
        """Positions in `replicas` that answered, as a bit mask."""
        self.no_entries = 0
        self.packet: bytes | None = None
        self.length = 0


class Recovery:
    """Recovers one ledger: steps 1-6 of the module docstring."""

    def __init__(
        self,
        metadata: LedgerMetadata,
        digest: Digest,
        *,
        read_batch_max: int = limits.recovery_read_batch_max,
        ensemble_changes_max: int = limits.ensemble_changes_max_default,
    ) -> None:
        """`metadata` is the record after the IN_RECOVERY mark (step 0)."""
        assert metadata.state is not LedgerState.OPEN, "mark the ledger IN_RECOVERY first"
        assert read_batch_max >= 1
        self._metadata = metadata
        self._recovered = metadata
        """`metadata` with the bookies recovery replaced (step 4)."""
        self._digest = digest
        self._quorum = metadata.quorum
        self._read_batch_max = read_batch_max
        self._ensemble_changes_max = ensemble_changes_max
        self._phase = RecoveryPhase.CREATED
        self._effects: list[RecoveryEffect] = []
        # Step 1.
        self._fence_index_of = ensemble_indices(metadata.current_ensemble)
        self._fence_valid = 0
        self._fence_answered = 0
        self._fence_lac = -1
        self._fence_lengths: dict[int, int] = {}
        """Ledger length at the entries the fence answers carried (by entry id)."""
        # Steps 2-5.
        self._start_lac = -1
        self._pipeline: AddPipeline | None = None
        self._pipeline_effects: list[WriterEffect] = []
        self._reads: dict[int, _RecoveryRead] = {}
        self._next_read = 0
        self._next_push = 0
        self._absent_entry_id: int | None = None
        self._replacing_from = 0
        # Step 6.
        self._measure: _RecoveryRead | None = None

    # --- state --------------------------------------------------------------------------------

    @property
    def phase(self) -> RecoveryPhase:
        return self._phase

    @property
    def start_lac(self) -> int:
        """The LAC recovery reads forward from (step 2); -1 before step 1 completes."""
        return self._start_lac

    def take_effects(self) -> list[RecoveryEffect]:
        effects = self._effects[:]
        self._effects.clear()
        return effects

    # --- inputs -------------------------------------------------------------------------------

    def start(self) -> None:
        assert self._phase is RecoveryPhase.CREATED
        if self._metadata.state is LedgerState.CLOSED:
            self._phase = RecoveryPhase.FINISHED
            self._effects.append(RecoveryFinished(self._metadata))
            return
        self._phase = RecoveryPhase.FENCING
        self._effects.extend(
            SendRead(bookie_id, ENTRY_ID_LAST, fence=True)
            for bookie_id in self._metadata.current_ensemble
        )

    def on_read_response(self, bookie_id: str, entry_id: int, response: ReadResponse) -> None:
        """`bookie_id` answered the READ of `entry_id` (-1 for the fencing LAC read)."""
        phase = self._phase
        if phase is RecoveryPhase.FENCING and entry_id == ENTRY_ID_LAST:
            self._on_fence_answer(bookie_id, response)
        elif phase is RecoveryPhase.RECOVERING and entry_id > self._start_lac:
            self._on_entry_answer(bookie_id, entry_id, response)
        elif phase is RecoveryPhase.MEASURING and entry_id == self._start_lac:
            self._on_measure_answer(bookie_id, response)

    def on_read_timeout(self, bookie_id: str, entry_id: int) -> None:
        """The READ of `entry_id` to `bookie_id` got no answer in time: an error (never absence)."""
        self.on_read_response(bookie_id, entry_id, ReadResponse(0, int(Status.EIO), "timeout"))

    def on_add_response(self, bookie_id: str, entry_id: int, status: int) -> None:
        if self._phase is RecoveryPhase.RECOVERING and self._pipeline is not None:
            self._pipeline.on_add_response(bookie_id, entry_id, status)
            self._after_pipeline()

    def on_add_timeout(self, bookie_id: str, entry_id: int) -> None:
        if self._phase is RecoveryPhase.RECOVERING and self._pipeline is not None:
            self._pipeline.on_add_timeout(bookie_id, entry_id)
            self._after_pipeline()

    def on_replacements(self, replacements: Mapping[int, str]) -> None:
        """The bookies chosen for `ChooseReplacements` (index -> new bookie id)."""
        if self._phase is not RecoveryPhase.RECOVERING:
            return
        assert self._pipeline is not None
        self._recovered = replace_bookies(self._recovered, self._replacing_from, replacements)
        self._pipeline.on_ensemble_changed(self._recovered)
        self._after_pipeline()

    def on_replacements_failed(self, error: BookieError) -> None:
        """No bookies could be chosen for `ChooseReplacements` (`NotEnoughBookies`)."""
        if self._phase is RecoveryPhase.RECOVERING:
            self._abort(error)

    def on_closed(self, metadata: LedgerMetadata) -> None:
        """The close CAS succeeded, or found the ledger closed by a concurrent recoverer."""
        assert self._phase is RecoveryPhase.CLOSING
        assert metadata.state is LedgerState.CLOSED
        self._phase = RecoveryPhase.FINISHED
        self._effects.append(RecoveryFinished(metadata))

    def on_close_failed(self, error: BookieError) -> None:
        assert self._phase is RecoveryPhase.CLOSING
        self._abort(error)

    # --- step 1 -------------------------------------------------------------------------------

    def _on_fence_answer(self, bookie_id: str, response: ReadResponse) -> None:
        index = self._fence_index_of.get(bookie_id)
        if index is None or self._fence_answered & (1 << index):
            return
        self._fence_answered |= 1 << index
        status = response.status
        if status == _EUA:
            self._abort(UnauthorizedLedgerAccess(f"bookie {bookie_id} refused the master key"))
            return
        if status in NO_ENTRY_STATUSES:
            self._fence_valid |= 1 << index
        elif status == _EOK and response.packet is not None and response.entry_id is not None:
            try:
                lac, length, _ = self._digest.verify_entry(
                    response.packet, self._metadata.ledger_id, response.entry_id
                )
            except DigestMismatch:
                pass
            else:
                self._fence_valid |= 1 << index
                self._fence_lac = max(self._fence_lac, lac)
                self._fence_lengths[response.entry_id] = length
        if self._quorum.covered(self._fence_valid):
            self._begin_recovering()
        elif self._fence_answered.bit_count() == len(self._fence_index_of):
            self._abort(
                RecoveryFailed(
                    f"ledger {self._metadata.ledger_id}: {self._fence_valid.bit_count()} valid "
                    f"fencing answers of {len(self._fence_index_of)} do not cover every write set"
                )
            )

    # --- steps 2-5 ----------------------------------------------------------------------------

    def _begin_recovering(self) -> None:
        """Step 2, then the first batch of step 3."""
        first_of_last_segment = self._metadata.ensembles[-1][0]
        start_lac = max(self._fence_lac, first_of_last_segment - 1)
        self._start_lac = start_lac
        self._next_read = self._next_push = start_lac + 1
        self._pipeline = AddPipeline(
            self._metadata,
            self._pipeline_effects,
            flags=ADD_FLAG_RECOVERY,
            last_add_confirmed=start_lac,
            length=0,
            replace_after_ack_quorum=False,
            ensemble_changes_max=self._ensemble_changes_max,
        )
        self._phase = RecoveryPhase.RECOVERING
        self._read_ahead()

    def _read_ahead(self) -> None:
        pipeline = self._pipeline
        assert pipeline is not None
        if self._absent_entry_id is not None:
            return
        end = pipeline.last_add_confirmed + 1 + self._read_batch_max
        while self._next_read < end:
            entry_id = self._next_read
            self._next_read += 1
            replicas = replicas_of(self._metadata, entry_id)
            self._reads[entry_id] = _RecoveryRead(entry_id, replicas)
            self._effects.extend(SendRead(b, entry_id, fence=True) for b in replicas)

    def _on_entry_answer(self, bookie_id: str, entry_id: int, response: ReadResponse) -> None:
        read = self._reads.get(entry_id)
        if read is None or read.packet is not None or not _mark_answered(read, bookie_id):
            return
        status = response.status
        if status == _EUA:
            self._abort(UnauthorizedLedgerAccess(f"bookie {bookie_id} refused the master key"))
            return
        if status in NO_ENTRY_STATUSES:
            read.no_entries += 1
            if self._quorum.absent(read.no_entries):
                self._found_absent(entry_id)
                self._progress()
                return
        elif status == _EOK and response.packet is not None:
            try:
                _, length, _ = self._digest.verify_entry(
                    response.packet, self._metadata.ledger_id, entry_id
                )
            except DigestMismatch:
                pass
            else:
                read.packet = response.packet
                read.length = length
                self._progress()
                return
        if read.answered.bit_count() == len(read.replicas):
            self._abort(
                RecoveryFailed(
                    f"entry {entry_id} of ledger {self._metadata.ledger_id}: every bookie of "
                    f"{list(read.replicas)} answered, {read.no_entries} said absent; neither "
                    "found nor provably absent"
                )
            )

    def _found_absent(self, entry_id: int) -> None:
        """Step 5: the end is before `entry_id`; reads after it no longer matter."""
        absent = self._absent_entry_id
        if absent is not None and absent <= entry_id:
            return
        self._absent_entry_id = entry_id
        for later in [e for e in self._reads if e >= entry_id]:
            del self._reads[later]

    def _progress(self) -> None:
        """Push the found prefix (step 4), read further (step 3), close when done (step 5)."""
        pipeline = self._pipeline
        assert pipeline is not None
        reads = self._reads
        read = reads.get(self._next_push)
        while read is not None and read.packet is not None:
            pipeline.push(read.entry_id, read.packet, read.length)
            del reads[read.entry_id]
            self._next_push += 1
            read = reads.get(self._next_push)
        self._after_pipeline()

    def _after_pipeline(self) -> None:
        """Hand on what the pipeline produced, then see whether recovery may end."""
        pipeline = self._pipeline
        assert pipeline is not None
        for effect in self._pipeline_effects:
            if isinstance(effect, SendAdd):
                self._effects.append(effect)
            elif isinstance(effect, ChangeEnsemble):
                self._replacing_from = effect.first_entry_id
                self._effects.append(
                    ChooseReplacements(effect.first_entry_id, effect.ensemble, effect.failed)
                )
            elif isinstance(effect, AddsFailed):
                self._pipeline_effects.clear()
                self._abort(_attempt_failure(effect.error))
                return
        self._pipeline_effects.clear()
        if self._phase is not RecoveryPhase.RECOVERING:
            return
        self._read_ahead()
        absent = self._absent_entry_id
        if absent is not None and self._next_push == absent and pipeline.idle:
            self._finish_recovering(absent - 1)

    # --- step 6 -------------------------------------------------------------------------------

    def _finish_recovering(self, last_entry_id: int) -> None:
        pipeline = self._pipeline
        assert pipeline is not None
        assert last_entry_id == pipeline.last_add_confirmed
        if last_entry_id > self._start_lac:
            self._close(last_entry_id, pipeline.confirmed_length)
        elif last_entry_id == -1:
            self._close(-1, 0)
        elif last_entry_id in self._fence_lengths:
            self._close(last_entry_id, self._fence_lengths[last_entry_id])
        else:
            self._phase = RecoveryPhase.MEASURING
            replicas = replicas_of(self._metadata, last_entry_id)
            self._measure = _RecoveryRead(last_entry_id, replicas)
            self._effects.extend(SendRead(b, last_entry_id) for b in replicas)

    def _on_measure_answer(self, bookie_id: str, response: ReadResponse) -> None:
        read = self._measure
        assert read is not None
        if not _mark_answered(read, bookie_id):
            return
        if response.status == _EOK and response.packet is not None:
            try:
                _, length, _ = self._digest.verify_entry(
                    response.packet, self._metadata.ledger_id, read.entry_id
                )
            except DigestMismatch:
                pass
            else:
                self._close(read.entry_id, length)
                return
        if read.answered.bit_count() == len(read.replicas):
            self._abort(
                RecoveryFailed(
                    f"entry {read.entry_id} of ledger {self._metadata.ledger_id}, the last "
                    f"confirmed one, could not be read from {list(read.replicas)} for its length"
                )
            )

    def _close(self, last_entry_id: int, length: int) -> None:
        self._phase = RecoveryPhase.CLOSING
        self._effects.append(
            CloseRecovered(
                self._metadata.ensembles, self._recovered.ensembles, last_entry_id, length
            )
        )

    def _abort(self, error: BookieError) -> None:
        if self._phase in (RecoveryPhase.FINISHED, RecoveryPhase.ABORTED):
            return
        self._phase = RecoveryPhase.ABORTED
        if self._pipeline is not None:
            self._pipeline.fail(error)
            self._pipeline_effects.clear()
        self._reads.clear()
        self._effects.append(RecoveryAborted(error))


def _attempt_failure(error: BookieError) -> BookieError:
    """What the re-adds failing with `error` means to whoever opened the ledger.

    Running out of ensemble changes ends this attempt only: the ledger stays
    IN_RECOVERY and a new open starts with a fresh count, so the caller must
    see the retryable `RecoveryFailed`, not the writer's final
    `TooManyEnsembleChanges`.
    """
    if isinstance(error, TooManyEnsembleChanges):
        return RecoveryFailed(f"re-adding entries failed: {error}")
    return error


def _mark_answered(read: _RecoveryRead, bookie_id: str) -> bool:
    """Record that `bookie_id` answered; False when it is not a replica or answered before."""
    try:
        bit = 1 << read.replicas.index(bookie_id)
    except ValueError:
        return False
    if read.answered & bit:
        return False
    read.answered |= bit
    return True
