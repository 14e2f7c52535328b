"""The SNAPSHOT request of the client protocol, and the key-value store's state through the
default snapshot codec (the flagship application needs no snapshot code of its own)."""

from __future__ import annotations

import random

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvstore.state_machine import KVStore

from rsm.core.commands import apply_batch
from rsm.core.log_format import Batch, CommandItem
from rsm.core.protocol import (
    Op,
    SnapshotRequest,
    UndecodableRequest,
    decode_request,
    encode_request,
)
from rsm.core.sessions import SessionTable


def test_a_snapshot_request_round_trips() -> None:
    request = SnapshotRequest(77)
    assert decode_request(encode_request(request)[4:]) == request


def test_a_snapshot_request_with_fields_is_a_bad_request() -> None:
    with pytest.raises(UndecodableRequest, match="SNAPSHOT takes no field"):
        decode_request(cbor2.dumps([1, int(Op.SNAPSHOT), 5, "extra"]))


def commands(seed: int, count: int) -> tuple[CommandItem, ...]:
    rng = random.Random(seed)
    items: list[CommandItem] = []
    for _ in range(count):
        key = f"key{rng.randrange(200)}".encode()
        choice = rng.random()
        if choice < 0.5:
            items.append(CommandItem("set", [key, rng.randbytes(rng.randrange(1, 40))], {}))
        elif choice < 0.7:
            items.append(
                CommandItem("set", [key, b"x", b"PX", str(rng.randrange(1, 10_000)).encode()], {})
            )
        elif choice < 0.85:
            items.append(CommandItem("incr", [f"n{rng.randrange(20)}".encode()], {}))
        else:
            items.append(CommandItem("del", [key], {}))
    return tuple(items)


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=1, max_value=400))
def test_the_key_value_store_round_trips_through_a_snapshot(seed: int, count: int) -> None:
    original = KVStore()
    apply_batch(original, Batch(1, 1, 1_000, seed, commands(seed, count)), SessionTable())
    restored = KVStore()
    restored.restore(original.snapshot())
    public = {name: value for name, value in vars(original).items() if not name.startswith("_")}
    assert {n: v for n, v in vars(restored).items() if not n.startswith("_")} == public
    assert restored.state_hash() == original.state_hash()
    # Both go on identically from there.
    later = Batch(1, count + 1, 5_000, seed + 1, commands(seed + 1, 100))
    assert apply_batch(restored, later, SessionTable()) == apply_batch(
        original, later, SessionTable()
    )
    assert restored.state_hash() == original.state_hash()
