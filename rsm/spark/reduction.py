"""What a Spark reducer (`StateMachine.spark_reducer`) is given and gives back, and its tools.

A reducer is a function `reduce(request: ReduceRequest) -> Reduced`.  It
runs on the driver, plans its Spark work over `request.log`, and returns a
fresh instance of the class holding exactly the state replay reaches at
`request.last_index`, with the outcomes the session table keeps
(`request.wanted`).  The framework does the rest: the session table,
writing the snapshot, registering it (rsm/spark/bulk_snapshot.py).

Tools for reducers, usable on executors:

* `apply_logged` applies one logged command to a machine as a replica does
  (`rsm.core.commands.apply_command`), with the command's logged index,
  time and epoch as its context.  A reducer has no batch seed, so the
  context has no `random`: a command that draws from it raises
  `NotReducible` instead of recording a failure no replica recorded.
* `byte_arguments` turns the `arguments` column of an application whose
  arguments are all byte strings back into them (the column writes a byte
  string as text when it is UTF-8, else as `{"hex": ...}`; rsm/spark/rows.py).

Nothing here imports Spark, so an application's module naming its reducer
loads without it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rsm.core.commands import apply_command
from rsm.core.sessions import Outcome
from rsm.core.state_machine import Context, StateMachine
from rsm.errors import ContextUnavailable, InvalidConfig, NotReducible
from rsm.machines import load_named

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True, slots=True)
class ReduceRequest:
    """What a reducer reduces."""

    log: DataFrame
    """The `rsm-log` rows of indexes 1 .. `last_index` (docs/spark.md has the columns)."""
    last_index: int
    skipped: frozenset[int]
    """Indexes of commands the session table did not let through (a duplicate, a stale or
    expired session's): a replica applies nothing for them, and neither may the reducer."""
    wanted: frozenset[int]
    """Indexes of the commands whose outcomes the session table keeps: `Reduced.outcomes`
    must hold each one's outcome, as applying it gave it."""


@dataclass(frozen=True, slots=True)
class Reduced:
    machine: StateMachine
    """A fresh instance holding the state after `last_index`."""
    outcomes: Mapping[int, Outcome]
    """Index -> outcome, for every index of `ReduceRequest.wanted`."""


Reducer = Callable[[ReduceRequest], Reduced]


def load_reducer(machine_class: type[StateMachine]) -> Reducer:
    """The function `machine_class.spark_reducer` names; `InvalidConfig` when there is none."""
    target = machine_class.spark_reducer
    name = f"{machine_class.__module__}:{machine_class.__qualname__}"
    if target is None:
        raise InvalidConfig(f"{name} declares no Spark reducer (StateMachine.spark_reducer)")
    try:
        function = load_named(target, "MODULE:FUNCTION")
    except InvalidConfig as error:
        raise InvalidConfig(f"{name}.spark_reducer: {error}") from None
    if not callable(function):
        raise InvalidConfig(f"{name}.spark_reducer: {target} is not a function")
    reducer: Reducer = function
    return reducer


def apply_logged(
    machine: StateMachine,
    command: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    index: int,
    time_ms: int,
    epoch: int,
) -> Outcome:
    """Apply logged command `command` at `index` (see the module docstring)."""
    outcome = apply_command(machine, command, args, kwargs, Context(index, time_ms, epoch, None))
    if outcome.detail == ContextUnavailable.__name__:
        raise NotReducible(
            f"index {index}: {command} reads its context's randomness, which a reducer does "
            "not have"
        )
    return outcome


def byte_arguments(arguments: str, index: int) -> list[bytes]:
    """The byte-string arguments of the `arguments` column `arguments` of `index`."""
    value = json.loads(arguments)
    if not isinstance(value, dict) or value.keys() != {"args"}:
        raise NotReducible(f"index {index}: arguments {arguments[:80]!r} are not positional only")
    decoded: list[bytes] = []
    for arg in value["args"]:
        if isinstance(arg, str):
            decoded.append(arg.encode())
        elif isinstance(arg, dict) and arg.keys() == {"hex"} and isinstance(arg["hex"], str):
            decoded.append(bytes.fromhex(arg["hex"]))
        else:
            raise NotReducible(f"index {index}: argument {arg!r:.40} is not a byte string")
    return decoded
