"""When to take a snapshot, which replica takes it, and how far the log may be truncated.

Pure: every function decides from values the shells read (the replica's
applied position, the election view, the log, the snapshots znode) and
`now_ms`, and returns a decision.

Taking snapshots (`SnapshotPolicy.due`): a snapshot is due once, since the
newest registered one, `every_commands` commands were logged, or
`every_log_bytes` bytes of log entries were applied, or `every_ms` passed
with at least one new command; each criterion is off at 0.  None of them
counts before the log applied since has grown to `log_growth_percent` of
the newest snapshot's size (a gate, off at 0): a snapshot costs about its
size in work and in bookie writes, so the gate keeps that within a share
of what the log itself costs, as Redis's auto-aof-rewrite-percentage does,
for a large state that the count alone would snapshot again and again.

Who takes it (`snapshotter`): the first candidate (caught-up replica, in
election order) that is not the leader-elect, so that the leader's latency
is not disturbed; the leader-elect itself only when it is the only
candidate.  Every replica computes the same answer from the same
candidates, so usually one replica snapshots; two at once would only waste
work (registration is a CAS, and one snapshot per index is kept).

Truncation (`plan_truncation`): the leader removes the leading segments whose
every command is in a durable snapshot and outside the retention window, in
one multi-operation that rewrites the log and lists their ledgers as garbage
in the snapshots znode (rsm/core/snapshot_manifest.py).  The snapshot cut at
is the newest registered one that is at least `retention_commands` indexes
below the leader's applied index and was logged at least `retention_ms`
before the leader's applied time: commands newer than that stay in the log
even when a snapshot covers them, so a replica a little behind catches up
from the log instead of reloading a snapshot.

Invariants: a plan never removes the last segment, never a segment holding
an index above its snapshot's, and only CLOSED segments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rsm.core import log_state
from rsm.core.election import Candidate
from rsm.core.log_state import Log, Segment
from rsm.core.snapshot_manifest import Manifest, SnapshotsValue, add_garbage


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """How often an application snapshots; 0 turns a criterion off."""

    every_commands: int
    every_log_bytes: int
    every_ms: int
    log_growth_percent: int = 0

    def __post_init__(self) -> None:
        assert self.every_commands >= 0
        assert self.every_log_bytes >= 0
        assert self.every_ms >= 0
        assert self.log_growth_percent >= 0

    def due(
        self,
        *,
        applied_index: int,
        newest_index: int,
        log_bytes_since: int,
        now_ms: int,
        since_ms: int,
        newest_size_bytes: int = 0,
    ) -> str | None:
        """Why a snapshot at `applied_index` is due, or None when it is not.

        `newest_index`: the newest registered snapshot's index (0: none);
        `newest_size_bytes`: its size (0: none); `log_bytes_since`: log bytes
        applied since it (as far as this replica knows); `since_ms`: when it
        was created (or when the replica started watching, when there is none).
        """
        if applied_index <= newest_index:
            return None
        if log_bytes_since * 100 < self.log_growth_percent * newest_size_bytes:
            return None
        if self.every_commands and applied_index - newest_index >= self.every_commands:
            return "commands"
        if self.every_log_bytes and log_bytes_since >= self.every_log_bytes:
            return "log_bytes"
        if self.every_ms and now_ms - since_ms >= self.every_ms:
            return "age"
        return None


def snapshotter(candidates: Sequence[Candidate], elect: Candidate | None) -> str | None:
    """The replica id that takes scheduled snapshots, or None when nobody stands."""
    for candidate in candidates:
        if elect is None or candidate.name != elect.name:
            return candidate.replica_id
    return None if elect is None else elect.replica_id


def truncation_point(
    value: SnapshotsValue,
    *,
    applied_index: int,
    applied_time_ms: int,
    retention_commands: int,
    retention_ms: int,
) -> Manifest | None:
    """The newest registered snapshot outside the retention window, if any."""
    assert retention_commands >= 0
    assert retention_ms >= 0
    for manifest in value.newest_first():
        if (
            manifest.index <= applied_index - retention_commands
            and manifest.time_ms <= applied_time_ms - retention_ms
        ):
            return manifest
    return None


@dataclass(frozen=True, slots=True)
class TruncationPlan:
    """One truncation: the log and snapshots values to write together, and what goes."""

    snapshot: Manifest
    log: Log
    snapshots: SnapshotsValue
    removed: tuple[Segment, ...]


def plan_truncation(
    log: Log,
    value: SnapshotsValue,
    *,
    applied_index: int,
    applied_time_ms: int,
    retention_commands: int,
    retention_ms: int,
) -> TruncationPlan | None:
    """The truncation the leader should do now, or None when nothing may go yet.

    Raises `SnapshotsFull` when the garbage list cannot take the ledgers yet.
    """
    point = truncation_point(
        value,
        applied_index=applied_index,
        applied_time_ms=applied_time_ms,
        retention_commands=retention_commands,
        retention_ms=retention_ms,
    )
    if point is None:
        return None
    truncated = log_state.truncate(log, below_index=point.index + 1)
    removed = log.segments[: len(log.segments) - len(truncated.segments)]
    if not removed:
        return None
    assert all(not s.is_open and s.last_index <= point.index for s in removed)
    snapshots = add_garbage(value, tuple(s.ledger_id for s in removed))
    return TruncationPlan(point, truncated, snapshots, removed)
