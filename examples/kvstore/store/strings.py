"""The string commands: SET, GET and their variants, the counters (INCR and kin), and CAS.

Each checks its arguments (keys and values within the store's bounds,
options, numbers) before it changes anything.  Storing a value drops the
key's TTL, as Redis does, except with SET's KEEPTTL, APPEND, SETRANGE and
the counters; SET with a time, SETEX and PSETEX give a new one, and GETEX
changes only the TTL.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstore import errors
from kvstore.errors import RedisError
from kvstore.protocol import numbers
from kvstore.store.options import StringOptions, expiry_time_ms
from kvstore.store.reply_bounds import check_strings
from kvstore.store.state import KVState
from rsm import command, query


class StringCommands(KVState):
    """The string commands, over the shared state."""

    # --- reading and writing strings ----------------------------------------------------------

    @command
    def set(self, key: bytes, value: bytes, *options: bytes) -> str | bytes | None:
        """SET key value [NX|XX] [GET] [EX s|PX ms|EXAT unix-s|PXAT unix-ms|KEEPTTL].

        "OK", or None when NX/XX stopped it; with GET the old value (or
        None) instead.  The new value has no TTL unless one is given or
        KEEPTTL keeps the old one.
        """
        now_ms = self._command_time_ms()
        self._check_key(key)
        self._check_value(value)
        if not options:
            # A plain SET (most of them): no options to parse or obey.  The lookup
            # still deletes the key first if it expired, as every write does.
            self._lookup(key, now_ms)
            self._store(key, value, keep_ttl=False)
            return "OK"
        parsed = StringOptions.parse(options, for_set=True)
        expire_at_ms = parsed.expire_at_ms(now_ms, "set")
        old = self._lookup(key, now_ms)
        if (parsed.only_if_absent and old is not None) or (parsed.only_if_present and old is None):
            return old if parsed.get else None
        self._store(key, value, keep_ttl=parsed.keep_ttl)
        if expire_at_ms is not None:
            self._expire(key, expire_at_ms, now_ms)
        return old if parsed.get else "OK"

    @command
    def setnx(self, key: bytes, value: bytes) -> int:
        """SETNX key value: set only if absent; 1 if set, 0 if not."""
        now_ms = self._command_time_ms()
        self._check_key(key)
        self._check_value(value)
        if self._lookup(key, now_ms) is not None:
            return 0
        self._store(key, value, keep_ttl=False)
        return 1

    @command
    def setex(self, key: bytes, seconds: bytes, value: bytes) -> str:
        """SETEX key seconds value: SET with EX."""
        return self._set_expiring(key, value, b"ex", seconds, "setex")

    @command
    def psetex(self, key: bytes, milliseconds: bytes, value: bytes) -> str:
        """PSETEX key milliseconds value: SET with PX."""
        return self._set_expiring(key, value, b"px", milliseconds, "psetex")

    @command
    def getset(self, key: bytes, value: bytes) -> bytes | None:
        """GETSET key value: set (dropping any TTL) and return the old value or None."""
        now_ms = self._command_time_ms()
        self._check_key(key)
        self._check_value(value)
        old = self._lookup(key, now_ms)
        self._store(key, value, keep_ttl=False)
        return old

    @command
    def getdel(self, key: bytes) -> bytes | None:
        """GETDEL key: delete and return the value, or None."""
        old = self._lookup(key, self._command_time_ms())
        if old is not None:
            self._delete(key)
        return old

    @command
    def getex(self, key: bytes, *options: bytes) -> bytes | None:
        """GETEX key [EX s|PX ms|EXAT unix-s|PXAT unix-ms|PERSIST]: GET, then change the TTL."""
        now_ms = self._command_time_ms()
        parsed = StringOptions.parse(options, for_set=False)
        value = self._lookup(key, now_ms)
        if value is None:
            return None
        expire_at_ms = parsed.expire_at_ms(now_ms, "getex")
        if expire_at_ms is not None:
            self._expire(key, expire_at_ms, now_ms)
        elif parsed.persist:
            self._persist(key)
        return value

    @command
    def mset(self, *pairs: bytes) -> str:
        """MSET key value [key value ...]: set every pair (dropping TTLs); "OK"."""
        self._command_time_ms()
        self._check_pairs(pairs, "mset")
        for key, value in zip(pairs[::2], pairs[1::2], strict=True):
            self._store(key, value, keep_ttl=False)
        return "OK"

    @command
    def msetnx(self, *pairs: bytes) -> int:
        """MSETNX key value [key value ...]: set every pair if no key exists (1), else none (0)."""
        now_ms = self._command_time_ms()
        self._check_pairs(pairs, "msetnx")
        keys = pairs[::2]
        if any(self._lookup(key, now_ms) is not None for key in keys):
            return 0
        for key, value in zip(keys, pairs[1::2], strict=True):
            self._store(key, value, keep_ttl=False)
        return 1

    @command
    def append(self, key: bytes, value: bytes) -> int:
        """APPEND key value: append (creating the key if absent); the new length.  Keeps the TTL."""
        now_ms = self._command_time_ms()
        self._check_key(key)
        old = self._lookup(key, now_ms)
        new = value if old is None else old + value
        self._check_value(new)
        self._store(key, new, keep_ttl=True)
        return len(new)

    @command
    def setrange(self, key: bytes, offset: bytes, value: bytes) -> int:
        """SETRANGE key offset value: overwrite from offset, padding with zero bytes; the length.

        Setting nothing (an empty value) creates no key.  Keeps the TTL.
        """
        now_ms = self._command_time_ms()
        start = numbers.require_int(offset)
        if start < 0:
            raise RedisError("ERR offset is out of range")
        old = self._lookup(key, now_ms)
        if not value:
            return 0 if old is None else len(old)
        self._check_key(key)
        if start + len(value) > self.value_bytes_max:
            raise RedisError(errors.STRING_TOO_LONG)
        new = bytearray(old or b"")
        if len(new) < start:
            new += bytes(start - len(new))
        new[start : start + len(value)] = value
        self._store(key, bytes(new), keep_ttl=True)
        return len(new)

    @query
    def get(self, key: bytes) -> bytes | None:
        """GET key: the value, or None."""
        return self.value_at(key, self._query_time_ms())

    @query
    def mget(self, *keys: bytes) -> list[bytes | None]:
        """MGET key [key ...]: each value, or None."""
        now_ms = self._query_time_ms()
        values = [self.value_at(key, now_ms) for key in keys]
        check_strings(values)
        return values

    @query
    def strlen(self, key: bytes) -> int:
        """STRLEN key: the value's length; 0 for a missing key."""
        value = self.value_at(key, self._query_time_ms())
        return 0 if value is None else len(value)

    @query
    def getrange(self, key: bytes, start: bytes, end: bytes) -> bytes:
        """GETRANGE key start end: the bytes from start to end, both included.

        Negative indexes count from the end (-1 is the last byte); the range
        is clipped to the value; a missing key reads as empty.
        """
        self._check_words((start, end))
        first = numbers.require_int(start)
        last = numbers.require_int(end)
        value = self.value_at(key, self._query_time_ms()) or b""
        if first < 0 and last < 0 and first > last:
            return b""
        length = len(value)
        if first < 0:
            first = max(length + first, 0)
        if last < 0:
            last = max(length + last, 0)
        last = min(last, length - 1)
        if first > last or length == 0:
            return b""
        return value[first : last + 1]

    # --- numbers ------------------------------------------------------------------------------

    @command
    def incr(self, key: bytes) -> int:
        """INCR key: add 1 to the integer value (a missing key is 0); the new value."""
        return self._increment(key, 1)

    @command
    def decr(self, key: bytes) -> int:
        """DECR key: subtract 1."""
        return self._increment(key, -1)

    @command
    def incrby(self, key: bytes, increment: bytes) -> int:
        """INCRBY key increment: add a 64-bit integer."""
        return self._increment(key, numbers.require_int(increment))

    @command
    def decrby(self, key: bytes, decrement: bytes) -> int:
        """DECRBY key decrement: subtract a 64-bit integer."""
        amount = numbers.require_int(decrement)
        if amount == numbers.INT64_MIN:
            raise RedisError("ERR decrement would overflow")
        return self._increment(key, -amount)

    @command
    def incrbyfloat(self, key: bytes, increment: bytes) -> bytes:
        """INCRBYFLOAT key increment: add in long double precision; the new value as text.

        The arithmetic and formatting are Redis's (see `kvstore.protocol.numbers`).
        Keeps the TTL.
        """
        now_ms = self._command_time_ms()
        self._check_key(key)
        new = numbers.add_float(self._lookup(key, now_ms), increment)
        self._check_value(new)
        self._store(key, new, keep_ttl=True)
        return new

    # --- compare-and-set (not a Redis command) ------------------------------------------------

    @command
    def cas(self, key: bytes, expected: bytes, new: bytes) -> int:
        """CAS key expected new: set `new` if the key holds exactly `expected`; 1 if set, else 0.

        A missing key holds nothing, so it never matches (use SET NX to
        create).  Like SET, the new value has no TTL.
        """
        now_ms = self._command_time_ms()
        self._check_value(new)
        if self._lookup(key, now_ms) != expected:
            return 0
        self._store(key, new, keep_ttl=False)
        return 1

    # --- helpers ------------------------------------------------------------------------------

    def _set_expiring(
        self, key: bytes, value: bytes, unit: bytes, raw_time: bytes, name: str
    ) -> str:
        """SETEX/PSETEX: validate the time first, then set with it."""
        now_ms = self._command_time_ms()
        self._check_key(key)
        self._check_value(value)
        expire_at_ms = expiry_time_ms(unit, raw_time, now_ms, name)
        self._store(key, value, keep_ttl=False)
        self._expire(key, expire_at_ms, now_ms)
        return "OK"

    def _increment(self, key: bytes, amount: int) -> int:
        now_ms = self._command_time_ms()
        self._check_key(key)
        old = self._lookup(key, now_ms)
        current = 0 if old is None else numbers.require_int(old)
        new = current + amount
        if new < numbers.INT64_MIN or new > numbers.INT64_MAX:
            raise RedisError(errors.INCREMENT_OVERFLOW)
        self._store(key, b"%d" % new, keep_ttl=True)
        return new

    def _check_pairs(self, pairs: Sequence[bytes], name: str) -> None:
        if not pairs or len(pairs) % 2:
            raise RedisError(errors.wrong_arity(name))
        for key, value in zip(pairs[::2], pairs[1::2], strict=True):
            self._check_key(key)
            self._check_value(value)
