"""Transactions: EXEC of the commands MULTI queued, and the position WATCH remembers.

A connection queues MULTI's commands and EXEC logs them as one command,
`exec(watched, calls)`: it checks the watched keys first (a change after the
index the connection's WATCH read at, including expiring after it, aborts:
None, which the server answers as a null array, as Redis), then applies each
call in order at the same index and time, each error becoming that call's
result while the others go on (Redis's EXEC); an exception other than a
`RedisError` (a bug) too, as `ERR <type>: <message>`, so a transaction is
never applied only up to a broken call.  Replies past `limits.reply_bytes_max`
in all are dropped (kvstore/store/reply_bounds.py).

WATCH errs one way only: a deletion forgotten from the bounded tombstones
(`KVState.tombstones`) counts as a change when it may have come after the
watched position, so a transaction may be aborted for nothing but is never
executed wrongly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from kvstore import limits
from kvstore.errors import RedisError
from kvstore.protocol.commands import COMMANDS, Route
from kvstore.protocol.resp import reply_bytes_bound
from kvstore.store.reply_bounds import REPLY_DROPPED
from kvstore.store.state import KVState
from rsm import StateMachine, command, query, resolve_command, resolve_query
from rsm import limits as rsm_limits


class TransactionCommands(KVState):
    """The transaction commands, over the shared state."""

    _transaction_operations: ClassVar[dict[str, Callable[..., Any]]]
    """What EXEC runs for each queued command: command name -> its method, for every data
    command of the table.  Built when a class taking these commands is created (KVStore: at
    import), so a table entry without its method fails at once."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        assert issubclass(cls, StateMachine), (
            "a class taking the transaction commands is a StateMachine"
        )
        cls._transaction_operations = _operations(cls)

    @query
    def position(self) -> list[int]:
        """[index, time_ms] of the state this replica answers from: what WATCH remembers."""
        context = self.context
        return [context.index, context.time_ms]

    @command(name="exec")
    def execute(self, watched: list[list[Any]], calls: list[list[bytes]]) -> list[Any] | None:
        """EXEC: None when a watched key changed, else each call's `[0, result]` or `[1, error]`.

        `watched` holds `[key, index, time_ms]` per watched key, the position
        its WATCH read at (`position`); `calls` the queued commands, each
        `[name, arg, ...]` with the name in lower case, checked against the
        command table when queued.
        """
        now_ms = self._command_time_ms()
        for key, index, time_ms in watched:
            if self._changed_since(key, index, time_ms, now_ms):
                return None
        results: list[Any] = []
        left_bytes = limits.reply_bytes_max
        for name, *args in calls:
            function = self._transaction_operations[name.decode("latin-1")]
            try:
                result = function(self, *args)
            except RedisError as error:
                results.append([1, error.message])
                continue
            except (MemoryError, RecursionError):
                raise
            except Exception as error:
                # A bug fails its call alone, worded as the framework words a command's
                # other exceptions; the calls after it still run.
                message = f"ERR {type(error).__name__}: {error}"
                results.append([1, message[: rsm_limits.error_message_chars_max]])
                continue
            size_bytes = reply_bytes_bound(result)
            if size_bytes > left_bytes:
                results.append([1, REPLY_DROPPED])
            else:
                left_bytes -= size_bytes
                results.append([0, result])
        return results

    # --- helpers ------------------------------------------------------------------------------

    def _changed_since(self, key: bytes, index: int, time_ms: int, now_ms: int) -> bool:
        """Whether `key` changed after log index `index` (logged at `time_ms`), as WATCH sees it.

        Expiring counts as a change when the key was live at `time_ms` and is
        expired at `now_ms` (Redis 6.0.9 on); deleting a key that had already
        expired at `time_ms` does not.  A deletion whose record was forgotten
        counts when it may have come after `index`: an abort, never a wrong EXEC.
        """
        version = self.versions.get(key)
        if version is not None:
            if version > index:
                return True
            expire_at_ms = self.expire_at_ms.get(key)
            return expire_at_ms is not None and time_ms < expire_at_ms <= now_ms
        tombstone = self.tombstones.get(key)
        if tombstone is None:
            return self.tombstones_forgotten_index > index
        deleted_index, expired_at_ms = tombstone
        if deleted_index <= index:
            return False
        return expired_at_ms is None or expired_at_ms > time_ms


def _operations(machine_class: type[StateMachine]) -> dict[str, Callable[..., Any]]:
    """Command name -> the method of `machine_class` that runs it, for every data command of
    the table."""
    functions: dict[str, Callable[..., Any]] = {}
    for spec in COMMANDS.values():
        if spec.route is Route.COMMAND:
            functions[spec.name] = resolve_command(machine_class, spec.name).function
        elif spec.route is Route.QUERY:
            functions[spec.name] = resolve_query(machine_class, spec.name).function
    return functions
