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
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence

from bookie.core.metadata import LedgerMetadata
from bookie.core.rereplication import position_entries, segment_ranges


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


def lacking_entries(metadata: LedgerMetadata, bookie_id: str, held: Sequence[Sequence[int]]) -> int:
    """How many entries of the ledger's sealed segments `bookie_id` should hold and `held`
    (its listing: inclusive [first, last] ranges, ascending) does not name."""
    firsts = [first for first, _ in held]
    lacking = 0
    for first_entry_id, last_entry_id, ensemble in segment_ranges(metadata):
        for position, member in enumerate(ensemble):
            if member != bookie_id:
                continue
            for entry_id in position_entries(
                metadata.quorum, first_entry_id, last_entry_id, position
            ):
                index = bisect.bisect_right(firsts, entry_id) - 1
                if index < 0 or held[index][1] < entry_id:
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
