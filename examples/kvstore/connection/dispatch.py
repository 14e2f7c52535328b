"""What a connection does with each request: answer it, log it, read it, or queue it.

Pure.  `plan(args, client, server)` takes one request (its words, as the
parser returns them), the connection's `ClientState` and the `ServerView`,
and returns an action for the server shell:

* `Answer(reply)`: the reply is known now: server commands (PING, HELLO,
  INFO, ...), errors (unknown command, wrong arity), QUEUED inside MULTI,
  MULTI, DISCARD, UNWATCH, and EXEC when it has nothing for the store;
* `Write(name, args)`: a `KVStore` command, logged through the leader with
  the connection's session (exactly-once);
* `Read(name, args, stale)`: a `KVStore` query, answered linearizably by
  the leader, or from the local replica's state when the connection asked
  for stale reads (READONLY);
* `WatchRead(keys, stale)`: WATCH: read the position (index, logged time)
  of the state, read like a query; `finish` then records the keys as
  watched at that position;
* `Execute(watched, calls, replies)`: EXEC: log one `exec` command holding
  the watched keys and every queued data command (see
  `kvstore.store.transactions`); the replies of queued server commands are
  computed at EXEC time, in order with the others.

`finish(action, outcome, client)` turns the framework's outcome of a
`Write`, `Read`, `WatchRead` or `Execute` into the reply, with
`failure_reply` for errors:

    the command raised RedisError       its message, as Redis words it
    it raised anything else             ERR <type>: <message>
    not logged, no leader in time       TRYAGAIN ... (NotLeader, Unavailable, Overloaded)
    may have been logged, no answer     TIMEOUT ...  (OutcomeUnknown, Timeout)
    anything else                       ERR <message>

Transactions follow Redis 7: a command that cannot be queued (unknown,
wrong arity) is answered with its error and makes EXEC answer EXECABORT;
an EXEC refused so (wrong arity, or NOPERM) answers `EXECABORT Transaction
discarded because of: <why>` and ends the transaction at once; MULTI inside
MULTI and WATCH inside MULTI are refused without that consequence; QUIT and
RESET act at once even inside MULTI, UNWATCH is queued (at EXEC it answers
OK); EXEC and DISCARD without MULTI are errors; EXEC and DISCARD forget the
watched keys.
A WATCH of a key already watched keeps the older position, as Redis.

A connection with a `restriction` (not logged in, or a user not allowed
everything: `kvstore.connection.acl`) gets its NOAUTH or NOPERM refusal
for a command it may not run, after the command's own errors (unknown,
wrong arity) and before anything else, counted as a rejected call; inside
MULTI the refusal makes EXEC answer EXECABORT, as Redis.  A connection
allowed everything pays one attribute test for this.

Every request is counted in `client.stats` (`command_stats.py`): its
command's call, or its refusal, or a server command's error; the shell
counts the failures of the others when their outcome arrives.

Invariants: `plan` changes only `client` (and counts refusals in the
server's `AccessControl`); every `Write`/`Read`/`WatchRead`/
`Execute` gets exactly one `finish`; a connection in MULTI never produces a
`Write` or `Read`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from kvstore import limits
from kvstore.connection import acl, server_commands
from kvstore.connection.server_commands import ClientState, ServerView, Watch
from kvstore.errors import RedisError
from kvstore.protocol import commands
from kvstore.protocol.commands import CommandSpec, Route
from kvstore.protocol.resp import NULL_ARRAY, Reply
from rsm.errors import RsmStatus
from rsm.host import Outcome

EXEC_ABORT: Final = "EXECABORT Transaction discarded because of previous errors."
EXEC_ABORT_BECAUSE: Final = "EXECABORT Transaction discarded because of: "
"""A refused EXEC's reply, followed by the refusal without its ERR code."""
_REDIS_ERROR: Final = "RedisError"
_FROM_STORE: Final = object()
"""Placeholder, in `Execute.replies`, for the next result of the store's `exec`."""
_NOT_LOGGED: Final = frozenset({RsmStatus.NOT_LEADER, RsmStatus.UNAVAILABLE, RsmStatus.OVERLOADED})
_MAYBE_LOGGED: Final = frozenset({RsmStatus.OUTCOME_UNKNOWN, RsmStatus.TIMEOUT})
_IMMEDIATE_IN_TRANSACTION: Final = frozenset({"multi", "exec", "discard", "watch", "quit", "reset"})
"""Commands that act at once inside MULTI instead of being queued."""


class Answer(NamedTuple):
    reply: Reply


class Write(NamedTuple):
    name: str
    args: list[bytes]


class Read(NamedTuple):
    name: str
    args: list[bytes]
    stale: bool


@dataclass(frozen=True, slots=True)
class WatchRead:
    keys: list[bytes]
    stale: bool


@dataclass(frozen=True, slots=True)
class Execute:
    watched: list[list[Any]]
    """`[key, index, time_ms]` per watched key: the `exec` command's first argument."""
    calls: list[list[bytes]]
    """`[name, arg, ...]` per queued data command: its second argument."""
    replies: tuple[Any, ...]
    """Per queued command, in order: the reply of a server command, or `_FROM_STORE`."""


Action = Answer | Write | Read | WatchRead | Execute


def plan(args: list[bytes], client: ClientState, server: ServerView) -> Action:
    """What to do with one request (see the module docstring)."""
    try:
        spec = commands.resolve(args)
    except RedisError as error:
        return _refused(_command_name(args), error, client)
    if client.restriction is not None:
        denied = acl.refusal(client.restriction, spec, args, server.access_control())
        if denied is not None:
            return _refused(spec.name, denied, client)
    calls = client.stats.calls
    calls[spec.name] = calls.get(spec.name, 0) + 1
    route = spec.route
    if client.in_transaction and spec.name not in _IMMEDIATE_IN_TRANSACTION:
        return _queue(spec, args, client)
    if route is Route.COMMAND:
        return Write(spec.name, args[1:])
    if route is Route.QUERY:
        return Read(spec.name, args[1:], client.stale_reads)
    try:
        return _transaction_command(spec, args, client, server) or Answer(
            server_commands.answer(spec, args, client, server)
        )
    except RedisError as error:
        client.stats.fail(spec.name, error.message)
        return Answer(error)


def _refused(name: str | None, error: RedisError, client: ClientState) -> Answer:
    """The answer to a request refused before it ran (`name`: its command, if known).
    Inside MULTI the refusal makes EXEC answer EXECABORT; a refused EXEC itself ends
    the transaction at once, in or out of MULTI, as Redis's `execCommandAbort` does."""
    client.stats.reject(name, error.message)
    if name == "exec":
        client.end_transaction()
        reason = error.message.removeprefix("ERR ")
        return Answer(RedisError(f"{EXEC_ABORT_BECAUSE}{reason}"))
    if client.in_transaction:
        client.transaction_error = EXEC_ABORT
    return Answer(error)


def _command_name(args: list[bytes]) -> str | None:
    """The name of the command a refused request names, None when there is no such command."""
    spec = commands.COMMANDS.get(args[0].lower().decode("latin-1"))
    return None if spec is None else spec.name


def _queue(spec: CommandSpec, args: list[bytes], client: ClientState) -> Answer:
    size_bytes = sum(map(len, args)) + len(args) * limits.transaction_item_overhead_bytes
    if (
        len(client.queued) >= limits.transaction_commands_max
        or client.queued_bytes + client.watched_bytes + size_bytes > limits.transaction_bytes_max
    ):
        client.transaction_error = EXEC_ABORT
        error = RedisError("ERR the transaction is too large to queue this command")
        client.stats.reject(spec.name, error.message)
        return Answer(error)
    client.queued.append((spec, args))
    client.queued_bytes += size_bytes
    return Answer("QUEUED")


def _transaction_command(
    spec: CommandSpec, args: list[bytes], client: ClientState, server: ServerView
) -> Action | None:
    """MULTI, EXEC, DISCARD, WATCH; None for any other server command."""
    name = spec.name
    if name == "multi":
        if client.in_transaction:
            raise RedisError("ERR MULTI calls can not be nested")
        client.in_transaction = True
        return Answer("OK")
    if name == "discard":
        if not client.in_transaction:
            raise RedisError("ERR DISCARD without MULTI")
        client.end_transaction()
        return Answer("OK")
    if name == "watch":
        if client.in_transaction:
            raise RedisError("ERR WATCH inside MULTI is not allowed")
        keys = [key for key in args[1:] if key not in client.watches]
        if len(client.watches) + len(keys) > limits.watched_keys_max:
            raise RedisError(f"ERR a connection may watch at most {limits.watched_keys_max} keys")
        added_bytes = sum(len(key) + limits.transaction_item_overhead_bytes for key in keys)
        if client.watched_bytes + added_bytes > limits.transaction_bytes_max:
            raise RedisError("ERR the watched keys are too large for one transaction")
        if not keys:
            return Answer("OK")
        return WatchRead(keys, client.stale_reads)
    if name == "exec":
        if not client.in_transaction:
            raise RedisError("ERR EXEC without MULTI")
        return _execute(client, server)
    return None


def _execute(client: ClientState, server: ServerView) -> Action:
    if client.transaction_error is not None:
        error = client.transaction_error
        client.end_transaction()
        return Answer(RedisError(error))
    queued = client.queued
    watched = [[watch.key, watch.index, watch.time_ms] for watch in client.watches.values()]
    client.end_transaction()
    calls: list[list[bytes]] = []
    replies: list[Any] = []
    for spec, args in queued:
        if spec.route is Route.SERVER:
            replies.append(_server_reply(spec, args, client, server))
        else:
            calls.append([spec.name.encode("latin-1"), *args[1:]])
            replies.append(_FROM_STORE)
    if not calls and not watched:
        return Answer(replies)
    return Execute(watched, calls, tuple(replies))


def _server_reply(
    spec: CommandSpec, args: Sequence[bytes], client: ClientState, server: ServerView
) -> Reply:
    """A queued server command's reply at EXEC (its error is its reply)."""
    try:
        return server_commands.answer(spec, args, client, server)
    except RedisError as error:
        return error


def finish(
    action: Write | Read | WatchRead | Execute, outcome: Outcome, client: ClientState
) -> Reply:
    """The reply to `action` given the framework's outcome."""
    if not outcome.ok:
        return failure_reply(outcome)
    if type(action) is WatchRead:
        index, time_ms = outcome.value
        for key in action.keys:
            client.watch(Watch(key, index, time_ms))
        return "OK"
    if type(action) is Execute:
        return transaction_reply(action, outcome.value)
    reply: Reply = outcome.value
    return reply


def transaction_reply(action: Execute, value: list[list[Any]] | None) -> Reply:
    """EXEC's reply: a null array when a watched key changed, else every queued reply in order."""
    if value is None:
        return NULL_ARRAY
    results = iter(value)
    replies: list[Reply] = []
    for reply in action.replies:
        if reply is _FROM_STORE:
            failed, result = next(results)
            replies.append(RedisError(result) if failed else result)
        else:
            replies.append(reply)
    return replies


def failure_reply(outcome: Outcome) -> RedisError:
    """The Redis error for an outcome that is not OK (see the module docstring)."""
    status = outcome.status
    message = outcome.message
    if status == RsmStatus.COMMAND_FAILED:
        if outcome.detail == _REDIS_ERROR:
            return RedisError(message)
        return RedisError(f"ERR {outcome.detail}: {message}")
    if status in _NOT_LOGGED or status == RsmStatus.SESSION_EXPIRED:
        return RedisError(f"TRYAGAIN the command was not applied ({message}); retry it")
    if status in _MAYBE_LOGGED:
        return RedisError(
            f"TIMEOUT the command may or may not have been applied ({message}); "
            "read the data before retrying it unless it is idempotent"
        )
    return RedisError(f"ERR {message}")
