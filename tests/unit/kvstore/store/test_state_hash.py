"""KVStore's state hash: kept up to date change by change, equal to the hash computed
from scratch, independent of how the contents were reached, and rebuilt after a
snapshot is restored; likewise the SCAN order, merged lazily."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st
from kvstore import limits
from kvstore.protocol.glob import key_hash
from kvstore.state_machine import KVStore
from kvstore.store.content_hash import content_hash

from rsm.core.commands import apply_batch
from rsm.core.log_format import decode_batch
from rsm.core.sessions import SessionTable
from tests.unit.kvstore.test_determinism import Log, encode, logs, replay


@settings(max_examples=150, deadline=None)
@given(log=logs)
def test_the_running_hash_equals_the_hash_from_scratch_after_every_batch(log: Log) -> None:
    store = KVStore()
    sessions = SessionTable()
    for entry in encode(log):
        apply_batch(store, decode_batch(entry), sessions)
        expected = content_hash(store.values, store.expire_at_ms).to_bytes(32, "big")
        assert store.state_hash() == expected


@settings(max_examples=150, deadline=None)
@given(log=logs, idle_after=st.lists(st.booleans(), min_size=25, max_size=25))
def test_idle_brings_the_running_hash_up_to_date_between_any_batches(
    log: Log, idle_after: list[bool]
) -> None:
    store = KVStore()
    sessions = SessionTable()
    for entry, idle in zip(encode(log), idle_after, strict=False):
        apply_batch(store, decode_batch(entry), sessions)
        if idle:
            store.idle()
            assert not store._hash_pending
            expected = content_hash(store.values, store.expire_at_ms)
            assert store._content_hash == expected
    assert store.state_hash() == content_hash(store.values, store.expire_at_ms).to_bytes(32, "big")


def test_the_changes_awaiting_the_hash_stay_within_their_bound() -> None:
    keys = limits.hash_pending_keys_max * 2 + 5
    calls = [("set", [b"k%d" % n, b"v"]) for n in range(keys)]
    calls += [("set", [b"k%d" % n, b"w", b"PX", b"500"]) for n in range(0, keys, 3)]
    calls += [("del", [b"k%d" % n]) for n in range(0, keys, 5)]
    store, _ = replay(encode([(0, calls)]))
    assert 0 < len(store._hash_pending) <= limits.hash_pending_keys_max
    expected = content_hash(store.values, store.expire_at_ms).to_bytes(32, "big")
    assert store.state_hash() == expected


@settings(max_examples=100, deadline=None)
@given(log=logs, walk_after=st.integers(0, 4))
def test_the_scan_order_holds_every_key_once_however_lazily_it_was_merged(
    log: Log, walk_after: int
) -> None:
    store = KVStore()
    sessions = SessionTable()
    for number, entry in enumerate(encode(log)):
        apply_batch(store, decode_batch(entry), sessions)
        if number % (walk_after + 1) == 0:  # sometimes merge in between, sometimes not
            assert list(store._scan_order()) == sorted((key_hash(k), k) for k in store.values)
    assert list(store._scan_order()) == sorted((key_hash(k), k) for k in store.values)


@settings(max_examples=100, deadline=None)
@given(log=logs)
def test_a_restored_snapshot_has_the_same_hash_and_indexes(log: Log) -> None:
    original, _ = replay(encode(log))
    restored = KVStore()
    restored.restore(original.snapshot())
    assert restored.state_hash() == original.state_hash()
    assert list(restored._scan_order()) == list(original._scan_order())
    assert list(restored._expiry_queue) == list(original._expiry_queue)


def test_equal_contents_reached_differently_hash_equal_and_different_contents_do_not() -> None:
    first, _ = replay(encode([(0, [("set", [b"a", b"1"]), ("set", [b"b", b"2"])])]))
    second, _ = replay(
        encode([(0, [("set", [b"b", b"x"]), ("set", [b"a", b"1"]), ("set", [b"b", b"2"])])])
    )
    assert first.state_hash() == second.state_hash()
    third, _ = replay(encode([(0, [("set", [b"a", b"1"]), ("set", [b"b", b"3"])])]))
    assert third.state_hash() != first.state_hash()
    expiring, _ = replay(
        encode([(0, [("set", [b"a", b"1", b"PX", b"500"]), ("set", [b"b", b"2"])])])
    )
    assert expiring.state_hash() != first.state_hash(), "a TTL is part of the state"


def test_the_key_length_is_hashed_so_split_points_differ() -> None:
    first, _ = replay(encode([(0, [("set", [b"ab", b"c"])])]))
    second, _ = replay(encode([(0, [("set", [b"a", b"bc"])])]))
    assert first.state_hash() != second.state_hash()


def test_the_hash_is_the_documented_sum_of_blake2b_digests() -> None:
    """The definition in the module docstring, computed here independently: the hash is
    logged, so a change to it must fail this test."""
    store, _ = replay(
        encode([(0, [("set", [b"ab", b"c"]), ("set", [b"k", b"v", b"PXAT", b"%d" % 2**50])])])
    )

    def digest(data: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(data, digest_size=32).digest(), "big")

    expected = digest(b"value" + (2).to_bytes(4, "big") + b"ab" + b"c")
    expected += digest(b"value" + (1).to_bytes(4, "big") + b"k" + b"v")
    expected += digest(b"expiry" + (1).to_bytes(4, "big") + b"k" + (2**50).to_bytes(8, "big"))
    assert store.state_hash() == (expected % 2**256).to_bytes(32, "big")
