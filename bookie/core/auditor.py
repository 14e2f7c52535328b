"""The auditor's decisions: which bookies are lost, when to audit, what to mark, and which
bookies that are up lack entries they should hold.

Pure.  The auditor shell (`bookie/autorecovery/auditor.py`) feeds `Auditor.observe`
the bookies it knows of (cookies, and every bookie it saw registered) and the ones
registered now, with the time; it audits when `audit_due` says so and marks each
ledger with `missing_bookies`.

Rules:

* A bookie is *gone* from the first observation that does not list it as registered
  (writable or read-only), and *lost* once it has been gone for `grace_ms` without
  a registration in between: a bookie that restarts within the grace is never lost.
* An audit is due when a bookie is lost that the last audit did not cover, and
  every `audit_interval_ms` while some bookie is lost (marks removed by hand, or an
  audit a previous auditor did not finish, are made again).  An operator's trigger
  (`bookie shell triggeraudit`) makes both the audit and the presence check due now.
* A ledger is marked with the lost bookies any of its segments names, whatever its
  state: a replication worker decides what it can repair.
* Entry presence (`PresenceCheck`), every `interval_ms`: each registered bookie is asked
  which entries of each ledger it holds, and `lacking_entries` counts those of the
  ledger's sealed segments (`bookie.core.rereplication.segment_ranges`) at its
  positions that it does not list.  A (ledger, bookie) found lacking is marked only
  when found lacking again at the next check: an add still on its way to a slow
  bookie when the ledger was closed is not a loss.
* Sampling: when a bookie should hold more than `sample_entries_max` entries of a
  ledger (0: no bound), only a sample is compared with its listing: the first and last
  entry of each of its (segment, position) shares, and `sample_entries_max` drawn
  uniformly without replacement among all it should hold, with the caller's `rng`.
  So the work per ledger and bookie is bounded however large the ledger; a lost
  disk, a lost range or a lost tail is still found at once, while a loss of a few
  scattered entries of a large ledger is found only when sampled (at two checks in
  a row).
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Collection, Sequence

from bookie.core.metadata import LedgerMetadata
from bookie.core.quorum import Quorum
from bookie.core.rereplication import segment_ranges


class Auditor:
    """What one elected auditor knows between observations."""

    __slots__ = ("_audit_interval_ms", "_audited", "_gone_since", "_grace_ms", "_last_audit_ms")

    def __init__(self, *, grace_ms: int, audit_interval_ms: int) -> None:
        assert grace_ms >= 0
        assert audit_interval_ms > 0
        self._grace_ms = grace_ms
        self._audit_interval_ms = audit_interval_ms
        self._gone_since: dict[str, int] = {}
        self._audited: frozenset[str] = frozenset()
        self._last_audit_ms: int | None = None

    def observe(self, known: Collection[str], registered: Collection[str], now_ms: int) -> None:
        """Record which of the `known` bookies are registered at `now_ms`."""
        present = set(registered)
        for bookie_id in known:
            if bookie_id not in present:
                self._gone_since.setdefault(bookie_id, now_ms)
        for bookie_id in list(self._gone_since):
            if bookie_id in present:
                del self._gone_since[bookie_id]
        # A bookie that came back and is lost again later needs a new audit.
        self._audited = self._audited.difference(present)

    def lost(self, now_ms: int) -> frozenset[str]:
        """The bookies gone for at least the grace period."""
        return frozenset(
            bookie_id
            for bookie_id, since in self._gone_since.items()
            if now_ms - since >= self._grace_ms
        )

    def next_change_ms(self, now_ms: int) -> int | None:
        """When `lost` or `audit_due` next changes by time alone (None: not by time)."""
        deadlines = [
            since + self._grace_ms
            for since in self._gone_since.values()
            if since + self._grace_ms > now_ms
        ]
        if self._last_audit_ms is not None and self.lost(now_ms):
            deadlines.append(self._last_audit_ms + self._audit_interval_ms)
        return min(deadlines) if deadlines else None

    def audit_due(self, now_ms: int, *, triggered: bool = False) -> bool:
        lost = self.lost(now_ms)
        if not lost:
            return False
        if triggered or not lost <= self._audited or self._last_audit_ms is None:
            return True
        return now_ms - self._last_audit_ms >= self._audit_interval_ms

    def audited(self, lost: frozenset[str], now_ms: int) -> None:
        """An audit that marked every ledger naming a bookie of `lost` finished."""
        self._audited = lost
        self._last_audit_ms = now_ms


def missing_bookies(metadata: LedgerMetadata, lost: Collection[str]) -> frozenset[str]:
    """The bookies of `lost` that some segment of the ledger names."""
    named = {bookie_id for _, ensemble in metadata.ensembles for bookie_id in ensemble}
    return frozenset(named.intersection(lost))


class _Share:
    """The entries of one segment that one ensemble position holds: those whose write set
    contains it, ascending (entry e is on positions (e + i) mod E, i < Qw)."""

    __slots__ = ("count", "_first", "_offsets", "_period")

    def __init__(self, quorum: Quorum, first_entry_id: int, last_entry_id: int, position: int):
        period = quorum.ensemble_size
        self._first = first_entry_id
        self._period = period
        self._offsets = [
            offset
            for offset in range(period)
            if (position - first_entry_id - offset) % period < quorum.write_quorum
        ]
        span = max(0, last_entry_id - first_entry_id + 1)
        self.count = span // period * len(self._offsets) + sum(
            offset < span % period for offset in self._offsets
        )

    def entry(self, index: int) -> int:
        """The share's `index`-th entry, 0 <= index < count."""
        cycle, within = divmod(index, len(self._offsets))
        return self._first + cycle * self._period + self._offsets[within]


def lacking_entries(
    metadata: LedgerMetadata,
    bookie_id: str,
    held: Sequence[Sequence[int]],
    *,
    sample_entries_max: int = 0,
    rng: random.Random | None = None,
) -> int:
    """How many entries of the ledger's sealed segments `bookie_id` should hold and `held`
    (its listing: inclusive [first, last] ranges, ascending) does not name; of a sample
    only when it should hold more than `sample_entries_max` (module docstring: then
    `rng` is required)."""
    shares = [
        _Share(metadata.quorum, first_entry_id, last_entry_id, position)
        for first_entry_id, last_entry_id, ensemble in segment_ranges(metadata)
        for position, member in enumerate(ensemble)
        if member == bookie_id
    ]
    shares = [share for share in shares if share.count]
    ends = list(itertools.accumulate(share.count for share in shares))
    total = ends[-1] if ends else 0
    if not sample_entries_max or total <= sample_entries_max:
        indexes: Collection[int] = range(total)
    else:
        assert rng is not None, "sampling draws from the caller's rng"
        starts = [end - share.count for end, share in zip(ends, shares, strict=True)]
        indexes = {
            *starts,
            *(end - 1 for end in ends),
            *rng.sample(range(total), sample_entries_max),
        }
    firsts = [first for first, _ in held]
    lacking = 0
    for index in indexes:
        which = bisect.bisect_right(ends, index)
        share = shares[which]
        entry_id = share.entry(index - (ends[which] - share.count))
        found = bisect.bisect_right(firsts, entry_id) - 1
        if found < 0 or held[found][1] < entry_id:
            lacking += 1
    return lacking


class PresenceCheck:
    """When entry presence is checked, and which lacks are confirmed (module docstring)."""

    __slots__ = ("_current", "_interval_ms", "_last_ms", "_previous")

    def __init__(self, *, interval_ms: int, now_ms: int) -> None:
        assert interval_ms > 0
        self._interval_ms = interval_ms
        self._last_ms = now_ms
        """When the last check finished (the first is due one interval after election)."""
        self._previous: set[tuple[int, str]] = set()
        self._current: set[tuple[int, str]] = set()

    def due(self, now_ms: int, *, triggered: bool = False) -> bool:
        return triggered or now_ms - self._last_ms >= self._interval_ms

    def next_due_ms(self) -> int:
        return self._last_ms + self._interval_ms

    def begin(self) -> None:
        """A check starts (what a check cut short found is forgotten)."""
        self._current = set()

    def lacking(self, ledger_id: int, bookie_id: str) -> bool:
        """Record that `bookie_id` lacks entries of the ledger in this check; return whether
        the previous check found it lacking too (then it is marked)."""
        key = (ledger_id, bookie_id)
        self._current.add(key)
        return key in self._previous

    def finished(self, now_ms: int) -> None:
        """A check went through every ledger (a check cut short changes nothing)."""
        self._previous, self._current = self._current, set()
        self._last_ms = now_ms
