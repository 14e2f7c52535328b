"""When snapshots are due, who takes them, and what truncation may remove."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rsm.core import snapshot_manifest
from rsm.core.election import Candidate
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.core.snapshot_manifest import Manifest, SnapshotsValue
from rsm.core.snapshot_policy import SnapshotPolicy, plan_truncation, snapshotter


def test_each_criterion_makes_a_snapshot_due_and_zero_turns_it_off() -> None:
    policy = SnapshotPolicy(every_commands=100, every_log_bytes=1_000, every_ms=60_000)
    base = {"newest_index": 50, "log_bytes_since": 0, "now_ms": 1_000, "since_ms": 1_000}
    assert policy.due(applied_index=149, **base) is None
    assert policy.due(applied_index=150, **base) == "commands"
    assert policy.due(applied_index=51, **{**base, "log_bytes_since": 1_000}) == "log_bytes"
    assert policy.due(applied_index=51, **{**base, "now_ms": 61_000}) == "age"
    off = SnapshotPolicy(0, 0, 0)
    assert off.due(applied_index=10**9, **{**base, "log_bytes_since": 10**12}) is None


def test_no_criterion_counts_before_the_log_grew_by_the_share_of_the_snapshot_size() -> None:
    # A 1,000,000-byte snapshot, a gate of 50%: the count criterion waits for 500,000
    # bytes of log; so do the others; 0 means no gate, and so does no snapshot yet.
    policy = SnapshotPolicy(100, 1_000, 60_000, log_growth_percent=50)
    base = {"newest_index": 50, "newest_size_bytes": 1_000_000, "now_ms": 61_000, "since_ms": 0}
    for log_bytes_since in (0, 1_000, 499_999):
        assert policy.due(applied_index=10**6, log_bytes_since=log_bytes_since, **base) is None
    assert policy.due(applied_index=10**6, log_bytes_since=500_000, **base) == "commands"
    assert policy.due(applied_index=51, log_bytes_since=500_000, **base) == "log_bytes"
    ungated = SnapshotPolicy(100, 0, 0)
    assert ungated.due(applied_index=150, log_bytes_since=0, **base) == "commands"
    first = {**base, "newest_index": 0, "newest_size_bytes": 0}
    assert policy.due(applied_index=100, log_bytes_since=0, **first) == "commands"


def test_nothing_is_due_without_new_commands() -> None:
    policy = SnapshotPolicy(every_commands=1, every_log_bytes=1, every_ms=1)
    assert (
        policy.due(
            applied_index=50, newest_index=50, log_bytes_since=10**6, now_ms=10**9, since_ms=0
        )
        is None
    )


def candidate(name: str, replica_id: str) -> Candidate:
    return Candidate(name, int(name[2:]), replica_id, f"{replica_id}:1")


def test_the_snapshotter_is_the_first_follower_or_the_lone_leader() -> None:
    a, b, c = candidate("n-1", "a"), candidate("n-2", "b"), candidate("n-3", "c")
    assert snapshotter((a, b, c), a) == "b"
    assert snapshotter((a, b, c), b) == "a"
    assert snapshotter((a,), a) == "a"
    assert snapshotter((a, b), None) == "a"
    assert snapshotter((), None) is None


def closed(ledger_id: int, first: int, last: int) -> Segment:
    return Segment(ledger_id, 1, first, SegmentState.CLOSED, last)


LOG = Log(
    1,
    (
        closed(1, 1, 100),
        closed(2, 101, 200),
        closed(3, 201, 300),
        Segment(4, 1, 301, SegmentState.OPEN, -1),
    ),
)


def snapshots(*points: tuple[int, int]) -> SnapshotsValue:
    """Registered snapshots at (index, logged time)."""
    value = SnapshotsValue()
    for ledger_id, (index, time_ms) in enumerate(points, start=100):
        value = snapshot_manifest.begin(value, ledger_id=ledger_id, replica_id="r", started_ms=0)
        value = snapshot_manifest.register(
            value,
            Manifest("a", index, time_ms, 1, ledger_id, b"h", b"s" * 32, 1, 1, 0, "r"),
            kept=5,
        )
    return value


def test_truncation_removes_segments_wholly_below_the_snapshot() -> None:
    plan = plan_truncation(
        LOG,
        snapshots((250, 2_500)),
        applied_index=400,
        applied_time_ms=4_000,
        retention_commands=0,
        retention_ms=0,
    )
    assert plan is not None
    assert [s.ledger_id for s in plan.removed] == [1, 2]
    assert plan.log.first_index == 201
    assert plan.snapshots.garbage == (1, 2)
    exact = plan_truncation(
        LOG,
        snapshots((200, 2_000)),
        applied_index=400,
        applied_time_ms=4_000,
        retention_commands=0,
        retention_ms=0,
    )
    assert exact is not None
    assert [s.ledger_id for s in exact.removed] == [1, 2]


def test_the_retention_window_keeps_recent_commands_even_under_a_snapshot() -> None:
    value = snapshots((150, 1_500), (250, 2_500))
    by_commands = plan_truncation(
        LOG, value, applied_index=400, applied_time_ms=4_000, retention_commands=200, retention_ms=0
    )
    assert by_commands is not None
    assert by_commands.snapshot.index == 150
    assert [s.ledger_id for s in by_commands.removed] == [1]
    by_time = plan_truncation(
        LOG,
        value,
        applied_index=400,
        applied_time_ms=4_000,
        retention_commands=0,
        retention_ms=2_000,
    )
    assert by_time is not None
    assert by_time.snapshot.index == 150
    assert (
        plan_truncation(
            LOG,
            value,
            applied_index=400,
            applied_time_ms=4_000,
            retention_commands=0,
            retention_ms=3_000,
        )
        is None
    )


@given(
    st.lists(st.integers(min_value=1, max_value=400), unique=True, max_size=4),
    st.integers(min_value=0, max_value=300),
)
def test_truncation_never_removes_what_no_snapshot_covers(
    indexes: list[int], retention: int
) -> None:
    value = snapshots(*((index, index * 10) for index in indexes))
    plan = plan_truncation(
        LOG,
        value,
        applied_index=400,
        applied_time_ms=4_000,
        retention_commands=retention,
        retention_ms=0,
    )
    if plan is None:
        return
    assert plan.log.segments[-1] == LOG.segments[-1]
    assert plan.snapshot.index <= 400 - retention
    for segment in plan.removed:
        assert not segment.is_open
        assert segment.last_index <= plan.snapshot.index
    assert plan.log.segments == LOG.segments[len(plan.removed) :]
