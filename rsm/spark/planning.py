"""How a Spark read of a log or of ledgers is cut into partitions, and which rows it keeps.

Pure: the driver's shell (`rsm/spark/cluster.py`) finds the entries to read
(ledgers, their ends, the entries where index and time bounds fall) and
calls `split`; executors read each partition's entries and keep the rows
`Bounds.admits` (`rsm/spark/rows.py`).  Nothing here reads a ledger.

Model:

* A `Span` is entries `first_entry .. last_entry` (inclusive, dense ids) of
  one ledger; `epoch` is its segment's (0 for a raw ledger).
* `split` cuts each span into contiguous pieces of near-equal size: at least
  `ceil(entries / max_entries_per_partition)` pieces, and together at least
  `min(min_partitions, total entries)` pieces, shared among the spans in
  proportion to their entries.  Pieces never cross a ledger, cover every
  entry of every span exactly once, in order, and are never empty; the same
  input always gives the same pieces, which is what lets Spark retry a task
  and read the same rows.
* `Bounds` are half-open intervals `[start, end)` on a row's index, epoch,
  ledger id and leader time (ms); `None` is unbounded.  `bounds_from_terms`
  turns pushed-down comparisons (`column op literal`, AND-ed) into bounds and
  says which terms they express exactly: those Spark need not apply again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from rsm.errors import InvalidConfig


@dataclass(frozen=True, slots=True)
class Span:
    """Entries `first_entry .. last_entry` of ledger `ledger_id` (none when last < first)."""

    ledger_id: int
    epoch: int
    first_entry: int
    last_entry: int

    @property
    def entries(self) -> int:
        return max(0, self.last_entry - self.first_entry + 1)


def split(
    spans: Sequence[Span], *, min_partitions: int, max_entries_per_partition: int
) -> list[Span]:
    """The partitions of `spans` (see the module docstring), in span order."""
    if min_partitions < 1 or max_entries_per_partition < 1:
        raise InvalidConfig(
            f"minPartitions ({min_partitions}) and maxEntriesPerPartition "
            f"({max_entries_per_partition}) must be at least 1"
        )
    total = sum(span.entries for span in spans)
    pieces: list[Span] = []
    for span in spans:
        entries = span.entries
        if entries == 0:
            continue
        count = max(-(-entries // max_entries_per_partition), -(-entries * min_partitions // total))
        count = min(count, entries)
        size, longer = divmod(entries, count)
        first = span.first_entry
        for position in range(count):
            length = size + (1 if position < longer else 0)
            pieces.append(replace(span, first_entry=first, last_entry=first + length - 1))
            first += length
        assert first == span.last_entry + 1
    return pieces


@dataclass(frozen=True, slots=True)
class Interval:
    """`[start, end)` of integers; None: unbounded on that side."""

    start: int | None = None
    end: int | None = None

    def meet(self, other: Interval) -> Interval:
        return Interval(_tighter(self.start, other.start, max), _tighter(self.end, other.end, min))

    @property
    def is_empty(self) -> bool:
        return self.start is not None and self.end is not None and self.start >= self.end

    def holds(self, value: int) -> bool:
        return (self.start is None or value >= self.start) and (
            self.end is None or value < self.end
        )

    def overlaps(self, first: int, last: int) -> bool:
        """Whether some value of `first .. last` (inclusive) is in the interval."""
        low = first if self.start is None else max(first, self.start)
        high = last if self.end is None else min(last, self.end - 1)
        return low <= high


UNBOUNDED: Final = Interval()


def _tighter(a: int | None, b: int | None, pick: Callable[[int, int], int]) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return pick(a, b)


@dataclass(frozen=True, slots=True)
class Bounds:
    """Which rows a read keeps: each column's value in its interval."""

    index: Interval = UNBOUNDED
    epoch: Interval = UNBOUNDED
    ledger_id: Interval = UNBOUNDED
    time_ms: Interval = UNBOUNDED

    def meet(self, other: Bounds) -> Bounds:
        return Bounds(
            self.index.meet(other.index),
            self.epoch.meet(other.epoch),
            self.ledger_id.meet(other.ledger_id),
            self.time_ms.meet(other.time_ms),
        )

    @property
    def is_empty(self) -> bool:
        return any(
            interval.is_empty for interval in (self.index, self.epoch, self.ledger_id, self.time_ms)
        )

    def admits(self, index: int, epoch: int, ledger_id: int, time_ms: int) -> bool:
        return (
            self.index.holds(index)
            and self.epoch.holds(epoch)
            and self.ledger_id.holds(ledger_id)
            and self.time_ms.holds(time_ms)
        )


# --- pushed-down filters ------------------------------------------------------------------------

OPERATORS: Final = ("=", ">", ">=", "<", "<=")
INTEGER_COLUMNS: Final = ("index", "epoch", "ledger_id")
TIME_COLUMN: Final = "leader_time"
"""Compared with microseconds since the Unix epoch (a Spark timestamp); rows carry milliseconds."""


@dataclass(frozen=True, slots=True)
class Term:
    """One pushed-down comparison `column op value` (value: int; microseconds for time)."""

    column: str
    op: str
    value: int


def _interval(op: str, value: int) -> Interval:
    """The integers v with `v op value`."""
    if op == "=":
        return Interval(value, value + 1)
    if op == ">":
        return Interval(value + 1, None)
    if op == ">=":
        return Interval(value, None)
    if op == "<":
        return Interval(None, value)
    assert op == "<="
    return Interval(None, value + 1)


def _time_interval(op: str, micros: int) -> Interval:
    """The milliseconds m with `m * 1000 op micros`."""
    floor = micros // 1000
    ceiling = -(-micros // 1000)
    if op == "=":
        return Interval(ceiling, floor + 1)
    if op == ">":
        return Interval(floor + 1, None)
    if op == ">=":
        return Interval(ceiling, None)
    if op == "<":
        return Interval(None, ceiling)
    assert op == "<="
    return Interval(None, floor + 1)


def bounds_from_terms(terms: Iterable[Term | None]) -> tuple[Bounds, list[int]]:
    """The bounds the terms set, and the positions of the terms they express exactly.

    A None term (a filter that is not `column op literal` on a bounded column)
    is never expressed; Spark applies it after the read.
    """
    bounds = Bounds()
    taken: list[int] = []
    for position, term in enumerate(terms):
        if term is None or term.op not in OPERATORS:
            continue
        if term.column == TIME_COLUMN:
            bounds = bounds.meet(Bounds(time_ms=_time_interval(term.op, term.value)))
        elif term.column in INTEGER_COLUMNS:
            interval = _interval(term.op, term.value)
            bounds = bounds.meet(
                Bounds(
                    index=interval if term.column == "index" else UNBOUNDED,
                    epoch=interval if term.column == "epoch" else UNBOUNDED,
                    ledger_id=interval if term.column == "ledger_id" else UNBOUNDED,
                )
            )
        else:
            continue
        taken.append(position)
    return bounds, taken
