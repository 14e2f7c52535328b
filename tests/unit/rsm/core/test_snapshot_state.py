"""The default snapshot codec: any supported state shape round-trips (Hypothesis), large
containers stream in bounded runs, equal states give equal bytes, and what cannot be
represented faithfully is refused by name."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import (  # type: ignore[import-untyped]
    SortedDict,
    SortedKeyList,
    SortedList,
    SortedSet,
)

from rsm import limits
from rsm.core.snapshot_state import StateDecoder, digest, encode_state, restore_state
from rsm.core.state_machine import StateMachine
from rsm.errors import BadSnapshotState, SnapshotCorrupt


class Bag:
    """A plain object: the codec needs public attributes, not a StateMachine."""


def bag(**attributes: Any) -> Bag:
    state = Bag()
    vars(state).update(attributes)
    return state


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
hashables = st.recursive(
    st.one_of(st.integers(), st.text(max_size=6), st.binary(max_size=6)),
    lambda inner: st.one_of(
        st.tuples(inner, inner), st.frozensets(inner, max_size=3).map(frozenset)
    ),
    max_leaves=6,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(hashables, inner, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.dictionaries(st.binary(max_size=6), inner, max_size=4).map(SortedDict),
        st.lists(st.integers(), max_size=5).map(SortedList),
        st.sets(st.text(max_size=4), max_size=5).map(SortedSet),
    ),
    max_leaves=20,
)
names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


def round_trip(state: Bag) -> Bag:
    restored = Bag()
    restore_state(restored, encode_state(state))
    return restored


def assert_same(restored: Bag, original: Bag) -> None:
    expected = {k: v for k, v in vars(original).items() if not k.startswith("_")}
    assert vars(restored) == expected
    for name, value in expected.items():
        assert type(vars(restored)[name]) is type(value), name
        if isinstance(value, dict):
            assert list(vars(restored)[name]) == list(value), f"{name} lost its order"


@given(st.dictionaries(names, values, max_size=6))
def test_any_state_shape_round_trips(attributes: dict[str, Any]) -> None:
    state = bag(**attributes)
    assert_same(round_trip(state), state)


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(["dict", "list", "set", "frozenset", "tuple", "sdict", "slist", "sset"]),
    st.integers(min_value=limits.snapshot_container_items_min + 1, max_value=5_000),
)
def test_large_containers_stream_in_runs_and_round_trip(kind: str, count: int) -> None:
    keys = [n.to_bytes(4, "big") for n in range(count)]
    makers: dict[str, Callable[[], Any]] = {
        "dict": lambda: {k: (n, k) for n, k in enumerate(reversed(keys))},
        "list": lambda: [[n] for n in range(count)],
        "set": lambda: set(keys),
        "frozenset": lambda: frozenset(keys),
        "tuple": lambda: tuple(keys),
        "sdict": lambda: SortedDict(zip(keys, range(count), strict=True)),
        "slist": lambda: SortedList(range(count)),
        "sset": lambda: SortedSet(keys),
    }
    value = makers[kind]()
    state = bag(big=value, small=1)
    records = list(encode_state(state))
    assert len(records) > 4  # head, container, several runs, attribute, end
    assert max(map(len, records)) < 4 * limits.snapshot_run_bytes_target
    assert_same(round_trip(state), state)


def test_a_decoder_holds_at_most_one_record_whatever_the_chunks() -> None:
    state = bag(values=SortedDict((n.to_bytes(8, "big"), b"v" * 100) for n in range(20_000)))
    stream = b"".join(encode_state(state))
    restored = Bag()
    decoder = StateDecoder(restored)
    chunk_bytes = 64 * 1024
    for start in range(0, len(stream), chunk_bytes):
        decoder.feed(stream[start : start + chunk_bytes])
        assert decoder.buffered_bytes <= 2 * limits.snapshot_run_bytes_target
    decoder.finish()
    assert restored.values == state.values  # type: ignore[attr-defined]


def added_backwards(words: list[str]) -> set[str]:
    """A set of `words` built in the opposite order (its iteration order may differ)."""
    result: set[str] = set()
    for word in words[::-1]:
        result.add(word)
    return result


def test_equal_states_give_equal_bytes_whatever_the_set_order() -> None:
    words = [f"w{n}" for n in range(2_000)]
    first = bag(s=set(words), f=frozenset(words[:10]), nested={"k": set(words[:50])})
    second = bag(
        nested={"k": added_backwards(words[:50])},
        f=frozenset(added_backwards(words[:10])),
        s=added_backwards(words),
    )
    assert digest(encode_state(first)) == digest(encode_state(second))
    assert digest(encode_state(first)) != digest(encode_state(bag(s=set(words[1:]))))


def test_private_attributes_are_not_state() -> None:
    state = bag(value=1, _cache=threading.Lock())
    assert vars(round_trip(state)) == {"value": 1}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (threading.Lock(), "lock"),
        (deque([1, 2]), "deque"),
        (OrderedDict(a=1), "OrderedDict"),
        (SortedDict(len, {"a": 1}), "key function"),
        (SortedKeyList([1], key=abs), "SortedKeyList"),
        (bytearray(b"x"), "bytearray"),
        ({"k": threading.Lock()}, "lock"),
        ({"k": deque()}, "deque"),
    ],
)
def test_what_cannot_be_represented_is_refused_by_name(value: object, named: str) -> None:
    with pytest.raises(BadSnapshotState, match="'troublesome'") as raised:
        list(encode_state(bag(fine=1, troublesome=value)))
    assert named.lower() in str(raised.value).lower()


def test_corrupt_streams_are_refused() -> None:
    records = list(encode_state(bag(a=list(range(3_000)), b=2)))
    stream = b"".join(records)
    with pytest.raises(SnapshotCorrupt, match="end record"):
        restore_state(Bag(), records[:-1])
    with pytest.raises(SnapshotCorrupt, match="inside a record"):
        restore_state(Bag(), [stream[:-5]])
    with pytest.raises(SnapshotCorrupt):
        restore_state(Bag(), [stream[20:]])
    with pytest.raises(SnapshotCorrupt, match="after its end"):
        restore_state(Bag(), [stream, stream])


class Machine(StateMachine):
    def __init__(self) -> None:
        self.values: SortedDict = SortedDict()
        self.counts: dict[str, int] = {}


def test_the_state_machine_defaults_use_the_codec() -> None:
    machine = Machine()
    machine.values[b"k"] = b"v"
    machine.counts["x"] = 3
    fresh = Machine()
    fresh.restore(machine.snapshot())
    assert (fresh.values, fresh.counts) == (machine.values, machine.counts)
    assert fresh.state_hash() == machine.state_hash() == digest(machine.snapshot())
    fresh.counts["x"] = 4
    assert fresh.state_hash() != machine.state_hash()
