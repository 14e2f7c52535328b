"""What concurrent clients saw: operations with their invocation, completion and outcome.

A *history* is a tuple of `Operation`s, one per call a test client made.  An
operation has a process (the client that made it, an int or str label), a
`kind` ("write", "get", "incrby", ...) and an `input`, an invocation event, a
completion event or None, an `Outcome` and, when the outcome is OK, an
`output`.  Inputs and outputs are JSON-shaped `Value`s: None, bool, int, finite
float, str, or a tuple of values (lists are turned into tuples on the way in,
so a history compares equal to its JSON round trip).

Outcomes, and who decides them:

* OK: the system answered; `output` is its answer.  The operation took
  effect exactly once, at some instant between its invocation and completion.
* FAIL: the operation definitely did not take effect.  Only the system's
  contract can justify this: an error that guarantees "nothing was applied"
  (`NotLeader`, `Overloaded`, a refused connection before sending).  The test
  harness decides, by listing those error classes in `HistoryRecorder`'s
  `fail_on`.  A FAIL operation is dropped before checking.
* INFO: indeterminate (a timeout, a lost connection, `OutcomeUnknown`): the
  operation may have taken effect at any instant after its invocation, even
  after the client gave up, or never.  Every exception not listed in
  `fail_on` makes an INFO, and so does an operation still pending when the
  history is taken.  Calling an indeterminate result FAIL would let the
  checker reject correct systems; so when in doubt, INFO.

Real-time order: every event (invocation or completion) carries the recorder's
clock reading and a sequence number the recorder draws from one counter, and
events are ordered by `(time, seq)`.  The recorder never lets time run
backwards (a reading below the previous one is raised to it), so the order is
the order in which the recorder saw the events, and `time` is what a human
reads in an explanation.  Operation A precedes operation B when A completed
before B was invoked; only OK operations have a completion that bounds them.
No two events of a history share a `(time, seq)` key.

JSON lines format (`history_to_jsonl` / `history_from_jsonl`): one UTF-8 line
per operation, in `id` order, each a JSON object with exactly these members:

    {"id": 0, "process": "c1", "kind": "write", "input": 5, "outcome": "ok",
     "output": null, "invoke_time": 0.5, "invoke_seq": 0,
     "complete_time": 0.75, "complete_seq": 3}

`id` is unique in the history (the recorder numbers operations densely in
invocation order); `outcome` is "ok", "fail" or "info"; `output` is null
unless the outcome is "ok"; `complete_time` and `complete_seq` are both null
or both set; tuples are JSON arrays.  Empty lines are ignored.  Any other shape
is refused with `HistoryError` naming the line.

Invariants: every `Operation` holds frozen values and satisfies
`validate_history`'s per-operation rules when built by the recorder or the
decoder; the recorder keeps at most `limits.history_operations_max`
operations.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, TypeAlias

from rsm import limits
from rsm.errors import HistoryError

Value: TypeAlias = "bool | int | float | str | tuple[Value, ...] | None"
Process: TypeAlias = "int | str"

_FIELDS: Final = (
    "id",
    "process",
    "kind",
    "input",
    "outcome",
    "output",
    "invoke_time",
    "invoke_seq",
    "complete_time",
    "complete_seq",
)


class Outcome(enum.Enum):
    """How an operation ended, as far as its client knows (see the module docstring)."""

    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Operation:
    """One call of one client: what it asked, when, and what it learned."""

    id: int
    process: Process
    kind: str
    input: Value
    outcome: Outcome
    output: Value
    invoke_time: float
    invoke_seq: int
    complete_time: float | None
    complete_seq: int | None

    @property
    def invoke_key(self) -> tuple[float, int]:
        """The invocation's place in real-time order."""
        return (self.invoke_time, self.invoke_seq)

    @property
    def complete_key(self) -> tuple[float, int] | None:
        """The completion's place in real-time order, or None when it never completed."""
        if self.complete_time is None or self.complete_seq is None:
            return None
        return (self.complete_time, self.complete_seq)

    def call_text(self) -> str:
        """`kind(arguments)`, the way a developer writes the call."""
        if self.input is None:
            arguments = ""
        elif isinstance(self.input, tuple):
            arguments = ", ".join(repr(item) for item in self.input)
        else:
            arguments = repr(self.input)
        return f"{self.kind}({arguments})"

    def describe(self) -> str:
        """One line for a human: id, process, call, result and interval."""
        if self.outcome is Outcome.OK:
            result = f"-> {self.output!r}"
        else:
            result = f"-> ? ({self.outcome.value})"
        end = "..." if self.complete_time is None else repr(self.complete_time)
        return (
            f"#{self.id} {self.process} {self.call_text()} {result} [{self.invoke_time!r}, {end}]"
        )


History: TypeAlias = tuple[Operation, ...]


def freeze_value(value: object) -> Value:
    """`value` as a `Value`: lists become tuples; anything not JSON-shaped is refused."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        # NaN and infinities have no JSON form, and NaN is not equal to itself,
        # so a model could never match it.
        if not math.isfinite(value):
            raise HistoryError(f"value {value!r} is not a finite number")
        return value
    if isinstance(value, list | tuple):
        return tuple(freeze_value(item) for item in value)
    raise HistoryError(f"value {value!r} of type {type(value).__name__} cannot be recorded")


def validate_history(history: Iterable[Operation]) -> None:
    """Raise `HistoryError` unless the operations make a well-formed history.

    Rules: ids are unique; OK and FAIL operations have a completion, INFO ones
    may; only OK operations have an output; a completion comes after its
    invocation; no two events share a `(time, seq)` key.
    """
    ids: set[int] = set()
    keys: dict[tuple[float, int], int] = {}
    for operation in history:
        if operation.id in ids:
            raise HistoryError(f"operation id {operation.id} appears twice")
        ids.add(operation.id)
        complete_key = operation.complete_key
        if (operation.complete_time is None) != (operation.complete_seq is None):
            raise HistoryError(f"#{operation.id}: completion time and sequence must come together")
        if complete_key is None and operation.outcome is not Outcome.INFO:
            raise HistoryError(f"#{operation.id}: a {operation.outcome.value} needs a completion")
        if operation.outcome is not Outcome.OK and operation.output is not None:
            raise HistoryError(f"#{operation.id}: only an ok operation has an output")
        if complete_key is not None and complete_key <= operation.invoke_key:
            raise HistoryError(f"#{operation.id}: completed before it was invoked")
        for key in (operation.invoke_key, complete_key):
            if key is None:
                continue
            if key in keys:
                raise HistoryError(
                    f"#{operation.id} and #{keys[key]} have an event at the same time and seq {key}"
                )
            keys[key] = operation.id


# --- recording ------------------------------------------------------------------------------------


class Call:
    """One operation in flight: a context manager that records how it ends.

    Inside the `with` block the client calls exactly one of `ok(output)`,
    `fail()` or `info()`.  An exception leaving the block records FAIL when it
    is an instance of the recorder's `fail_on` classes and INFO otherwise
    (unless the block already recorded an outcome); it then propagates unless
    it is an instance of the recorder's `suppress` classes.  Leaving the block
    normally without an outcome is a bug in the test and fails an assertion.
    """

    __slots__ = ("_recorder", "_id", "_process", "_kind", "_input", "_invoke", "_done")

    def __init__(
        self,
        recorder: HistoryRecorder,
        *,
        operation_id: int,
        process: Process,
        kind: str,
        input_value: Value,
        invoke: tuple[float, int],
    ) -> None:
        self._recorder = recorder
        self._id = operation_id
        self._process = process
        self._kind = kind
        self._input = input_value
        self._invoke = invoke
        self._done = False

    @property
    def id(self) -> int:
        return self._id

    def ok(self, output: object = None) -> None:
        """The system answered `output`: the operation took effect once."""
        self._finish(Outcome.OK, freeze_value(output))

    def fail(self) -> None:
        """The operation definitely did not take effect (the system guarantees it)."""
        self._finish(Outcome.FAIL, None)

    def info(self) -> None:
        """The outcome is unknown: it may take effect later, or never."""
        self._finish(Outcome.INFO, None)

    def pending_operation(self) -> Operation:
        """The operation as it stands while still in flight: INFO, no completion."""
        assert not self._done
        return self._operation(Outcome.INFO, None, None)

    def _finish(self, outcome: Outcome, output: Value) -> None:
        assert not self._done, f"operation #{self._id} already has an outcome"
        self._done = True
        complete = self._recorder._next_event()
        self._recorder._completed(self._operation(outcome, output, complete))

    def _operation(
        self, outcome: Outcome, output: Value, complete: tuple[float, int] | None
    ) -> Operation:
        return Operation(
            id=self._id,
            process=self._process,
            kind=self._kind,
            input=self._input,
            outcome=outcome,
            output=output,
            invoke_time=self._invoke[0],
            invoke_seq=self._invoke[1],
            complete_time=None if complete is None else complete[0],
            complete_seq=None if complete is None else complete[1],
        )

    def __enter__(self) -> Call:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if exc is None:
            assert self._done, f"operation #{self._id} ended without ok(), fail() or info()"
            return False
        if not self._done:
            if isinstance(exc, self._recorder.fail_on):
                self.fail()
            else:
                self.info()
        return isinstance(exc, self._recorder.suppress)


class HistoryRecorder:
    """Records the operations of concurrent test clients into a `History`.

    `clock` returns the current time in any unit (`anyio.current_time` in real
    tests, the simulation's virtual clock there); it is only read, never
    waited on.  Use::

        with recorder.invoke("c1", "write", 5) as call:
            await client.write(5)
            call.ok()

    The recorder is meant for one event loop (one thread): calls are recorded
    in the order the loop runs them, and that order is the history's order.
    """

    __slots__ = (
        "fail_on",
        "suppress",
        "_clock",
        "_operations_max",
        "_last_time",
        "_next_seq",
        "_next_id",
        "_pending",
        "_completed_operations",
    )

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        fail_on: tuple[type[BaseException], ...] = (),
        suppress: tuple[type[BaseException], ...] = (),
        operations_max: int = limits.history_operations_max,
    ) -> None:
        assert operations_max >= 1
        self.fail_on = fail_on
        self.suppress = suppress
        self._clock = clock
        self._operations_max = operations_max
        self._last_time: float | None = None
        self._next_seq = 0
        self._next_id = 0
        self._pending: dict[int, Call] = {}
        self._completed_operations: list[Operation] = []

    def __len__(self) -> int:
        return self._next_id

    def invoke(self, process: Process, kind: str, input_value: object = None) -> Call:
        """Record that `process` invokes `kind(input_value)` now; returns the call to complete."""
        if self._next_id >= self._operations_max:
            raise HistoryError(f"the recorder is full ({self._operations_max} operations)")
        frozen = freeze_value(input_value)
        call = Call(
            self,
            operation_id=self._next_id,
            process=process,
            kind=kind,
            input_value=frozen,
            invoke=self._next_event(),
        )
        self._pending[self._next_id] = call
        self._next_id += 1
        return call

    def history(self) -> History:
        """Every operation so far, in invocation order; those still in flight count as INFO."""
        operations = self._completed_operations + [
            call.pending_operation() for call in self._pending.values()
        ]
        operations.sort(key=lambda operation: operation.id)
        return tuple(operations)

    def _next_event(self) -> tuple[float, int]:
        now = self._clock()
        # A clock that steps back must not reorder events the recorder saw in order.
        if self._last_time is not None and now < self._last_time:
            now = self._last_time
        self._last_time = now
        seq = self._next_seq
        self._next_seq += 1
        return (now, seq)

    def _completed(self, operation: Operation) -> None:
        del self._pending[operation.id]
        self._completed_operations.append(operation)


# --- JSON lines -----------------------------------------------------------------------------------


def history_to_jsonl(history: Iterable[Operation]) -> str:
    """The history as JSON lines (format in the module docstring), one line per operation."""
    lines = []
    for operation in sorted(history, key=lambda item: item.id):
        record = {
            "id": operation.id,
            "process": operation.process,
            "kind": operation.kind,
            "input": operation.input,
            "outcome": operation.outcome.value,
            "output": operation.output,
            "invoke_time": operation.invoke_time,
            "invoke_seq": operation.invoke_seq,
            "complete_time": operation.complete_time,
            "complete_seq": operation.complete_seq,
        }
        lines.append(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
    return "".join(lines)


def history_from_jsonl(text: str) -> History:
    """Decode JSON lines written by `history_to_jsonl`; refuse anything else with `HistoryError`."""
    operations = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            operations.append(_decode_line(line))
        except (HistoryError, ValueError, TypeError) as error:
            raise HistoryError(f"history line {number}: {error}") from error
    history = tuple(operations)
    validate_history(history)
    return history


def _decode_line(line: str) -> Operation:
    record = json.loads(line)
    if not isinstance(record, dict) or tuple(sorted(record)) != tuple(sorted(_FIELDS)):
        raise HistoryError(f"expected an object with members {', '.join(_FIELDS)}")
    process = record["process"]
    if isinstance(process, bool) or not isinstance(process, int | str):
        raise HistoryError(f"process {process!r} is neither an int nor a str")
    if not isinstance(record["kind"], str):
        raise HistoryError(f"kind {record['kind']!r} is not a str")
    return Operation(
        id=_integer(record["id"], "id"),
        process=process,
        kind=record["kind"],
        input=freeze_value(record["input"]),
        outcome=Outcome(record["outcome"]),
        output=freeze_value(record["output"]),
        invoke_time=_number(record["invoke_time"], "invoke_time"),
        invoke_seq=_integer(record["invoke_seq"], "invoke_seq"),
        complete_time=(
            None
            if record["complete_time"] is None
            else _number(record["complete_time"], "complete_time")
        ),
        complete_seq=(
            None
            if record["complete_seq"] is None
            else _integer(record["complete_seq"], "complete_seq")
        ),
    )


def _integer(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HistoryError(f"{name} {value!r} is not an integer")
    return value


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HistoryError(f"{name} {value!r} is not a finite number")
    return value
