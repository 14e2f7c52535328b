"""Redis's number syntax and arithmetic, exactly: 64-bit integers and INCRBYFLOAT's floats.

Pure.  Integers (INCR, EXPIRE, GETRANGE, COUNT, ...) follow Redis's
`string2ll`: optional `-`, no `+`, no spaces, no leading zeros, "-0"
refused, value within a signed 64-bit integer, at most 20 characters.

INCRBYFLOAT computes in C `long double`, which on x86-64 (where Redis
runs) is the x87 80-bit extended format: a 64-bit significand and
exponents from -16382 to 16383, with subnormals below.  Its replies show
the rounding of that format ("12345.6789" + 0.1 gives
"12345.77889999999999926"), so a binary64 float would give other
replies.  This module emulates the format exactly with `Fraction`s:

* parse like `strtold` (decimal or hexadecimal, "inf"/"infinity", no
  spaces, nothing after the number), round to nearest-even; refuse NaN,
  values that overflow, and nonzero values that underflow to zero;
* add exactly, round to nearest-even; an infinite or NaN sum is an error;
* format as `printf("%.17Lf")` does (exact decimal expansion, rounded
  half-to-even at 17 decimals), then drop trailing zeros and a trailing
  point, and write "-0" as "0".

Invariants: every `Fraction` this module returns is exactly representable
in the 80-bit format; formatting and parsing never go through binary64.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

from kvstore import errors, limits
from kvstore.errors import RedisError

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_INTEGER: Final = re.compile(rb"0|-?[1-9][0-9]*")
_INTEGER_CHARS_MAX: Final = 20

_DECIMAL: Final = re.compile(
    rb"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?",
)
_HEXADECIMAL: Final = re.compile(
    rb"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?[0-9]+))?",
)
_INFINITY: Final = re.compile(rb"([+-]?)(?:inf|infinity)", re.IGNORECASE)

_SIGNIFICAND_BITS: Final = 64
_EXPONENT_MIN: Final = -16382
_EXPONENT_MAX: Final = 16383
_SUBNORMAL_EXPONENT_MIN: Final = _EXPONENT_MIN - (_SIGNIFICAND_BITS - 1)
"""The smallest positive value is 2**-16445."""
_LOG2_10: Final = Fraction(332, 100)
"""Just below log2(10): bounds on decimal exponents that err on the side of exact work
(exact, so an exponent of thousands of digits is no float overflow)."""
_FORMAT_DECIMALS: Final = 17

_DIGITS_CHUNK: Final = 4000
"""Digits converted per `int()`/`str()` call: Python refuses more than 4300 at once."""


def parse_int(raw: bytes | bytearray) -> int | None:
    """The integer `raw` spells by Redis's rules, or None."""
    if len(raw) > _INTEGER_CHARS_MAX or _INTEGER.fullmatch(raw) is None:
        return None
    value = int(raw)
    if value < INT64_MIN or value > INT64_MAX:
        return None
    return value


def require_int(raw: bytes, message: str = errors.NOT_AN_INTEGER) -> int:
    """`parse_int`, raising Redis's error (or `message`) when `raw` is not an integer."""
    value = parse_int(raw)
    if value is None:
        raise RedisError(message)
    return value


def add_float(current: bytes | None, increment: bytes) -> bytes:
    """INCRBYFLOAT: `current` (None: a missing key, 0) plus `increment`, formatted as Redis does."""
    base = Fraction(0) if current is None else parse_extended(current)
    step = parse_extended(increment)
    if isinstance(base, float) or isinstance(step, float):
        raise RedisError("ERR increment would produce NaN or Infinity")
    total = _round_extended(base + step)
    if total is None:
        raise RedisError("ERR increment would produce NaN or Infinity")
    return format_extended(total)


def parse_extended(raw: bytes) -> Fraction | float:
    """The 80-bit value `strtold` reads from `raw` (±inf as a float); `RedisError` if refused."""
    if not raw or len(raw) > limits.float_chars_max:
        raise RedisError(errors.NOT_A_FLOAT)
    infinity = _INFINITY.fullmatch(raw)
    if infinity is not None:
        return -math.inf if infinity.group(1) == b"-" else math.inf
    exact = _exact_value(raw)
    if exact == 0:
        return exact
    rounded = _round_extended(exact)
    if rounded is None or rounded == 0:
        # strtold reports ERANGE: Redis refuses overflow and total underflow alike.
        raise RedisError(errors.NOT_A_FLOAT)
    return rounded


def _exact_value(raw: bytes) -> Fraction:
    """The exact rational a decimal or hexadecimal `raw` denotes; `RedisError` if neither."""
    decimal = _DECIMAL.fullmatch(raw)
    hexadecimal = None if decimal is not None else _HEXADECIMAL.fullmatch(raw)
    match = decimal or hexadecimal
    if match is None:
        raise RedisError(errors.NOT_A_FLOAT)
    sign, whole, fraction, exponent = match.groups()
    fraction = fraction or b""
    digits = (whole + fraction).lstrip(b"0")
    if not whole and not fraction:
        raise RedisError(errors.NOT_A_FLOAT)
    if not digits:
        return Fraction(0)
    exponent_value = _signed_digits_to_int(exponent) if exponent else 0
    log2_low: Fraction | int
    log2_high: Fraction | int
    if decimal is not None:
        # value = significand * 10**power, and significand has len(digits) digits.
        power = exponent_value - len(fraction)
        log2_low = (len(digits) - 1 + power) * _LOG2_10
        log2_high = (len(digits) + power) * _LOG2_10 + 1
        significand = _digits_to_int(digits, 10)
        scale = Fraction(10) ** power if _in_range(log2_low, log2_high) else None
    else:
        # value = significand * 2**power; each hexadecimal digit is 4 bits.
        power = exponent_value - 4 * len(fraction)
        significand = _digits_to_int(digits, 16)
        log2_low = significand.bit_length() - 1 + power
        log2_high = significand.bit_length() + power
        scale = Fraction(2) ** power if _in_range(log2_low, log2_high) else None
    if scale is None:
        raise RedisError(errors.NOT_A_FLOAT)
    value = significand * scale
    return -value if sign == b"-" else value


def _in_range(log2_low: Fraction | int, log2_high: Fraction | int) -> bool:
    """False when a value in [2**log2_low, 2**log2_high) surely overflows or rounds to zero.

    Decides before any exact arithmetic, so a huge exponent costs nothing.
    """
    if log2_low > _EXPONENT_MAX + 1:
        return False
    return log2_high >= _SUBNORMAL_EXPONENT_MIN - 1


def _round_extended(value: Fraction) -> Fraction | None:
    """`value` rounded to nearest-even in the 80-bit format; None when it overflows."""
    if value == 0:
        return value
    numerator = abs(value.numerator)
    denominator = value.denominator
    # The binary exponent e with 2**e <= |value| < 2**(e+1).
    exponent = numerator.bit_length() - denominator.bit_length()
    if _below_power_of_two(numerator, denominator, exponent):
        exponent -= 1
    # Below the smallest normal exponent the spacing stays fixed: subnormals.
    exponent = max(exponent, _EXPONENT_MIN)
    shift = _SIGNIFICAND_BITS - 1 - exponent
    if shift >= 0:
        quotient, remainder = divmod(numerator << shift, denominator)
        divisor = denominator
    else:
        divisor = denominator << -shift
        quotient, remainder = divmod(numerator, divisor)
    if 2 * remainder > divisor or (2 * remainder == divisor and quotient & 1):
        quotient += 1
    if quotient == 1 << _SIGNIFICAND_BITS:
        quotient >>= 1
        shift -= 1
    if _SIGNIFICAND_BITS - 1 - shift > _EXPONENT_MAX:
        return None
    rounded = Fraction(quotient, 1 << shift) if shift >= 0 else Fraction(quotient << -shift)
    assert quotient < 1 << _SIGNIFICAND_BITS
    return -rounded if value < 0 else rounded


def _below_power_of_two(numerator: int, denominator: int, exponent: int) -> bool:
    """Whether numerator / denominator < 2**exponent."""
    if exponent >= 0:
        return numerator < denominator << exponent
    return numerator << -exponent < denominator


def format_extended(value: Fraction) -> bytes:
    """`value` as Redis writes a long double for humans: `%.17Lf`, trailing zeros dropped."""
    scaled = abs(value) * 10**_FORMAT_DECIMALS
    units, remainder = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * remainder
    if twice > scaled.denominator or (twice == scaled.denominator and units & 1):
        units += 1
    whole, fraction = divmod(units, 10**_FORMAT_DECIMALS)
    text = _int_to_digits(whole)
    decimals = f"{fraction:0{_FORMAT_DECIMALS}d}".rstrip("0")
    if decimals:
        text += "." + decimals
    if value < 0 and text != "0":
        text = "-" + text
    return text.encode("ascii")


def _signed_digits_to_int(text: bytes) -> int:
    """An exponent's value, however many digits it has."""
    negative = text[:1] == b"-"
    value = _digits_to_int(text.lstrip(b"+-"), 10)
    return -value if negative else value


def _digits_to_int(digits: bytes, base: int) -> int:
    """`int(digits, base)` for any length (Python refuses long decimal strings at once)."""
    value = 0
    for start in range(0, len(digits), _DIGITS_CHUNK):
        chunk = digits[start : start + _DIGITS_CHUNK]
        value = value * base ** len(chunk) + int(chunk, base)
    return value


def _int_to_digits(value: int) -> str:
    """`str(value)` for any size, value >= 0 (Python refuses long conversions at once)."""
    assert value >= 0
    chunks: list[str] = []
    chunk_base = 10**_DIGITS_CHUNK
    while value >= chunk_base:
        value, low = divmod(value, chunk_base)
        chunks.append(f"{low:0{_DIGITS_CHUNK}d}")
    chunks.append(str(value))
    return "".join(reversed(chunks))
