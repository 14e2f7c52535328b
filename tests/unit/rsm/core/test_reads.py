"""Linearizable read rounds: a read is released only by a confirmation round that
started after it arrived; read-your-writes waits for an applied index."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm import limits
from rsm.core.reads import (
    LEASE_HELD,
    LEASE_HELD_RENEW,
    LEASE_NOT_HELD,
    IndexWaiters,
    LinearizableReads,
    ReadLease,
    successor_wait_ms,
)
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


def test_a_lease_holds_from_a_confirmed_round_for_its_length_after_the_round_started() -> None:
    lease = ReadLease(1_000)
    assert not lease.holds(0.0), "no round confirmed yet"
    lease.confirmed(10.0)
    assert lease.holds(10.5)
    assert lease.holds(10.999)
    assert not lease.holds(11.0), "measured from the round's start, not its answer"
    assert lease.check(10.4) == LEASE_HELD
    assert lease.check(10.5) == LEASE_HELD_RENEW, "renewed ahead of time once half used"
    assert lease.check(11.0) == LEASE_NOT_HELD


def test_a_lease_never_moves_back_and_a_revoked_one_holds_no_more() -> None:
    lease = ReadLease(1_000)
    lease.confirmed(10.0)
    lease.confirmed(9.5)  # an older round confirmed late
    assert lease.holds(10.9)
    lease.revoke()
    assert not lease.holds(10.1)
    assert not lease.holds(-1.0)


def test_a_lease_of_zero_never_holds() -> None:
    lease = ReadLease(0)
    lease.confirmed(10.0)
    assert not lease.holds(10.0)


@given(
    lease_ms=st.integers(0, limits.read_lease_ms_max),
    leader_rate=st.floats(1 - limits.lease_clock_rate_error, 1 + limits.lease_clock_rate_error),
    successor_rate=st.floats(1 - limits.lease_clock_rate_error, 1 + limits.lease_clock_rate_error),
    round_started_s=st.floats(0, 1e6),
    fenced_after_s=st.floats(0, 100),
)
def test_a_successor_serves_only_after_every_lease_of_its_predecessor_ran_out(
    lease_ms: int,
    leader_rate: float,
    successor_rate: float,
    round_started_s: float,
    fenced_after_s: float,
) -> None:
    """In real (virtual) time: a round that confirmed started before the successor's
    fencing finished; the successor then waits `successor_wait_ms` by its own clock.
    Each clock runs at a rate within the bound; neither is stopped."""
    lease = ReadLease(lease_ms)
    lease.confirmed(round_started_s * leader_rate)
    fenced_s = round_started_s + fenced_after_s
    serve_from_s = fenced_s + successor_wait_ms(lease_ms) / 1000 / successor_rate
    # The last real instant at which the old leader's clock says the lease holds:
    lease_end_s = round_started_s + lease_ms / 1000 / leader_rate
    rounding_s = 1e-6  # floating point, at the exact bound
    assert serve_from_s + rounding_s >= lease_end_s
    assert not lease.holds((serve_from_s + rounding_s) * leader_rate)


def test_the_successor_wait_covers_the_clock_rate_error() -> None:
    assert successor_wait_ms(0) == 0
    assert successor_wait_ms(1_000) == 1_223, "1000 * 1.1 / 0.9, rounded up"


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
