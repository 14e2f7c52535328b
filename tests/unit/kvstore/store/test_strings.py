"""String commands against Redis's documented behaviour: replies, errors and edge cases.

Expected values are Redis 7's (checked against a real redis-server while
writing them); each test drives the store through the framework's apply path.
"""

from __future__ import annotations

import pytest
from kvstore import limits
from kvstore.state_machine import KVStore

from tests.unit.kvstore.replica import Replica


@pytest.fixture
def kv() -> Replica:
    return Replica()


# --- SET ----------------------------------------------------------------------------------------


def test_set_and_get(kv: Replica) -> None:
    assert kv.run("SET", "k", "v") == "OK"
    assert kv.run("GET", "k") == b"v"
    assert kv.run("GET", "missing") is None
    assert kv.run("SET", "k", b"\x00\xff binary") == "OK"
    assert kv.run("GET", "k") == b"\x00\xff binary"


def test_set_nx_and_xx(kv: Replica) -> None:
    assert kv.run("SET", "k", "1", "XX") is None
    assert kv.run("GET", "k") is None
    assert kv.run("SET", "k", "1", "NX") == "OK"
    assert kv.run("SET", "k", "2", "nx") is None
    assert kv.run("GET", "k") == b"1"
    assert kv.run("SET", "k", "3", "xx") == "OK"
    assert kv.run("GET", "k") == b"3"


def test_set_get_returns_the_old_value(kv: Replica) -> None:
    assert kv.run("SET", "k", "1", "GET") is None
    assert kv.run("SET", "k", "2", "GET") == b"1"
    # NX + GET (allowed since Redis 7): the old value, and nothing set when it exists.
    assert kv.run("SET", "k", "3", "NX", "GET") == b"2"
    assert kv.run("GET", "k") == b"2"
    assert kv.run("SET", "new", "x", "NX", "GET") is None
    assert kv.run("GET", "new") == b"x"
    # XX + GET on a missing key: None, nothing set.
    assert kv.run("SET", "absent", "x", "XX", "GET") is None
    assert kv.run("EXISTS", "absent") == 0


def test_set_repeated_compatible_options_are_accepted(kv: Replica) -> None:
    assert kv.run("SET", "k", "1", "GET", "GET", "NX", "NX") is None
    assert kv.run("SET", "k", "1", "EX", "100", "EX", "200") == "OK"
    assert kv.run("TTL", "k") == 200


@pytest.mark.parametrize(
    "options",
    [
        ("NX", "XX"),
        ("XX", "NX"),
        ("EX", "10", "PX", "10"),
        ("PX", "10", "EXAT", "10"),
        ("KEEPTTL", "EX", "5"),
        ("EX", "5", "KEEPTTL"),
        ("EX",),
        ("PERSIST",),
        ("FOO",),
        ("NXX",),
    ],
)
def test_set_option_conflicts_are_syntax_errors(kv: Replica, options: tuple[str, ...]) -> None:
    assert kv.error("SET", "k", "v", *options) == "ERR syntax error"
    assert kv.run("EXISTS", "k") == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("EX", "0"), "ERR invalid expire time in 'set' command"),
        (("EX", "-1"), "ERR invalid expire time in 'set' command"),
        (("PX", "0"), "ERR invalid expire time in 'set' command"),
        (("EX", "9223372036854775"), "ERR invalid expire time in 'set' command"),
        (("EX", "9223372036854776"), "ERR invalid expire time in 'set' command"),
        (("PX", "9223372036854775807"), "ERR invalid expire time in 'set' command"),
        (("EX", "abc"), "ERR value is not an integer or out of range"),
        (("EX", "1.5"), "ERR value is not an integer or out of range"),
        (("EX", " 1"), "ERR value is not an integer or out of range"),
    ],
)
def test_set_invalid_expire_times(kv: Replica, options: tuple[str, ...], message: str) -> None:
    assert kv.error("SET", "k", "v", *options) == message
    assert kv.run("EXISTS", "k") == 0


def test_set_with_ttls(kv: Replica) -> None:
    assert kv.run("SET", "k", "v", "EX", "100") == "OK"
    assert kv.run("PTTL", "k") == 100_000
    assert kv.run("SET", "k", "v", "PX", "1500") == "OK"
    assert kv.run("PTTL", "k") == 1500
    at_s = kv.time_ms // 1000 + 50
    assert kv.run("SET", "k", "v", "EXAT", at_s) == "OK"
    assert kv.run("PEXPIRETIME", "k") == at_s * 1000
    assert kv.run("SET", "k", "v", "PXAT", kv.time_ms + 7) == "OK"
    assert kv.run("PTTL", "k") == 7
    # EXAT far in the future fits when no "now" is added (Redis accepts it too).
    assert kv.run("SET", "k", "v", "EXAT", "9223372036854775") == "OK"


def test_set_drops_the_ttl_unless_keepttl(kv: Replica) -> None:
    kv.run("SET", "k", "1", "EX", "100")
    assert kv.run("SET", "k", "2", "KEEPTTL") == "OK"
    assert kv.run("TTL", "k") == 100
    assert kv.run("SET", "k", "3") == "OK"
    assert kv.run("TTL", "k") == -1


def test_set_with_a_time_in_the_past_leaves_no_key(kv: Replica) -> None:
    assert kv.run("SET", "k", "v", "PXAT", "1") == "OK"
    assert kv.run("GET", "k") is None
    assert kv.run("SET", "k", "old") == "OK"
    assert kv.run("SET", "k", "new", "EXAT", "1", "GET") == b"old"
    assert kv.run("EXISTS", "k") == 0


# --- SETNX, SETEX, PSETEX, GETSET, GETDEL, GETEX ------------------------------------------------


def test_setnx(kv: Replica) -> None:
    assert kv.run("SETNX", "k", "1") == 1
    assert kv.run("SETNX", "k", "2") == 0
    assert kv.run("GET", "k") == b"1"


def test_setex_and_psetex(kv: Replica) -> None:
    assert kv.run("SETEX", "k", "10", "v") == "OK"
    assert kv.run("TTL", "k") == 10
    assert kv.run("PSETEX", "p", "2500", "v") == "OK"
    assert kv.run("PTTL", "p") == 2500
    assert kv.error("SETEX", "k", "0", "v") == "ERR invalid expire time in 'setex' command"
    assert kv.error("PSETEX", "k", "-3", "v") == "ERR invalid expire time in 'psetex' command"
    assert kv.error("SETEX", "k", "x", "v") == "ERR value is not an integer or out of range"


def test_getset_returns_old_value_and_drops_the_ttl(kv: Replica) -> None:
    assert kv.run("GETSET", "k", "1") is None
    kv.run("EXPIRE", "k", "100")
    assert kv.run("GETSET", "k", "2") == b"1"
    assert kv.run("GET", "k") == b"2"
    assert kv.run("TTL", "k") == -1


def test_getdel(kv: Replica) -> None:
    kv.run("SET", "k", "v", "EX", "100")
    assert kv.run("GETDEL", "k") == b"v"
    assert kv.run("GETDEL", "k") is None
    assert kv.run("TTL", "k") == -2
    assert kv.store.expire_at_ms == {}


def test_getex_changes_or_removes_the_ttl(kv: Replica) -> None:
    assert kv.run("GETEX", "missing", "EX", "0") is None
    kv.run("SET", "k", "v")
    assert kv.run("GETEX", "k") == b"v"
    assert kv.run("TTL", "k") == -1
    assert kv.run("GETEX", "k", "EX", "100") == b"v"
    assert kv.run("TTL", "k") == 100
    assert kv.run("GETEX", "k", "PERSIST") == b"v"
    assert kv.run("TTL", "k") == -1
    assert kv.run("GETEX", "k", "PXAT", "1") == b"v"
    assert kv.run("EXISTS", "k") == 0


def test_getex_errors(kv: Replica) -> None:
    kv.run("SET", "k", "v")
    assert kv.error("GETEX", "k", "NX") == "ERR syntax error"
    assert kv.error("GETEX", "k", "PERSIST", "EX", "1") == "ERR syntax error"
    assert kv.error("GETEX", "k", "EX", "0") == "ERR invalid expire time in 'getex' command"
    assert kv.error("GETEX", "k", "EX") == "ERR syntax error"


# --- MSET, MSETNX, MGET -------------------------------------------------------------------------


def test_mset_and_mget(kv: Replica) -> None:
    kv.run("SET", "a", "old", "EX", "100")
    assert kv.run("MSET", "a", "1", "b", "2", "a", "3") == "OK"
    assert kv.run("MGET", "a", "b", "c", "a") == [b"3", b"2", None, b"3"]
    assert kv.run("TTL", "a") == -1


def test_mset_with_an_odd_number_of_arguments_is_an_arity_error(kv: Replica) -> None:
    assert kv.error("MSET", "a", "1", "b") == "ERR wrong number of arguments for 'mset' command"
    assert kv.error("MSETNX", "a", "1", "b") == (
        "ERR wrong number of arguments for 'msetnx' command"
    )
    assert kv.run("EXISTS", "a") == 0


def test_msetnx_is_all_or_nothing(kv: Replica) -> None:
    assert kv.run("MSETNX", "a", "1", "b", "2") == 1
    assert kv.run("MSETNX", "b", "x", "c", "3") == 0
    assert kv.run("MGET", "a", "b", "c") == [b"1", b"2", None]
    kv.run("SET", "gone", "v", "PX", "10")
    kv.advance_ms(10)
    assert kv.run("MSETNX", "gone", "back", "c", "3") == 1
    assert kv.run("MGET", "gone", "c") == [b"back", b"3"]


# --- APPEND, STRLEN, GETRANGE, SETRANGE ---------------------------------------------------------


def test_append_and_strlen(kv: Replica) -> None:
    assert kv.run("STRLEN", "k") == 0
    assert kv.run("APPEND", "k", "Hello") == 5
    kv.run("EXPIRE", "k", "100")
    assert kv.run("APPEND", "k", " World") == 11
    assert kv.run("GET", "k") == b"Hello World"
    assert kv.run("STRLEN", "k") == 11
    assert kv.run("TTL", "k") == 100


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 3, b"This"),
        (-3, -1, b"ing"),
        (0, -1, b"This is a string"),
        (10, 100, b"string"),
        (-1, -3, b""),
        (3, 1, b""),
        (100, 200, b""),
        (-100, -50, b"T"),
        (-100, 2, b"Thi"),
        (5, -100, b""),
        (0, 0, b"T"),
    ],
)
def test_getrange(kv: Replica, start: int, end: int, expected: bytes) -> None:
    kv.run("SET", "k", "This is a string")
    assert kv.run("GETRANGE", "k", start, end) == expected


def test_getrange_of_a_missing_key_and_bad_indexes(kv: Replica) -> None:
    assert kv.run("GETRANGE", "missing", "0", "10") == b""
    assert kv.error("GETRANGE", "k", "a", "1") == "ERR value is not an integer or out of range"
    kv.run("SET", "empty", "")
    assert kv.run("GETRANGE", "empty", "0", "-1") == b""


def test_setrange_pads_with_zero_bytes(kv: Replica) -> None:
    assert kv.run("SETRANGE", "k", "5", "hi") == 7
    assert kv.run("GET", "k") == b"\x00\x00\x00\x00\x00hi"
    kv.run("SET", "s", "Hello World")
    assert kv.run("SETRANGE", "s", "6", "Redis") == 11
    assert kv.run("GET", "s") == b"Hello Redis"
    assert kv.run("SETRANGE", "s", "20", "!") == 21
    assert kv.run("GET", "s") == b"Hello Redis" + bytes(9) + b"!"


def test_setrange_with_an_empty_value_changes_nothing(kv: Replica) -> None:
    assert kv.run("SETRANGE", "k", "5", "") == 0
    assert kv.run("EXISTS", "k") == 0
    kv.run("SET", "s", "abc")
    assert kv.run("SETRANGE", "s", "100", "") == 3
    assert kv.run("GET", "s") == b"abc"


def test_setrange_errors_and_the_maximum_offset() -> None:
    kv = Replica(KVStore(value_bytes_max=16))
    assert kv.error("SETRANGE", "k", "-1", "x") == "ERR offset is out of range"
    assert kv.error("SETRANGE", "k", "x", "x") == "ERR value is not an integer or out of range"
    assert kv.run("SETRANGE", "k", "15", "x") == 16
    message = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    assert kv.error("SETRANGE", "k", "16", "x") == message
    assert kv.error("SETRANGE", "other", "15", "xy") == message
    assert kv.run("EXISTS", "other") == 0


def test_setrange_keeps_the_ttl(kv: Replica) -> None:
    kv.run("SET", "k", "abc", "EX", "100")
    kv.run("SETRANGE", "k", "1", "X")
    assert kv.run("GET", "k") == b"aXc"
    assert kv.run("TTL", "k") == 100


# --- size limits --------------------------------------------------------------------------------


def test_values_and_keys_over_the_limits_are_refused() -> None:
    kv = Replica(KVStore(key_bytes_max=4, value_bytes_max=8))
    value_message = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    key_message = "ERR key exceeds maximum allowed size"
    assert kv.run("SET", "kkkk", "v" * 8) == "OK"
    assert kv.error("SET", "kkkk", "v" * 9) == value_message
    assert kv.error("SET", "kkkkk", "v") == key_message
    assert kv.error("MSET", "a", "1", "b", "v" * 9) == value_message
    assert kv.run("EXISTS", "a") == 0, "MSET checks every pair before setting any"
    assert kv.error("APPEND", "kkkk", "x") == value_message
    assert kv.run("GET", "kkkk") == b"v" * 8
    assert kv.error("INCR", "kkkkk") == key_message


def test_the_default_limits_are_the_configured_ones() -> None:
    store = KVStore()
    assert store.key_bytes_max == limits.key_bytes_max_default
    assert store.value_bytes_max == limits.value_bytes_max_default


# --- compare-and-set ----------------------------------------------------------------------------


def test_cas_sets_only_on_the_expected_value(kv: Replica) -> None:
    assert kv.run("CAS", "k", "", "1") == 0
    assert kv.run("EXISTS", "k") == 0
    kv.run("SET", "k", "1", "EX", "100")
    assert kv.run("CAS", "k", "2", "3") == 0
    assert kv.run("GET", "k") == b"1"
    assert kv.run("CAS", "k", "1", "3") == 1
    assert kv.run("GET", "k") == b"3"
    assert kv.run("TTL", "k") == -1
