"""The wire codec: every message round-trips, frames survive any chunking, and bad
input of every kind ends in the documented error and nothing else."""

from __future__ import annotations

import struct
from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import limits
from bookie.errors import LocalProtocolError, RemoteProtocolError, Status
from bookie.wire import codec
from bookie.wire.codec import (
    FrameDecoder,
    UndecodableRequest,
    decode_request,
    decode_response,
    encode_error_response,
    encode_request,
    encode_response,
    frame,
)
from bookie.wire.messages import (
    OP_OF_REQUEST,
    AddRequest,
    AddResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    IdentifyRequest,
    IdentifyResponse,
    LedgerStateRequest,
    LedgerStateResponse,
    ListEntriesRequest,
    ListEntriesResponse,
    Op,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)

U63_MAX = (1 << 63) - 1

# --- strategies -------------------------------------------------------------------------------

u63 = st.integers(min_value=0, max_value=U63_MAX)
entry_or_last = st.integers(min_value=-1, max_value=U63_MAX)
lac = st.integers(min_value=-1, max_value=U63_MAX)
flags = st.integers(min_value=0, max_value=0xFF)
status = st.integers(min_value=0, max_value=0xFFFF)
key = st.binary(max_size=limits.master_key_bytes_max)
packet = st.binary(max_size=256)
timeout = st.integers(min_value=0, max_value=limits.long_poll_timeout_ms_max)
message = st.none() | st.text(max_size=64)
text = st.text(max_size=64)
ranges = st.lists(
    st.tuples(u63, st.integers(min_value=0, max_value=1000)).map(
        lambda pair: [pair[0] // 2, pair[0] // 2 + pair[1]]
    ),
    max_size=8,
)

requests: st.SearchStrategy[Request] = st.one_of(
    st.builds(AddRequest, u63, u63, u63, key, flags, packet),
    st.builds(
        ReadRequest,
        u63,
        u63,
        entry_or_last,
        flags,
        st.none() | key,
        st.none() | lac,
        st.none() | timeout,
    ),
    st.builds(ReadLacRequest, u63, u63),
    st.builds(WriteLacRequest, u63, u63, key, lac, packet),
    st.builds(GetBookieInfoRequest, u63),
    st.builds(ListEntriesRequest, u63, u63),
    st.builds(LedgerStateRequest, u63, u63),
    st.builds(IdentifyRequest, u63),
)


def _opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


responses: st.SearchStrategy[Response] = st.one_of(
    st.builds(AddResponse, u63, status, message, _opt(u63), _opt(u63)),
    st.builds(
        ReadResponse,
        u63,
        status,
        message,
        _opt(u63),
        _opt(entry_or_last),
        _opt(packet),
        _opt(lac),
    ),
    st.builds(ReadLacResponse, u63, status, message, _opt(u63), _opt(packet), _opt(packet)),
    st.builds(WriteLacResponse, u63, status, message, _opt(u63)),
    st.builds(
        GetBookieInfoResponse, u63, status, message, _opt(u63), _opt(u63), _opt(st.booleans())
    ),
    st.builds(ListEntriesResponse, u63, status, message, _opt(u63), _opt(ranges)),
    st.builds(LedgerStateResponse, u63, status, message, _opt(u63), _opt(st.booleans()), _opt(lac)),
    st.builds(IdentifyResponse, u63, status, message, _opt(text), _opt(text)),
)

# Values of every CBOR kind a hostile peer could put in a field.
bad_values = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(min_value=-(1 << 70), max_value=-2),
    st.integers(min_value=1 << 63, max_value=1 << 70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
any_values = st.one_of(bad_values, u63, entry_or_last, key, packet)


def _body(data: bytes) -> bytes:
    """The body of one framed message."""
    (length,) = struct.unpack_from(">I", data)
    assert length == len(data) - 4
    return data[4:]


# --- round trips ------------------------------------------------------------------------------


@given(requests)
def test_every_request_round_trips(request: Request) -> None:
    assert decode_request(_body(encode_request(request))) == request


@given(responses)
def test_every_response_round_trips(response: Response) -> None:
    assert decode_response(_body(encode_response(response))) == response


def test_response_with_trailing_fields_left_out_decodes_with_defaults() -> None:
    body = cbor2.dumps([limits.protocol_version, int(Op.READ), 7, int(Status.EIO), "disk"])
    assert decode_response(body) == ReadResponse(7, int(Status.EIO), "disk")


@given(st.lists(requests, min_size=1, max_size=10), st.data())
def test_frame_decoder_splits_any_chunking_into_the_same_frames(
    sent: list[Request], data: st.DataObject
) -> None:
    stream = b"".join(encode_request(request) for request in sent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    decoder = FrameDecoder()
    bodies: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        bodies.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert [decode_request(body) for body in bodies] == sent
    assert decoder.buffered_bytes == 0


def test_frame_decoder_keeps_a_partial_frame_until_it_completes() -> None:
    data = encode_request(ReadLacRequest(1, 2))
    decoder = FrameDecoder()
    assert decoder.feed(data[:3]) == []
    assert decoder.buffered_bytes == 3
    assert decoder.feed(data[3:-1]) == []
    assert decoder.feed(data[-1:]) == [data[4:]]
    assert decoder.buffered_bytes == 0


# --- frames out of bounds ---------------------------------------------------------------------


def test_zero_length_frame_is_a_remote_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(b"\x00\x00\x00\x00")


def test_oversized_frame_is_refused_from_its_length_prefix_alone() -> None:
    prefix = struct.pack(">I", limits.frame_size_bytes_max + 1)
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(prefix)


def test_frame_at_the_maximum_size_is_accepted() -> None:
    decoder = FrameDecoder(frame_size_bytes_max=16)
    assert decoder.feed(struct.pack(">I", 16) + b"x" * 16) == [b"x" * 16]


def test_frame_helper_prefixes_the_length() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"


# --- bad request bodies -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"\xff",  # a break code outside any indefinite item
        b"\x81",  # an array of one that ends early
        b"\x1c",  # a reserved additional-information value
        cbor2.dumps({"op": 1}),
        cbor2.dumps("ADD"),
        cbor2.dumps([1, 1]),
        cbor2.dumps([1, 1, -1]),
        cbor2.dumps([1, 1, True]),
        cbor2.dumps([1, 1, 1 << 63]),
        cbor2.dumps([1, 1, 1 << 64]),
        cbor2.dumps([1, 1, "7"]),
        cbor2.dumps([1, 1, None]),
    ],
)
def test_body_without_a_usable_request_id_is_a_remote_protocol_error(body: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as caught:
        decode_request(body)
    assert not isinstance(caught.value, UndecodableRequest)


def test_wrong_version_is_answerable_with_ebadversion() -> None:
    body = cbor2.dumps([limits.protocol_version + 1, int(Op.READ_LAC), 9, 1])
    with pytest.raises(UndecodableRequest) as caught:
        decode_request(body)
    assert (caught.value.request_id, caught.value.status) == (9, Status.EBADVERSION)


def test_boolean_version_is_not_our_version() -> None:
    with pytest.raises(UndecodableRequest) as caught:
        decode_request(cbor2.dumps([True, int(Op.READ_LAC), 9, 1]))
    assert caught.value.status == Status.EBADVERSION


@pytest.mark.parametrize("op", [0, 7, 1000, -1])
def test_unknown_op_is_answerable_with_ebadreq(op: int) -> None:
    with pytest.raises(UndecodableRequest) as caught:
        decode_request(cbor2.dumps([limits.protocol_version, op, 3]))
    assert (caught.value.request_id, caught.value.op, caught.value.status) == (
        3,
        op,
        Status.EBADREQ,
    )


@pytest.mark.parametrize("op", [True, "ADD", None, 1.0])
def test_op_of_the_wrong_type_is_answerable_with_ebadreq(op: object) -> None:
    with pytest.raises(UndecodableRequest) as caught:
        decode_request(cbor2.dumps([limits.protocol_version, op, 3]))
    assert caught.value.status == Status.EBADREQ


GOOD_ADD = [7, 8, b"k" * 32, 0, b"packet"]


@pytest.mark.parametrize(
    ("index", "value"),
    [
        (0, True),  # bool where an int is expected
        (0, -1),  # negative ledger id
        (1, -1),  # entry -1 is for reads only
        (0, 1 << 63),  # one past the largest id
        (1, 1 << 64),  # beyond 64 bits (a CBOR bignum)
        (2, "k"),  # text where bytes are expected
        (2, b"k" * (limits.master_key_bytes_max + 1)),
        (3, 0x100),
        (3, False),
        (4, None),
        (4, 1.5),
    ],
)
def test_add_field_of_the_wrong_type_or_range_is_ebadreq(index: int, value: object) -> None:
    fields: list[object] = list(GOOD_ADD)
    fields[index] = value
    body = cbor2.dumps([limits.protocol_version, int(Op.ADD), 5, *fields])
    with pytest.raises(UndecodableRequest) as caught:
        decode_request(body)
    assert (caught.value.request_id, caught.value.status) == (5, Status.EBADREQ)


@pytest.mark.parametrize("fields", [GOOD_ADD[:-1], [*GOOD_ADD, 0], []])
def test_add_with_the_wrong_number_of_fields_is_ebadreq(fields: list[object]) -> None:
    body = cbor2.dumps([limits.protocol_version, int(Op.ADD), 5, *fields])
    with pytest.raises(UndecodableRequest) as caught:
        decode_request(body)
    assert caught.value.status == Status.EBADREQ


def test_long_poll_timeout_over_the_maximum_is_ebadreq() -> None:
    fields = [1, 0, 0, None, 4, limits.long_poll_timeout_ms_max + 1]
    with pytest.raises(UndecodableRequest):
        decode_request(cbor2.dumps([limits.protocol_version, int(Op.READ), 5, *fields]))


@given(st.binary(max_size=64))
def test_random_bytes_give_a_request_or_a_remote_protocol_error(body: bytes) -> None:
    try:
        request = decode_request(body)
    except RemoteProtocolError:
        return
    assert decode_request(_body(encode_request(request))) == request


@given(
    st.sampled_from(list(OP_OF_REQUEST.values())),
    u63,
    st.lists(any_values, max_size=8),
)
def test_random_field_values_give_a_request_or_an_undecodable_request(
    op: Op, request_id: int, fields: list[object]
) -> None:
    body = cbor2.dumps([limits.protocol_version, int(op), request_id, *fields])
    refusal: UndecodableRequest | None = None
    try:
        request = decode_request(body)
    except UndecodableRequest as error:
        refusal = error
    if refusal is None:
        assert list(request) == [request_id, *fields]
    else:
        assert (refusal.request_id, refusal.status) == (request_id, Status.EBADREQ)


@given(st.sampled_from([AddRequest, ReadRequest]), st.lists(any_values, min_size=5, max_size=8))
def test_fast_request_checks_accept_exactly_what_the_field_tables_accept(
    cls: type[Request], values: list[object]
) -> None:
    checks = codec._REQUEST_FIELDS[cls]
    by_table = (
        codec._u63(values[0])
        and len(values) - 1 == len(checks)
        and codec._first_invalid(values[1:], checks) is None
    )
    assert codec._FAST_REQUEST_CHECKS[cls](values) == by_table


@given(st.sampled_from([AddResponse, ReadResponse]), st.lists(any_values, min_size=5, max_size=8))
def test_fast_response_checks_accept_exactly_what_the_field_tables_accept(
    cls: type[Response], values: list[object]
) -> None:
    checks = codec._RESPONSE_FIELDS[cls]
    by_table = (
        codec._response_head_ok(values[0], values[1], values[2])
        and len(values) - 3 == len(checks)
        and codec._first_invalid(values[3:], checks) is None
    )
    assert codec._FAST_RESPONSE_CHECKS[cls](values) == by_table


# --- encoding our own bad requests ------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        AddRequest(-1, 1, 0, b"", 0, b""),
        AddRequest(1, 1, -1, b"", 0, b""),
        ReadRequest(1, True, 0, 0, None, None, None),
        ReadRequest(1, 1, -2, 0, None, None, None),
        WriteLacRequest(1, 1, b"", -2, b""),
        ListEntriesRequest(1, 1 << 63),
    ],
)
def test_encoding_a_field_out_of_range_is_a_local_protocol_error(request_: Request) -> None:
    with pytest.raises(LocalProtocolError):
        encode_request(request_)


def test_encoding_a_request_over_the_frame_limit_is_a_local_protocol_error() -> None:
    packet = b"x" * limits.frame_size_bytes_max
    with pytest.raises(LocalProtocolError):
        encode_request(AddRequest(1, 1, 0, b"", 0, packet))


# --- bad response bodies ----------------------------------------------------------------------


@given(st.binary(max_size=64))
def test_random_bytes_give_a_response_or_a_remote_protocol_error(body: bytes) -> None:
    try:
        response = decode_response(body)
    except RemoteProtocolError:
        return
    assert decode_response(_body(encode_response(response))) == response


@pytest.mark.parametrize(
    "item",
    [
        [limits.protocol_version + 1, 1, 1, 0, None],
        [True, 1, 1, 0, None],
        [limits.protocol_version, 99, 1, 0, None],
        [limits.protocol_version, True, 1, 0, None],
        [limits.protocol_version, 1, -1, 0, None],
        [limits.protocol_version, 1, 1, -1, None],
        [limits.protocol_version, 1, 1, 0, b"not text"],
        [limits.protocol_version, 1, 1, 0, None, 1, 2, 3],
        [limits.protocol_version, 1, 1, 0, None, "ledger"],
        [limits.protocol_version, 1, 1],
    ],
)
def test_malformed_response_is_a_remote_protocol_error(item: list[object]) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_response(cbor2.dumps(item))


def test_error_response_decodes_as_the_response_of_its_op() -> None:
    data = encode_error_response(4, int(Op.ADD), Status.EBADREQ, "no")
    assert decode_response(_body(data)) == AddResponse(4, int(Status.EBADREQ), "no")
