"""Sequential specifications: what each operation answers when operations run one at a time.

A model is a small pure object with `init() -> state` and
`step(state, kind, input, output) -> (legal, new_state)`: `legal` says whether
`output` is an answer the object may give to `kind(input)` in `state`, and
`new_state` is the state after it.  When the output is not known (an INFO
operation) the checker passes `UNKNOWN`, and a model must accept any answer
its operation could give.  States must be hashable and compare by value: the
checker memoizes on them.  `is_read_only(kind)` says an operation never
changes the state, which lets the checker drop indeterminate reads (they can
neither explain nor spoil anything).

Every model here is deterministic (`DeterministicModel`): `apply(state, kind,
input)` computes the one output and next state, and `step` compares.  A
deterministic model also lets a failure explanation say what the answer
should have been.  A nondeterministic specification can implement the `Model`
protocol directly.

Models:

* `Register`: read() -> value; write(v) -> None; cas((expected, new)) -> bool.
* `Counter`: add(n) -> the new value; read() -> value.
* `KvModel`: one key of the key-value store, Redis string semantics.  Every
  input is a tuple whose first item is the key (`kv_key` reads it), so a
  history of many keys can be split per key.  The state is the key's value
  (a str) or None when it does not exist.  Operations and their answers:
  get(k) -> value or None; set(k, v) -> "OK"; del(k) -> 1 or 0 (keys
  removed); exists(k) -> 1 or 0; incr(k), decr(k), incrby(k, n),
  decrby(k, n) -> the new value as an int, or `KV_ERROR` when the value is not
  a decimal 64-bit integer or the result would leave the 64-bit range (the
  value is then unchanged); append(k, s) -> the new length in UTF-8 bytes;
  cas(k, expected, new) -> True when the value equalled `expected` (None:
  the key did not exist) and is now `new` (None: deleted), else False.
  Pass `operations=` to add or replace operations.
* `Keyed`: independent copies of a model, one per key (`input[0]`): the
  whole-history counterpart of checking key by key.

Invalid operations (an unknown kind, arguments of the wrong shape) raise
`HistoryError`: they are bugs in the test, not behaviour to judge.
"""

from __future__ import annotations

import enum
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from typing import Final, Generic, Protocol, TypeAlias, TypeVar

from rsm.errors import HistoryError
from rsm.testing.history import Operation, Value

S = TypeVar("S", bound=Hashable)


class Unknown(enum.Enum):
    """The type of `UNKNOWN`, the output of an operation whose answer nobody saw."""

    UNKNOWN = "unknown"

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = Unknown.UNKNOWN

Output: TypeAlias = "Value | Unknown"


class Model(Protocol[S]):
    """A sequential specification the linearizability checker can use."""

    def init(self) -> S:
        """The state before any operation."""
        ...

    def step(self, state: S, kind: str, input_value: Value, output: Output) -> tuple[bool, S]:
        """Whether `kind(input_value)` may answer `output` in `state`, and the state after it."""
        ...

    def is_read_only(self, kind: str) -> bool:
        """True when `kind` never changes the state, whatever its input."""
        ...


class DeterministicModel(ABC, Generic[S]):
    """A model whose every operation has exactly one answer and one next state."""

    read_only_kinds: frozenset[str] = frozenset()

    @abstractmethod
    def init(self) -> S:
        """The state before any operation."""

    @abstractmethod
    def apply(self, state: S, kind: str, input_value: Value) -> tuple[Value, S]:
        """The answer of `kind(input_value)` in `state`, and the state after it."""

    def step(self, state: S, kind: str, input_value: Value, output: Output) -> tuple[bool, S]:
        answer, after = self.apply(state, kind, input_value)
        if output is UNKNOWN or answer == output:
            return True, after
        return False, state

    def is_read_only(self, kind: str) -> bool:
        return kind in self.read_only_kinds


def _unknown_kind(model: object, kind: str) -> HistoryError:
    return HistoryError(f"{type(model).__name__} has no operation {kind!r}")


class Register(DeterministicModel[Value]):
    """A single read/write register with compare-and-set."""

    read_only_kinds = frozenset({"read"})

    def __init__(self, initial: Value = None) -> None:
        self._initial = initial

    def init(self) -> Value:
        return self._initial

    def apply(self, state: Value, kind: str, input_value: Value) -> tuple[Value, Value]:
        if kind == "read":
            return state, state
        if kind == "write":
            return None, input_value
        if kind == "cas":
            if not isinstance(input_value, tuple) or len(input_value) != 2:
                raise HistoryError(f"cas takes (expected, new), not {input_value!r}")
            expected, new = input_value
            if state == expected:
                return True, new
            return False, state
        raise _unknown_kind(self, kind)


class Counter(DeterministicModel[int]):
    """An integer counter: add(n) answers the value after adding."""

    read_only_kinds = frozenset({"read"})

    def __init__(self, initial: int = 0) -> None:
        self._initial = initial

    def init(self) -> int:
        return self._initial

    def apply(self, state: int, kind: str, input_value: Value) -> tuple[Value, int]:
        if kind == "read":
            return state, state
        if kind == "add":
            if isinstance(input_value, bool) or not isinstance(input_value, int):
                raise HistoryError(f"add takes an int, not {input_value!r}")
            return state + input_value, state + input_value
        raise _unknown_kind(self, kind)


# --- the key-value store --------------------------------------------------------------------------

KV_ERROR: Final = "error"
"""The answer of an INCR-family operation that Redis refuses (not an integer, or overflow).

Unambiguous because those operations otherwise answer ints."""

KvValue: TypeAlias = "str | None"
KvOperation: TypeAlias = "Callable[[KvValue, tuple[Value, ...]], tuple[Value, KvValue]]"

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
# Redis accepts an optional minus sign and decimal digits without leading
# zeros, spaces or a plus sign ("-0" is refused too), in the 64-bit range.
_REDIS_INTEGER: Final = re.compile(r"-?(0|[1-9][0-9]*)")


def _redis_integer(value: str) -> int | None:
    # 20 characters hold every 64-bit integer; the check also spares int() huge strings.
    if len(value) > 20 or value == "-0" or _REDIS_INTEGER.fullmatch(value) is None:
        return None
    number = int(value)
    if not _INT64_MIN <= number <= _INT64_MAX:
        return None
    return number


def _arguments(kind: str, arguments: tuple[Value, ...], count: int) -> tuple[Value, ...]:
    if len(arguments) != count:
        raise HistoryError(f"{kind} takes {count} argument(s) after the key, not {arguments!r}")
    return arguments


def _text(kind: str, value: Value) -> str:
    if not isinstance(value, str):
        raise HistoryError(f"{kind} takes a str value, not {value!r}")
    return value


def _optional_text(kind: str, value: Value) -> str | None:
    return None if value is None else _text(kind, value)


def _kv_get(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    _arguments("get", arguments, 0)
    return state, state


def _kv_set(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    (value,) = _arguments("set", arguments, 1)
    return "OK", _text("set", value)


def _kv_del(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    _arguments("del", arguments, 0)
    return (0 if state is None else 1), None


def _kv_exists(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    _arguments("exists", arguments, 0)
    return (0 if state is None else 1), state


def _incrby(state: KvValue, increment: Value) -> tuple[Value, KvValue]:
    if isinstance(increment, bool) or not isinstance(increment, int):
        raise HistoryError(f"incrby takes an int increment, not {increment!r}")
    current = 0 if state is None else _redis_integer(state)
    if current is None or not _INT64_MIN <= increment <= _INT64_MAX:
        return KV_ERROR, state
    result = current + increment
    if not _INT64_MIN <= result <= _INT64_MAX:
        return KV_ERROR, state
    return result, str(result)


def _kv_incr(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    _arguments("incr", arguments, 0)
    return _incrby(state, 1)


def _kv_decr(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    _arguments("decr", arguments, 0)
    return _incrby(state, -1)


def _kv_incrby(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    (increment,) = _arguments("incrby", arguments, 1)
    return _incrby(state, increment)


def _kv_decrby(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    (decrement,) = _arguments("decrby", arguments, 1)
    if isinstance(decrement, bool) or not isinstance(decrement, int):
        raise HistoryError(f"decrby takes an int decrement, not {decrement!r}")
    return _incrby(state, -decrement)


def _kv_append(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    (suffix,) = _arguments("append", arguments, 1)
    value = (state or "") + _text("append", suffix)
    # Redis counts bytes, and the store keeps strings as UTF-8.
    return len(value.encode()), value


def _kv_cas(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
    expected, new = _arguments("cas", arguments, 2)
    if state == _optional_text("cas", expected):
        return True, _optional_text("cas", new)
    return False, state


KV_OPERATIONS: Final[Mapping[str, KvOperation]] = {
    "get": _kv_get,
    "set": _kv_set,
    "del": _kv_del,
    "exists": _kv_exists,
    "incr": _kv_incr,
    "decr": _kv_decr,
    "incrby": _kv_incrby,
    "decrby": _kv_decrby,
    "append": _kv_append,
    "cas": _kv_cas,
}
"""The key-value operations `KvModel` knows by default; each answers (output, new value)."""

KV_READ_ONLY: Final = frozenset({"get", "exists"})


def kv_key(operation: Operation) -> Value:
    """The key a key-value operation touches: the first item of its input."""
    if not isinstance(operation.input, tuple) or not operation.input:
        raise HistoryError(f"#{operation.id}: a key-value input starts with the key")
    return operation.input[0]


class KvModel(DeterministicModel[KvValue]):
    """One key of the key-value store (see the module docstring for the operations)."""

    def __init__(
        self,
        operations: Mapping[str, KvOperation] = KV_OPERATIONS,
        read_only_kinds: frozenset[str] = KV_READ_ONLY,
    ) -> None:
        self._operations = operations
        self.read_only_kinds = read_only_kinds

    def init(self) -> KvValue:
        return None

    def apply(self, state: KvValue, kind: str, input_value: Value) -> tuple[Value, KvValue]:
        operation = self._operations.get(kind)
        if operation is None:
            raise _unknown_kind(self, kind)
        if not isinstance(input_value, tuple) or not input_value:
            raise HistoryError(f"{kind} input must start with the key, not {input_value!r}")
        return operation(state, input_value[1:])


class Keyed(DeterministicModel[frozenset[tuple[Value, S]]]):
    """One independent copy of `model` per key, the key being `input[0]`.

    The state holds only keys whose state differs from `model.init()`, so
    equal contents give equal states.
    """

    def __init__(self, model: DeterministicModel[S]) -> None:
        self._model = model
        self._initial = model.init()
        self.read_only_kinds = model.read_only_kinds

    def init(self) -> frozenset[tuple[Value, S]]:
        return frozenset()

    def apply(
        self, state: frozenset[tuple[Value, S]], kind: str, input_value: Value
    ) -> tuple[Value, frozenset[tuple[Value, S]]]:
        if not isinstance(input_value, tuple) or not input_value:
            raise HistoryError(f"{kind} input must start with the key, not {input_value!r}")
        key = input_value[0]
        states = dict(state)
        answer, after = self._model.apply(states.get(key, self._initial), kind, input_value)
        if after == self._initial:
            states.pop(key, None)
        else:
            states[key] = after
        return answer, frozenset(states.items())
