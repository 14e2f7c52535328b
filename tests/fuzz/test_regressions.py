"""Inputs fuzzing found that made a decoder raise something other than its own error.

Each is kept with its bytes inline.  Most are one kind: an integer of more than
4,300 decimal digits (a CBOR bignum, tag 2) where a field's value is printed
into the error message; Python refuses to turn such an integer into text and
raised ValueError from inside the message.  Error messages now show untrusted
values through `bookie.errors.preview`.
"""

from __future__ import annotations

import struct

import cbor2
import pytest
from kvstore.endpoints import decode_endpoint
from kvstore.errors import ProtocolError

from bookie.errors import BadMetadata, RemoteProtocolError, preview
from bookie.meta import ledger_format
from bookie.meta.bookies import Cookie, decode_registration
from bookie.wire import codec
from rsm.core import log_format, protocol, snapshot_format
from rsm.core.sessions import SessionTable
from rsm.core.snapshot_manifest import decode_snapshots
from rsm.core.snapshot_state import StateDecoder
from rsm.errors import MalformedValue, ProtocolViolation, SnapshotCorrupt

from .targets import small_resp_parser

HUGE = b"\xc2\x59\x09\xc5\x01" + bytes(2_500)
"""CBOR bignum 2**20000 (tag 2, a byte string of 2,501 bytes): 6,021 decimal digits."""


def test_huge_is_what_it_says() -> None:
    assert cbor2.loads(HUGE) == 1 << 20_000


def test_preview_shows_what_python_cannot_print() -> None:
    assert preview(1 << 20_000) == "<int too large to show>"
    assert preview([1, 2], 3) == "[1,"


def test_bookie_request_with_a_huge_request_id() -> None:
    with pytest.raises(RemoteProtocolError, match="request id <int too large"):
        codec.decode_request(b"\x83\x01\x00" + HUGE)


def test_bookie_request_with_a_huge_op() -> None:
    with pytest.raises(codec.UndecodableRequest, match="unknown op"):
        codec.decode_request(b"\x83\x01" + HUGE + b"\x05")


def test_bookie_request_with_a_huge_version() -> None:
    with pytest.raises(codec.UndecodableRequest, match="protocol version"):
        codec.decode_request(b"\x83" + HUGE + b"\x01\x05")


def test_bookie_response_with_a_huge_field() -> None:
    # AddResponse [version, op, request id, status, message, ledger id, entry id].
    with pytest.raises(RemoteProtocolError, match="field 1"):
        codec.decode_response(b"\x87\x01\x01\x05\x00\xf6\x07" + HUGE)


def test_replica_request_with_a_huge_request_id() -> None:
    with pytest.raises(ProtocolViolation, match="request id"):
        protocol.decode_request(b"\x83\x01\x01" + HUGE)


def test_replica_request_with_a_huge_version() -> None:
    with pytest.raises(protocol.UndecodableRequest, match="protocol version"):
        protocol.decode_request(b"\x83" + HUGE + b"\x03\x05")


def test_replica_response_with_a_huge_op() -> None:
    with pytest.raises(ProtocolViolation, match="response header"):
        protocol.decode_response(b"\x88\x01" + HUGE + b"\x05\x00\xf6\xf6\xf6\x00")


def test_batch_with_a_huge_epoch() -> None:
    with pytest.raises(MalformedValue, match="epoch <int too large"):
        log_format.decode_batch(b"\x87\x01" + HUGE + b"\x01\x00\x00\x80\xf6")


def test_batch_item_with_a_huge_kind() -> None:
    with pytest.raises(MalformedValue, match="kind <int too large"):
        log_format.decode_batch(b"\x87\x01\x01\x01\x00\x00\x81\x81" + HUGE + b"\xf6")


def test_log_znode_with_a_huge_key() -> None:
    with pytest.raises(MalformedValue, match="has keys"):
        log_format.decode_log(b"\xa2\x61v\x01" + HUGE + b"\x01")


def test_snapshots_znode_with_a_huge_manifest() -> None:
    value = b"\xa4\x61v\x01\x69snapshots\x81" + HUGE + b"\x67pending\x80\x67garbage\x80"
    with pytest.raises(MalformedValue, match="snapshot manifest <int too large"):
        decode_snapshots(value)


def test_ledger_metadata_with_a_huge_version() -> None:
    with pytest.raises(BadMetadata, match="format version <int too large"):
        ledger_format.decode(b"\xa1\x61v" + HUGE)


def test_bookie_registration_with_a_huge_session_id() -> None:
    value = b"\xa4\x61a\x61x\x61r\xf6\x61s" + HUGE + b"\x61v\x01"
    with pytest.raises(BadMetadata, match="session id: <int too large"):
        decode_registration(value, "registration")


def test_snapshot_header_with_a_huge_version() -> None:
    with pytest.raises(SnapshotCorrupt, match="not its header"):
        snapshot_format.decode_header(cbor2.loads(b"\xa1\x61v" + HUGE))
    header = dict.fromkeys(snapshot_format._HEADER_KEYS, 0) | {"v": cbor2.loads(HUGE)}
    with pytest.raises(SnapshotCorrupt, match="version <int too large"):
        snapshot_format.decode_header(header)


def test_session_table_with_a_huge_session() -> None:
    plain = {"v": 1, "clock_ms": 0, "sessions": [[cbor2.loads(HUGE)]]}
    with pytest.raises(MalformedValue, match="session <list too large"):
        SessionTable.from_plain(plain)


def _records(*items: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(item)) + item for item in items)


def _restore(stream: bytes) -> None:
    decoder = StateDecoder(type("State", (), {})())
    decoder.feed(stream)
    decoder.finish()


def test_state_run_with_an_unhashable_key() -> None:
    # [0, 1] (default codec), [2, "a", 0 (dict), 1], [3, [[1], 2]]: the key [1] is a list.
    stream = _records(b"\x82\x00\x01", b"\x84\x02\x61a\x00\x01", b"\x82\x03\x82\x81\x01\x02")
    with pytest.raises(SnapshotCorrupt, match="unhashable"):
        _restore(stream)


def test_state_run_with_elements_that_do_not_compare() -> None:
    # [0, 1], [2, "a", 6 (SortedList), 2], [3, [1, "x"]]: an int and a text in one sorted list.
    stream = _records(b"\x82\x00\x01", b"\x84\x02\x61a\x06\x02", b"\x82\x03\x82\x01\x61x")
    with pytest.raises(SnapshotCorrupt, match="cannot be built"):
        _restore(stream)


@pytest.mark.parametrize("value", [b"[" * 100_000, b'{"a":' * 100_000])
def test_endpoint_nested_deeper_than_python_recurses(value: bytes) -> None:
    with pytest.raises(MalformedValue, match="not JSON"):
        decode_endpoint("r1", value)


@pytest.mark.parametrize("bookie_id", [b"\x62\x00\x00", b"\x68readonly"])
def test_cookie_with_a_bookie_id_that_cannot_name_a_bookie(bookie_id: bytes) -> None:
    # Found by atheris: the cookie was built, and its constructor's assertion failed.
    value = (
        b"\xa6\x61a\x6e127.0.0.1:3181\x61b"
        + bookie_id
        + b"\x61i\x63i-1\x61j\x6d/data/journal\x61l\x81\x6d/data/ledgers\x61v\x01"
    )
    with pytest.raises(BadMetadata, match="cannot name a bookie"):
        Cookie.decode(value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"*0" + b"d" * 77 + b"\r", "invalid multibulk length"),
        (b"*1\r\n$" + b"9" * 74 + b"\r", "invalid bulk length"),
    ],
)
def test_resp_count_line_that_fills_the_parser(line: bytes, message: str) -> None:
    # Found by atheris: a count line longer than `inline_bytes_max` whose CR is the last byte
    # fed waited for its LF, with the parser full: no room to feed the LF, no command to take.
    parser = small_resp_parser()
    parser.feed(line)
    assert parser.room_bytes == 0
    with pytest.raises(ProtocolError, match=message):
        parser.next_command()
