"""Read barriers: a linearizable read is released only by an entry sent after it arrived."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.core.batching import Batcher, OutgoingBatch
from rsm.core.entry_format import encode_command
from rsm.core.reads import IndexWaiters, LinearizableReads
from rsm.errors import Overloaded


def test_an_entry_sent_before_the_read_does_not_release_it() -> None:
    reads: LinearizableReads[str] = LinearizableReads()
    reads.sent(0)  # a write batch already in flight
    reads.add("r1")
    waiting = reads.needs_barrier
    assert reads.applied(0) == []
    reads.sent(1)  # the barrier
    assert (waiting, reads.needs_barrier) == (True, False)
    assert reads.applied(1) == ["r1"]
    assert len(reads) == 0


def test_many_reads_share_one_barrier_and_leave_in_arrival_order() -> None:
    reads: LinearizableReads[int] = LinearizableReads()
    for number in range(100):
        reads.add(number)
    reads.sent(0)
    reads.add(100)
    reads.sent(1)
    assert reads.applied(0) == list(range(100))
    assert reads.applied(1) == [100]


def test_reads_are_bounded_and_abandoned_on_step_down() -> None:
    reads: LinearizableReads[int] = LinearizableReads(waiters_max=3)
    reads.add(1)
    reads.sent(0)
    reads.add(2)
    reads.add(3)
    with pytest.raises(Overloaded):
        reads.add(4)
    assert sorted(reads.abandon()) == [1, 2, 3]
    assert len(reads) == 0
    assert not reads.needs_barrier


@settings(max_examples=150)
@given(st.data())
def test_reads_with_the_batcher_are_released_only_after_a_later_entry(data: Any) -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, pipeline_batches_max=2)
    reads: LinearizableReads[int] = LinearizableReads()
    rng = random.Random(0)
    arrived_at: dict[int, int] = {}
    cut_at: dict[int, int] = {}
    in_flight: list[OutgoingBatch[int]] = []
    released: list[int] = []

    def acknowledge_oldest(step: int) -> None:
        batch = batcher.acknowledged(in_flight.pop(0).sequence)
        for read in reads.applied(batch.sequence):
            # Some entry cut after the read arrived is at or before this one.
            assert any(
                arrived_at[read] < cut_at[seq] and seq <= batch.sequence for seq in cut_at
            ), read
            released.append(read)

    for step in range(data.draw(st.integers(1, 50))):
        action = data.draw(st.sampled_from(["read", "write", "send", "ack"]))
        if action == "read":
            arrived_at[len(arrived_at)] = step
            reads.add(len(arrived_at) - 1)
        elif action == "write":
            batcher.submit(encode_command("w"), step)
        elif action == "send":
            batch = batcher.cut(step, rng, barrier=reads.needs_barrier)
            if batch is not None:
                reads.sent(batch.sequence)
                cut_at[batch.sequence] = step
                in_flight.append(batch)
        elif in_flight:
            acknowledge_oldest(step)
    step = 10_000
    while len(reads) or batcher.pending_count or in_flight:
        batch = batcher.cut(step, rng, barrier=reads.needs_barrier)
        if batch is not None:
            reads.sent(batch.sequence)
            cut_at[batch.sequence] = step
            in_flight.append(batch)
        else:
            acknowledge_oldest(step)
        step += 1
    assert released == sorted(arrived_at)


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
