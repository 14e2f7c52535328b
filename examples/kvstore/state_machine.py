"""The key-value store's replicated state: `KVStore`, Redis's string commands as a StateMachine.

This class is also the model for writing an application on `rsm`: state in
plain attributes, `@command` for what changes it, `@query` for what reads
it, and logged time (`self.context.time_ms`) wherever Redis would read its
clock.

Arguments are the raw bytes a Redis client sends after the command name;
results are the Python values `kvstore.resp` encodes (str for a simple
string like "OK", bytes for a bulk string, None for a null bulk, int,
lists); errors are `RedisError`s carrying Redis's exact text.  The
framework records a raised error (type name and message) like any result,
identically on every replica, so every replica answers the same `-ERR ...`
line.  The server checks command names and argument counts before a
command is logged (`kvstore.commands`); the methods check everything else,
before they change anything.

The state, and the operations on it every command shares, are in
`kvstore.state`.

Transactions.  A connection queues MULTI's commands and EXEC logs them as
one command, `exec(watched, calls)`: it checks the watched keys first (a
change after the index the connection's WATCH read at, including expiring
after it, aborts: None, which the server answers as a null array, as
Redis), then applies each call in order at the same index and time, each
error becoming that call's result while the others go on (Redis's EXEC).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from kvstore.commands import COMMANDS, Route
from kvstore.content_hash import HASH_BYTES
from kvstore.errors import RedisError
from kvstore.expiry import ExpiryCommands
from kvstore.keys import KeyCommands
from kvstore.keyspace import KeyspaceCommands
from kvstore.strings import StringCommands
from rsm.state_machine import StateMachine, command, query, resolve_command, resolve_query


class KVStore(StringCommands, KeyCommands, KeyspaceCommands, ExpiryCommands, StateMachine):
    """Redis's string commands, replicated.  See `kvstore.state` for the state and expiry."""

    # --- snapshots and state hashes --------------------------------------------------------

    def restore(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        """The default restore of the public attributes, then the private indexes and the
        hash rebuilt from them (they are derived, so snapshots do not carry them)."""
        super().restore(chunks)
        self._rebuild_derived()

    def state_hash(self) -> bytes:
        """The running hash of the contents (see `kvstore.state`): no serialization."""
        self._settle_hash()
        return self._content_hash.to_bytes(HASH_BYTES, "big")

    def idle(self) -> None:
        """Bring the state hash up to date while the replica has nothing else to do."""
        self._settle_hash()

    # --- transactions (MULTI / EXEC / WATCH) --------------------------------------------------

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
        for name, *args in calls:
            function = _transaction_operation(name.decode("latin-1"))
            try:
                results.append([0, function(self, *args)])
            except RedisError as error:
                results.append([1, error.message])
        return results

    # --- helpers: time and expiry -------------------------------------------------------------

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


def _operations() -> dict[str, Callable[..., Any]]:
    """Command name -> the KVStore method that runs it, for every data command of the table."""
    functions: dict[str, Callable[..., Any]] = {}
    for spec in COMMANDS.values():
        if spec.route is Route.COMMAND:
            functions[spec.name] = resolve_command(KVStore, spec.name).function
        elif spec.route is Route.QUERY:
            functions[spec.name] = resolve_query(KVStore, spec.name).function
    return functions


_TRANSACTION_OPERATIONS: Final = _operations()
"""What EXEC runs for each queued command; built at import, so a table entry without its
method fails at once."""


def _transaction_operation(name: str) -> Callable[..., Any]:
    """The method of data command `name` (one the server queued: it is in the table)."""
    return _TRANSACTION_OPERATIONS[name]
