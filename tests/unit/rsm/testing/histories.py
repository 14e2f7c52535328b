"""Shared tools of the checker tests: hand-written histories, histories that are
linearizable by construction, and a brute-force checker to compare against.

A history is made linearizable by construction by giving every operation a
moment inside its interval at which it takes effect (an INFO operation: any
moment after its invocation, or never), running the real sequential model in
the order of those moments, and recording the outputs it gives.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from rsm.testing.history import History, Operation, Outcome, Value
from rsm.testing.models import UNKNOWN, DeterministicModel, Model

Draw = Callable[[random.Random], tuple[str, Value]]


# Hand-written histories read best as tables of positional calls.
def op(  # noqa: PLR0917
    operation_id: int,
    process: int | str,
    kind: str,
    input_value: Value,
    output: Value,
    invoke: float,
    complete: float | None,
    outcome: Outcome = Outcome.OK,
) -> Operation:
    """A hand-written operation; times are distinct, so each time is its own sequence number."""
    return Operation(
        id=operation_id,
        process=process,
        kind=kind,
        input=input_value,
        outcome=outcome,
        output=output if outcome is Outcome.OK else None,
        invoke_time=invoke,
        invoke_seq=int(invoke),
        complete_time=complete,
        complete_seq=None if complete is None else int(complete),
    )


def history(*operations: Operation) -> History:
    return tuple(operations)


@dataclass(frozen=True, slots=True)
class _Planned:
    process: int
    kind: str
    input: Value
    start: int
    end: int
    effect: float | None
    outcome: Outcome


def build_history(
    model: DeterministicModel[Any],
    plans: Sequence[tuple[int, str, Value, int, int, float | None, Outcome]],
) -> History:
    """Run `model` in effect order over planned operations and record what it answers.

    A plan is (process, kind, input, start, end, effect, outcome): integer
    invocation and completion times, the moment the operation takes effect
    (strictly inside (start, end) for OK ones; after start, or None for
    never, for INFO ones; None for FAIL ones) and the outcome.  Events at
    the same time get sequence numbers in plan order; any order is
    consistent, since effects sit strictly inside their intervals.
    """
    planned = [_Planned(*plan) for plan in plans]
    outputs: dict[int, Value] = {}
    state = model.init()
    effects = sorted(
        (item.effect, index) for index, item in enumerate(planned) if item.effect is not None
    )
    for _, index in effects:
        item = planned[index]
        outputs[index], state = model.apply(state, item.kind, item.input)
    events = sorted(
        [(item.start, index, 0) for index, item in enumerate(planned)]
        + [(item.end, index, 1) for index, item in enumerate(planned)]
    )
    seqs = {(index, side): seq for seq, (_, index, side) in enumerate(events)}
    return tuple(
        Operation(
            id=index,
            process=item.process,
            kind=item.kind,
            input=item.input,
            outcome=item.outcome,
            output=outputs[index] if item.outcome is Outcome.OK else None,
            invoke_time=item.start,
            invoke_seq=seqs[(index, 0)],
            complete_time=item.end,
            complete_seq=seqs[(index, 1)],
        )
        for index, item in enumerate(planned)
    )


def random_plans(
    rng: random.Random,
    operations: int,
    processes: int,
    draw: Draw,
    *,
    info_ratio: float = 0.0,
    fail_ratio: float = 0.0,
    duration_max: int = 10,
) -> list[tuple[int, str, Value, int, int, float | None, Outcome]]:
    """Plans for `operations` calls by `processes` sequential clients with random intervals."""
    free_at = [0] * processes
    plans: list[tuple[int, str, Value, int, int, float | None, Outcome]] = []
    for _ in range(operations):
        process = rng.randrange(processes)
        start = free_at[process] + rng.randint(1, 3)
        end = start + rng.randint(1, duration_max)
        free_at[process] = end
        kind, input_value = draw(rng)
        roll = rng.random()
        effect: float | None
        if roll < info_ratio:
            outcome = Outcome.INFO
            # An indeterminate call may take effect long after its client gave up, or never.
            effect = None if rng.random() < 0.5 else start + rng.random() * 3 * duration_max + 0.5
        elif roll < info_ratio + fail_ratio:
            outcome = Outcome.FAIL
            effect = None
        else:
            outcome = Outcome.OK
            effect = start + (end - start) * rng.uniform(0.01, 0.99)
        plans.append((process, kind, input_value, start, end, effect, outcome))
    return plans


def draw_register(rng: random.Random) -> tuple[str, Value]:
    roll = rng.random()
    if roll < 0.4:
        return "read", None
    if roll < 0.8:
        return "write", rng.randrange(4)
    return "cas", (rng.randrange(4), rng.randrange(4))


def draw_counter(rng: random.Random) -> tuple[str, Value]:
    if rng.random() < 0.4:
        return "read", None
    return "add", rng.randint(1, 3)


def kv_drawer(keys: Sequence[str]) -> Draw:
    def draw(rng: random.Random) -> tuple[str, Value]:
        key = rng.choice(keys)
        kind = rng.choice(["get", "get", "set", "del", "exists", "incr", "incrby", "append", "cas"])
        if kind == "set":
            return kind, (key, rng.choice(["1", "2", "a"]))
        if kind == "incrby":
            return kind, (key, rng.randint(-2, 2))
        if kind == "append":
            return kind, (key, rng.choice(["x", "1"]))
        if kind == "cas":
            return kind, (key, rng.choice([None, "1", "2"]), rng.choice(["1", "2"]))
        return kind, (key,)

    return draw


READ_KINDS = frozenset({"read", "get"})


def corrupt_read(operations: History, rng: random.Random, value: Value | None = None) -> History:
    """Change one OK read's output: to `value`, or to another value some operation answered."""
    reads = [
        operation
        for operation in operations
        if operation.outcome is Outcome.OK and operation.kind in READ_KINDS
    ]
    if not reads:
        return operations
    target = rng.choice(reads)
    if value is None:
        answers = sorted(
            {repr(operation.output): operation.output for operation in operations}.items()
        )
        others = [answer for text, answer in answers if answer != target.output]
        if not others:
            return operations
        value = rng.choice(others)
    return tuple(
        replace(operation, output=value) if operation is target else operation
        for operation in operations
    )


def brute_force_linearizable(operations: History, model: Model[Any]) -> bool:
    """Try every subset of the INFO operations and every order: small histories only."""
    ok = [operation for operation in operations if operation.outcome is Outcome.OK]
    info = [operation for operation in operations if operation.outcome is Outcome.INFO]
    assert len(ok) + len(info) <= 8
    for size in range(len(info) + 1):
        for chosen in itertools.combinations(info, size):
            for order in itertools.permutations([*ok, *chosen]):
                if _respects_real_time(order) and _model_allows(order, model):
                    return True
    return False


def _respects_real_time(order: Sequence[Operation]) -> bool:
    for earlier_position, earlier in enumerate(order):
        for later in order[earlier_position + 1 :]:
            completed = later.complete_key
            # An OK `later` that completed before `earlier` was invoked cannot come after
            # it; an INFO one is bound by nothing (its client merely gave up).
            bound = completed if later.outcome is Outcome.OK else None
            if bound is not None and bound < earlier.invoke_key:
                return False
    return True


def _model_allows(order: Sequence[Operation], model: Model[Any]) -> bool:
    state: Hashable = model.init()
    for operation in order:
        output = operation.output if operation.outcome is Outcome.OK else UNKNOWN
        legal, state = model.step(state, operation.kind, operation.input, output)
        if not legal:
            return False
    return True


seeds = st.integers(min_value=0, max_value=2**32 - 1)
