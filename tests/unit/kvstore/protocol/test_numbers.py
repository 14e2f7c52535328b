"""Integers and INCRBYFLOAT: Redis's parsing, overflow rules and long double formatting."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kvstore.errors import RedisError
from kvstore.protocol import numbers

from tests.unit.kvstore.replica import Replica

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


@pytest.fixture
def kv() -> Replica:
    return Replica()


# --- integers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"0", 0),
        (b"7", 7),
        (b"-7", -7),
        (b"9223372036854775807", INT64_MAX),
        (b"-9223372036854775808", INT64_MIN),
        (b"9223372036854775808", None),
        (b"-9223372036854775809", None),
        (b"01", None),
        (b"-0", None),
        (b"+1", None),
        (b" 1", None),
        (b"1 ", None),
        (b"1.0", None),
        (b"", None),
        (b"-", None),
        (b"1e3", None),
        (b"\xd9\xa1", None),
        (b"000000000000000000001", None),
    ],
)
def test_integers_follow_string2ll(raw: bytes, value: int | None) -> None:
    assert numbers.parse_int(raw) == value


@given(st.integers(INT64_MIN, INT64_MAX))
def test_every_int64_round_trips(value: int) -> None:
    assert numbers.parse_int(b"%d" % value) == value


def test_incr_family(kv: Replica) -> None:
    assert kv.run("INCR", "n") == 1
    assert kv.run("INCRBY", "n", "41") == 42
    assert kv.run("DECR", "n") == 41
    assert kv.run("DECRBY", "n", "50") == -9
    assert kv.run("GET", "n") == b"-9"
    assert kv.run("DECR", "fresh") == -1


def test_incr_keeps_the_ttl(kv: Replica) -> None:
    kv.run("SET", "n", "1", "EX", "100")
    assert kv.run("INCR", "n") == 2
    assert kv.run("TTL", "n") == 100


@pytest.mark.parametrize("value", ["abc", "1.5", " 1", "01", "", "9223372036854775808"])
def test_incr_on_a_non_integer(kv: Replica, value: str) -> None:
    kv.run("SET", "n", value)
    assert kv.error("INCR", "n") == "ERR value is not an integer or out of range"
    assert kv.run("GET", "n") == value.encode()


def test_increments_must_be_integers(kv: Replica) -> None:
    assert kv.error("INCRBY", "n", "1.5") == "ERR value is not an integer or out of range"
    assert kv.error("DECRBY", "n", "x") == "ERR value is not an integer or out of range"
    assert kv.run("EXISTS", "n") == 0


def test_overflow_at_the_int64_bounds(kv: Replica) -> None:
    kv.run("SET", "n", str(INT64_MAX))
    assert kv.error("INCR", "n") == "ERR increment or decrement would overflow"
    assert kv.run("INCRBY", "n", "0") == INT64_MAX
    assert kv.run("DECRBY", "n", str(INT64_MAX)) == 0
    kv.run("SET", "n", str(INT64_MIN))
    assert kv.error("DECR", "n") == "ERR increment or decrement would overflow"
    assert kv.error("INCRBY", "n", "-1") == "ERR increment or decrement would overflow"
    assert kv.run("INCRBY", "n", str(INT64_MAX)) == -1
    assert kv.run("GET", "n") == b"-1"


def test_decrby_of_the_smallest_int64_would_overflow(kv: Replica) -> None:
    assert kv.error("DECRBY", "n", str(INT64_MIN)) == "ERR decrement would overflow"
    assert kv.error("DECRBY", "n", "9223372036854775808") == (
        "ERR value is not an integer or out of range"
    )


# --- INCRBYFLOAT --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "increment", "expected"),
    [
        ("10.50", "0.1", b"10.6"),
        ("5.0e3", "2.0e2", b"5200"),
        (None, "5.0e3", b"5000"),
        (None, "3.0", b"3"),
        ("3", "0.5", b"3.5"),
        ("0.1", "0.2", b"0.3"),
        ("12345.6789", "0.1", b"12345.77889999999999926"),
        ("1", "-1", b"0"),
        ("0", "-0.0", b"0"),
        ("100000000000000000000", "1", b"100000000000000000000"),
        (None, "0x10p1", b"32"),
        (None, "1e-20", b"0"),
        (None, "-1e-20", b"0"),
        (None, "1.5e-17", b"0.00000000000000002"),
        (None, "2.5e-17", b"0.00000000000000002"),
        (None, "0.000000000000000005", b"0"),
        ("32", "1e-320", b"32"),
        (None, ".5", b"0.5"),
        (None, "5.", b"5"),
        (None, "+1.25", b"1.25"),
        ("-3", "1", b"-2"),
    ],
)
def test_incrbyfloat_replies_as_redis_does(
    kv: Replica, start: str | None, increment: str, expected: bytes
) -> None:
    if start is not None:
        kv.run("SET", "f", start)
    assert kv.run("INCRBYFLOAT", "f", increment) == expected
    assert kv.run("GET", "f") == expected


def test_incrbyfloat_of_a_huge_number_prints_every_digit(kv: Replica) -> None:
    reply = kv.run("INCRBYFLOAT", "f", "1e400")
    assert reply.startswith(b"10000000000000000000281880683947586514586453433629052038625910")
    assert len(reply) == 401
    assert b"." not in reply


@pytest.mark.parametrize(
    "increment", ["abc", "", " 1", "1 ", "1e", "e5", ".", "nan", "1e5000", "1e-5000", "0x", "--1"]
)
def test_incrbyfloat_refuses_what_strtold_does_not_read_fully(kv: Replica, increment: str) -> None:
    assert kv.error("INCRBYFLOAT", "f", increment) == "ERR value is not a valid float"
    assert kv.run("EXISTS", "f") == 0


def test_incrbyfloat_on_a_non_number_value(kv: Replica) -> None:
    kv.run("SET", "f", "hello")
    assert kv.error("INCRBYFLOAT", "f", "1") == "ERR value is not a valid float"


@pytest.mark.parametrize(("start", "increment"), [(None, "inf"), ("inf", "1"), ("1", "-INFINITY")])
def test_incrbyfloat_to_infinity_is_refused(kv: Replica, start: str | None, increment: str) -> None:
    if start is not None:
        kv.run("SET", "f", start)
    assert kv.error("INCRBYFLOAT", "f", increment) == (
        "ERR increment would produce NaN or Infinity"
    )


def test_incrbyfloat_overflowing_the_format_is_refused(kv: Replica) -> None:
    kv.run("SET", "f", "1e4932")
    assert kv.error("INCRBYFLOAT", "f", "1e4932") == "ERR increment would produce NaN or Infinity"


def test_incrbyfloat_keeps_the_ttl(kv: Replica) -> None:
    kv.run("SET", "f", "1", "EX", "100")
    kv.run("INCRBYFLOAT", "f", "1.5")
    assert kv.run("TTL", "f") == 100


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_binary64_value_is_read_exactly(value: float) -> None:
    # A binary64 value has 53 significant bits, so the 64-bit format holds it
    # exactly: reading its exact decimal expansion gives it back unchanged.
    assert numbers.parse_extended(str(Decimal(value)).encode()) == Fraction(value)


@given(st.integers(-(2**63), 2**63))
def test_integers_up_to_64_bits_add_exactly(value: int) -> None:
    assert numbers.add_float(b"%d" % value, b"0") == b"%d" % value


def test_rounding_to_the_64_bit_significand_is_to_nearest_even() -> None:
    # 2**64 + 1 lies between two representable values (2**64 and 2**64 + 2
    # are 2 apart there): the tie goes to the even significand, 2**64.
    assert numbers.parse_extended(b"%d" % (2**64 + 1)) == 2**64
    assert numbers.parse_extended(b"%d" % (2**64 + 3)) == 2**64 + 4
    assert numbers.parse_extended(b"%d" % (2**64 + 2)) == 2**64 + 2


def test_subnormals_are_read_and_zero_is_not_an_underflow() -> None:
    smallest = Fraction(1, 2**16445)
    assert numbers.parse_extended(b"0x1p-16445") == smallest
    assert numbers.parse_extended(b"0.000") == 0
    with pytest.raises(RedisError, match="not a valid float"):
        numbers.parse_extended(b"0x1p-16447")


def test_numbers_longer_than_redis_reads_are_refused() -> None:
    with pytest.raises(RedisError, match="not a valid float"):
        numbers.parse_extended(b"1" + b"0" * 5119)
    long_tenth = b"0." + b"0" * 5000 + b"1e5000"
    assert numbers.parse_extended(long_tenth) == numbers.parse_extended(b"0.1")


@pytest.mark.parametrize("sign", ["", "-"])
def test_an_exponent_of_hundreds_of_digits_is_out_of_range_not_a_crash(
    kv: Replica, sign: str
) -> None:
    exponent = sign + "9" * 400  # a float overflows on it: the bounds are exact
    assert kv.error("INCRBYFLOAT", "f", "1e" + exponent) == "ERR value is not a valid float"
    kv.run("SET", "g", "1e" + exponent)
    assert kv.error("INCRBYFLOAT", "g", "1") == "ERR value is not a valid float"
    in_range = b"0." + b"0" * 300 + b"1e" + b"3" * 3  # 10**-301 * 10**333
    assert numbers.parse_extended(in_range) == numbers.parse_extended(b"1e32")
