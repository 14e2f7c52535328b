"""The key commands: DEL, UNLINK, RENAME, RENAMENX, COPY, EXISTS, TOUCH and TYPE.

They act on named keys whatever their value.  A key moved or copied takes
its TTL with it.  There is one database and one type of value ("string"), so
COPY's DB is 0 and TYPE is "string" or "none".
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstore import errors
from kvstore.errors import RedisError
from kvstore.protocol import numbers
from kvstore.store.state import KVState
from rsm import command, query


class KeyCommands(KVState):
    """The key commands, over the shared state."""

    @command(name="del")
    def delete(self, *keys: bytes) -> int:
        """DEL key [key ...]: delete the keys; how many existed."""
        return self._delete_keys(keys)

    @command
    def unlink(self, *keys: bytes) -> int:
        """UNLINK key [key ...]: DEL (Redis frees memory later; here there is nothing to defer)."""
        return self._delete_keys(keys)

    @command
    def rename(self, key: bytes, new_key: bytes) -> str:
        """RENAME key newkey: move the value and TTL of `key` to `newkey`, replacing what
        was there; "OK" (also when the names are equal), "ERR no such key" without `key`."""
        self._rename(key, new_key, replace=True)
        return "OK"

    @command
    def renamenx(self, key: bytes, new_key: bytes) -> int:
        """RENAMENX key newkey: RENAME only if `newkey` does not exist; 1 if renamed, else 0
        (also when the names are equal)."""
        return 1 if self._rename(key, new_key, replace=False) else 0

    @command
    def copy(self, source: bytes, destination: bytes, *options: bytes) -> int:
        """COPY source destination [DB 0] [REPLACE]: copy the value and TTL; 1 if copied, 0
        if `source` does not exist or `destination` does (without REPLACE).

        There is one database: DB takes only 0 ("ERR DB index is out of range"
        otherwise, where Redis would copy to that database).
        """
        now_ms = self._command_time_ms()
        replace = False
        position = 0
        while position < len(options):
            option = options[position].lower()
            if option == b"replace":
                replace = True
            elif option == b"db" and position + 1 < len(options):
                position += 1
                if numbers.require_int(options[position]) != 0:
                    raise RedisError(errors.DB_INDEX_OUT_OF_RANGE)
            else:
                raise RedisError(errors.SYNTAX)
            position += 1
        if source == destination:
            raise RedisError("ERR source and destination objects are the same")
        value = self._lookup(source, now_ms)
        if value is None:
            return 0
        self._check_key(destination)
        if self._lookup(destination, now_ms) is not None and not replace:
            return 0
        self._store(destination, value, keep_ttl=False)
        expire_at_ms = self.expire_at_ms.get(source)
        if expire_at_ms is not None:
            self._expire(destination, expire_at_ms, now_ms)
        return 1

    @query
    def exists(self, *keys: bytes) -> int:
        """EXISTS key [key ...]: how many of the keys exist (a key named twice counts twice)."""
        return self._count_live(keys)

    @query
    def touch(self, *keys: bytes) -> int:
        """TOUCH key [key ...]: EXISTS.  (Redis also notes the keys' access time for its
        eviction; this store evicts nothing, so it keeps none.)"""
        return self._count_live(keys)

    @query
    def type(self, key: bytes) -> str:
        """TYPE key: "string", or "none" for a missing key."""
        return "none" if self.value_at(key, self._query_time_ms()) is None else "string"

    # --- helpers ------------------------------------------------------------------------------

    def _count_live(self, keys: Sequence[bytes]) -> int:
        now_ms = self._query_time_ms()
        return sum(1 for key in keys if self.value_at(key, now_ms) is not None)

    def _rename(self, key: bytes, new_key: bytes, *, replace: bool) -> bool:
        """RENAME (`replace`) and RENAMENX, checked in Redis's order; whether it renamed."""
        now_ms = self._command_time_ms()
        value = self._lookup(key, now_ms)
        if value is None:
            raise RedisError("ERR no such key")
        if key == new_key:
            return replace
        self._check_key(new_key)
        if self._lookup(new_key, now_ms) is not None and not replace:
            return False
        expire_at_ms = self.expire_at_ms.get(key)
        self._store(new_key, value, keep_ttl=False)
        if expire_at_ms is not None:
            self._expire(new_key, expire_at_ms, now_ms)
        self._delete(key)
        return True

    def _delete_keys(self, keys: Sequence[bytes]) -> int:
        """DEL: delete the live ones of `keys`; how many there were."""
        now_ms = self._command_time_ms()
        deleted = 0
        for key in keys:
            if self._lookup(key, now_ms) is not None:
                self._delete(key)
                deleted += 1
        return deleted
