"""Reading a ledger as pure state machines: entries, the last add confirmed, tailing.

Pure (docs/ledgers.md, "What a reader may see").  Same shape as the writer:
inputs through methods (answers, timeouts, `tick(now_ms)` for timers), effects
queued and pulled with `take_effects()`.  Effects name bookies by id; the shell
builds `ReadRequest` / `ReadLacRequest` from them, assigns request ids, and
reports every answer back with the entry id it asked for, or a timeout.

Three machines:

`RangeRead` reads entries first..last (rules 1-4):

1. Only up to the last add confirmed (LAC) unless the caller asks for
   unconfirmed entries (`ReadBeyondLastAddConfirmed`), and never past the end
   of a closed ledger.
2. Each entry is asked of the members of its write set in write-set order, one
   at a time: the next one is asked when the current one answers an error,
   no entry, or a packet whose digest does not verify; or, speculatively, when
   it has not answered within `speculative_read_timeout_ms` (then both are
   outstanding and the first valid packet wins).
3. An entry fails when every member has answered without a valid packet:
   `NoSuchEntry` if all said they do not hold it, `DigestMismatch` if only
   corrupt copies came back, `BookieUnavailable` (with the first reason) if
   none could be reached at all (`on_unreachable`: a refused TLS handshake,
   say), else `EntryNotAvailable`.  The read stops there.
4. Payloads are delivered strictly in entry order (`EntriesRead` runs); every
   answer's LAC (the bookie's, and the one in a verified packet header)
   raises the reader's LAC, which never decreases.

`LacRead` learns the LAC without fencing (rule 5): READ_LAC to every bookie of
the last ensemble; an answer is valid when its packets verify (OK) or the
bookie holds nothing (ENOENTRY, ENOLEDGER); the LAC is the highest in the
explicit-LAC packets and the last-entry headers.  The standard read completes
once the valid answers cover the ensemble (quorum rule 3), so no acknowledged
entry is missed; the "try" read completes on the first valid answer.  Either
fails (`BookieUnavailable`) once every bookie answered without completing.

`LongPollTail` decides how a tailing reader waits for the next entry
(rules 6-9):

6. One long-poll READ at a time, for entry LAC + 1 with `previous_lac` = LAC,
   to a member of that entry's write set: the bookie whose answer advanced
   the LAC last if it is one, else the first member.
7. An answer whose LAC (the bookie's, or the header of the verified packet it
   carries) passed the reader's LAC advances it (`LacAdvanced`, with the
   payload of entry LAC + 1 when the answer carried it and it is confirmed)
   and the next poll goes out at once, to the same bookie when it holds the
   next entry.  An answer without progress (the bookie's poll timed out)
   moves to the next member, without counting as a failure: a bookie can
   miss entries for good (one the writer went on without when it failed and
   no replacement was found: it never sees the LAC move again) while the
   others are ahead, and polling it again would stall the tail until the
   ledger closes.  Errors, timeouts, corrupt packets and ENOLEDGER (a bookie
   that has seen nothing of the ledger answers at once) move to the next
   member too, and after a whole write set of those the tail waits
   `retry_delay_ms` before polling again.
8. When the metadata says the ledger is closed, the LAC becomes its last
   entry and the tail ends (`TailEnded`).
9. A segment that starts at entry s proves every entry before s confirmed (a
   writer starts a segment at its LAC + 1), so the LAC is at least s - 1.
   This matters: bookies of an earlier ensemble never learn a later LAC (new
   entries and explicit LACs go to the current ensemble), so a tail polling
   them for an entry below s would wait forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bookie import limits
from bookie.core.metadata import LedgerMetadata
from bookie.core.quorum import ensemble_indices
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    DigestMismatch,
    EntryNotAvailable,
    NoSuchEntry,
    ReadBeyondLastAddConfirmed,
    Status,
)
from bookie.wire.messages import ReadLacResponse, ReadResponse
from bookie.wire.packet import Digest, packet_entry_id

# --- effects ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendRead:
    """Send READ of `entry_id` (-1: the last entry it holds) to `bookie_id`.

    `fence` sets `READ_FLAG_FENCE` (the shell adds the master key);
    `previous_lac` and `timeout_ms` make it a long poll.
    """

    bookie_id: str
    entry_id: int
    fence: bool = False
    previous_lac: int | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SendReadLac:
    """Send READ_LAC to `bookie_id`."""

    bookie_id: str


@dataclass(frozen=True, slots=True)
class EntriesRead:
    """Payloads of entries `first_entry_id`, `first_entry_id + 1`, ... in order."""

    first_entry_id: int
    payloads: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """Entry `entry_id` could not be read (rule 3); no later entry will be delivered."""

    entry_id: int
    error: BookieError


@dataclass(frozen=True, slots=True)
class LacKnown:
    """`LacRead` completed: the last add confirmed is at least `last_add_confirmed`."""

    last_add_confirmed: int


@dataclass(frozen=True, slots=True)
class LacReadFailed:
    """`LacRead` cannot complete: too few bookies gave a valid answer."""

    error: BookieError


@dataclass(frozen=True, slots=True)
class LacAdvanced:
    """The tail's LAC rose to `last_add_confirmed`.

    When the answer carried entry `entry_id` (the old LAC + 1) and it is
    confirmed, its `payload` comes along; other entries up to the LAC are for
    a `RangeRead`.
    """

    last_add_confirmed: int
    entry_id: int | None = None
    payload: bytes | None = None


@dataclass(frozen=True, slots=True)
class TailEnded:
    """The ledger is closed at `last_entry_id`: nothing more will come."""

    last_entry_id: int


RangeReadEffect = SendRead | EntriesRead | ReadFailed
LacReadEffect = SendReadLac | LacKnown | LacReadFailed
TailEffect = SendRead | LacAdvanced | TailEnded

_EOK = int(Status.EOK)
NO_ENTRY_STATUSES = frozenset({int(Status.ENOENTRY), int(Status.ENOLEDGER)})
"""Statuses that say "I do not hold it": explicit, unlike errors and timeouts."""


def replicas_of(metadata: LedgerMetadata, entry_id: int) -> tuple[str, ...]:
    """The bookies holding `entry_id`, in write-set order (the order readers try them)."""
    ensemble = metadata.ensemble_at(entry_id)
    return tuple(ensemble[index] for index in metadata.quorum.write_set(entry_id))


# --- reading entries --------------------------------------------------------------------------


class _EntryRead:
    """Progress of reading one entry from its replicas."""

    __slots__ = (
        "entry_id",
        "replicas",
        "asked",
        "outstanding",
        "no_entries",
        "mismatches",
        "unreachable",
        "asked_at_ms",
        "payload",
    )

    def __init__(self, entry_id: int, replicas: tuple[str, ...]) -> None:
        self.entry_id = entry_id
        self.replicas = replicas
        self.asked = 0
        """Replicas asked so far: replicas[:asked]."""
        self.outstanding = 0
        """Positions (in `replicas`) asked and not answered, as a bit mask."""
        self.no_entries = 0
        self.mismatches = 0
        self.unreachable: list[str] = []
        """Why the replicas that could not be reached at all could not, in order."""
        self.asked_at_ms = 0
        self.payload: bytes | None = None


class RangeRead:
    """Reads entries first..last with replica fallback and speculative reads (rules 1-4)."""

    __slots__ = (
        "_ledger_id",
        "_digest",
        "_speculative_read_timeout_ms",
        "_entries",
        "_next_delivery",
        "_last_entry_id",
        "_last_add_confirmed",
        "_finished",
        "_effects",
    )

    def __init__(
        self,
        metadata: LedgerMetadata,
        digest: Digest,
        first_entry_id: int,
        last_entry_id: int,
        *,
        last_add_confirmed: int,
        allow_unconfirmed: bool = False,
        speculative_read_timeout_ms: int = limits.speculative_read_timeout_ms_default,
    ) -> None:
        """Raises `ReadBeyondLastAddConfirmed` for a range rule 1 forbids."""
        assert 0 <= first_entry_id <= last_entry_id
        assert last_entry_id - first_entry_id < limits.read_batch_entries_max
        assert speculative_read_timeout_ms > 0
        if metadata.is_closed and last_entry_id > metadata.last_entry_id:
            raise ReadBeyondLastAddConfirmed(
                f"ledger {metadata.ledger_id} ends at entry {metadata.last_entry_id}"
            )
        if last_entry_id > last_add_confirmed and not allow_unconfirmed:
            raise ReadBeyondLastAddConfirmed(
                f"entry {last_entry_id} is past the last add confirmed {last_add_confirmed}"
            )
        self._ledger_id = metadata.ledger_id
        self._digest = digest
        self._speculative_read_timeout_ms = speculative_read_timeout_ms
        self._entries = {
            entry_id: _EntryRead(entry_id, replicas_of(metadata, entry_id))
            for entry_id in range(first_entry_id, last_entry_id + 1)
        }
        self._next_delivery = first_entry_id
        self._last_entry_id = last_entry_id
        self._last_add_confirmed = last_add_confirmed
        self._finished = False
        self._effects: list[RangeReadEffect] = []

    @property
    def last_add_confirmed(self) -> int:
        """The highest LAC seen: the one given at start, raised by every answer (rule 4)."""
        return self._last_add_confirmed

    @property
    def finished(self) -> bool:
        """Every entry was delivered, or the read failed."""
        return self._finished

    @property
    def next_tick_ms(self) -> int | None:
        """When a speculative read is due next, or None when none can be."""
        due = [
            entry.asked_at_ms + self._speculative_read_timeout_ms
            for entry in self._entries.values()
            if entry.payload is None and entry.outstanding and entry.asked < len(entry.replicas)
        ]
        return min(due) if due and not self._finished else None

    def take_effects(self) -> list[RangeReadEffect]:
        effects = self._effects[:]
        self._effects.clear()
        return effects

    # --- inputs -------------------------------------------------------------------------------

    def start(self, now_ms: int) -> None:
        for entry in self._entries.values():
            self._ask_next(entry, now_ms)

    def on_read_response(
        self, bookie_id: str, entry_id: int, response: ReadResponse, now_ms: int
    ) -> None:
        """`bookie_id` answered the READ of `entry_id`."""
        entry = self._answered(bookie_id, entry_id)
        if entry is None:
            return
        if response.lac is not None:
            self._raise_lac(response.lac)
        if response.status == _EOK and response.packet is not None:
            try:
                lac, _, payload = self._digest.verify_entry(
                    response.packet, self._ledger_id, entry_id
                )
            except DigestMismatch:
                entry.mismatches += 1
            else:
                self._raise_lac(lac)
                entry.payload = payload
                self._deliver()
                return
        elif response.status in NO_ENTRY_STATUSES:
            entry.no_entries += 1
        self._fall_back(entry, now_ms)

    def on_read_timeout(self, bookie_id: str, entry_id: int, now_ms: int) -> None:
        """The READ of `entry_id` to `bookie_id` got no answer in time."""
        entry = self._answered(bookie_id, entry_id)
        if entry is not None:
            self._fall_back(entry, now_ms)

    def on_unreachable(self, bookie_id: str, entry_id: int, reason: str, now_ms: int) -> None:
        """The READ of `entry_id` could not be sent: `bookie_id` cannot be reached (`reason`)."""
        entry = self._answered(bookie_id, entry_id)
        if entry is not None:
            entry.unreachable.append(f"{bookie_id}: {reason}")
            self._fall_back(entry, now_ms)

    def tick(self, now_ms: int) -> None:
        """Timer input: ask the next replica of every entry slower than the speculative timeout."""
        if self._finished:
            return
        deadline = now_ms - self._speculative_read_timeout_ms
        for entry in self._entries.values():
            if (
                entry.payload is None
                and entry.outstanding
                and entry.asked < len(entry.replicas)
                and entry.asked_at_ms <= deadline
            ):
                self._ask_next(entry, now_ms)

    # --- rules --------------------------------------------------------------------------------

    def _answered(self, bookie_id: str, entry_id: int) -> _EntryRead | None:
        """The entry's progress if this answer is one we wait for, with it marked answered."""
        if self._finished:
            return None
        entry = self._entries.get(entry_id)
        if entry is None or entry.payload is not None:
            return None
        try:
            position = entry.replicas.index(bookie_id)
        except ValueError:
            return None
        bit = 1 << position
        if not entry.outstanding & bit:
            return None
        entry.outstanding &= ~bit
        return entry

    def _ask_next(self, entry: _EntryRead, now_ms: int) -> None:
        position = entry.asked
        assert position < len(entry.replicas)
        entry.asked = position + 1
        entry.outstanding |= 1 << position
        entry.asked_at_ms = now_ms
        self._effects.append(SendRead(entry.replicas[position], entry.entry_id))

    def _fall_back(self, entry: _EntryRead, now_ms: int) -> None:
        if entry.asked < len(entry.replicas):
            self._ask_next(entry, now_ms)
            return
        if entry.outstanding:
            return
        replicas = len(entry.replicas)
        where = f"entry {entry.entry_id} of ledger {self._ledger_id} on {list(entry.replicas)}"
        error: BookieError
        if entry.no_entries == replicas:
            error = NoSuchEntry(f"no replica holds {where}")
        elif entry.mismatches and entry.mismatches + entry.no_entries == replicas:
            error = DigestMismatch(f"only corrupt copies of {where}")
        elif len(entry.unreachable) == replicas:
            error = BookieUnavailable(
                f"no bookie holding {where} could be reached: {entry.unreachable[0]}"
            )
        else:
            error = EntryNotAvailable(
                f"no valid copy of {where}: {entry.no_entries} absent, "
                f"{entry.mismatches} corrupt, the rest failed"
            )
        self._finished = True
        self._effects.append(ReadFailed(entry.entry_id, error))

    def _raise_lac(self, lac: int) -> None:
        self._last_add_confirmed = max(self._last_add_confirmed, lac)

    def _deliver(self) -> None:
        entries = self._entries
        first = self._next_delivery
        payloads: list[bytes] = []
        entry = entries.get(first)
        while entry is not None and entry.payload is not None:
            payloads.append(entry.payload)
            del entries[entry.entry_id]
            entry = entries.get(first + len(payloads))
        if not payloads:
            return
        self._next_delivery = first + len(payloads)
        self._effects.append(EntriesRead(first, tuple(payloads)))
        if self._next_delivery > self._last_entry_id:
            self._finished = True


# --- reading the last add confirmed -----------------------------------------------------------


class LacRead:
    """Reads the LAC from the last ensemble without fencing (rule 5)."""

    __slots__ = (
        "_metadata",
        "_digest",
        "_first_answer",
        "_index_of",
        "_valid_mask",
        "_answered_mask",
        "_last_add_confirmed",
        "_finished",
        "_effects",
        "_unreachable",
    )

    def __init__(
        self, metadata: LedgerMetadata, digest: Digest, *, first_answer: bool = False
    ) -> None:
        self._metadata = metadata
        self._digest = digest
        self._first_answer = first_answer
        self._index_of = ensemble_indices(metadata.current_ensemble)
        self._valid_mask = 0
        self._answered_mask = 0
        self._last_add_confirmed = -1
        self._finished = False
        self._effects: list[LacReadEffect] = []
        self._unreachable: list[str] = []
        """Why the bookies that could not be reached at all could not, in order."""

    def take_effects(self) -> list[LacReadEffect]:
        effects = self._effects[:]
        self._effects.clear()
        return effects

    def start(self) -> None:
        self._effects.extend(SendReadLac(b) for b in self._metadata.current_ensemble)

    def on_read_lac_response(self, bookie_id: str, response: ReadLacResponse) -> None:
        index = self._unanswered(bookie_id)
        if index is None:
            return
        lac = self._answer_lac(response)
        if lac is not None:
            self._valid_mask |= 1 << index
            self._last_add_confirmed = max(self._last_add_confirmed, lac)
        self._decide()

    def on_read_lac_timeout(self, bookie_id: str) -> None:
        if self._unanswered(bookie_id) is not None:
            self._decide()

    def on_read_lac_unreachable(self, bookie_id: str, reason: str) -> None:
        """`bookie_id` cannot be reached (`reason`, which a failed read names)."""
        if self._unanswered(bookie_id) is not None:
            self._unreachable.append(f"{bookie_id}: {reason}")
            self._decide()

    def _unanswered(self, bookie_id: str) -> int | None:
        if self._finished:
            return None
        index = self._index_of.get(bookie_id)
        if index is None or self._answered_mask & (1 << index):
            return None
        self._answered_mask |= 1 << index
        return index

    def _answer_lac(self, response: ReadLacResponse) -> int | None:
        """The LAC a valid answer gives (-1: none known), None for an invalid one."""
        if response.status in NO_ENTRY_STATUSES:
            return -1
        if response.status != _EOK:
            return None
        ledger_id = self._metadata.ledger_id
        lac = -1
        try:
            if response.lac_packet is not None:
                lac = self._digest.verify_lac(response.lac_packet, ledger_id)
            packet = response.last_entry_packet
            if packet is not None:
                header_lac, _, _ = self._digest.verify_entry(
                    packet, ledger_id, packet_entry_id(packet)
                )
                lac = max(lac, header_lac)
        except DigestMismatch:
            return None
        return lac

    def _decide(self) -> None:
        valid = self._valid_mask
        done = bool(valid) if self._first_answer else self._metadata.quorum.covered(valid)
        if done:
            self._finished = True
            self._effects.append(LacKnown(self._last_add_confirmed))
            return
        if self._answered_mask.bit_count() == len(self._index_of):
            self._finished = True
            unreachable = f"; unreachable: {self._unreachable[0]}" if self._unreachable else ""
            self._effects.append(
                LacReadFailed(
                    BookieUnavailable(
                        f"too few valid LAC answers for ledger {self._metadata.ledger_id}: "
                        f"{valid.bit_count()} of {len(self._index_of)}{unreachable}"
                    )
                )
            )


# --- tailing ----------------------------------------------------------------------------------


class LongPollTail:
    """Where a tailing reader long-polls next and what each answer means (rules 6-8)."""

    __slots__ = (
        "_metadata",
        "_digest",
        "_last_add_confirmed",
        "_poll_timeout_ms",
        "_retry_delay_ms",
        "_replicas",
        "_cursor",
        "_misses",
        "_polling",
        "_retry_at_ms",
        "_ended",
        "_effects",
    )

    def __init__(
        self,
        metadata: LedgerMetadata,
        digest: Digest,
        last_add_confirmed: int,
        *,
        poll_timeout_ms: int = limits.long_poll_timeout_ms_default,
        retry_delay_ms: int = limits.tail_retry_delay_ms_default,
    ) -> None:
        assert 0 < poll_timeout_ms <= limits.long_poll_timeout_ms_max
        assert retry_delay_ms > 0
        self._metadata = metadata
        self._digest = digest
        self._last_add_confirmed = last_add_confirmed
        self._poll_timeout_ms = poll_timeout_ms
        self._retry_delay_ms = retry_delay_ms
        self._replicas: Sequence[str] = ()
        self._cursor = 0
        self._misses = 0
        self._polling: str | None = None
        """The bookie whose long poll is outstanding."""
        self._retry_at_ms: int | None = None
        self._ended = False
        self._effects: list[TailEffect] = []

    @property
    def last_add_confirmed(self) -> int:
        return self._last_add_confirmed

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def next_tick_ms(self) -> int | None:
        """When the tail polls again after a failed round, or None."""
        return self._retry_at_ms

    def take_effects(self) -> list[TailEffect]:
        effects = self._effects[:]
        self._effects.clear()
        return effects

    # --- inputs -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._end_if_closed():
            return
        floor = _confirmed_by_segments(self._metadata)
        if floor > self._last_add_confirmed:
            self._advance(floor, None, None)
            return
        self._target_next_entry()
        self._poll()

    def on_read_response(
        self, bookie_id: str, entry_id: int, response: ReadResponse, now_ms: int
    ) -> None:
        """The long poll answered (rule 7)."""
        if not self._is_current(bookie_id, entry_id):
            return
        self._polling = None
        status = response.status
        if status != _EOK and status != int(Status.ENOENTRY):
            self._miss(now_ms)
            return
        lac = -1 if response.lac is None else response.lac
        payload: bytes | None = None
        if response.packet is not None:
            try:
                header_lac, _, payload = self._digest.verify_entry(
                    response.packet, self._metadata.ledger_id, entry_id
                )
            except DigestMismatch:
                self._miss(now_ms)
                return
            lac = max(lac, header_lac)
        if lac <= self._last_add_confirmed:
            # The bookie's poll timed out: it answers, but it may be one that misses
            # entries for good, while another member is ahead (rule 7).
            self._misses = 0
            self._cursor = (self._cursor + 1) % len(self._replicas)
            self._poll()
            return
        confirmed = payload if lac >= entry_id else None
        self._advance(lac, entry_id if confirmed is not None else None, confirmed, bookie_id)

    def on_read_timeout(self, bookie_id: str, entry_id: int, now_ms: int) -> None:
        """The long poll got no answer within its timeout plus the read timeout."""
        if self._is_current(bookie_id, entry_id):
            self._polling = None
            self._miss(now_ms)

    def on_metadata(self, metadata: LedgerMetadata) -> None:
        """A newer metadata record (new segments, or closed: rule 8)."""
        assert metadata.ledger_id == self._metadata.ledger_id
        self._metadata = metadata
        if self._end_if_closed():
            return
        floor = _confirmed_by_segments(metadata)
        if floor > self._last_add_confirmed:
            # Rule 9: the writer replaced a bookie at floor + 1, so everything
            # below is confirmed; poll the current ensemble from there.
            self._advance(floor, None, None)
            return
        # Entry LAC + 1 may now belong to a new segment (the writer replaced a
        # bookie): poll its members from now on.
        self._replicas = replicas_of(metadata, self._last_add_confirmed + 1)
        self._cursor %= len(self._replicas)

    def tick(self, now_ms: int) -> None:
        """Timer input: poll again once the retry delay after a failed round passed."""
        if self._retry_at_ms is not None and now_ms >= self._retry_at_ms and not self._ended:
            self._retry_at_ms = None
            self._poll()

    # --- rules --------------------------------------------------------------------------------

    def _is_current(self, bookie_id: str, entry_id: int) -> bool:
        return (
            not self._ended
            and bookie_id == self._polling
            and entry_id == self._last_add_confirmed + 1
        )

    def _end_if_closed(self) -> bool:
        metadata = self._metadata
        if self._ended or not metadata.is_closed:
            return self._ended
        self._ended = True
        self._polling = None
        self._retry_at_ms = None
        if metadata.last_entry_id > self._last_add_confirmed:
            self._last_add_confirmed = metadata.last_entry_id
            self._effects.append(LacAdvanced(metadata.last_entry_id))
        self._effects.append(TailEnded(metadata.last_entry_id))
        return True

    def _target_next_entry(self) -> None:
        self._replicas = replicas_of(self._metadata, self._last_add_confirmed + 1)
        self._cursor = 0
        self._misses = 0

    def _advance(
        self,
        lac: int,
        entry_id: int | None,
        payload: bytes | None,
        answered_by: str | None = None,
    ) -> None:
        self._last_add_confirmed = lac
        self._effects.append(LacAdvanced(lac, entry_id, payload))
        self._target_next_entry()
        if answered_by in self._replicas:
            self._cursor = self._replicas.index(answered_by)
        self._poll()

    def _miss(self, now_ms: int) -> None:
        self._misses += 1
        self._cursor = (self._cursor + 1) % len(self._replicas)
        if self._misses < len(self._replicas):
            self._poll()
            return
        self._misses = 0
        self._retry_at_ms = now_ms + self._retry_delay_ms

    def _poll(self) -> None:
        lac = self._last_add_confirmed
        bookie_id = self._replicas[self._cursor]
        self._polling = bookie_id
        self._effects.append(
            SendRead(
                bookie_id,
                lac + 1,
                previous_lac=lac,
                timeout_ms=self._poll_timeout_ms,
            )
        )


def _confirmed_by_segments(metadata: LedgerMetadata) -> int:
    """The highest entry the segments prove confirmed (rule 9): the last segment's first
    entry - 1, or -1 for a ledger of one segment."""
    return metadata.ensembles[-1][0] - 1
