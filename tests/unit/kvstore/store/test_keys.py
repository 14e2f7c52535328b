"""Keyspace commands: DEL, UNLINK, RENAME, RENAMENX, COPY, EXISTS, TOUCH, TYPE, KEYS, SCAN, DBSIZE,
FLUSHDB, FLUSHALL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvstore import limits
from kvstore.protocol.glob import decode_cursor, key_hash

from tests.unit.kvstore.replica import Replica


def in_scan_order(keys: list[bytes]) -> list[bytes]:
    """`keys` in the order KEYS and SCAN walk them: by 64-bit hash."""
    return sorted(keys, key=lambda key: (key_hash(key), key))


@pytest.fixture
def kv() -> Replica:
    return Replica()


def test_del_and_unlink_count_the_keys_that_existed(kv: Replica) -> None:
    kv.run("MSET", "a", "1", "b", "2", "c", "3")
    assert kv.run("DEL", "a", "a", "missing") == 1
    assert kv.run("UNLINK", "b", "c") == 2
    assert kv.run("DBSIZE") == 0


def test_exists_counts_a_key_each_time_it_is_named(kv: Replica) -> None:
    kv.run("SET", "a", "1")
    assert kv.run("EXISTS", "a", "a", "b") == 2


def test_touch_counts_like_exists(kv: Replica) -> None:
    kv.run("SET", "a", "1")
    kv.run("PSETEX", "gone", "10", "v")
    kv.advance_ms(10)
    kv.barrier()
    assert kv.run("TOUCH", "a", "a", "gone", "missing") == 2


def test_rename_moves_the_value_and_its_ttl_and_replaces_the_new_name(kv: Replica) -> None:
    kv.run("SET", "old", "v", "PX", "5000")
    kv.run("SET", "new", "replaced", "PX", "90000")
    assert kv.run("RENAME", "old", "new") == "OK"
    assert kv.run("EXISTS", "old") == 0
    assert kv.run("GET", "new") == b"v"
    assert kv.run("PTTL", "new") == 5000
    kv.run("SET", "plain", "p")
    assert kv.run("RENAME", "plain", "new") == "OK"
    assert kv.run("PTTL", "new") == -1, "the new name takes the old key's TTL, or none"
    assert kv.run("DBSIZE") == 1


def test_renamenx_renames_only_to_a_free_name(kv: Replica) -> None:
    kv.run("MSET", "a", "1", "b", "2")
    assert kv.run("RENAMENX", "a", "b") == 0
    assert kv.run("MGET", "a", "b") == [b"1", b"2"]
    assert kv.run("RENAMENX", "a", "c") == 1
    assert kv.run("MGET", "a", "c") == [None, b"1"]


def test_renaming_a_key_to_itself_changes_nothing(kv: Replica) -> None:
    kv.run("SET", "k", "v", "PX", "5000")
    assert kv.run("RENAME", "k", "k") == "OK"
    assert kv.run("RENAMENX", "k", "k") == 0
    assert kv.run("GET", "k") == b"v"
    assert kv.run("PTTL", "k") == 5000


def test_renaming_a_missing_or_expired_key_is_an_error(kv: Replica) -> None:
    assert kv.error("RENAME", "missing", "x") == "ERR no such key"
    assert kv.error("RENAMENX", "missing", "missing") == "ERR no such key"
    kv.run("PSETEX", "k", "10", "v")
    kv.advance_ms(10)
    assert kv.error("RENAME", "k", "x") == "ERR no such key"
    assert kv.run("DBSIZE") == 0, "the expired key was deleted on the way"


def test_copy_copies_the_value_and_ttl_and_replaces_only_when_asked(kv: Replica) -> None:
    kv.run("SET", "src", "v", "PX", "5000")
    assert kv.run("COPY", "src", "dst") == 1
    assert kv.run("MGET", "src", "dst") == [b"v", b"v"]
    assert kv.run("PTTL", "dst") == 5000
    kv.run("SET", "other", "o")
    assert kv.run("COPY", "other", "dst") == 0
    assert kv.run("GET", "dst") == b"v"
    assert kv.run("COPY", "other", "dst", "db", "0", "REPLACE") == 1
    assert kv.run("GET", "dst") == b"o"
    assert kv.run("PTTL", "dst") == -1
    assert kv.run("COPY", "missing", "dst") == 0


def test_copy_errors(kv: Replica) -> None:
    kv.run("SET", "src", "v")
    assert kv.error("COPY", "src", "src") == "ERR source and destination objects are the same"
    assert kv.error("COPY", "src", "dst", "DB") == "ERR syntax error"
    assert kv.error("COPY", "src", "dst", "NOW") == "ERR syntax error"
    assert kv.error("COPY", "src", "dst", "DB", "x") == (
        "ERR value is not an integer or out of range"
    )
    # One database: another index is out of range (Redis would copy to it).
    assert kv.error("COPY", "src", "src", "DB", "1") == "ERR DB index is out of range"
    assert kv.error("COPY", "src", "dst", "DB", "-1") == "ERR DB index is out of range"
    assert kv.run("EXISTS", "dst") == 0


def test_new_names_are_bounded_like_every_written_key(kv: Replica) -> None:
    long_key = "k" * (limits.key_bytes_max_default + 1)
    kv.run("SET", "src", "v")
    assert kv.error("RENAME", "src", long_key) == "ERR key exceeds maximum allowed size"
    assert kv.error("COPY", "src", long_key) == "ERR key exceeds maximum allowed size"
    assert kv.run("KEYS", "*") == [b"src"]


def test_type(kv: Replica) -> None:
    assert kv.run("TYPE", "k") == "none"
    kv.run("SET", "k", "v")
    assert kv.run("TYPE", "k") == "string"


def test_keys_lists_matches_in_scan_order(kv: Replica) -> None:
    kv.run("MSET", "user:2", "x", "user:10", "x", "session", "x", "user:1", "x", "", "x")
    every = in_scan_order([b"", b"session", b"user:1", b"user:10", b"user:2"])
    assert kv.run("KEYS", "*") == every
    assert kv.run("KEYS", "user:*") == in_scan_order([b"user:1", b"user:10", b"user:2"])
    assert kv.run("KEYS", "user:?") == in_scan_order([b"user:1", b"user:2"])
    assert kv.run("KEYS", "*ss*") == [b"session"]
    assert kv.run("KEYS", "nothing*") == []
    # "**" is matched like any pattern, and the empty key matches only "".
    assert kv.run("KEYS", "**") == [key for key in every if key]
    assert kv.run("KEYS", "") == [b""]


def test_dbsize_and_flush(kv: Replica) -> None:
    kv.run("MSET", "a", "1", "b", "2")
    kv.run("EXPIRE", "a", "10")
    assert kv.run("DBSIZE") == 2
    assert kv.run("FLUSHDB", "ASYNC") == "OK"
    assert kv.run("DBSIZE") == 0
    kv.run("SET", "a", "1")
    assert kv.run("FLUSHALL", "sync") == "OK"
    assert kv.run("DBSIZE") == 0
    assert kv.error("FLUSHDB", "now") == "ERR syntax error"
    assert kv.error("FLUSHALL", "ASYNC", "SYNC") == "ERR syntax error"


def scan_all(kv: Replica, *options: str) -> tuple[list[bytes], int]:
    """Every key one full SCAN iteration returns, and how many calls it took."""
    cursor = b"0"
    keys: list[bytes] = []
    calls = 0
    while True:
        cursor, page = kv.run("SCAN", cursor, *options)
        keys += page
        calls += 1
        if cursor == b"0":
            return keys, calls


def test_scan_pages_by_count(kv: Replica) -> None:
    kv.apply([[b"SET", b"key:%02d" % i, b"v"] for i in range(25)])
    ordered = in_scan_order([b"key:%02d" % i for i in range(25)])
    keys, calls = scan_all(kv)
    assert keys == ordered
    assert calls == 3
    cursor, page = kv.run("SCAN", "0", "COUNT", "7")
    assert page == ordered[:7]
    assert decode_cursor(cursor) == key_hash(ordered[7]), "the cursor is the next key's hash"
    assert kv.run("SCAN", cursor, "COUNT", "100") == [b"0", ordered[7:]]


def test_scan_cursors_fit_unsigned_64_bits_whatever_the_key(kv: Replica) -> None:
    long_keys = [bytes([i]) * 50_000 for i in range(5)]
    kv.apply([[b"SET", key, b"v"] for key in long_keys])
    cursor, _ = kv.run("SCAN", "0", "COUNT", "2")
    assert 0 < int(cursor) < 2**64
    assert sorted(scan_all(kv, "COUNT", "2")[0]) == sorted(long_keys)


def test_scan_match_and_type(kv: Replica) -> None:
    kv.apply([[b"SET", b"%s:%d" % (kind, i), b"v"] for kind in (b"a", b"b") for i in range(5)])
    assert scan_all(kv, "MATCH", "b:*")[0] == in_scan_order([b"b:%d" % i for i in range(5)])
    assert scan_all(kv, "MATCH", "*:3", "COUNT", "2")[0] == in_scan_order([b"a:3", b"b:3"])
    assert len(scan_all(kv, "TYPE", "STRING")[0]) == 10
    assert kv.run("SCAN", "0", "TYPE", "hash") == [b"0", []]


def test_scan_match_examines_count_keys_whatever_matches(kv: Replica) -> None:
    kv.apply([[b"SET", b"a:%03d" % i, b"v"] for i in range(100)])
    cursor, page = kv.run("SCAN", "0", "MATCH", "nothing*", "COUNT", "5")
    assert page == []
    assert cursor != b"0", "COUNT bounds the keys examined, not those returned (as Redis)"


def test_scan_count_is_clamped(kv: Replica) -> None:
    kv.apply([[b"SET", b"k%05d" % i, b"v"] for i in range(limits.scan_count_max + 1)])
    cursor, page = kv.run("SCAN", "0", "COUNT", "9223372036854775807")
    assert len(page) == limits.scan_count_max
    assert cursor != b"0"


def test_scan_skips_expired_keys(kv: Replica) -> None:
    kv.run("SET", "a", "1", "PX", "5")
    kv.run("SET", "b", "1")
    kv.advance_ms(5)
    kv.barrier()
    assert scan_all(kv)[0] == [b"b"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("abc",), "ERR invalid cursor"),
        (("-1",), "ERR invalid cursor"),
        (("18446744073709551616",), "ERR invalid cursor"),
        (("1" * 5000,), "ERR invalid cursor"),
        (("0", "COUNT", "0"), "ERR syntax error"),
        (("0", "COUNT", "-1"), "ERR syntax error"),
        (("0", "COUNT", "x"), "ERR value is not an integer or out of range"),
        (("0", "MATCH"), "ERR syntax error"),
        (("0", "FOO", "bar"), "ERR syntax error"),
        (("abc", "FOO"), "ERR invalid cursor"),
    ],
)
def test_scan_errors(kv: Replica, arguments: tuple[str, ...], message: str) -> None:
    assert kv.error("SCAN", *arguments) == message


key_sets = st.sets(st.binary(max_size=6), max_size=40)


@settings(max_examples=60, deadline=None)
@given(keys=key_sets, count=st.integers(1, 12))
def test_a_full_scan_returns_every_key_exactly_once(keys: set[bytes], count: int) -> None:
    kv = Replica()
    if keys:
        kv.apply([[b"SET", key, b"v"] for key in keys])
    found, _ = scan_all(kv, "COUNT", str(count))
    assert sorted(found) == sorted(keys)
    assert len(found) == len(keys)


@settings(max_examples=60, deadline=None)
@given(
    kept=key_sets,
    churn=st.lists(st.tuples(st.booleans(), st.binary(max_size=6)), max_size=30),
    count=st.integers(1, 5),
)
def test_keys_present_throughout_are_returned_once_despite_writes(
    kept: set[bytes], churn: list[tuple[bool, bytes]], count: int
) -> None:
    kv = Replica()
    if kept:
        kv.apply([[b"SET", key, b"v"] for key in kept])
    steps = iter(churn)
    cursor = b"0"
    found: list[bytes] = []
    while True:
        cursor, page = kv.run("SCAN", cursor, "COUNT", str(count))
        found += page
        if cursor == b"0":
            break
        # Between calls, other clients create and delete keys (never the kept ones).
        for create, key in steps:
            if key in kept:
                continue
            if create:
                kv.run("SET", key, "x")
            else:
                kv.run("DEL", key)
            break
    for key in kept:
        assert found.count(key) == 1


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("get", ["k"], "keys are bytes, not str"),
        ("mget", [b"k", "k"], "keys are bytes, not str"),
        ("strlen", ["k"], "keys are bytes, not str"),
        ("getrange", [b"k", "0", b"1"], "arguments are bytes, not str"),
        ("getrange", ["k", b"0", b"1"], "keys are bytes, not str"),
        ("ttl", ["k"], "keys are bytes, not str"),
        ("pexpiretime", ["k"], "keys are bytes, not str"),
        ("exists", ["k"], "keys are bytes, not str"),
        ("touch", [b"k", 5], "keys are bytes, not int"),
        ("type", ["k"], "keys are bytes, not str"),
        ("keys", ["*"], "arguments are bytes, not str"),
        ("scan", [b"0", "count", b"1"], "arguments are bytes, not str"),
        ("debug", [b"digest-value", "k"], "arguments are bytes, not str"),
    ],
)
def test_a_query_given_text_for_bytes_says_so(
    kv: Replica, name: str, args: list[object], message: str
) -> None:
    """A caller other than a Redis client (`rsm query` without `--bytes`) may pass text:
    the query fails with a TypeError instead of answering for a key no store holds."""
    kv.run("SET", "k", "v")
    outcome = kv.query(name, *args)
    assert not outcome.ok
    assert (outcome.detail, outcome.message) == ("TypeError", message)
