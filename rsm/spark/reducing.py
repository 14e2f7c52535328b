"""The driver's steps of a bulk snapshot between the tasks' passes and the snapshot written.

Pure: `reduce_tasks` is given `run`, which runs tasks and gives back their
passes (rsm/spark/part_pass.py) in order: on Spark executors in
`rsm/spark/bulk_snapshot.py`, in process in tests.  Steps:

1. every task passes once, leaving nothing out and keeping nothing;
2. the session pass over their session columns in index order, from the
   starting table if any, decides what replicas apply and the table;
3. the tasks holding a command the table did not let through pass again,
   leaving those out (a summary depends only on its own task's commands);
4. the reducer combines the summaries; when it answers `Rerun(keep)`,
   every task passes again keeping `keep` and it combines again (asking
   for the same `keep` twice is refused: it would never end).

Task `n` is the n-th of `count`; `on_step` is called with each step's name
after it: "read", "sessions", "rerun", "combine".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rsm.config import ReplicaConfig
from rsm.core.sessions import SessionTable
from rsm.core.state_machine import StateMachine
from rsm.errors import NotReducible
from rsm.spark.part_pass import PartPass, holds_any
from rsm.spark.reduction import CombineRequest, Reduced, SparkReducer
from rsm.spark.session_pass import SessionPass, session_pass


@dataclass(frozen=True, slots=True)
class TaskRun:
    """Which task to run, leaving out `skipped` and keeping `keep` (`PartCommands.keep`)."""

    number: int
    skipped: frozenset[int]
    keep: frozenset[Any]


@dataclass(frozen=True, slots=True)
class Reduction:
    passes: list[PartPass]
    """Each task's last pass, in order."""
    passed: SessionPass
    reduced: Reduced
    reruns: int
    """Tasks run again (step 3, then step 4 for every task each time)."""


def reduce_tasks(
    run: Callable[[Sequence[TaskRun]], list[PartPass]],
    count: int,
    *,
    reducer: SparkReducer,
    config: ReplicaConfig,
    last_index: int,
    start: tuple[StateMachine, SessionTable] | None,
    on_step: Callable[[str], None],
    machine_class: type[StateMachine] | None = None,
    settings: Any = None,
) -> Reduction:
    """Steps 1 to 4 (see the module docstring); `machine_class` and `settings` go to the
    reducer's `combine` (`CombineRequest`)."""
    passes = run([TaskRun(number, frozenset(), frozenset()) for number in range(count)])
    on_step("read")
    passed = session_pass(
        itertools.chain.from_iterable(part.sessions.rows() for part in passes),
        config,
        None if start is None else start[1],
    )
    on_step("sessions")
    skipped = passed.skipped
    rerun = [number for number, part in enumerate(passes) if holds_any(part, skipped)]
    if rerun:
        again = run([TaskRun(number, skipped, frozenset()) for number in rerun])
        for number, part in zip(rerun, again, strict=True):
            passes[number] = part
    on_step("rerun")
    reruns = len(rerun)
    keep: frozenset[Any] = frozenset()
    while True:
        refusal = next((part.refusal for part in passes if part.refusal is not None), None)
        if refusal is not None:
            raise NotReducible(refusal)
        result = reducer.combine(
            CombineRequest(
                [part.summary for part in passes],
                last_index,
                passed.wanted,
                None if start is None else start[0],
                [part.sessions.clock(skipped) for part in passes],
                keep,
                machine_class,
                settings,
            )
        )
        if isinstance(result, Reduced):
            break
        if result.keep == keep:
            raise NotReducible("the reducer asked the tasks again to keep what they kept")
        keep = result.keep
        passes = run([TaskRun(number, skipped, keep) for number in range(count)])
        reruns += count
    on_step("combine")
    return Reduction(passes, passed, result, reruns)
