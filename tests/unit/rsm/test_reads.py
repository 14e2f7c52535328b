"""Linearizable read rounds: a read is released only by a confirmation round that
started after it arrived; read-your-writes waits for an applied index."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.core.reads import IndexWaiters, LinearizableReads
from rsm.errors import Overloaded


def test_a_round_started_before_the_read_does_not_release_it() -> None:
    reads: LinearizableReads[str] = LinearizableReads()
    reads.add("r1")
    reads.start_round(0)
    reads.add("r2")
    assert not reads.needs_round, "one round at a time"
    assert reads.confirmed(0) == ["r1"]
    assert reads.needs_round
    reads.start_round(1)
    assert reads.confirmed(1) == ["r2"]
    assert len(reads) == 0
    assert not reads.needs_round


def test_many_reads_share_one_round_and_leave_in_arrival_order() -> None:
    reads: LinearizableReads[int] = LinearizableReads()
    for number in range(100):
        reads.add(number)
    reads.start_round(0)
    assert reads.confirmed(0) == list(range(100))


def test_a_failed_round_hands_its_reads_to_the_next_round_first() -> None:
    reads: LinearizableReads[str] = LinearizableReads()
    reads.add("early")
    reads.start_round(0)
    reads.add("late")
    reads.round_failed(0)
    assert reads.needs_round
    assert len(reads) == 2
    reads.start_round(1)
    assert reads.confirmed(1) == ["early", "late"]


def test_reads_are_bounded_and_abandoned_on_step_down() -> None:
    reads: LinearizableReads[int] = LinearizableReads(waiters_max=3)
    reads.add(1)
    reads.start_round(0)
    reads.add(2)
    reads.add(3)
    with pytest.raises(Overloaded):
        reads.add(4)
    assert sorted(reads.abandon()) == [1, 2, 3]
    assert len(reads) == 0
    assert not reads.needs_round


@settings(max_examples=200)
@given(st.data())
def test_every_read_is_released_once_by_a_round_started_after_it_arrived(data: Any) -> None:
    reads: LinearizableReads[int] = LinearizableReads()
    arrived_at: dict[int, int] = {}
    round_started_at: dict[int, int] = {}
    in_flight: int | None = None
    released: list[int] = []
    rounds = 0
    for step in range(data.draw(st.integers(1, 60))):
        action = data.draw(st.sampled_from(["read", "start", "confirm", "fail"]))
        if action == "read":
            arrived_at[len(arrived_at)] = step
            reads.add(len(arrived_at) - 1)
        elif action == "start" and reads.needs_round:
            in_flight = rounds
            round_started_at[rounds] = step
            reads.start_round(rounds)
            rounds += 1
        elif action == "confirm" and in_flight is not None:
            for read in reads.confirmed(in_flight):
                assert arrived_at[read] < round_started_at[in_flight], read
                released.append(read)
            in_flight = None
        elif action == "fail" and in_flight is not None:
            reads.round_failed(in_flight)
            in_flight = None
    if in_flight is not None:
        released.extend(reads.confirmed(in_flight))
    while reads.needs_round:
        reads.start_round(rounds)
        released.extend(reads.confirmed(rounds))
        rounds += 1
    assert sorted(released) == sorted(arrived_at)
    assert len(released) == len(set(released))


def test_index_waiters_release_in_index_order_once_applied() -> None:
    waiters: IndexWaiters[str] = IndexWaiters(applied_index=10)
    waiters.add(15, "b")
    waiters.add(12, "a")
    cancelled = waiters.add(13, "gone")
    waiters.cancel(cancelled)
    waiters.cancel(cancelled)
    assert waiters.applied(11) == []
    assert waiters.applied(14) == ["a"]
    assert waiters.applied(20) == ["b"]
    assert waiters.applied_index == 20
    assert len(waiters) == 0


def test_index_waiters_are_bounded() -> None:
    waiters: IndexWaiters[int] = IndexWaiters(applied_index=0, waiters_max=2)
    first = waiters.add(5, 1)
    waiters.add(5, 2)
    with pytest.raises(Overloaded):
        waiters.add(5, 3)
    waiters.cancel(first)
    waiters.add(5, 3)
    assert waiters.applied(5) == [2, 3]


@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "cancel", "apply"]), st.integers(0, 30)),
        max_size=200,
    )
)
def test_index_waiters_release_exactly_the_satisfied_live_ones(
    ops: list[tuple[str, int]],
) -> None:
    waiters: IndexWaiters[int] = IndexWaiters(applied_index=0, waiters_max=1000)
    live: dict[int, tuple[int, int]] = {}
    applied = 0
    counter = 0
    for op, value in ops:
        if op == "add":
            index = applied + 1 + value
            ticket = waiters.add(index, counter)
            live[ticket] = (index, counter)
            counter += 1
        elif op == "cancel" and live:
            ticket = sorted(live)[value % len(live)]
            waiters.cancel(ticket)
            del live[ticket]
        elif op == "apply":
            applied += value
            expected = sorted(
                (index, waiter) for index, waiter in live.values() if index <= applied
            )
            assert waiters.applied(applied) == [waiter for _, waiter in expected]
            live = {t: entry for t, entry in live.items() if entry[0] > applied}
        assert len(waiters) == len(live)
