"""The whole-keyspace commands: KEYS, SCAN, DBSIZE, FLUSHDB, FLUSHALL, and INFO's counts.

KEYS and SCAN walk the keys in `_scan_order` (by key hash, see
`kvstore.protocol.glob`) and leave out expired keys; DBSIZE counts every key not
deleted yet, as Redis does.  A flush deletes every key at once and still
aborts every WATCH of a key it deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstore import errors
from kvstore.errors import RedisError
from kvstore.protocol.glob import GlobPattern, ScanRequest
from kvstore.store.reply_bounds import check_strings
from kvstore.store.state import KVState
from rsm import command, query


class KeyspaceCommands(KVState):
    """The keyspace commands, over the shared state."""

    @query
    def keys(self, pattern: bytes) -> list[bytes]:
        """KEYS pattern: every key matching the glob pattern, in key order."""
        self._check_words((pattern,))
        now_ms = self._query_time_ms()
        glob = GlobPattern(pattern)
        everything = glob.matches_everything
        keys = [
            key
            for _, key in self._scan_order()
            if (everything or glob.matches(key)) and not self._expired(key, now_ms)
        ]
        check_strings(keys)
        return keys

    @query
    def scan(self, cursor: bytes, *options: bytes) -> list[bytes | list[bytes]]:
        """SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: [next cursor, keys].

        A full iteration starts and ends with cursor "0" (see `kvstore.protocol.glob`).
        """
        self._check_words((cursor, *options))
        request = ScanRequest.parse(cursor, options)
        now_ms = self._query_time_ms()
        next_cursor, found = request.page(self._scan_order())
        keys = [key for key in found if not self._expired(key, now_ms)]
        check_strings(keys)
        return [next_cursor, keys]

    @query
    def dbsize(self) -> int:
        """DBSIZE: how many keys are stored (expired ones not deleted yet included, as Redis)."""
        return len(self.values)

    @query
    def keyspace(self) -> list[int]:
        """[keys, keys with a TTL]: for INFO's keyspace section."""
        return [len(self.values), len(self.expire_at_ms)]

    @command
    def flushdb(self, *options: bytes) -> str:
        """FLUSHDB [ASYNC|SYNC]: delete every key; "OK"."""
        return self._flush(options)

    @command
    def flushall(self, *options: bytes) -> str:
        """FLUSHALL [ASYNC|SYNC]: FLUSHDB (there is one database)."""
        return self._flush(options)

    # --- helpers ------------------------------------------------------------------------------

    def _flush(self, options: Sequence[bytes]) -> str:
        """FLUSHDB / FLUSHALL: ASYNC and SYNC are accepted and mean the same here."""
        self._command_time_ms()
        if len(options) > 1 or (options and options[0].lower() not in (b"async", b"sync")):
            raise RedisError(errors.SYNTAX)
        self._delete_all()
        return "OK"
