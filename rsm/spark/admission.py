"""How far a streaming micro-batch of `rsm-log` reads: admission control, pure.

The stream reader (`rsm/spark/sources.py`, `LogStreamReader.latestOffset`)
asks, on each trigger, for the end of the next micro-batch; offsets are log
indexes, the batch reads `[first, end)`.  `batch_end` decides it from:

* `readable`: one past the last index readable now (never below `first`);
* `max_commands` (`maxCommandsPerTrigger`): at most that many indexes;
* `min_commands` (`minCommandsPerTrigger`) and `max_delay_ms`
  (`maxTriggerDelay`): fewer than `min_commands` readable indexes make no
  batch (the end is `first`) until `max_delay_ms` passed since the last
  batch (`waited_ms`), after which whatever is readable is read;
* `everything`: Spark asked for all that is available (`ReadAllAvailable`,
  and every trigger of `Trigger.AvailableNow`, whose end the reader fixed
  when the query started): the minimum does not apply, so such a query
  reads to its end and stops instead of waiting for commands that may
  never come; the maximum still cuts it into batches.

Invariant: `first <= batch_end(...) <= readable`, and the result is
`first` (no batch) or covers at least one index.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admission:
    max_commands: int | None = None
    min_commands: int | None = None
    max_delay_ms: int | None = None
    """With `min_commands`: the longest wait for them (None: forever)."""


def batch_end(
    first: int, readable: int, admission: Admission, *, waited_ms: float, everything: bool
) -> int:
    """The end (excluded) of the micro-batch starting at `first` (see the module docstring)."""
    available = max(0, readable - first)
    minimum = admission.min_commands
    if (
        not everything
        and minimum is not None
        and available < minimum
        and (admission.max_delay_ms is None or waited_ms < admission.max_delay_ms)
    ):
        return first
    if admission.max_commands is not None:
        available = min(available, admission.max_commands)
    return first + available
