"""Re-replication: which entries a bookie of a ledger should hold, which segments name a
missing bookie, where each copy comes from, and the metadata change that ends a repair.

Pure.  The replication worker (`bookie/autorecovery/worker.py`) carries it out:

1. `plan_repairs(metadata, missing)`: one `SegmentRepair` per *sealed* segment whose
   ensemble names a missing bookie, with the positions it names them at.  Segment k
   holds the entries from its first entry to the next segment's first entry - 1, the
   last segment of a CLOSED ledger to the ledger's last entry: every segment of a
   CLOSED ledger is sealed, and every segment but the last of an OPEN or IN_RECOVERY
   one (a segment starts at its writer's last add confirmed + 1, so every entry before
   it was acknowledged).  The last segment of a ledger that is not CLOSED belongs to
   its writer, or to its recovery (`left_to_writer`), and is never planned.  So no
   entry past the end the metadata records is ever copied, and a segment that holds
   no entry is repaired by the metadata change alone.
2. Replacements come from placement (`choose_replacements`: never a bookie of the
   segment's ensemble, never a missing one), so the repaired ensemble still has E
   distinct bookies and no entry gets two copies on one bookie.
3. `position_entries`: the entries position p holds, those whose write set contains p
   (entry e is on positions (e + i) mod E, i < Qw).  Each is read from `copy_sources`,
   the other members of its write set that are neither missing nor being replaced,
   and written verbatim to the replacement.  `lacking_in_segment`: the entries a
   member that is back should hold and does not list (it was down while they were
   written, its writer deferring the ensemble change); refilling it copies those
   alone, from the same sources, and changes no metadata.
4. `repaired_segment_transform`: the compare-and-set that replaces the bookies of that
   one sealed segment, and nothing else (a writer's ensemble change and close only
   look at and touch the last segment, so they compose with it).
5. `CopyThrottle`: copies go out at most `entries_per_s` entries and `bytes_per_s`
   bytes per second (0: no bound), each one when the budget of those before it is
   spent, so a worker's copying cannot crowd out the writes of the cluster; credit
   does not build up while idle.
6. `RetrySchedule`: a ledger whose repair failed is not tried again by the same worker
   before a delay that starts at `delay_ms_min` and doubles per failure in a row, up to
   `delay_ms_max`; a success forgets it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from bookie.core.metadata import LedgerMetadata, check_invariants
from bookie.core.quorum import Quorum
from bookie.errors import UnexpectedMetadataChange


@dataclass(frozen=True, slots=True)
class SegmentRepair:
    """One segment to repair: its entries, its ensemble as read, the positions to replace."""

    first_entry_id: int
    last_entry_id: int
    """Last entry the segment holds; first_entry_id - 1 when it holds none."""
    ensemble: tuple[str, ...]
    positions: tuple[int, ...]
    """Ensemble positions naming a missing bookie, ascending, never empty."""


def segment_ranges(metadata: LedgerMetadata) -> list[tuple[int, int, tuple[str, ...]]]:
    """(first entry, last entry, ensemble) of every sealed segment (module docstring)."""
    segments = metadata.ensembles
    ranges: list[tuple[int, int, tuple[str, ...]]] = []
    for index, (first_entry_id, ensemble) in enumerate(segments):
        if index + 1 < len(segments):
            last_entry_id = segments[index + 1][0] - 1
        elif metadata.is_closed:
            last_entry_id = metadata.last_entry_id
        else:
            break
        ranges.append((first_entry_id, max(last_entry_id, first_entry_id - 1), ensemble))
    return ranges


def plan_repairs(metadata: LedgerMetadata, missing: Collection[str]) -> list[SegmentRepair]:
    """The sealed segments that name a bookie of `missing`, in order."""
    lost = frozenset(missing)
    repairs: list[SegmentRepair] = []
    for first_entry_id, last_entry_id, ensemble in segment_ranges(metadata):
        positions = tuple(index for index, bookie_id in enumerate(ensemble) if bookie_id in lost)
        if positions:
            repairs.append(SegmentRepair(first_entry_id, last_entry_id, ensemble, positions))
    return repairs


def left_to_writer(metadata: LedgerMetadata, missing: Collection[str]) -> bool:
    """Whether the ledger is not CLOSED and its last segment names a bookie of `missing`:
    that segment is its writer's (or its recovery's) to change, not a repair's."""
    return not metadata.is_closed and bool(set(metadata.current_ensemble) & set(missing))


def position_entries(
    quorum: Quorum, first_entry_id: int, last_entry_id: int, position: int
) -> Iterator[int]:
    """The entries of [first_entry_id, last_entry_id] that ensemble position `position`
    holds: those whose write set contains it, ascending."""
    assert 0 <= position < quorum.ensemble_size
    for entry_id in range(max(first_entry_id, 0), last_entry_id + 1):
        if (position - entry_id) % quorum.ensemble_size < quorum.write_quorum:
            yield entry_id


def lacking_in_segment(
    quorum: Quorum,
    segment: tuple[int, int, tuple[str, ...]],
    bookie_id: str,
    held: Sequence[Sequence[int]],
) -> Iterator[int]:
    """The entries of `segment` (first entry, last entry, ensemble: as `segment_ranges`
    gives them) that `bookie_id` should hold and `held` (its listing: inclusive [first,
    last] ranges, ascending) does not name, ascending; none when it is not a member."""
    first_entry_id, last_entry_id, ensemble = segment
    if bookie_id not in ensemble:
        return
    firsts = [first for first, _ in held]
    for entry_id in position_entries(
        quorum, first_entry_id, last_entry_id, ensemble.index(bookie_id)
    ):
        found = bisect.bisect_right(firsts, entry_id) - 1
        if found < 0 or held[found][1] < entry_id:
            yield entry_id


def copy_sources(
    quorum: Quorum, ensemble: tuple[str, ...], entry_id: int, unusable: Collection[str]
) -> list[str]:
    """The bookies of `entry_id`'s write set to read it from, in write-set order: every
    member but the `unusable` ones (missing, or being replaced)."""
    return [
        ensemble[index] for index in quorum.write_set(entry_id) if ensemble[index] not in unusable
    ]


def repaired_ensemble(
    ensemble: tuple[str, ...], replacements: Mapping[int, str]
) -> tuple[str, ...]:
    target = list(ensemble)
    for index, bookie_id in replacements.items():
        target[index] = bookie_id
    assert len(set(target)) == len(target), "a replacement is not in the ensemble"
    return tuple(target)


def repaired_segment_transform(
    current: LedgerMetadata,
    first_entry_id: int,
    expected: tuple[str, ...],
    replacements: Mapping[int, str],
) -> LedgerMetadata | None:
    """The CAS of a finished repair: the segment starting at `first_entry_id` goes from
    `expected` to `expected` with `replacements`, every other field stays.

    None when the segment already is the outcome (an earlier attempt whose reply was
    lost); `UnexpectedMetadataChange` when the segment is gone, names other bookies
    (someone else repaired it) or is the last one of a ledger that is not CLOSED (never
    planned so; a guard): the copies made are then unused.
    """
    target = repaired_ensemble(expected, replacements)
    segments = list(current.ensembles)
    for index, (segment_first, ensemble) in enumerate(segments):
        if segment_first != first_entry_id:
            continue
        if index == len(segments) - 1 and not current.is_closed:
            break
        if ensemble == target:
            return None
        if ensemble != expected:
            break
        segments[index] = (first_entry_id, target)
        result = replace(current, ensembles=tuple(segments))
        check_invariants(result)
        return result
    raise UnexpectedMetadataChange(
        f"ledger {current.ledger_id}: the segment from entry {first_entry_id} is no longer "
        f"{list(expected)}"
    )


class CopyThrottle:
    """When each copy may go out, under the rate bounds of the module docstring."""

    __slots__ = ("_bytes_per_s", "_entries_per_s", "_next_ms")

    def __init__(self, *, entries_per_s: int, bytes_per_s: int) -> None:
        assert entries_per_s >= 0
        assert bytes_per_s >= 0
        self._entries_per_s = entries_per_s
        self._bytes_per_s = bytes_per_s
        self._next_ms = 0.0
        """When the next copy may start, in ms of the caller's clock."""

    def reserve(self, now_ms: int, size_bytes: int) -> int:
        """Book a copy of `size_bytes`; return how many ms the caller waits before it."""
        cost_ms = 0.0
        if self._entries_per_s:
            cost_ms = 1000 / self._entries_per_s
        if self._bytes_per_s:
            cost_ms = max(cost_ms, size_bytes * 1000 / self._bytes_per_s)
        start_ms = max(float(now_ms), self._next_ms)
        self._next_ms = start_ms + cost_ms
        return math.ceil(start_ms - now_ms)


class RetrySchedule:
    """When a worker may try each ledger whose repair failed again."""

    __slots__ = ("_delay_ms_max", "_delay_ms_min", "_failed")

    def __init__(self, *, delay_ms_min: int, delay_ms_max: int) -> None:
        assert 0 < delay_ms_min <= delay_ms_max
        self._delay_ms_min = delay_ms_min
        self._delay_ms_max = delay_ms_max
        self._failed: dict[int, tuple[int, int]] = {}
        """Ledger id -> (not before, in ms of the caller's clock; the last delay)."""

    def ready(self, ledger_ids: Iterable[int], now_ms: int) -> list[int]:
        """The ledgers of `ledger_ids` that may be tried at `now_ms`, in their order; the
        others are forgotten when no longer listed (their mark is gone)."""
        listed = list(ledger_ids)
        for ledger_id in set(self._failed) - set(listed):
            del self._failed[ledger_id]
        return [
            ledger_id
            for ledger_id in listed
            if ledger_id not in self._failed or self._failed[ledger_id][0] <= now_ms
        ]

    def failed(self, ledger_id: int, now_ms: int) -> int:
        """Record a failure; return the delay before the next try."""
        previous = self._failed.get(ledger_id)
        delay_ms = (
            self._delay_ms_min if previous is None else min(previous[1] * 2, self._delay_ms_max)
        )
        self._failed[ledger_id] = (now_ms + delay_ms, delay_ms)
        return delay_ms

    def succeeded(self, ledger_id: int) -> None:
        self._failed.pop(ledger_id, None)
