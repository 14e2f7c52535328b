"""TTLs: the EXPIRE family, TTL/PTTL/EXPIRETIME, PERSIST, and expiry by logged time."""

from __future__ import annotations

import pytest
from kvstore import limits

from tests.unit.kvstore.replica import Replica


@pytest.fixture
def kv() -> Replica:
    return Replica()


def test_ttl_of_missing_and_persistent_keys(kv: Replica) -> None:
    assert kv.run("TTL", "k") == -2
    assert kv.run("PTTL", "k") == -2
    assert kv.run("EXPIRETIME", "k") == -2
    kv.run("SET", "k", "v")
    assert kv.run("TTL", "k") == -1
    assert kv.run("PTTL", "k") == -1
    assert kv.run("EXPIRETIME", "k") == -1
    assert kv.run("PEXPIRETIME", "k") == -1


def test_expire_and_the_ttl_readings(kv: Replica) -> None:
    kv.run("SET", "k", "v")
    assert kv.run("EXPIRE", "k", "10") == 1
    assert kv.run("PTTL", "k") == 10_000
    assert kv.run("PEXPIRETIME", "k") == kv.time_ms + 10_000
    kv.advance_ms(8_501)
    kv.barrier()
    # TTL rounds to the nearest second, as Redis does: 1499 ms -> 1, 1500 ms -> 2.
    assert kv.run("PTTL", "k") == 1_499
    assert kv.run("TTL", "k") == 1
    kv.advance_ms(999)
    kv.barrier()
    assert kv.run("PTTL", "k") == 500
    assert kv.run("TTL", "k") == 1


def test_expiretime_is_absolute_and_rounded() -> None:
    kv = Replica(start_ms=1_000_000_400)
    kv.run("SET", "k", "v", "PXAT", "2000000499")
    assert kv.run("PEXPIRETIME", "k") == 2_000_000_499
    assert kv.run("EXPIRETIME", "k") == 2_000_000
    kv.run("PEXPIREAT", "k", "2000000500")
    assert kv.run("EXPIRETIME", "k") == 2_000_001


def test_the_expire_family_units(kv: Replica) -> None:
    kv.run("MSET", "a", "1", "b", "1", "c", "1", "d", "1")
    now_s = kv.time_ms // 1000
    assert kv.run("EXPIRE", "a", "5") == 1
    assert kv.run("PEXPIRE", "b", "5") == 1
    assert kv.run("EXPIREAT", "c", now_s + 5) == 1
    assert kv.run("PEXPIREAT", "d", kv.time_ms + 5) == 1
    assert kv.run("PTTL", "a") == 5_000
    assert kv.run("PTTL", "b") == 5
    assert kv.run("PEXPIRETIME", "c") == (now_s + 5) * 1000
    assert kv.run("PTTL", "d") == 5


def test_expire_on_a_missing_key(kv: Replica) -> None:
    assert kv.run("EXPIRE", "k", "10") == 0
    assert kv.run("PEXPIREAT", "k", "-5") == 0


@pytest.mark.parametrize(
    "call",
    [("EXPIRE", "0"), ("EXPIRE", "-1"), ("PEXPIRE", "0"), ("EXPIREAT", "1"), ("PEXPIREAT", "-5")],
)
def test_an_expiry_in_the_past_deletes_the_key(kv: Replica, call: tuple[str, str]) -> None:
    kv.run("SET", "k", "v", "EX", "100")
    name, when = call
    assert kv.run(name, "k", when) == 1
    assert kv.run("EXISTS", "k") == 0
    assert kv.store.expire_at_ms == {}
    assert list(kv.store._expiry_queue) == []


@pytest.mark.parametrize(
    ("current", "options", "new", "applied"),
    [
        (None, ("NX",), 100, True),
        (50, ("NX",), 100, False),
        (None, ("XX",), 100, False),
        (50, ("XX",), 100, True),
        (None, ("GT",), 100, False),
        (50, ("GT",), 100, True),
        (50, ("GT",), 50, False),
        (150, ("GT",), 100, False),
        (None, ("LT",), 100, True),
        (150, ("LT",), 100, True),
        (100, ("LT",), 100, False),
        (50, ("LT",), 100, False),
        (50, ("XX", "GT"), 100, True),
        (None, ("XX", "LT"), 100, False),
        (50, ("gt", "xx"), 100, True),
    ],
)
def test_expire_conditions(
    kv: Replica, current: int | None, options: tuple[str, ...], new: int, applied: bool
) -> None:
    kv.run("SET", "k", "v")
    if current is not None:
        kv.run("EXPIRE", "k", current)
    assert kv.run("EXPIRE", "k", new, *options) == (1 if applied else 0)
    expected_s = new if applied else (-1 if current is None else current)
    assert kv.run("TTL", "k") == expected_s


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("NX", "XX"), "ERR NX and XX, GT or LT options at the same time are not compatible"),
        (("NX", "GT"), "ERR NX and XX, GT or LT options at the same time are not compatible"),
        (("LT", "NX"), "ERR NX and XX, GT or LT options at the same time are not compatible"),
        (("GT", "LT"), "ERR GT and LT options at the same time are not compatible"),
        (("FOO",), "ERR Unsupported option FOO"),
        (("NX", "bar"), "ERR Unsupported option bar"),
    ],
)
def test_expire_option_errors(kv: Replica, options: tuple[str, ...], message: str) -> None:
    kv.run("SET", "k", "v")
    assert kv.error("EXPIRE", "k", "10", *options) == message
    # The options are checked before the time.
    assert kv.error("EXPIRE", "k", "not-a-number", *options) == message


@pytest.mark.parametrize(
    ("name", "when", "message"),
    [
        ("EXPIRE", "x", "ERR value is not an integer or out of range"),
        ("EXPIRE", "9223372036854775807", "ERR invalid expire time in 'expire' command"),
        ("EXPIRE", "9223372036854776", "ERR invalid expire time in 'expire' command"),
        ("EXPIRE", "-9223372036854776", "ERR invalid expire time in 'expire' command"),
        ("PEXPIRE", "9223372036854775807", "ERR invalid expire time in 'pexpire' command"),
        ("EXPIREAT", "9223372036854775807", "ERR invalid expire time in 'expireat' command"),
    ],
)
def test_expire_times_that_overflow(kv: Replica, name: str, when: str, message: str) -> None:
    kv.run("SET", "k", "v")
    assert kv.error(name, "k", when) == message
    assert kv.run("TTL", "k") == -1


def test_the_largest_expiry_times_that_fit(kv: Replica) -> None:
    kv.run("SET", "k", "v")
    assert kv.run("PEXPIREAT", "k", "9223372036854775807") == 1
    assert kv.run("PEXPIRETIME", "k") == 9223372036854775807
    # The most negative seconds that convert to ms still work (and delete).
    assert kv.run("EXPIRE", "k", "-9223372036854775") == 1
    assert kv.run("EXISTS", "k") == 0


def test_persist(kv: Replica) -> None:
    assert kv.run("PERSIST", "k") == 0
    kv.run("SET", "k", "v")
    assert kv.run("PERSIST", "k") == 0
    kv.run("EXPIRE", "k", "100")
    assert kv.run("PERSIST", "k") == 1
    assert kv.run("TTL", "k") == -1
    assert kv.store.expire_at_ms == {}
    assert list(kv.store._expiry_queue) == []


# --- expiry by logged time ----------------------------------------------------------------------


def test_a_key_expires_when_its_time_is_reached_not_before(kv: Replica) -> None:
    kv.run("SET", "k", "v", "PX", "100")
    kv.advance_ms(99)
    kv.barrier()
    assert kv.run("GET", "k") == b"v"
    kv.advance_ms(1)
    kv.barrier()
    assert kv.run("GET", "k") is None
    assert kv.run("TTL", "k") == -2
    assert kv.run("EXISTS", "k") == 0


def test_queries_see_the_time_of_the_last_applied_entry(kv: Replica) -> None:
    kv.run("SET", "k", "v", "PX", "100")
    kv.advance_ms(1_000)
    # Nothing was logged since: a stale read still sees the key.
    assert kv.run("GET", "k") == b"v"
    assert kv.run("PTTL", "k") == 100
    # A barrier (what a linearizable read waits for) carries the new time.
    kv.barrier()
    assert kv.run("GET", "k") is None


def test_queries_leave_expired_keys_and_commands_remove_them(kv: Replica) -> None:
    kv.run("SET", "k", "v", "PX", "10")
    kv.advance_ms(10)
    kv.barrier()
    assert kv.run("GET", "k") is None
    assert b"k" in kv.store.values, "a query changes nothing"
    assert kv.run("DBSIZE") == 1, "like Redis, DBSIZE counts keys not yet deleted"
    assert kv.run("KEYS", "*") == []
    assert kv.run("APPEND", "k", "new") == 3
    assert kv.run("GET", "k") == b"new"
    assert kv.run("TTL", "k") == -1


def test_expired_keys_do_not_count_as_existing(kv: Replica) -> None:
    kv.run("SET", "a", "1", "PX", "10")
    kv.run("SET", "b", "1")
    kv.advance_ms(10)
    assert kv.run("DEL", "a", "b") == 1
    kv.run("SET", "c", "5", "PX", "10")
    kv.advance_ms(10)
    assert kv.run("INCR", "c") == 1
    assert kv.run("SETNX", "c", "x") == 0
    kv.run("SET", "d", "v", "PX", "10")
    kv.advance_ms(10)
    assert kv.run("SET", "d", "w", "XX") is None


def test_active_expiry_removes_a_bounded_number_of_due_keys_per_command(kv: Replica) -> None:
    due = limits.active_expiry_keys_max * 2 + 3
    kv.apply([[b"SET", b"due:%d" % i, b"v", b"PX", b"%d" % (10 + i)] for i in range(due)])
    kv.run("SET", "later", "v", "EX", "1000")
    assert len(kv.store.values) == due + 1
    kv.advance_ms(10 + due)
    kv.run("SET", "other", "v")
    assert len(kv.store.values) == due + 2 - limits.active_expiry_keys_max
    # The keys due first go first: the queue is ordered by expiry time.
    assert b"due:0" not in kv.store.values
    assert b"due:%d" % (due - 1) in kv.store.values
    kv.run("SET", "other", "v")
    kv.run("SET", "other", "v")
    assert sorted(kv.store.values) == [b"later", b"other"]
    assert list(kv.store._expiry_queue) == [(kv.store.expire_at_ms[b"later"], b"later")]


def test_the_expiry_index_follows_every_change(kv: Replica) -> None:
    kv.run("SET", "k", "v", "EX", "10")
    kv.run("EXPIRE", "k", "20")
    kv.run("SET", "j", "v", "EX", "30")
    kv.run("GETSET", "j", "w")
    kv.run("SET", "i", "v", "EX", "40")
    kv.run("DEL", "i")
    store = kv.store
    assert store.expire_at_ms == {b"k": kv.time_ms + 20_000}
    assert list(store._expiry_queue) == [(kv.time_ms + 20_000, b"k")]
    kv.run("FLUSHALL")
    assert (dict(store.values), store.expire_at_ms, list(store._expiry_queue)) == ({}, {}, [])


def test_keys_deleted_for_expiring_are_counted_and_other_deletions_are_not(kv: Replica) -> None:
    kv.run("MSET", "a", "1", "b", "1", "deleted", "1", "kept", "1")
    kv.run("PEXPIRE", "a", "100")
    kv.run("PEXPIRE", "b", "100")
    kv.run("PEXPIRE", "kept", "100000")
    kv.run("DEL", "deleted")
    assert kv.store.expired_keys == 0
    kv.advance_ms(200)
    kv.run("SET", "other", "1")  # the next command deletes the keys due
    assert kv.store.expired_keys == 2
    assert kv.run("GET", "a") is None
    assert kv.run("EXISTS", "kept") == 1
    assert "expired_keys" not in vars(kv.store), "a counter of the process, not state"
