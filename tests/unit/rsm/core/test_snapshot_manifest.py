"""The snapshots znode: its transitions keep every ledger listed exactly once until deleted,
and its encoding round-trips and refuses what is not a value."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm import limits
from rsm.core import snapshot_manifest
from rsm.core.snapshot_manifest import (
    Manifest,
    SnapshotAbandoned,
    SnapshotsFull,
    SnapshotsValue,
    decode_snapshots,
    encode_snapshots,
)
from rsm.errors import MalformedValue


def manifest(index: int, ledger_id: int) -> Manifest:
    return Manifest(
        app="app",
        index=index,
        time_ms=index * 10,
        epoch=1,
        ledger_id=ledger_id,
        state_hash=b"h" * 32,
        sha256=b"s" * 32,
        size_bytes=100,
        chunk_count=1,
        created_ms=5,
        replica_id="r",
    )


def registered(value: SnapshotsValue, index: int, ledger_id: int, kept: int = 2) -> SnapshotsValue:
    value = snapshot_manifest.begin(value, ledger_id=ledger_id, replica_id="r", started_ms=0)
    return snapshot_manifest.register(value, manifest(index, ledger_id), kept=kept)


def test_register_keeps_the_newest_and_sends_the_rest_to_garbage() -> None:
    value = SnapshotsValue()
    for index, ledger_id in ((10, 1), (30, 3), (20, 2)):
        value = registered(value, index, ledger_id)
    assert [m.index for m in value.snapshots] == [20, 30]
    assert value.garbage == (1,)
    assert value.pending == ()
    assert value.newest == manifest(30, 3)
    assert value.find(20) == manifest(20, 2)


def test_a_second_snapshot_at_an_index_is_garbage_and_the_first_stays() -> None:
    value = registered(SnapshotsValue(), 10, 1)
    value = registered(value, 10, 2)
    assert [m.ledger_id for m in value.snapshots] == [1]
    assert value.garbage == (2,)


def test_only_a_pending_snapshot_can_be_registered() -> None:
    with pytest.raises(SnapshotAbandoned):
        snapshot_manifest.register(SnapshotsValue(), manifest(1, 1), kept=3)
    value = snapshot_manifest.begin(SnapshotsValue(), ledger_id=1, replica_id="r", started_ms=0)
    value = snapshot_manifest.expire_pending(value, now_ms=100, grace_ms=50)
    assert value.garbage == (1,)
    with pytest.raises(SnapshotAbandoned):
        snapshot_manifest.register(value, manifest(1, 1), kept=3)


def test_a_writer_starting_again_gives_up_its_old_pending_snapshots() -> None:
    value = snapshot_manifest.begin(SnapshotsValue(), ledger_id=1, replica_id="a", started_ms=0)
    value = snapshot_manifest.begin(value, ledger_id=2, replica_id="b", started_ms=0)
    value = snapshot_manifest.begin(value, ledger_id=3, replica_id="a", started_ms=0)
    assert [(p.ledger_id, p.replica_id) for p in value.pending] == [(2, "b"), (3, "a")]
    assert value.garbage == (1,)


def test_pending_snapshots_expire_after_the_grace_period_only() -> None:
    value = snapshot_manifest.begin(SnapshotsValue(), ledger_id=1, replica_id="a", started_ms=100)
    assert snapshot_manifest.expire_pending(value, now_ms=150, grace_ms=50) == value
    expired = snapshot_manifest.expire_pending(value, now_ms=151, grace_ms=50)
    assert (expired.pending, expired.garbage) == ((), (1,))


def test_abandon_and_collect() -> None:
    value = snapshot_manifest.begin(SnapshotsValue(), ledger_id=4, replica_id="a", started_ms=0)
    value = snapshot_manifest.abandon(value, 4)
    assert (value.pending, value.garbage) == ((), (4,))
    value = snapshot_manifest.add_garbage(value, (5, 4, 6))
    assert value.garbage == (4, 5, 6)
    assert snapshot_manifest.collected(value, frozenset({4, 6})).garbage == (5,)


def test_bounds_are_refused_not_broken() -> None:
    value = SnapshotsValue()
    for ledger_id in range(limits.snapshot_pending_max):
        value = snapshot_manifest.begin(
            value, ledger_id=ledger_id, replica_id=f"r{ledger_id}", started_ms=0
        )
    with pytest.raises(SnapshotsFull):
        snapshot_manifest.begin(value, ledger_id=10_000, replica_id="x", started_ms=0)
    with pytest.raises(SnapshotsFull):
        snapshot_manifest.add_garbage(
            SnapshotsValue(), tuple(range(limits.snapshot_garbage_max + 1))
        )


@given(
    st.lists(st.integers(min_value=1, max_value=1_000), unique=True, max_size=8),
    st.integers(min_value=1, max_value=5),
)
def test_every_ledger_stays_listed_exactly_once(indexes: list[int], kept: int) -> None:
    value = SnapshotsValue()
    for ledger_id, index in enumerate(indexes, start=1):
        value = registered(value, index, ledger_id, kept)
        assert snapshot_manifest.violation(value) is None
    assert value.ledger_ids == frozenset(range(1, len(indexes) + 1))
    assert [m.index for m in value.snapshots] == sorted(indexes)[-kept:]
    assert decode_snapshots(encode_snapshots(value)) == value


def test_an_empty_znode_is_the_empty_value_and_junk_is_refused() -> None:
    assert decode_snapshots(b"") == SnapshotsValue()
    for junk in (
        b"\xff",
        cbor2.dumps({"v": 2, "snapshots": [], "pending": [], "garbage": []}),
        cbor2.dumps({"v": 1, "snapshots": [{"index": 1}], "pending": [], "garbage": []}),
        cbor2.dumps({"v": 1, "snapshots": [], "pending": [[1, "", 0]], "garbage": []}),
        cbor2.dumps({"v": 1, "snapshots": [], "pending": [], "garbage": [1, 1]}),
        encode_snapshots(SnapshotsValue()) + b"\x00",
    ):
        with pytest.raises(MalformedValue):
            decode_snapshots(junk)
