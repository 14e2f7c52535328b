"""Log entries and znode values: exact round trips, the documented bytes, junk rejected cleanly."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.core import log_format as ef
from rsm.core.log_format import (
    Batch,
    CandidateInfo,
    CommandItem,
    Handoff,
    LeaderInfo,
    LeaderStart,
    StateHash,
)
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.errors import BadArguments, BadRequest, MalformedValue, NoAddressForTransport
from tests.unit.rsm.core.strategies import U63, batches, logs, raw_item, replica_ids


def encode(batch: Batch) -> bytes:
    return ef.encode_batch(
        epoch=batch.epoch,
        first_index=batch.first_index,
        timestamp_ms=batch.timestamp_ms,
        seed=batch.seed,
        items=[ef.encode_item(item) for item in batch.items],
        state_hash=batch.state_hash,
    )


@given(batches())
def test_batches_round_trip(batch: Batch) -> None:
    assert ef.decode_batch(encode(batch)) == batch


@given(batches())
def test_batch_bytes_are_exactly_the_documented_cbor(batch: Batch) -> None:
    state_hash = None
    if batch.state_hash is not None:
        state_hash = [batch.state_hash.index, batch.state_hash.digest]
    expected = cbor2.dumps(
        [
            1,
            batch.epoch,
            batch.first_index,
            batch.timestamp_ms,
            batch.seed,
            [raw_item(item) for item in batch.items],
            state_hash,
        ]
    )
    assert encode(batch) == expected


@pytest.mark.parametrize("count", [0, 23, 24, 255, 256, 65_536])
def test_item_array_heads_of_every_width(count: int) -> None:
    item = ef.encode_leader_start("r")
    data = ef.encode_batch(epoch=1, first_index=1, timestamp_ms=0, seed=0, items=[item] * count)
    batch = ef.decode_batch(data)
    assert batch.items == (LeaderStart("r"),) * count
    assert batch.next_index == 1 + count
    assert batch.is_barrier is (count == 0)


def test_a_barrier_takes_no_index() -> None:
    data = ef.encode_batch(epoch=3, first_index=42, timestamp_ms=7, seed=9, items=[])
    batch = ef.decode_batch(data)
    assert batch.is_barrier
    assert batch.next_index == 42


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_malformed_value(data: bytes) -> None:
    for decode in DECODERS:
        with contextlib.suppress(MalformedValue):
            decode(data)


DECODERS: list[Callable[[bytes], object]] = [
    ef.decode_batch,
    ef.decode_log,
    ef.decode_leader,
    ef.decode_candidate,
    ef.decode_handoff,
]


@given(batches(), st.data())
def test_damaged_entries_decode_or_raise_malformed_value(batch: Batch, data: Any) -> None:
    encoded = bytearray(encode(batch))
    kind = data.draw(st.sampled_from(["flip", "truncate", "append", "insert"]))
    position = data.draw(st.integers(0, len(encoded) - 1))
    if kind == "flip":
        encoded[position] ^= data.draw(st.integers(1, 255))
    elif kind == "truncate":
        del encoded[position:]
    elif kind == "append":
        encoded += data.draw(st.binary(min_size=1, max_size=4))
    else:
        encoded[position:position] = data.draw(st.binary(min_size=1, max_size=4))
    try:
        decoded = ef.decode_batch(bytes(encoded))
    except MalformedValue:
        return
    assert kind != "append", "bytes after the value must be refused"
    assert isinstance(decoded, Batch)


def batch_of(*fields: Any) -> bytes:
    return cbor2.dumps(list(fields))


GOOD_COMMAND = [0, "add", [1], {}, b"c", 2, 1]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "not CBOR"),
        (cbor2.dumps([1, 1, 1, 0, 0, [], None]) + b"\x00", "after"),
        (batch_of(1, 1, 1, 0, 0, []), "array of 7"),
        (batch_of(2, 1, 1, 0, 0, [], None), "format tag"),
        (batch_of(True, 1, 1, 0, 0, [], None), "format tag"),
        (batch_of(1, 0, 1, 0, 0, [], None), "epoch"),
        (batch_of(1, True, 1, 0, 0, [], None), "epoch"),
        (batch_of(1, 1, 0, 0, 0, [], None), "first index"),
        (batch_of(1, 1, 1, -1, 0, [], None), "timestamp"),
        (batch_of(1, 1, 1, 0, 2**64, [], None), "seed"),
        (batch_of(1, 1, 1, 0, 0, {}, None), "items"),
        (batch_of(1, 1, 2**63 - 1, 0, 0, [[1, "r"]], None), "overflow"),
        (batch_of(1, 1, 1, 0, 0, [], [1]), "state hash"),
        (batch_of(1, 1, 1, 0, 0, [], [1, b""]), "state hash"),
        (batch_of(1, 1, 1, 0, 0, [], [1, b"x" * 65]), "state hash"),
        (batch_of(1, 1, 1, 0, 0, [[]], None), "tagged array"),
        (batch_of(1, 1, 1, 0, 0, [[2, "x"]], None), "unknown"),
        (batch_of(1, 1, 1, 0, 0, [[1, ""]], None), "replica id"),
        (batch_of(1, 1, 1, 0, 0, [[0, "add", [1], {}]], None), "unknown"),
        (batch_of(1, 1, 1, 0, 0, [[0, "", [], {}, None, None, None]], None), "name"),
        (batch_of(1, 1, 1, 0, 0, [[0, "a", {}, {}, None, None, None]], None), "args"),
        (batch_of(1, 1, 1, 0, 0, [[0, "a", [], {1: 2}, None, None, None]], None), "kwargs"),
        (batch_of(1, 1, 1, 0, 0, [[0, "a", [], {}, b"c", None, None]], None), "seq"),
        (batch_of(1, 1, 1, 0, 0, [[0, "a", [], {}, None, 2, 1]], None), "client id"),
        (batch_of(1, 1, 1, 0, 0, [[0, "a", [], {}, b"c", 2, 2]], None), "ack_seq"),
        (batch_of(1, 1, 1, 0, 0, [[0, "a", [], {}, b"c", 0, 0]], None), "seq"),
        (batch_of(1, 1, 1, 0, 0, [[0, "a", [], {}, b"x" * 33, 2, 1]], None), "client id"),
        (batch_of(1, 1, 1, 0, 0, [GOOD_COMMAND, [0, "a", [], {}, b"c", 2, 5]], None), "index 2"),
    ],
)
def test_malformed_entries_say_what_is_wrong(data: bytes, problem: str) -> None:
    with pytest.raises(MalformedValue, match=problem):
        ef.decode_batch(data)


def test_commands_are_checked_before_they_can_be_logged() -> None:
    with pytest.raises(BadArguments, match="CBOR"):
        ef.encode_command("add", [object()])
    with pytest.raises(BadArguments, match="text"):
        ef.encode_command("add", [], {1: 2})  # type: ignore[dict-item]
    with pytest.raises(BadRequest, match="name"):
        ef.encode_command("", [])
    with pytest.raises(BadRequest, match="ack_seq"):
        ef.encode_command("add", [], client_id=b"c", seq=3, ack_seq=3)
    with pytest.raises(BadRequest, match="exceeds"):
        ef.encode_command("add", [b"x" * (1 << 20)])
    item = ef.encode_command("add", (1, 2), {"k": 3}, client_id=b"c", seq=2, ack_seq=1)
    batch = ef.decode_batch(
        ef.encode_batch(epoch=1, first_index=5, timestamp_ms=0, seed=0, items=[item])
    )
    assert batch.items == (CommandItem("add", [1, 2], {"k": 3}, b"c", 2, 1),)


_byte_args = st.lists(
    st.one_of(
        st.binary(max_size=300),
        st.sampled_from([b"", b"x" * 23, b"x" * 24, b"x" * 255, b"x" * 256, b"x" * 65_536]),
    ),
    max_size=5,
)


@given(
    st.text(min_size=1, max_size=128),
    _byte_args,
    st.one_of(st.none(), st.tuples(st.binary(min_size=1, max_size=32), st.integers(1, U63))),
)
def test_commands_of_byte_strings_are_encoded_as_cbor2_encodes_them(
    name: str, args: list[bytes], session: tuple[bytes, int] | None
) -> None:
    # Such commands take a path of their own (`_encode_bytes_command`); the bytes must
    # be the documented CBOR whichever path encodes them.
    if session is None:
        client_id, seq, ack_seq = None, None, None
    else:
        client_id, seq = session
        ack_seq = seq - 1
    item = ef.encode_command(name, args, client_id=client_id, seq=seq, ack_seq=ack_seq)
    assert item == cbor2.dumps([ef.ITEM_COMMAND, name, args, {}, client_id, seq, ack_seq])


@given(
    st.text(min_size=1, max_size=128),
    st.lists(st.binary(max_size=300), max_size=300),
    st.one_of(st.none(), st.tuples(st.binary(min_size=1, max_size=32), st.integers(1, U63))),
)
def test_the_decoded_form_of_a_byte_string_command_is_what_decoding_gives(
    name: str, args: list[bytes], session: tuple[bytes, int] | None
) -> None:
    # A leader applies this form instead of decoding what it built: it must be the
    # decoded item exactly, types included, whichever path encoded the command.
    client_id, seq, ack_seq = (None, None, None) if session is None else (*session, 0)
    encoded = ef.encode_command(name, args, client_id=client_id, seq=seq, ack_seq=ack_seq)
    known = ef.decoded_command(name, args, None, client_id=client_id, seq=seq, ack_seq=ack_seq)
    entry = ef.encode_batch(epoch=1, first_index=1, timestamp_ms=0, seed=0, items=[encoded])
    [decoded] = ef.decode_batch(entry).items
    assert known == decoded
    assert known is not None
    assert type(known.args) is list
    assert type(known.kwargs) is dict
    assert [type(arg) for arg in known.args] == [bytes] * len(args)


def test_other_commands_have_no_decoded_form_without_decoding() -> None:
    for args, kwargs in (
        ([b"k", 1], None),
        ([b"k", "text"], None),
        ([b"k", bytearray(b"v")], None),
        ((b"k", (b"nested",)), None),
        ([b"k"], {"option": b"v"}),
    ):
        assert (
            ef.decoded_command("set", args, kwargs, client_id=None, seq=None, ack_seq=None) is None
        )


def test_commands_with_other_arguments_are_encoded_by_cbor2() -> None:
    for args in ([b"k", 1], [b"k", "text"], [b"k", bytearray(b"v")], [b"k"] * 256):
        item = ef.encode_command("set", args)
        assert item == cbor2.dumps([ef.ITEM_COMMAND, "set", list(args), {}, None, None, None])


# --- znode values -----------------------------------------------------------------------------


@given(logs())
def test_logs_round_trip_canonically(log: Log) -> None:
    data = ef.encode_log(log)
    assert ef.decode_log(data) == log
    assert data == cbor2.dumps(cbor2.loads(data), canonical=True)


@given(replica_ids, st.text(min_size=1, max_size=40), st.integers(1, U63))
def test_coordination_values_round_trip(replica_id: str, address: str, epoch: int) -> None:
    leader = LeaderInfo(replica_id, address, epoch)
    assert ef.decode_leader(ef.encode_leader(leader)) == leader
    candidate = CandidateInfo(replica_id, address)
    assert ef.decode_candidate(ef.encode_candidate(candidate)) == candidate
    handoff = Handoff(replica_id, epoch)
    assert ef.decode_handoff(ef.encode_handoff(handoff)) == handoff


@given(
    replica_ids,
    st.none() | st.text(min_size=1, max_size=40),
    st.text(min_size=1, max_size=40),
    st.integers(1, U63),
)
def test_values_with_a_tls_address_round_trip(
    replica_id: str, address: str | None, tls_address: str, epoch: int
) -> None:
    leader = LeaderInfo(replica_id, address, epoch, tls_address)
    assert ef.decode_leader(ef.encode_leader(leader)) == leader
    candidate = CandidateInfo(replica_id, address, tls_address)
    assert ef.decode_candidate(ef.encode_candidate(candidate)) == candidate


def test_a_plain_only_replica_writes_version_1_byte_for_byte() -> None:
    # What readers that know only version 1 decode: unchanged by the TLS field.
    assert ef.encode_candidate(CandidateInfo("r1", "h:1")) == cbor2.dumps(
        {"v": 1, "replica_id": "r1", "address": "h:1"}, canonical=True
    )
    assert ef.encode_leader(LeaderInfo("r1", "h:1", 3)) == cbor2.dumps(
        {"v": 1, "replica_id": "r1", "address": "h:1", "epoch": 3}, canonical=True
    )


def test_a_replica_with_a_tls_port_writes_version_2() -> None:
    both = ef.encode_leader(LeaderInfo("r1", "h:1", 3, "h:2"))
    assert cbor2.loads(both) == {
        "v": 2,
        "replica_id": "r1",
        "address": "h:1",
        "tls_address": "h:2",
        "epoch": 3,
    }
    assert both == cbor2.dumps(cbor2.loads(both), canonical=True)
    tls_only = ef.encode_candidate(CandidateInfo("r1", None, "h:2"))
    assert cbor2.loads(tls_only) == {"v": 2, "replica_id": "r1", "tls_address": "h:2"}


def test_old_values_decode_as_plain_addresses() -> None:
    old = cbor2.dumps({"v": 1, "replica_id": "r1", "address": "h:1", "epoch": 2})
    leader = ef.decode_leader(old)
    assert leader == LeaderInfo("r1", "h:1", 2, None)
    assert leader.dial(tls=False) == "h:1"


def test_a_client_is_told_which_replica_lacks_its_transport() -> None:
    with pytest.raises(NoAddressForTransport, match="replica r1 has no TLS port"):
        LeaderInfo("r1", "h:1", 2).dial(tls=True)
    with pytest.raises(NoAddressForTransport, match="replica r2 has no plain port"):
        CandidateInfo("r2", None, "h:2").dial(tls=False)
    assert CandidateInfo("r2", "h:1", "h:2").dial(tls=True) == "h:2"


def znode(**fields: Any) -> bytes:
    return cbor2.dumps(fields)


OPEN_SEGMENT = [7, 1, 1, 1, -1]


@pytest.mark.parametrize(
    ("decode", "data", "problem"),
    [
        (ef.decode_log, cbor2.dumps([1]), "not a map"),
        (ef.decode_log, znode(epoch=1, segments=[]), "version"),
        (ef.decode_log, znode(v=2, epoch=1, segments=[]), "version"),
        (ef.decode_log, znode(v=1, epoch=1), "keys"),
        (ef.decode_log, znode(v=1, epoch=1, segments=[], more=1), "keys"),
        (ef.decode_log, znode(v=1, epoch=-1, segments=[]), "epoch"),
        (ef.decode_log, znode(v=1, epoch=1, segments={}), "segments"),
        (ef.decode_log, znode(v=1, epoch=1, segments=[[7, 1, 1, 2, -1]]), "segment 0"),
        (ef.decode_log, znode(v=1, epoch=1, segments=[[7, 1, 1, 1]]), "segment 0"),
        (ef.decode_log, znode(v=1, epoch=0, segments=[OPEN_SEGMENT]), "epoch 1 outside"),
        (ef.decode_log, znode(v=1, epoch=1, segments=[OPEN_SEGMENT, [8, 1, 1, 1, -1]]), "I1"),
        (ef.decode_log, znode(v=1, epoch=2, segments=[[7, 2, 1, 3, 4], [8, 1, 5, 1, -1]]), "I4"),
        (
            ef.decode_log,
            znode(v=1, epoch=1, segments=[[7, 1, 1, 3, 4], [8, 1, 6, 1, -1]]),
            "follow",
        ),
        (ef.decode_log, znode(v=1, epoch=1, segments=[[7, 1, 1, 3, 4], [7, 1, 5, 1, -1]]), "twice"),
        (ef.decode_log, znode(v=1, epoch=1, segments=[[7, 1, 5, 3, 2]]), "before its first"),
        (ef.decode_log, znode(v=1, epoch=1, segments=[[7, 1, 1, 1, 3]]), "OPEN with"),
        (ef.decode_log, b"\xa2\x61v\x01", "not CBOR"),
        (ef.decode_log, b"\xa1\x61v\x01\xa1", "after"),
        (ef.decode_leader, znode(v=1, replica_id="r", address="a"), "keys"),
        (ef.decode_leader, znode(v=1, replica_id="r", address="a", epoch=0), "epoch"),
        (ef.decode_leader, znode(v=1, replica_id="", address="a", epoch=1), "replica_id"),
        (ef.decode_candidate, znode(v=1, replica_id="r", address=""), "address"),
        (ef.decode_candidate, znode(v=1, replica_id="r", address="a" * 257), "address"),
        (ef.decode_leader, znode(v=3, replica_id="r", address="a", epoch=1), "not 1 or 2"),
        (ef.decode_leader, znode(v=2, replica_id="r", address="a", epoch=1), "keys"),
        (
            ef.decode_leader,
            znode(v=2, replica_id="r", address=None, tls_address="t", epoch=1),
            "field address",
        ),
        (ef.decode_candidate, znode(v=1, replica_id="r", tls_address="t"), "keys"),
        (ef.decode_candidate, znode(v=2, replica_id="r", tls_address=""), "tls_address"),
        (ef.decode_candidate, znode(v=2, replica_id="r", tls_address="t", x=1), "keys"),
        (ef.decode_handoff, znode(v=2, target="r", epoch=1), "version"),
        (ef.decode_handoff, znode(v=1, target=5, epoch=1), "target"),
        (ef.decode_handoff, znode(v=1, target="r", epoch=True), "epoch"),
    ],
)
def test_malformed_znode_values_say_what_is_wrong(
    decode: Callable[[bytes], object], data: bytes, problem: str
) -> None:
    with pytest.raises(MalformedValue, match=problem):
        decode(data)


def test_duplicate_map_keys_are_refused() -> None:
    # {"v": 1, "v": 1, "target": "r", "epoch": 1} written by hand: cbor2 cannot produce it.
    data = b"\xa4\x61v\x01\x61v\x01\x66target\x61r\x65epoch\x01"
    with pytest.raises(MalformedValue):
        ef.decode_handoff(data)


def test_empty_log_round_trips() -> None:
    assert ef.decode_log(ef.encode_log(Log())) == Log()
    closed = Log(1, (Segment(3, 1, 1, SegmentState.CLOSED, 0),))
    assert ef.decode_log(ef.encode_log(closed)) == closed


def test_state_hash_round_trips() -> None:
    data = ef.encode_batch(
        epoch=1, first_index=1, timestamp_ms=0, seed=0, items=[], state_hash=StateHash(9, b"h")
    )
    assert ef.decode_batch(data).state_hash == StateHash(9, b"h")
