"""Orphan ledgers: ledgers an application created but never recorded, and which of them the
leader deletes.

Pure.  A leader creates a segment's ledger and then names it in the log by
compare-and-set; a snapshotter creates a snapshot's ledger and then records it
in the snapshots znode.  A process that dies between the two leaves a ledger
nothing names: an orphan, which nothing would ever delete.  Every ledger the
framework creates carries the application's name in its custom metadata
(`APP_KEY`, UTF-8), so an orphan can be told from another application's ledger
and from ledgers the framework did not create.

`orphans` picks, among the cluster's ledgers, those that

1. carry `APP_KEY` equal to this application's name (never an untagged ledger,
   never another application's),
2. are named by neither the log's segments nor the snapshots znode
   (registered, pending and garbage ledgers: `named`),
3. were created at least `safe_age_ms` ago (by the ledger's creation time,
   `ctime_ms`, against the leader's wall clock), far longer than any create to
   compare-and-set takes, so a ledger whose creator is still on its way to
   recording it is left alone.

The runtime (rsm/runtime/orphans.py) deletes each one only in a ZooKeeper
transaction that also checks that the log and the snapshots znode are still at
the versions `named` was read from, and a leader's compare-and-set that names a
new ledger checks that the ledger's metadata still exists: so a ledger that is
named, or about to be, is never deleted, whatever the clocks say.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

APP_KEY: Final = "rsm.app"
"""Custom metadata key of every ledger the framework creates: the application's name."""


@dataclass(frozen=True, slots=True)
class LedgerTag:
    """What decides whether a ledger is an orphan."""

    ledger_id: int
    app: bytes | None
    """Its `APP_KEY` value, None when it has none."""
    ctime_ms: int


def orphans(
    ledgers: Iterable[LedgerTag],
    *,
    app: str,
    named: Collection[int],
    now_ms: int,
    safe_age_ms: int,
) -> list[int]:
    """The ids of `ledgers` that are `app`'s orphans (module docstring), ascending."""
    assert safe_age_ms >= 0
    tag = app.encode()
    return sorted(
        ledger.ledger_id
        for ledger in ledgers
        if ledger.app == tag
        and ledger.ledger_id not in named
        and now_ms - ledger.ctime_ms >= safe_age_ms
    )
