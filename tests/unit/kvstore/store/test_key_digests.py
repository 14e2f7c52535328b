"""KVStore's per-key digests (the optional `StateMachine.key_digests`): each key's share of
the state hash, equal for equal contents however they were reached, and different at
exactly the keys whose contents differ."""

from __future__ import annotations

from hypothesis import given, settings
from kvstore.state_machine import KVStore
from kvstore.store.content_hash import HASH_BYTES

from tests.unit.kvstore.test_determinism import Log, encode, logs, replay


def digests(store: KVStore) -> list[tuple[bytes, bytes]]:
    return list(store.key_digests())


def differing_keys(one: KVStore, other: KVStore) -> list[bytes]:
    """The keys at which two stores' digests differ (or that only one holds)."""
    mine, theirs = dict(one.key_digests()), dict(other.key_digests())
    return sorted(key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key))


def test_equal_contents_reached_differently_give_equal_digests() -> None:
    first, _ = replay(
        encode(
            [
                (0, [("set", [b"a", b"1"]), ("set", [b"b", b"2", b"PX", b"500"])]),
                (10, [("del", [b"a"]), ("set", [b"c", b"x"]), ("set", [b"a", b"1"])]),
                (10, [("rename", [b"c", b"d"])]),
            ]
        )
    )
    second, _ = replay(
        encode(
            [
                (0, [("set", [b"d", b"x"]), ("set", [b"a", b"1"])]),
                (20, [("set", [b"b", b"2", b"PX", b"480"])]),
            ]
        )
    )
    assert [key for key, _ in digests(first)] == [b"a", b"b", b"d"]
    assert digests(first) == digests(second)
    assert first.state_hash() == second.state_hash()


def test_one_changed_key_shows_exactly_that_key() -> None:
    base = [(0, [("set", [b"k%d" % n, b"v"]) for n in range(6)])]
    one, _ = replay(encode(base))
    value_changed, _ = replay(encode([*base, (0, [("set", [b"k3", b"w"])])]))
    ttl_changed, _ = replay(encode([*base, (0, [("pexpire", [b"k1", b"1000"])])]))
    deleted, _ = replay(encode([*base, (0, [("del", [b"k5"])])]))
    added, _ = replay(encode([*base, (0, [("set", [b"new", b"v"])])]))
    assert differing_keys(one, value_changed) == [b"k3"]
    assert differing_keys(one, ttl_changed) == [b"k1"]
    assert differing_keys(one, deleted) == [b"k5"]
    assert differing_keys(one, added) == [b"new"]


def test_chosen_keys_come_in_key_order_and_absent_ones_are_left_out() -> None:
    store, _ = replay(encode([(0, [("set", [b"b", b"2"]), ("set", [b"a", b"1"])])]))
    every = dict(store.key_digests())
    assert list(store.key_digests([b"zz", b"b", b"a", b"b"])) == [
        (b"a", every[b"a"]),
        (b"b", every[b"b"]),
    ]
    assert list(KVStore().key_digests()) == []


@settings(max_examples=100, deadline=None)
@given(log=logs)
def test_the_state_hash_is_the_sum_of_the_key_digests(log: Log) -> None:
    store, _ = replay(encode(log))
    pairs = digests(store)
    assert [key for key, _ in pairs] == sorted(store.values)
    total = sum(int.from_bytes(digest, "big") for _, digest in pairs) % (1 << (8 * HASH_BYTES))
    assert store.state_hash() == total.to_bytes(HASH_BYTES, "big")


@settings(max_examples=50, deadline=None)
@given(log=logs)
def test_a_restored_snapshot_has_the_same_digests(log: Log) -> None:
    store, _ = replay(encode(log))
    copy = KVStore()
    copy.restore(store.snapshot())
    assert digests(copy) == digests(store)
