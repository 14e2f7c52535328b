"""The auditor's decisions: which bookies are lost, when to audit, what to mark.

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
  audit a previous auditor did not finish, are made again).
* A ledger is marked with the lost bookies any of its segments names, whatever its
  state: a replication worker decides what it can repair.
"""

from __future__ import annotations

from collections.abc import Collection

from bookie.core.metadata import LedgerMetadata


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

    def audit_due(self, now_ms: int) -> bool:
        lost = self.lost(now_ms)
        if not lost:
            return False
        if not lost <= self._audited or self._last_audit_ms is None:
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
