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

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from kvstore import errors, numbers
from kvstore.commands import COMMANDS, Route
from kvstore.content_hash import HASH_BYTES
from kvstore.errors import RedisError
from kvstore.keys import KeyCommands
from kvstore.keyspace import KeyspaceCommands
from kvstore.options import (
    MILLISECONDS,
    NEGATIVE_SECONDS_LIMIT,
    SECONDS,
    SECONDS_LIMIT,
    ExpireCondition,
)
from kvstore.strings import StringCommands
from rsm.state_machine import StateMachine, command, query, resolve_command, resolve_query


class KVStore(StringCommands, KeyCommands, KeyspaceCommands, StateMachine):
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

    # --- TTLs ---------------------------------------------------------------------------------

    @command
    def expire(self, key: bytes, seconds: bytes, *options: bytes) -> int:
        """EXPIRE key seconds [NX|XX|GT|LT]: expire in `seconds`; 1 if set, 0 if not.

        NX: only without a TTL; XX: only with one; GT/LT: only if the new
        time is later/earlier (no TTL counts as infinitely late).  A time
        in the past deletes the key (and answers 1).
        """
        return self._set_ttl(key, seconds, options, SECONDS, relative=True, name="expire")

    @command
    def pexpire(self, key: bytes, milliseconds: bytes, *options: bytes) -> int:
        """PEXPIRE key milliseconds [NX|XX|GT|LT]: EXPIRE in milliseconds."""
        return self._set_ttl(
            key, milliseconds, options, MILLISECONDS, relative=True, name="pexpire"
        )

    @command
    def expireat(self, key: bytes, unix_seconds: bytes, *options: bytes) -> int:
        """EXPIREAT key unix-seconds [NX|XX|GT|LT]: EXPIRE at an absolute time."""
        return self._set_ttl(key, unix_seconds, options, SECONDS, relative=False, name="expireat")

    @command
    def pexpireat(self, key: bytes, unix_milliseconds: bytes, *options: bytes) -> int:
        """PEXPIREAT key unix-milliseconds [NX|XX|GT|LT]: EXPIREAT in milliseconds."""
        return self._set_ttl(
            key, unix_milliseconds, options, MILLISECONDS, relative=False, name="pexpireat"
        )

    @command
    def persist(self, key: bytes) -> int:
        """PERSIST key: remove the TTL; 1 if there was one, 0 if not (or no key)."""
        if self._lookup(key, self._command_time_ms()) is None:
            return 0
        return 1 if self._persist(key) else 0

    @query
    def ttl(self, key: bytes) -> int:
        """TTL key: seconds left (rounded), -1 without a TTL, -2 for a missing key."""
        return self._time_left(key, milliseconds=False, absolute=False)

    @query
    def pttl(self, key: bytes) -> int:
        """PTTL key: TTL in milliseconds."""
        return self._time_left(key, milliseconds=True, absolute=False)

    @query
    def expiretime(self, key: bytes) -> int:
        """EXPIRETIME key: the expiry as unix seconds (rounded); -1 without a TTL, -2 missing."""
        return self._time_left(key, milliseconds=False, absolute=True)

    @query
    def pexpiretime(self, key: bytes) -> int:
        """PEXPIRETIME key: EXPIRETIME in unix milliseconds."""
        return self._time_left(key, milliseconds=True, absolute=True)

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

    def _time_left(self, key: bytes, *, milliseconds: bool, absolute: bool) -> int:
        now_ms = self._query_time_ms()
        if self._peek(key, now_ms) is None:
            return -2
        expire_at_ms = self.expire_at_ms.get(key)
        if expire_at_ms is None:
            return -1
        left_ms = max(expire_at_ms if absolute else expire_at_ms - now_ms, 0)
        return left_ms if milliseconds else (left_ms + 500) // 1000

    def _set_ttl(
        self,
        key: bytes,
        raw_time: bytes,
        options: Sequence[bytes],
        unit_ms: int,
        *,
        relative: bool,
        name: str,
    ) -> int:
        """The EXPIRE family, checked in Redis's order: options, time, then the key."""
        now_ms = self._command_time_ms()
        condition = ExpireCondition.parse(options)
        when = numbers.require_int(raw_time)
        if unit_ms == SECONDS:
            if when > SECONDS_LIMIT or when < NEGATIVE_SECONDS_LIMIT:
                raise RedisError(errors.invalid_expire_time(name))
            when *= SECONDS
        base_ms = now_ms if relative else 0
        if when > numbers.INT64_MAX - base_ms:
            raise RedisError(errors.invalid_expire_time(name))
        when += base_ms
        if self._lookup(key, now_ms) is None:
            return 0
        if not condition.allows(when, self.expire_at_ms.get(key)):
            return 0
        self._expire(key, when, now_ms)
        return 1


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
