"""The options of the string and expiry commands, parsed and checked as Redis does.

SET's and GETEX's options (`StringOptions`), EXPIRE's conditions
(`ExpireCondition`) and the expiry times they ask for (`expiry_time_ms`).
They read no state: a bad option or time raises a `RedisError` with Redis's
text, in Redis's order of checks, before the command changes anything.
Times are in ms since the Unix epoch and stay within a signed 64-bit integer,
as Redis's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kvstore import errors
from kvstore.errors import RedisError
from kvstore.protocol import numbers

SECONDS: Final = 1000
"""A time unit in ms: EX, EXAT, EXPIRE and EXPIREAT take seconds."""
MILLISECONDS: Final = 1
"""PX, PXAT, PEXPIRE and PEXPIREAT take milliseconds."""
SECONDS_LIMIT: Final = numbers.INT64_MAX // 1000
"""C's LLONG_MAX / 1000: seconds above it overflow when converted to ms."""
NEGATIVE_SECONDS_LIMIT: Final = -(-numbers.INT64_MIN // 1000)
"""C's LLONG_MIN / 1000 (C division truncates toward zero)."""

_EXPIRY_UNITS: Final = {
    b"ex": SECONDS,
    b"px": MILLISECONDS,
    b"exat": SECONDS,
    b"pxat": MILLISECONDS,
}
_RELATIVE_EXPIRY: Final = frozenset({b"ex", b"px"})


def expiry_time_ms(unit: bytes, raw_time: bytes, now_ms: int, name: str) -> int:
    """The absolute expiry an EX/PX/EXAT/PXAT argument asks for, checked as Redis does."""
    amount = numbers.require_int(raw_time)
    scale_ms = _EXPIRY_UNITS[unit]
    if amount <= 0 or (scale_ms == SECONDS and amount > SECONDS_LIMIT):
        raise RedisError(errors.invalid_expire_time(name))
    amount *= scale_ms
    if unit in _RELATIVE_EXPIRY:
        amount += now_ms
        if amount > numbers.INT64_MAX:
            raise RedisError(errors.invalid_expire_time(name))
    return amount


@dataclass(frozen=True, slots=True)
class StringOptions:
    """The options of SET (`for_set`) or GETEX, parsed and checked as Redis does."""

    only_if_absent: bool = False
    only_if_present: bool = False
    get: bool = False
    keep_ttl: bool = False
    persist: bool = False
    expiry_unit: bytes | None = None
    """b"ex", b"px", b"exat" or b"pxat" when a time was given."""
    expiry_time: bytes = b""

    @classmethod
    def parse(cls, options: Sequence[bytes], *, for_set: bool) -> StringOptions:
        """Redis's rules: an unknown option, or one clashing with an earlier one: syntax error."""
        if not options:
            return _NO_OPTIONS
        nx = xx = get = keep_ttl = persist = False
        unit: bytes | None = None
        time = b""
        position = 0
        while position < len(options):
            option = options[position].lower()
            has_value = position + 1 < len(options)
            if for_set and option == b"nx" and not xx:
                nx = True
            elif for_set and option == b"xx" and not nx:
                xx = True
            elif for_set and option == b"get":
                get = True
            elif for_set and option == b"keepttl" and unit is None:
                keep_ttl = True
            elif not for_set and option == b"persist" and unit is None:
                persist = True
            elif (
                option in _EXPIRY_UNITS
                and not keep_ttl
                and not persist
                and unit in (None, option)
                and has_value
            ):
                unit = option
                position += 1
                time = options[position]
            else:
                raise RedisError(errors.SYNTAX)
            position += 1
        return cls(nx, xx, get, keep_ttl, persist, unit, time)

    def expire_at_ms(self, now_ms: int, name: str) -> int | None:
        """The absolute expiry asked for, or None; `RedisError` for an invalid time."""
        if self.expiry_unit is None:
            return None
        return expiry_time_ms(self.expiry_unit, self.expiry_time, now_ms, name)


_NO_OPTIONS: Final = StringOptions()
"""What a plain SET or GETEX parses to (most calls: parsed once, here)."""


@dataclass(frozen=True, slots=True)
class ExpireCondition:
    """EXPIRE's NX / XX / GT / LT options."""

    nx: bool = False
    xx: bool = False
    gt: bool = False
    lt: bool = False

    @classmethod
    def parse(cls, options: Sequence[bytes]) -> ExpireCondition:
        flags = {b"nx": False, b"xx": False, b"gt": False, b"lt": False}
        for option in options:
            lowered = option.lower()
            if lowered not in flags:
                raise RedisError(f"ERR Unsupported option {errors.c_text(option)}")
            flags[lowered] = True
        condition = cls(flags[b"nx"], flags[b"xx"], flags[b"gt"], flags[b"lt"])
        if condition.nx and (condition.xx or condition.gt or condition.lt):
            raise RedisError("ERR NX and XX, GT or LT options at the same time are not compatible")
        if condition.gt and condition.lt:
            raise RedisError("ERR GT and LT options at the same time are not compatible")
        return condition

    def allows(self, when_ms: int, current_ms: int | None) -> bool:
        """Whether a new expiry `when_ms` may replace `current_ms` (None: no TTL, "infinite")."""
        if self.nx and current_ms is not None:
            return False
        if self.xx and current_ms is None:
            return False
        if self.gt and (current_ms is None or when_ms <= current_ms):
            return False
        return not (self.lt and current_ms is not None and when_ms >= current_ms)
