"""The apply step: run a decoded batch against a state machine, deterministically.

Pure.  Every replica (and every replay tool) calls `apply_batch` with the
same batches in log order, and must end with equal state, equal session
tables and equal outcomes.  What makes that hold:

* Items apply in index order, each with a `Context` built only from logged
  data (index, batch timestamp, epoch, batch seed).
* Sessions idle past the TTL are dropped at the batch's logged timestamp
  before any item applies; a command whose `(client_id, seq)` already has a
  recorded outcome returns it and is not applied again (see sessions.py).
* An exception raised by a command is a result, not a crash: it becomes a
  `CommandFailed` outcome with the exception's type name and its message
  (`str()` of it, cut to `limits.error_message_chars_max`), recorded like any
  result.  The exceptions are `MemoryError` and `RecursionError`, which
  depend on the machine and the call stack rather than on the log: recording
  them could make replicas disagree, so they propagate and stop the replica.
* A result must be CBOR-encodable, since it is sent to the client and kept in
  the session table (and so in snapshots).  Scalars are kept as they are;
  containers are kept as their CBOR round trip, which is what a client would
  receive anyway and which detaches the recorded result from state the
  machine may mutate later.  A result that cannot be encoded becomes a
  `CommandFailed` outcome, identically everywhere; so does a command's
  result larger than `limits.result_bytes_max` ("ResultTooLarge": it was
  applied, but no answer could carry it).
* An unknown command key becomes an `UnknownCommand` outcome.  The leader
  checks names and arguments before logging (`prepare_command_item`), so this
  only happens when replicas run different code.

Batches must be the decoded form of the log entries (also on the leader), so
every replica sees exactly the arguments the log holds.  The leader's may be
built instead of decoded where the two are certainly equal
(`prepare_command_item`, `entry_format.decoded_command`).

Queries (`answer_query`) run outside the log, on one replica.  The replica
passes the `AppliedPosition` of the last batch it applied
(`AppliedPosition.after(batch)`), and the query sees it as a read-only
context, so its notion of "now" is logged time like a command's.  A leader
answering a linearizable read passes its own clock when that is later (never
earlier than a logged timestamp), so a key whose time has passed is expired
even if nothing was logged since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import cbor2

from rsm import limits
from rsm.core.log_format import (
    Batch,
    CommandItem,
    LeaderStart,
    decoded_command,
    encode_command,
)
from rsm.core.sessions import Outcome, SessionTable
from rsm.core.state_machine import (
    Context,
    Operation,
    StateMachine,
    commands_by_key,
    resolve_command,
    resolve_query,
)
from rsm.errors import CommandFailed, RsmStatus, UnknownCommand

_SCALARS: Final = frozenset({type(None), bool, int, float, str, bytes})
_TEXT_CHARS_SURELY_ANSWERED: Final = limits.result_bytes_max // 4
"""A str or bytes result this long or shorter fits an answer (UTF-8: at most 4 bytes a
character), so its size is not measured."""
"""Result types that are immutable and always CBOR-encodable: kept without a round trip."""

_MARKER_OUTCOME: Final = Outcome(RsmStatus.OK, None)
_NO_KEYWORDS: Final[Mapping[str, Any]] = MappingProxyType({})

_OK: Final = RsmStatus.OK
_new_tuple: Final = tuple.__new__
"""Builds an `Outcome` in one C call (its own __new__ is Python): every command's outcome."""
assert _new_tuple(Outcome, (_OK, 1, "", None)) == Outcome(RsmStatus.OK, 1)


@dataclass(frozen=True, slots=True)
class AppliedPosition:
    """How far a replica's state goes: the last applied index and the last applied entry's time.

    `index` is 0 and `time_ms` 0 before anything was applied.  A barrier
    moves `time_ms` (and `epoch`) but not `index`, since it takes none.
    """

    index: int
    time_ms: int
    epoch: int

    def __post_init__(self) -> None:
        assert self.index >= 0
        assert self.time_ms >= 0
        assert self.epoch >= 0

    @classmethod
    def after(cls, batch: Batch) -> AppliedPosition:
        """The position once `batch` is applied."""
        return cls(batch.next_index - 1, batch.timestamp_ms, batch.epoch)


INITIAL_POSITION: Final = AppliedPosition(0, 0, 0)
"""Where a replica stands before it applied anything."""


def prepare_command(
    machine_class: type[StateMachine],
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    client_id: bytes | None = None,
    seq: int | None = None,
    ack_seq: int | None = None,
) -> bytes:
    """Check a call against the newest version of command `name` and encode it as a log item.

    Raises `UnknownCommand`, `BadArguments` or `BadRequest`; nothing that
    fails here is ever logged.
    """
    return prepare_command_item(
        machine_class, name, args, kwargs, client_id=client_id, seq=seq, ack_seq=ack_seq
    )[0]


def prepare_command_item(
    machine_class: type[StateMachine],
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    client_id: bytes | None = None,
    seq: int | None = None,
    ack_seq: int | None = None,
) -> tuple[bytes, CommandItem | None]:
    """`prepare_command`, and the item decoding it will give when that is certain without
    decoding (`entry_format.decoded_command`), else None: a leader applies that item
    instead of decoding the bytes it built."""
    operation = resolve_command(machine_class, name)
    operation.check_arguments(args, kwargs or {})
    key = operation.key
    item = encode_command(key, args, kwargs, client_id=client_id, seq=seq, ack_seq=ack_seq)
    return item, decoded_command(key, args, kwargs, client_id=client_id, seq=seq, ack_seq=ack_seq)


def apply_batch(machine: StateMachine, batch: Batch, sessions: SessionTable) -> list[Outcome]:
    """Apply every item of `batch` in index order; one outcome per item, in item order.

    A leader-start marker changes nothing and has an OK outcome with no value.
    """
    time_ms = batch.timestamp_ms
    epoch = batch.epoch
    seed = batch.seed
    sessions.expire(time_ms)
    commands = commands_by_key(type(machine))
    outcomes: list[Outcome] = []
    index = batch.first_index
    for item in batch.items:
        if isinstance(item, LeaderStart):
            outcome = _MARKER_OUTCOME
        else:
            client_id = item.client_id
            if client_id is None:
                outcome = _apply(machine, commands, item, Context(index, time_ms, epoch, seed))
            else:
                seq = item.seq
                assert seq is not None
                assert item.ack_seq is not None
                early = sessions.begin(client_id, seq, item.ack_seq, time_ms)
                if early is None:
                    context = Context(index, time_ms, epoch, seed)
                    outcome = _apply(machine, commands, item, context)
                    sessions.record(client_id, seq, outcome)
                else:
                    outcome = early
        outcomes.append(outcome)
        index += 1
    assert len(outcomes) == len(batch.items)
    return outcomes


def apply_command(
    machine: StateMachine,
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    context: Context,
) -> Outcome:
    """Apply one logged command, outside a batch and without a session, exactly as a replica
    applies it (errors become outcomes): for tools that apply commands of the log one by one,
    such as a Spark reducer (`StateMachine.spark_reducer`)."""
    item = CommandItem(name, list(args), dict(kwargs))
    return _apply(machine, commands_by_key(type(machine)), item, context)


def answer_query(
    machine: StateMachine,
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    applied: AppliedPosition | None = None,
    time_ms: int | None = None,
) -> Outcome:
    """Run query `name` on local state; errors become outcomes exactly as for commands.

    With `applied` (the replica's position) the query sees it as a read-only
    `self.context`, with `time_ms` as its time when that is later; without
    it, `self.context` raises `ContextUnavailable`.
    Raises `UnknownCommand` / `BadArguments` for a query that does not exist or
    does not take these arguments (the caller's mistake, not the query's).
    """
    if applied is None:
        operation = resolve_query(type(machine), name)
        keywords = kwargs or {}
        operation.check_arguments(args, keywords)
        return _call(machine, operation, args, keywords, recorded=False)
    query_time_ms = applied.time_ms
    if time_ms is not None and time_ms > query_time_ms:
        query_time_ms = time_ms
    context = Context.for_query(applied.index, query_time_ms, applied.epoch)
    return run_query(machine, name, args, kwargs, context)


def run_query(
    machine: StateMachine,
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    context: Context,
) -> Outcome:
    """`answer_query` with the query's context made by the caller (`Context.for_query`), who
    may give the same one to every query answered at the same position and time."""
    operation = resolve_query(type(machine), name)
    keywords = kwargs or _NO_KEYWORDS
    operation.check_arguments(args, keywords)
    machine._rsm_context = context
    try:
        return _call(machine, operation, args, keywords, recorded=False)
    finally:
        del machine._rsm_context


def _apply(
    machine: StateMachine, commands: Mapping[str, Operation], item: CommandItem, context: Context
) -> Outcome:
    """Apply one command item; `commands` is the machine class's, by logged key."""
    operation = commands.get(item.name)
    if operation is None:
        return Outcome.failure(
            UnknownCommand(f"{type(machine).__qualname__} has no command {item.name!r}")
        )
    machine._rsm_context = context
    try:
        return _call(machine, operation, item.args, item.kwargs)
    finally:
        # Deleting (not setting None) leaves the instance's attributes exactly
        # the application's state, and the class default (None) shows again.
        del machine._rsm_context


def _call(
    machine: StateMachine,
    operation: Operation,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    recorded: bool = True,
) -> Outcome:
    """Run `operation`; `recorded` is False for a query, whose outcome no replica keeps."""
    try:
        if kwargs:
            result = operation.function(machine, *args, **kwargs)
        else:
            result = operation.function(machine, *args)
    except (MemoryError, RecursionError):
        raise
    except Exception as error:
        return _failure(error, recorded=recorded)
    kind = type(result)
    if kind in _SCALARS:
        if (kind is bytes or kind is str) and len(result) > _TEXT_CHARS_SURELY_ANSWERED:
            size_bytes = len(result) if kind is bytes else len(result.encode())
            if recorded and size_bytes > limits.result_bytes_max:
                return _result_too_large(operation, size_bytes)
        return _new_tuple(Outcome, (_OK, result, "", None))  # Outcome(OK, result), in C
    try:
        encoded = cbor2.dumps(result)
    except Exception as error:  # cbor2 raises several types for values it cannot encode
        return _failure(
            error, f"result of {operation.kind} {operation.name!r} is not CBOR: ", recorded=recorded
        )
    if recorded and len(encoded) > limits.result_bytes_max:
        return _result_too_large(operation, len(encoded))
    return Outcome(RsmStatus.OK, cbor2.loads(encoded))


def _result_too_large(operation: Operation, size_bytes: int) -> Outcome:
    """A command applied whose result no answer could carry: `CommandFailed`, which says it
    was applied (never `BadRequest`, "refused", as the answer's encoding would say)."""
    return Outcome.failure(
        CommandFailed(
            f"{operation.kind} {operation.name!r} was applied, but its result of {size_bytes} "
            f"bytes is more than an answer carries ({limits.result_bytes_max})",
            "ResultTooLarge",
        )
    )


def _failure(error: Exception, prefix: str = "", *, recorded: bool = True) -> Outcome:
    """The deterministic outcome of an exception: its type name and (cut) message.

    The message is `str(error)`, except for a query's `KeyError` with one text
    argument: `str()` of a `KeyError` is the `repr` of its argument, which
    would quote the message a second time.  A command's message stays
    `str(error)` whatever its type, because the session table records it: a
    replica of another version must record the same outcome.
    """
    try:
        if (
            not recorded
            and type(error).__str__ is KeyError.__str__
            and len(error.args) == 1
            and isinstance(error.args[0], str)
        ):
            message = error.args[0]
        else:
            message = str(error)
    except Exception:  # a broken __str__ must not take the replica down
        message = "<message could not be formatted>"
    message = (prefix + message)[: limits.error_message_chars_max]
    return Outcome.failure(CommandFailed(message, type(error).__name__))
