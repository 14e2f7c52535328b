"""What a Spark reducer (`StateMachine.spark_reducer`) is given and gives back, and its tools.

A reducer is a `SparkReducer`, two functions:

* `summarize(part: PartCommands) -> summary`, on executors: one Spark task's
  share of the log, its decoded batches (`PartCommands.commands()` walks
  the commands to reduce, in index order), made into a
  summary (any picklable value) that says what they do to the state, as
  small as the reducer can make it (a key-value store keeps one record per
  key its commands only set or delete);
* `combine(request: CombineRequest) -> Reduced`, on the driver: every
  task's summary in log order, applied to `request.start` (a snapshot's
  state, or None: the empty state), made into a fresh instance of the
  class holding exactly the state replay reaches at `request.last_index`,
  with the outcomes the session table keeps (`request.wanted`); or a
  `Rerun`, when the summaries lack something only the whole log shows
  (what to keep), to have every task summarized again.

A reducer whose results depend on the machine's settings (a key-value
store's bounds on keys and values) also gives `settings(machine)`: it runs on
the driver with the machine reduced for (the starting snapshot's restored
state, else a fresh instance of the class, built with its defaults), and
what it returns reaches every `summarize` and `combine` as `settings`.

The framework does the rest (rsm/spark/bulk_snapshot.py): reading and
decoding, the session table, leaving out the commands it did not let
through, writing the snapshot, registering it.

`PartCommands.open` is what lets a summary stay small yet give the kept
outcomes: the indexes of the part's commands whose outcome the session
table may still keep at the end, because no later command of the same
client in the part acknowledged it (a later acknowledgement drops it for
good).  Every index of `CombineRequest.wanted` is open in its part.

Tools, usable on executors and on the driver:

* `apply_logged` applies one logged command to a machine as a replica does
  (`rsm.core.commands.apply_command`), with the command's logged index,
  time and epoch as its context.  A reducer has no batch seed, so the
  context has no `random`: a command that draws from it raises
  `NotReducible` instead of recording a failure no replica recorded.

A summary or combine that cannot be exact raises `NotReducible` naming the
index and why.  Nothing here imports Spark, so an application's module
naming its reducer loads without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsm.core.commands import apply_command
from rsm.core.log_format import Batch, CommandItem
from rsm.core.sessions import Outcome
from rsm.core.state_machine import Context, StateMachine
from rsm.errors import ContextUnavailable, InvalidConfig, NotReducible
from rsm.machines import load_named


@dataclass(frozen=True, slots=True)
class LoggedCommand:
    """One logged command, with where and when it was logged."""

    index: int
    time_ms: int
    """Its batch's timestamp (the leader's clock)."""
    epoch: int
    name: str
    """The command key ("name" or "name@version")."""
    args: list[Any]
    kwargs: dict[str, Any]

    @classmethod
    def of(cls, index: int, batch: Batch, item: CommandItem) -> LoggedCommand:
        """Command `item` of `batch`, logged at `index`."""
        return cls(index, batch.timestamp_ms, batch.epoch, item.name, item.args, item.kwargs)


@dataclass(frozen=True, slots=True)
class PartCommands:
    """One Spark task's share of the log (see the module docstring): the commands of indexes
    `[start, end)` of `batches` that the session table lets through."""

    batches: Sequence[Batch]
    """Decoded, in log order; the first and last may hold items outside `[start, end)`."""
    start: int
    end: int
    skipped: frozenset[int]
    """Indexes of commands the session table did not let through: a replica applies nothing
    for them, and neither may the reducer."""
    open: frozenset[int]
    keep: frozenset[Any] = frozenset()
    """What the reducer's `combine` asked the tasks to keep (`Rerun.keep`); empty at first."""
    settings: Any = None
    """What the reducer's `settings` took from the machine reduced for (None without it)."""

    def commands(self) -> Iterator[tuple[int, Batch, CommandItem]]:
        """`(index, its batch, the command)` of each command, in index order (leader-start
        markers and `skipped` left out)."""
        start, end, skipped = self.start, self.end, self.skipped
        for batch in self.batches:
            index = batch.first_index
            for item in batch.items:
                if start <= index < end and type(item) is CommandItem and index not in skipped:
                    yield index, batch, item
                index += 1


@dataclass(frozen=True, slots=True)
class CombineRequest:
    summaries: Sequence[Any]
    """One per task, in log order."""
    last_index: int
    wanted: frozenset[int]
    """Indexes of the commands whose outcomes the session table keeps: `Reduced.outcomes`
    must hold each one's outcome, as applying it gave it."""
    start: StateMachine | None = None
    """The state the summaries apply to: a snapshot's, restored, at the index before the
    first summarized (None: the empty state, from index 1)."""
    clocks: Sequence[Iterable[tuple[int, int]]] = ()
    """One per task, in log order: `(index, time_ms)` of every command a replica applies
    (markers and commands the session table did not let through left out), in index
    order."""
    keep: frozenset[Any] = frozenset()
    """What the summaries were made keeping (`Rerun.keep`)."""
    machine_class: type[StateMachine] | None = None
    """The class reduced for: `Reduced.machine` is an instance of exactly it."""
    settings: Any = None
    """As `PartCommands.settings`."""


@dataclass(frozen=True, slots=True)
class Rerun:
    """What `combine` returns to have every task summarized again, keeping `keep` (given to
    `summarize` as `PartCommands.keep`, to `combine` as `CombineRequest.keep`); a combine
    given the same `keep` again must not return it."""

    keep: frozenset[Any]


@dataclass(frozen=True, slots=True)
class Reduced:
    machine: StateMachine
    """A fresh instance holding the state after `last_index`."""
    outcomes: Mapping[int, Outcome]
    """Index -> outcome, for every index of `CombineRequest.wanted`."""


@dataclass(frozen=True, slots=True)
class SparkReducer:
    summarize: Callable[[PartCommands], Any]
    combine: Callable[[CombineRequest], Reduced | Rerun]
    settings: Callable[[StateMachine], Any] | None = None
    """On the driver, before any task: what the reducer needs of the machine it reduces for
    (the starting snapshot's restored state, else a fresh instance of the class), a
    picklable value given to every `summarize` and `combine` as `settings`: an
    application's settings that decide results (a bound on values, say)."""


def load_reducer(machine_class: type[StateMachine]) -> SparkReducer:
    """The `SparkReducer` `machine_class.spark_reducer` names; `InvalidConfig` when there is
    none."""
    target = machine_class.spark_reducer
    name = f"{machine_class.__module__}:{machine_class.__qualname__}"
    if target is None:
        raise InvalidConfig(f"{name} declares no Spark reducer (StateMachine.spark_reducer)")
    return load_named_reducer(target, name)


def load_named_reducer(target: str, owner: str) -> SparkReducer:
    """The `SparkReducer` at `target` ("module:name"), declared by `owner` (for messages)."""
    try:
        reducer = load_named(target, "MODULE:NAME")
    except InvalidConfig as error:
        raise InvalidConfig(f"{owner}.spark_reducer: {error}") from None
    if not isinstance(reducer, SparkReducer):
        raise InvalidConfig(f"{owner}.spark_reducer: {target} is not an rsm.spark.SparkReducer")
    return reducer


def apply_logged(machine: StateMachine, command: LoggedCommand) -> Outcome:
    """Apply logged `command` (see the module docstring)."""
    index = command.index
    outcome = apply_command(
        machine,
        command.name,
        command.args,
        command.kwargs,
        Context(index, command.time_ms, command.epoch, None),
    )
    if outcome.detail == ContextUnavailable.__name__:
        raise NotReducible(
            f"index {index}: {command.name} reads its context's randomness, which a reducer "
            "does not have"
        )
    return outcome
