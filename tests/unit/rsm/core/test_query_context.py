"""The framework's read-only query context (added for the store's expiry): what a query sees.

These test `rsm.core.state_machine.Context.for_query`, `rsm.core.commands.AppliedPosition`
and `answer_query(..., applied=...)`; they live here because the key-value
store is what needed them.
"""

from __future__ import annotations

import pytest

from rsm.core.commands import (
    INITIAL_POSITION,
    AppliedPosition,
    answer_query,
    apply_batch,
    prepare_command,
)
from rsm.core.log_format import decode_batch, encode_batch
from rsm.core.sessions import SessionTable
from rsm.core.state_machine import Context, StateMachine, command, query
from rsm.errors import ContextUnavailable, RsmStatus


class Clock(StateMachine):
    def __init__(self) -> None:
        self.writes = 0

    @command
    def write(self) -> int:
        self.writes += 1
        return self.context.index

    @query
    def now(self) -> list[int]:
        return [self.context.index, self.context.time_ms, self.context.epoch]

    @query
    def draw(self) -> int:
        return self.context.random.randint(1, 6)


def apply(machine: Clock, first_index: int, count: int, time_ms: int) -> AppliedPosition:
    items = [prepare_command(Clock, "write") for _ in range(count)]
    data = encode_batch(epoch=4, first_index=first_index, timestamp_ms=time_ms, seed=1, items=items)
    batch = decode_batch(data)
    apply_batch(machine, batch, SessionTable())
    return AppliedPosition.after(batch)


def test_a_query_sees_the_last_applied_entry() -> None:
    machine = Clock()
    applied = apply(machine, 1, 3, 5_000)
    assert applied == AppliedPosition(3, 5_000, 4)
    assert answer_query(machine, "now", applied=applied).value == [3, 5_000, 4]


def test_a_barrier_moves_the_time_but_not_the_index() -> None:
    machine = Clock()
    apply(machine, 1, 2, 5_000)
    barrier = apply(machine, 3, 0, 9_000)
    assert barrier == AppliedPosition(2, 9_000, 4)
    assert answer_query(machine, "now", applied=barrier).value == [2, 9_000, 4]


def test_before_anything_is_applied_the_position_is_zero() -> None:
    assert answer_query(Clock(), "now", applied=INITIAL_POSITION).value == [0, 0, 0]


def test_a_query_has_no_randomness_and_leaves_no_context() -> None:
    machine = Clock()
    outcome = answer_query(machine, "draw", applied=INITIAL_POSITION)
    assert outcome.status is RsmStatus.COMMAND_FAILED
    assert outcome.detail == "ContextUnavailable"
    assert vars(machine) == {"writes": 0}
    with pytest.raises(ContextUnavailable):
        _ = machine.context


def test_without_a_position_a_query_has_no_context() -> None:
    outcome = answer_query(Clock(), "now")
    assert outcome.detail == "ContextUnavailable"


def test_query_contexts_are_checked() -> None:
    context = Context.for_query(0, 0, 0)
    assert (context.index, context.time_ms, context.epoch) == (0, 0, 0)
    with pytest.raises(AssertionError):
        Context(0, 0, 1, seed=5)
    with pytest.raises(AssertionError):
        AppliedPosition(-1, 0, 0)
