"""The application's side of the framework: `StateMachine`, `@command`, `@query`, `Context`.

An application subclasses `StateMachine`, keeps its state in ordinary public
attributes, and marks methods::

    class Counter(StateMachine):
        def __init__(self) -> None:
            self.value = 0

        @command
        def add(self, amount: int = 1) -> int:
            self.value += amount
            return self.value

        @query
        def get(self) -> int:
            return self.value

`@command` methods change state.  Every replica runs each logged command, in
log order, once; so a command must be deterministic: the same state and
arguments give the same state change and result.  Whatever varies between
machines comes from `self.context` instead: `index` (the command's position
in the log), `time_ms` (the leader's clock when it logged the command, never
decreasing) and `random` (a `random.Random` seeded from the logged seed and
the index).  `self.context` exists only while a command is being applied.
A command that raises is not an accident but a result: the error (type name
and message) is recorded, identically on every replica, and returned to the
caller; state changes made before the raise stay, so validate first.

`@query` methods only read state, on one replica, outside the log; they must
not change state (nothing enforces it, but a change would exist on one
replica only).  A query sees a read-only `self.context` describing the last
entry the replica applied (its `index`, `time_ms` and `epoch`) when the
replica passes that position to `rsm.core.commands.answer_query`, so "now"
in a query is logged time too, never a local clock: a key-value store can
decide that a key has expired the same way a command would.  A linearizable
read, answered by the leader, sees the leader's clock when that is later than
the last logged time.  `random` is not available in a query: its
draws would exist on one replica only.

`@command(name=..., version=...)` gives a command a stable logged name (so a
method can be renamed) and a version: `version=2` logs as `"name@2"`, so old
log entries keep replaying through the version-1 method while new calls go to
the newest version.  Arguments are bound against the method's signature before
a command is logged, so a bad call fails at once with `BadArguments` or
`UnknownCommand` instead of being logged and failing on every replica.

Snapshots.  A replica saves its state in a snapshot and a new or restarted
replica loads one instead of replaying the whole log (docs/snapshots.md).
By default the public attributes are the state: `snapshot()` streams them
with cbor2 (sortedcontainers types, sets, frozensets and tuples included;
`rsm/core/snapshot_state.py` has the format), `restore(chunks)` reads them
back into a fresh instance (made by calling the class, or the factory the
replica was given), and `state_hash()` is the SHA-256 of `snapshot()`'s
bytes.  An application may override all three: `snapshot()` yields `bytes`
chunks of any size, `restore()` receives the same bytes cut anywhere (treat
them as one stream), and `state_hash()` returns 1 to 64 bytes that must be
equal on replicas with equal state; an incremental hash kept up to date by
the commands is much cheaper than the default (see KVStore).  `snapshot()`
must read the state only: it runs in a forked child process or between two
commands, and must not keep references that outlive it.

Per-key digests.  Optionally, a state machine whose state is a map of keys
offers `key_digests()`: `(key, digest)` pairs in key order, each digest a
function of one key's content, so that tools can name the keys where two
states differ instead of only saying that they do.  The default returns None
(not offered); the framework itself never calls it.  With it, a class may
offer `show_key(key)`: that key's content as text for a person reading a
diff or a key's history (default: None, not offered).

Bulk snapshots in Spark.  Optionally, a class names a Spark reducer in the
class attribute `spark_reducer`, as `"module:name"` of an
`rsm.spark.SparkReducer` (a string, so that nothing here imports Spark):
`rsm spark snapshot` then computes the state at the log's readable end in
Spark instead of replaying the log, and registers it as a snapshot that
replicas start from (docs/spark.md, "Bulk snapshot").  Its `summarize`
makes each Spark task's share of the commands (those the session table let
through) into a summary, on executors; its `combine` makes the summaries,
in log order, into a fresh instance holding exactly the state replay
reaches there (equal `snapshot()` bytes) and the outcomes the session table
keeps.  A log it cannot reduce exactly must make it raise
`rsm.errors.NotReducible`, never give a state replay would not reach.
Default: None (no bulk snapshot).

Typed arguments in Spark.  Optionally, `spark_arguments` maps logged command
keys to a Spark DDL list of fields, one per argument in order
(`{"incrby": "key BINARY, increment BIGINT"}`): the `rsm-log` source, given
the class, then has a `typed_arguments` column where those commands' arguments
are typed (rsm/spark/typed_arguments.py has the rules).  Default: none.

The registry is built once, when the subclass is created (`__init_subclass__`);
declaring the same name twice, a command and a query of the same name, or an
`async` method raises `BadStateMachine` right there.

Invariants: a class's registry never changes after creation; every logged key
maps to exactly one method; `self.context` is set only for the duration of one
command's apply or one query's answer (by `rsm.core.commands`) and the
instance's attributes are the application's state alone outside them.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeVar, overload

from rsm import limits
from rsm.core.snapshot_state import digest, encode_state, restore_state
from rsm.errors import BadArguments, BadStateMachine, ContextUnavailable, UnknownCommand

F = TypeVar("F", bound=Callable[..., Any])

_DECLARATION: Final = "__rsm_declaration__"
"""Attribute the decorators set on a method; read once, at class creation."""

COMMAND: Final = "command"
QUERY: Final = "query"


class Context:
    """What a command may know about its own application: where and when it was logged.

    The same on every replica for the same log entry, so using it keeps apply
    deterministic.  `random` is created on first use (most commands never
    need it) from `seed` and `index`, so two commands of one batch draw
    different numbers.

    A query's context (`seed` None, see `for_query`) describes the last
    applied entry instead: index 0 and time 0 before anything was applied,
    and no `random`.
    """

    __slots__ = ("_index", "_time_ms", "_epoch", "_seed", "_random")

    def __init__(self, index: int, time_ms: int, epoch: int, seed: int | None) -> None:
        assert index >= 1 or seed is None, "a command's index is >= 1"
        assert index >= 0
        assert time_ms >= 0
        self._index = index
        self._time_ms = time_ms
        self._epoch = epoch
        self._seed = seed
        self._random: random.Random | None = None

    @classmethod
    def for_query(cls, index: int, time_ms: int, epoch: int) -> Context:
        """The read-only context of a query answered after applying up to `index`."""
        return cls(index, time_ms, epoch, None)

    @property
    def index(self) -> int:
        """The command's position in the log (dense, 1-based); in a query, the last applied one."""
        return self._index

    @property
    def time_ms(self) -> int:
        """The leader's clock (ms since the Unix epoch) when it logged the batch.

        In a query: the timestamp of the last applied entry, or for a linearizable
        read on the leader its clock when later.
        """
        return self._time_ms

    @property
    def epoch(self) -> int:
        """The epoch of the leader that logged the command (a fencing token for side effects)."""
        return self._epoch

    @property
    def random(self) -> random.Random:
        """A `random.Random` (the standard library's generator) seeded from the batch seed and
        the index: the same draws on every replica, for commands only.

        Python promises that only its `random()` method gives the same numbers
        from the same seed on every Python version; `randint`, `choice`,
        `shuffle` and the rest may change between versions, so replicas that
        use them should run the same Python version.
        """
        if self._seed is None:
            raise ContextUnavailable("a query has no randomness: its draws would differ by replica")
        if self._random is None:
            self._random = random.Random((self._seed << 64) | self._index)
        return self._random


@dataclass(frozen=True, slots=True)
class _Declaration:
    kind: str
    name: str | None
    version: int


@dataclass(frozen=True, slots=True)
class Operation:
    """One registered command or query of a StateMachine class."""

    kind: str
    name: str
    version: int
    key: str
    """What the log carries: `name` for version 1, else `name@version`."""
    function: Callable[..., Any]
    signature: inspect.Signature
    """The method's signature without `self`."""
    positional_min: int
    positional_max: int | None
    """None when the method takes `*args`."""
    plain: bool
    """No keyword-only parameter lacks a default: positional calls can skip `bind`."""

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise `BadArguments` unless `args`/`kwargs` bind to the method's parameters."""
        count = len(args)
        if (
            not kwargs
            and self.plain
            and count >= self.positional_min
            and (self.positional_max is None or count <= self.positional_max)
        ):
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise BadArguments(f"{self.kind} {self.name!r}: {error}") from None


@overload
def command(function: F, /) -> F: ...


@overload
def command(*, name: str | None = None, version: int = 1) -> Callable[[F], F]: ...


def command(
    function: F | None = None, /, *, name: str | None = None, version: int = 1
) -> F | Callable[[F], F]:
    """Mark a method as a replicated command: `@command` or `@command(name=..., version=...)`."""
    declaration = _declare(COMMAND, name, version)
    if function is not None:
        return _marked(function, declaration)
    return lambda f: _marked(f, declaration)


@overload
def query(function: F, /) -> F: ...


@overload
def query(*, name: str | None = None) -> Callable[[F], F]: ...


def query(function: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Mark a method as a read-only query: `@query` or `@query(name=...)`."""
    declaration = _declare(QUERY, name, 1)
    if function is not None:
        return _marked(function, declaration)
    return lambda f: _marked(f, declaration)


def _declare(kind: str, name: str | None, version: int) -> _Declaration:
    if name is not None and (not isinstance(name, str) or not name or "@" in name):
        raise BadStateMachine(f"{kind} name {name!r} must be non-empty text without '@'")
    if type(version) is not int or version < 1:
        raise BadStateMachine(f"{kind} version {version!r} must be an int >= 1")
    return _Declaration(kind, name, version)


def _marked(function: F, declaration: _Declaration) -> F:
    if not inspect.isfunction(function):
        raise BadStateMachine(f"@{declaration.kind} decorates plain methods, not {function!r}")
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        raise BadStateMachine(
            f"@{declaration.kind} {function.__qualname__} is async: apply is synchronous"
        )
    setattr(function, _DECLARATION, declaration)
    return function


def _operation(
    attribute: str, function: Callable[..., Any], declaration: _Declaration
) -> Operation:
    name = declaration.name or attribute
    key = name if declaration.version == 1 else f"{name}@{declaration.version}"
    if len(key) > limits.command_name_chars_max:
        raise BadStateMachine(f"{key!r} is longer than {limits.command_name_chars_max} characters")
    parameters = list(inspect.signature(function).parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise BadStateMachine(f"{function.__qualname__} must take `self` first")
    parameters = parameters[1:]
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return Operation(
        kind=declaration.kind,
        name=name,
        version=declaration.version,
        key=key,
        function=function,
        signature=inspect.Signature(parameters),
        positional_min=sum(1 for p in positional if p.default is inspect.Parameter.empty),
        positional_max=None if variadic else len(positional),
        plain=not any(
            p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
            for p in parameters
        ),
    )


_FRAMEWORK_METHODS: Final = frozenset(
    {
        "snapshot",
        "restore",
        "state_hash",
        "key_digests",
        "show_key",
        "idle",
        "context",
        "spark_reducer",
        "spark_arguments",
    }
)
"""What the framework calls or reads on a machine: never a command's or a query's method."""


class StateMachine:
    """Base class of every replicated state machine (see the module docstring).

    State is the instance's public attributes.  Names starting with `_rsm_`
    belong to the framework.
    """

    _rsm_commands: ClassVar[dict[str, Operation]] = {}
    """Commands by logged key (`name` or `name@version`): what apply looks up."""
    _rsm_newest_commands: ClassVar[dict[str, Operation]] = {}
    """Commands by name, newest version only: what new calls are logged as."""
    _rsm_queries: ClassVar[dict[str, Operation]] = {}
    _rsm_context: Context | None = None
    spark_reducer: ClassVar[str | None] = None
    """Optional: `"module:name"` of the class's `rsm.spark.SparkReducer` (see the module
    docstring)."""
    spark_arguments: ClassVar[Mapping[str, str]] = {}
    """Optional: logged command key -> Spark DDL of its arguments (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        members: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            members.update(vars(klass))
        commands: dict[str, Operation] = {}
        newest: dict[str, Operation] = {}
        queries: dict[str, Operation] = {}
        for attribute, value in members.items():
            declaration = getattr(value, _DECLARATION, None) if inspect.isfunction(value) else None
            if not isinstance(declaration, _Declaration):
                continue
            if attribute in _FRAMEWORK_METHODS:
                raise BadStateMachine(
                    f"{cls.__qualname__}.{attribute} is the framework's method: a command or "
                    f"query needs another method name (it may keep the logged name with name=)"
                )
            operation = _operation(attribute, value, declaration)
            table = commands if operation.kind == COMMAND else queries
            if operation.key in table:
                raise BadStateMachine(
                    f"{cls.__qualname__} declares {operation.kind} {operation.key!r} twice"
                )
            table[operation.key] = operation
            if operation.kind == COMMAND:
                current = newest.get(operation.name)
                if current is None or current.version < operation.version:
                    newest[operation.name] = operation
        clashes = newest.keys() & queries.keys()
        if clashes:
            raise BadStateMachine(
                f"{cls.__qualname__} uses {sorted(clashes)} as both command and query names"
            )
        for key, ddl in cls.spark_arguments.items():
            if key not in commands or not isinstance(ddl, str):
                raise BadStateMachine(
                    f"{cls.__qualname__}.spark_arguments maps {key!r} to {ddl!r}: keys are "
                    "logged command keys, values Spark DDL text"
                )
        cls._rsm_commands = commands
        cls._rsm_newest_commands = newest
        cls._rsm_queries = queries

    def snapshot(self) -> Iterator[bytes]:
        """The state as a stream of bytes chunks (default: the public attributes, with cbor2).

        Called at an exact index, with nothing applied until it returns (or
        in a forked copy of the process): it must only read the state.
        """
        return encode_state(self)

    def restore(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        """Set the state of this fresh instance from what `snapshot()` produced.

        The chunks hold the same bytes `snapshot()` yielded, in order, but cut
        at other places.  Raise on bytes that do not make a state (the
        default raises `SnapshotCorrupt`): the replica then tries an older
        snapshot.
        """
        restore_state(self, chunks)

    def state_hash(self) -> bytes:
        """1 to 64 bytes, equal on replicas whose states are equal (default: SHA-256 of the
        snapshot stream, which costs a full serialization; override it when that is slow)."""
        return digest(self.snapshot())

    def key_digests(
        self, keys: Iterable[bytes] | None = None
    ) -> Iterator[tuple[bytes, bytes]] | None:
        """Optional: the state as `(key, digest)` pairs, for tools that compare states key
        by key (default: None, not offered).

        A state machine whose state is a map offers it by returning an iterator
        of `(key, digest)` for every key present, in ascending byte order of the
        keys; with `keys`, only for those of them that are present (in the same
        order).  A digest is 1 to 64 bytes, a function of that key's content
        alone: equal on replicas where the key's content is equal, different
        (but for hash collisions) where it differs.  So two states differ
        exactly at the keys whose digests differ or that only one of them has.
        Like `snapshot()`, it must only read the state.
        """
        return None

    def show_key(self, key: bytes) -> str | None:
        """Optional: one key's content as a person reads it (absent keys included, as the
        class shows absence), for tools that list keys or a key's history (default: None,
        not offered).  Like `key_digests`, it must only read the state."""
        return None

    def idle(self) -> None:
        """Deferred bookkeeping, done while the replica has nothing to apply (default: none).

        A leader calls it each time it has sent a batch to the bookies and waits
        for them, between two applied batches, so work done here is off the path
        from the clients' commands to their answers (KVStore brings its state
        hash up to date here).  It must not change what commands, queries,
        `snapshot()` or `state_hash()` return; `self.context` does not exist here.
        """

    @property
    def context(self) -> Context:
        """Where and when the command being applied was logged (in a query: the last applied entry).

        Exists only inside a command, or inside a query the replica answers
        with its applied position.
        """
        context = self._rsm_context
        if context is None:
            raise ContextUnavailable(
                "context exists only while a command is applied or a query is answered "
                "with the replica's applied position (not in __init__)"
            )
        return context


def resolve_command(machine_class: type[StateMachine], name: str) -> Operation:
    """The newest version of command `name` (what a new call is logged as)."""
    operation = machine_class._rsm_newest_commands.get(name)
    if operation is None:
        hint = ""
        if name in machine_class._rsm_queries:
            hint = f"; {name!r} is a query (Client.query, rsm query)"
        raise UnknownCommand(f"{machine_class.__qualname__} has no command {name!r}{hint}")
    return operation


def commands_by_key(machine_class: type[StateMachine]) -> Mapping[str, Operation]:
    """Every command (every version) by the key it is logged under."""
    return machine_class._rsm_commands


def resolve_query(machine_class: type[StateMachine], name: str) -> Operation:
    operation = machine_class._rsm_queries.get(name)
    if operation is None:
        hint = ""
        if name in machine_class._rsm_newest_commands:
            hint = f"; {name!r} is a command (Client.call, rsm call)"
        raise UnknownCommand(f"{machine_class.__qualname__} has no query {name!r}{hint}")
    return operation
