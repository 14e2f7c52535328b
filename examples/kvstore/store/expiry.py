"""The TTL commands: the EXPIRE family, PERSIST, and the TTL and EXPIRETIME families.

They give, drop and read keys' TTLs; when keys expire, and how expired keys
go (lazily when touched, actively from the front of the expiry queue), is
`kvstore.store.state`'s.  A TTL set at or before now deletes the key.  The EXPIRE
family checks its options, then the time, then the key, as Redis does.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstore import errors
from kvstore.errors import RedisError
from kvstore.protocol import numbers
from kvstore.store.options import (
    MILLISECONDS,
    NEGATIVE_SECONDS_LIMIT,
    SECONDS,
    SECONDS_LIMIT,
    ExpireCondition,
)
from kvstore.store.state import KVState
from rsm import command, query


class ExpiryCommands(KVState):
    """The TTL commands, over the shared state."""

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

    # --- helpers ------------------------------------------------------------------------------

    def _time_left(self, key: bytes, *, milliseconds: bool, absolute: bool) -> int:
        now_ms = self._query_time_ms()
        if self.value_at(key, now_ms) is None:
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
