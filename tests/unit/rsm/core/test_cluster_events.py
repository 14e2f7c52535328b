"""The status page's events: what changed between two looks at the cluster, in a bounded log."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rsm.core.cluster_events import BookieState, ClusterLook, EventKind, EventLog, events_between

UP, READ_ONLY, DOWN = BookieState.UP, BookieState.READ_ONLY, BookieState.DOWN


def kinds(before: ClusterLook | None, after: ClusterLook) -> list[EventKind]:
    return [kind for kind, _ in events_between(before, after)]


def test_first_look_names_its_leader_only() -> None:
    look = ClusterLook(("r1", 1), {"b1": UP, "b2": DOWN})
    assert list(events_between(None, look)) == [(EventKind.LEADER, "leader r1 (epoch 1)")]
    assert kinds(None, ClusterLook(None, {"b1": UP})) == []


def test_leader_changes_by_replica_or_epoch_and_its_loss() -> None:
    first = ClusterLook(("r1", 1))
    assert kinds(first, ClusterLook(("r1", 1))) == []
    assert list(events_between(first, ClusterLook(("r1", 2)))) == [
        (EventKind.LEADER, "leader r1 (epoch 2)")
    ]
    assert list(events_between(first, ClusterLook(None))) == [(EventKind.LEADER, "no leader")]


def test_bookie_changes_in_id_order() -> None:
    before = ClusterLook(("r1", 1), {"b1": UP, "b2": UP, "b3": DOWN})
    after = ClusterLook(("r1", 1), {"b1": READ_ONLY, "b2": DOWN, "b3": UP, "b4": UP, "b5": DOWN})
    assert list(events_between(before, after)) == [
        (EventKind.BOOKIE_READ_ONLY, "bookie b1 read-only"),
        (EventKind.BOOKIE_DOWN, "bookie b2 down"),
        (EventKind.BOOKIE_UP, "bookie b3 up"),
        (EventKind.BOOKIE_DOWN, "bookie b5 down"),
    ]


def test_divergence_is_reported_once() -> None:
    calm = ClusterLook(("r1", 1))
    diverged = ClusterLook(("r1", 1), diverged_at=42)
    assert list(events_between(calm, diverged)) == [
        (EventKind.DIVERGED, "state diverged from the leader's at index 42")
    ]
    assert kinds(diverged, ClusterLook(("r1", 1), diverged_at=42)) == []
    assert kinds(None, diverged) == [EventKind.LEADER, EventKind.DIVERGED]


def test_log_keeps_the_newest_events_with_their_times() -> None:
    log = EventLog(capacity=2)
    log.look(ClusterLook(("r1", 1)), time_ms=10)
    log.look(ClusterLook(("r2", 2)), time_ms=20)
    log.look(ClusterLook(("r2", 2)), time_ms=25)
    log.look(ClusterLook(("r3", 3)), time_ms=30)
    assert [(e.time_ms, e.message) for e in log.events()] == [
        (20, "leader r2 (epoch 2)"),
        (30, "leader r3 (epoch 3)"),
    ]
    assert log.events()[-1].plain() == {
        "time_ms": 30,
        "kind": "leader",
        "message": "leader r3 (epoch 3)",
    }


states = st.dictionaries(st.sampled_from(["b1", "b2", "b3"]), st.sampled_from(list(BookieState)))
leaders = st.none() | st.tuples(st.sampled_from(["r1", "r2"]), st.integers(1, 3))


@given(st.lists(st.tuples(leaders, states), min_size=1, max_size=8), st.integers(1, 5))
def test_log_is_bounded_and_a_repeated_look_adds_nothing(
    looks: list[tuple[tuple[str, int] | None, dict[str, BookieState]]], capacity: int
) -> None:
    log = EventLog(capacity)
    for time_ms, (leader, bookies) in enumerate(looks):
        log.look(ClusterLook(leader, bookies), time_ms)
        assert len(log.events()) <= capacity
        kept = log.events()
        log.look(ClusterLook(leader, bookies), time_ms)
        assert log.events() == kept
