"""When autorecovery fences an open ledger: its last segment names a lost bookie, and its
writer is gone.

Pure.  The replication worker (`bookie/autorecovery/worker.py`) leaves the last
segment of a ledger that is not CLOSED to its writer (`left_to_writer`); a writer
that died never changes it, so the worker fences the ledger and recovers it (which
closes it at its last acknowledged entry), after which every segment is sealed and
repaired as any other.  Fencing a writer that is alive stops it, so the rule is:

1. **Declared writer.**  A ledger whose creator names, in its custom metadata under
   `WRITER_KEY` (UTF-8 text), a znode that exists exactly while its writer lives (an
   ephemeral znode of the writer's session) has a writer that is `ALIVE` while that
   znode exists, and `GONE` when it does not while its parent does.  When the parent
   is missing too (the znode is in another ZooKeeper, or was never made), the writer
   is `UNKNOWN`.  A ledger with no such key has an `UNKNOWN` writer, and one
   IN_RECOVERY a `GONE` one (its writer can get nothing more acknowledged).
2. **No progress.**  A ledger whose writer is not `ALIVE` is fenced only once it has
   made no progress for `grace_ms` as seen by this worker: its progress is its
   metadata version with the last entry any surviving bookie of its last segment
   holds, and any change of either starts the grace period again, as does the
   writer being seen `ALIVE`.  A worker counts only what it observed itself, so a
   worker that restarts waits a whole grace period again.

An `ALIVE` writer is never fenced, whatever its progress: it replaces the lost bookie
itself once one is free (a deferred ensemble change), or closes the ledger.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from bookie.core.metadata import LedgerMetadata, LedgerState

WRITER_KEY: Final = "bookie.writer"
"""Custom metadata key: the znode that exists while the ledger's writer lives (rule 1)."""


class Writer(enum.Enum):
    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"


def declared_writer(metadata: LedgerMetadata) -> str | None:
    """The znode path the ledger names for its writer (not checked to be a valid path),
    None when it names none or its value is not UTF-8."""
    raw = metadata.custom.get(WRITER_KEY)
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def writer_state(
    metadata: LedgerMetadata, *, znode_exists: bool | None, parent_exists: bool | None
) -> Writer:
    """Rule 1, from whether the declared znode and its parent exist (None: not asked,
    because the ledger declares no valid znode)."""
    if metadata.state is LedgerState.IN_RECOVERY:
        return Writer.GONE
    if znode_exists:
        return Writer.ALIVE
    if znode_exists is None or not parent_exists:
        return Writer.UNKNOWN
    return Writer.GONE


@dataclass(frozen=True, slots=True)
class Progress:
    """What a ledger has done, as far as a worker can see."""

    metadata_version: int
    last_entry_held: int
    """The last entry any surviving bookie of the last segment holds (-1: none)."""


class StalledLedgers:
    """Rule 2: the ledgers a worker watches, and when each may be fenced."""

    __slots__ = ("_grace_ms", "_seen")

    def __init__(self, *, grace_ms: int) -> None:
        assert grace_ms >= 0
        self._grace_ms = grace_ms
        self._seen: dict[int, tuple[Progress, int]] = {}
        """Ledger id -> (its progress as last seen, since when it is unchanged)."""

    def observe(
        self, ledger_id: int, writer: Writer, progress: Progress, now_ms: int
    ) -> int | None:
        """Record an observation; return how many ms more without progress before the
        ledger may be fenced (0: now), None while its writer is alive."""
        if writer is Writer.ALIVE:
            self._seen.pop(ledger_id, None)
            return None
        seen = self._seen.get(ledger_id)
        if seen is None or seen[0] != progress:
            self._seen[ledger_id] = (progress, now_ms)
            since_ms = now_ms
        else:
            since_ms = seen[1]
        return max(0, since_ms + self._grace_ms - now_ms)

    def retain(self, ledger_ids: Iterable[int]) -> None:
        """Stop watching every ledger not in `ledger_ids` (its mark is gone)."""
        kept = set(ledger_ids)
        for ledger_id in set(self._seen) - kept:
            del self._seen[ledger_id]

    def forget(self, ledger_id: int) -> None:
        """The ledger is no longer watched (closed, repaired, or its mark gone)."""
        self._seen.pop(ledger_id, None)
