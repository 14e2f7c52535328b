"""The log of an application as a value: its segments and the only changes it may go through.

Pure.  The value lives in the `/rsm/<app>/log` znode (encoding in
`rsm/core/log_format.py`) and is only ever replaced by compare-and-set; this
module decides what a legal replacement is, so the shell that does the CAS
never has to.

A *segment* is one ledger of the log: `(ledger_id, epoch, first_index, state,
last_index)`.  Indexes are global, dense and 1-based; `last_index` is the
index of the segment's last command, `first_index - 1` for an empty CLOSED
segment and -1 while the segment is OPEN (its end is not known until it is
closed).

Invariants (`violation` names the first one broken; every transition asserts
them on its result):

* I1: at most one segment is OPEN, and only the last one can be.
* I4: epochs never decrease along the segments, none exceeds `Log.epoch` (the
  highest epoch ever written, kept even after segments are truncated away),
  and a takeover's segment has an epoch above every earlier one.
* Continuity: each segment starts right after the previous one ends
  (`next.first_index == prev.last_index + 1`); the first one starts at 1
  unless truncation removed earlier segments.
* A ledger appears in at most one segment; there are at most
  `limits.log_segments_max` segments.

Transitions: `takeover` (new leader: close the OPEN segment at the end its
recovery found, append a new OPEN one with a new epoch), `rollover` (same
leader, same epoch, next ledger), `close` (graceful handoff: close without a
successor), `truncate` (drop leading CLOSED segments a snapshot covers).
Each raises `IllegalLogTransition` for a change that would break an
invariant or that the caller is not entitled to (a leader writes only to the
segment of its own epoch and ledger).
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from rsm import limits
from rsm.errors import IllegalLogTransition, Truncated

_U63_END = 1 << 63


class Cursor(NamedTuple):
    """A position in the log: ledger id and entry id (of the last entry a replica applied)."""

    ledger_id: int
    entry_id: int


class SegmentState(enum.IntEnum):
    """Stored as its int value; never renumber (values match the ledger states they mirror)."""

    OPEN = 1
    CLOSED = 3


@dataclass(frozen=True, slots=True)
class Segment:
    ledger_id: int
    epoch: int
    first_index: int
    state: SegmentState
    last_index: int
    """Index of the last command; `first_index - 1` when CLOSED and empty; -1 while OPEN."""

    @property
    def is_open(self) -> bool:
        return self.state is SegmentState.OPEN

    def holds(self, index: int) -> bool:
        """Whether the command at `index` is (or, while OPEN, may be) in this segment."""
        if self.is_open:
            return index >= self.first_index
        return self.first_index <= index <= self.last_index


@dataclass(frozen=True, slots=True)
class Log:
    """The segments of one application's log, oldest first, and the highest epoch ever used."""

    epoch: int = 0
    segments: tuple[Segment, ...] = ()
    _first_indexes: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Kept beside the segments so locating an index is a binary search.
        object.__setattr__(self, "_first_indexes", tuple(s.first_index for s in self.segments))

    @property
    def open_segment(self) -> Segment | None:
        """The OPEN segment (always the last one), if any."""
        if self.segments and self.segments[-1].is_open:
            return self.segments[-1]
        return None

    @property
    def first_index(self) -> int:
        """The truncation point: the lowest index the log still holds."""
        return self.segments[0].first_index if self.segments else 1

    @property
    def end_index(self) -> int | None:
        """Index of the last command when every segment is CLOSED; None while one is OPEN."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return None if last.is_open else last.last_index

    def segment_for(self, index: int) -> Segment | None:
        """The segment that holds `index`, or None past the end of a log with no OPEN segment.

        Raises `Truncated` for an index below the truncation point.
        """
        assert index >= 1
        if index < self.first_index:
            raise Truncated(
                f"index {index} is below the log's first index {self.first_index}: the log "
                "was truncated there; start from a snapshot (`rsm snapshot ls`) and read on "
                "from its index"
            )
        # The last segment starting at or before `index`: empty segments share
        # their first_index with their successor, so bisect_right skips them.
        position = bisect.bisect_right(self._first_indexes, index) - 1
        if position < 0:
            return None  # the log has no segment yet
        segment = self.segments[position]
        return segment if segment.holds(index) else None

    def segments_wholly_below(self, index: int) -> tuple[Segment, ...]:
        """The leading CLOSED segments whose every command is below `index` (truncation candidates).

        The last segment is never included: it says where the log goes on.
        """
        below: list[Segment] = []
        for segment in self.segments[:-1]:
            if segment.last_index >= index:
                break
            below.append(segment)
        return tuple(below)


def violation(log: Log) -> str | None:
    """The first invariant of the module docstring `log` breaks, or None when it keeps all."""
    if not 0 <= log.epoch < _U63_END:
        return f"log epoch {log.epoch} out of range"
    if len(log.segments) > limits.log_segments_max:
        return f"{len(log.segments)} segments exceed {limits.log_segments_max}"
    ledger_ids: set[int] = set()
    previous: Segment | None = None
    for position, segment in enumerate(log.segments):
        where = f"segment {position} (ledger {segment.ledger_id})"
        if not 0 <= segment.ledger_id < _U63_END:
            return f"{where}: ledger id out of range"
        if segment.ledger_id in ledger_ids:
            return f"{where}: ledger appears twice"
        ledger_ids.add(segment.ledger_id)
        if not 1 <= segment.epoch <= log.epoch:
            return f"{where}: epoch {segment.epoch} outside 1..{log.epoch}"
        if not 1 <= segment.first_index < _U63_END:
            return f"{where}: first index {segment.first_index} out of range"
        if segment.is_open:
            if position != len(log.segments) - 1:
                return f"{where}: OPEN but not the last segment (I1)"
            if segment.last_index != -1:
                return f"{where}: OPEN with last index {segment.last_index}"
        elif not segment.first_index - 1 <= segment.last_index < _U63_END:
            return f"{where}: last index {segment.last_index} before its first index"
        if previous is not None:
            if segment.epoch < previous.epoch:
                return f"{where}: epoch {segment.epoch} below the previous {previous.epoch} (I4)"
            if segment.first_index != previous.last_index + 1:
                return (
                    f"{where}: first index {segment.first_index} does not follow "
                    f"the previous last index {previous.last_index}"
                )
        previous = segment
    return None


def check_invariants(log: Log) -> None:
    """Assert every invariant (programmer errors: a transition produced a bad log)."""
    problem = violation(log)
    assert problem is None, problem


# --- transitions ------------------------------------------------------------------------------


def takeover(log: Log, *, new_ledger_id: int, recovered_last_index: int | None = None) -> Log:
    """The log after a new leader takes over with ledger `new_ledger_id` (one CAS).

    If a segment is OPEN, `recovered_last_index` is the end its recovery found
    and the segment is closed there; with no OPEN segment it must be None (or
    the log's end) since the end is already known.  The new OPEN segment
    starts right after and has epoch `log.epoch + 1`.
    """
    check_invariants(log)
    current = log.open_segment
    end = log.end_index
    if current is not None:
        if recovered_last_index is None:
            raise IllegalLogTransition("takeover of an OPEN segment needs its recovered end")
        if recovered_last_index < current.first_index - 1:
            raise IllegalLogTransition(
                f"recovered last index {recovered_last_index} is before the OPEN segment's "
                f"first index {current.first_index}"
            )
        closed = _closed(current, recovered_last_index)
        kept = (*log.segments[:-1], closed)
        end = recovered_last_index
    else:
        assert end is not None
        if recovered_last_index is not None and recovered_last_index != end:
            raise IllegalLogTransition(
                f"recovered last index {recovered_last_index} differs from the closed log's "
                f"end {end}"
            )
        kept = log.segments
    epoch = log.epoch + 1
    successor = Segment(new_ledger_id, epoch, end + 1, SegmentState.OPEN, -1)
    result = Log(epoch, _appended(kept, successor))
    check_invariants(result)
    assert result.epoch > log.epoch
    return result


def rollover(log: Log, *, epoch: int, ledger_id: int, last_index: int, new_ledger_id: int) -> Log:
    """The log after the leader of `epoch` closes its segment at `last_index` and opens the next.

    The next segment keeps the same epoch: the leader did not change.
    """
    current = _own_open_segment(log, epoch, ledger_id, last_index)
    successor = Segment(new_ledger_id, epoch, last_index + 1, SegmentState.OPEN, -1)
    result = Log(
        log.epoch, _appended((*log.segments[:-1], _closed(current, last_index)), successor)
    )
    check_invariants(result)
    assert result.open_segment is not None
    return result


def close(log: Log, *, epoch: int, ledger_id: int, last_index: int) -> Log:
    """The log after the leader of `epoch` closes its segment at `last_index` (graceful handoff).

    No segment is OPEN afterwards, so the next leader needs no recovery.
    """
    current = _own_open_segment(log, epoch, ledger_id, last_index)
    result = Log(log.epoch, (*log.segments[:-1], _closed(current, last_index)))
    check_invariants(result)
    assert result.open_segment is None
    return result


def truncate(log: Log, *, below_index: int) -> Log:
    """The log without its leading CLOSED segments whose every command is below `below_index`.

    The caller (the leader, after a snapshot at `below_index - 1` became
    durable) deletes their ledgers afterwards.  The last segment always stays,
    so the log still says where it goes on; `Log.epoch` stays too.
    """
    check_invariants(log)
    removed = log.segments_wholly_below(below_index)
    result = Log(log.epoch, log.segments[len(removed) :])
    check_invariants(result)
    assert result.first_index <= below_index or not removed
    return result


def _own_open_segment(log: Log, epoch: int, ledger_id: int, last_index: int) -> Segment:
    """The OPEN segment, checked to belong to the leader of `epoch` writing `ledger_id`."""
    check_invariants(log)
    current = log.open_segment
    if current is None:
        raise IllegalLogTransition("no segment is OPEN")
    if current.epoch != epoch or current.ledger_id != ledger_id:
        raise IllegalLogTransition(
            f"the OPEN segment is ledger {current.ledger_id} of epoch {current.epoch}, "
            f"not ledger {ledger_id} of epoch {epoch}: a leader writes only to its own (I4)"
        )
    if last_index < current.first_index - 1:
        raise IllegalLogTransition(
            f"last index {last_index} is before the segment's first index {current.first_index}"
        )
    return current


def _closed(segment: Segment, last_index: int) -> Segment:
    return Segment(
        segment.ledger_id, segment.epoch, segment.first_index, SegmentState.CLOSED, last_index
    )


def _appended(segments: tuple[Segment, ...], successor: Segment) -> tuple[Segment, ...]:
    """`segments` plus `successor`, refused when the ledger repeats or the bound is reached."""
    if any(s.ledger_id == successor.ledger_id for s in segments):
        raise IllegalLogTransition(f"ledger {successor.ledger_id} is already a segment of the log")
    if len(segments) >= limits.log_segments_max:
        raise IllegalLogTransition(
            f"the log already has {len(segments)} segments (max {limits.log_segments_max}); "
            "truncate it first"
        )
    if not 0 <= successor.ledger_id < _U63_END:
        raise IllegalLogTransition(f"ledger id {successor.ledger_id} out of range")
    return (*segments, successor)
