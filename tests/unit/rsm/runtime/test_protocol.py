"""The client<->replica protocol: every message round-trips, junk is refused cleanly."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.wire.codec import FrameDecoder
from rsm import limits
from rsm.core.protocol import (
    AuthRequest,
    CallRequest,
    Consistency,
    Op,
    QueryRequest,
    Request,
    StatusRequest,
    TransferRequest,
    UndecodableRequest,
    decode_request,
    decode_response,
    encode_error,
    encode_request,
    encode_response,
)
from rsm.core.sessions import Outcome
from rsm.errors import BadRequest, CommandFailed, NotLeader, ProtocolViolation, RsmStatus

request_ids = st.integers(0, (1 << 63) - 1)
names = st.text(min_size=1, max_size=limits.command_name_chars_max)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
arguments = st.lists(values, max_size=4)
keywords = st.dictionaries(st.text(min_size=1), values, max_size=3)


@st.composite
def sessions(draw: st.DrawFn) -> tuple[bytes | None, int | None, int | None]:
    if draw(st.booleans()):
        return None, None, None
    seq = draw(st.integers(1, (1 << 63) - 1))
    return draw(st.binary(min_size=1, max_size=32)), seq, draw(st.integers(0, seq - 1))


@st.composite
def requests(draw: st.DrawFn) -> Request:
    request_id = draw(request_ids)
    kind = draw(st.sampled_from(["call", "query", "status", "transfer", "auth"]))
    if kind == "call":
        client_id, seq, ack_seq = draw(sessions())
        return CallRequest(
            request_id, draw(names), draw(arguments), draw(keywords), client_id, seq, ack_seq
        )
    if kind == "query":
        return QueryRequest(
            request_id,
            draw(names),
            draw(arguments),
            draw(keywords),
            draw(st.sampled_from(list(Consistency))),
            draw(st.integers(0, (1 << 63) - 1)),
        )
    if kind == "status":
        return StatusRequest(request_id)
    if kind == "auth":
        return AuthRequest(request_id, draw(st.binary(min_size=1, max_size=256)))
    return TransferRequest(request_id, draw(st.none() | st.text(min_size=1, max_size=20)))


def body_of(frame: bytes) -> bytes:
    [body] = FrameDecoder(limits.frame_bytes_max).feed(frame)
    return body


@given(requests())
def test_every_request_round_trips(request: Request) -> None:
    assert decode_request(body_of(encode_request(request))) == request


@given(
    request_ids,
    st.sampled_from(list(Op)),
    values,
    st.integers(0, (1 << 63) - 1),
)
def test_every_ok_response_round_trips(request_id: int, op: Op, value: Any, index: int) -> None:
    frame = encode_response(op, request_id, Outcome(RsmStatus.OK, value), index)
    response = decode_response(body_of(frame))
    assert response.ok
    assert (response.op, response.request_id, response.log_index) == (op, request_id, index)
    assert response.value == value


def test_error_responses_carry_the_error_class_and_its_detail() -> None:
    frame = encode_error(Op.CALL, 7, NotLeader("not me", "10.0.0.1:7000"), index=3)
    response = decode_response(body_of(frame))
    error = response.error()
    assert isinstance(error, NotLeader)
    assert error.leader_address == "10.0.0.1:7000"
    assert response.log_index == 3
    failed = decode_response(body_of(encode_error(Op.CALL, 8, CommandFailed("boom", "ValueError"))))
    failure = failed.error()
    assert isinstance(failure, CommandFailed)
    assert (failure.message, failure.type_name) == ("boom", "ValueError")


def test_an_answer_too_large_for_a_frame_becomes_an_error() -> None:
    value = b"x" * (limits.frame_bytes_max + 1)
    frame = encode_response(Op.QUERY, 1, Outcome(RsmStatus.OK, value), 0)
    assert isinstance(decode_response(body_of(frame)).error(), BadRequest)


def test_a_request_too_large_for_a_frame_is_refused_before_sending() -> None:
    with pytest.raises(BadRequest):
        encode_request(CallRequest(1, "add", [b"x" * (limits.frame_bytes_max + 1)], {}))


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff",  # not CBOR
        cbor2.dumps({"v": 1}),  # not an array
        cbor2.dumps([1, 1]),  # too short
        cbor2.dumps([1, 1, -5]),  # no usable request id
        cbor2.dumps([1, 1, "seven"]),
    ],
)
def test_bodies_without_a_request_id_are_protocol_violations(body: bytes) -> None:
    with pytest.raises(ProtocolViolation) as raised:
        decode_request(body)
    assert not isinstance(raised.value, UndecodableRequest)


@pytest.mark.parametrize(
    "item",
    [
        [2, Op.STATUS, 9],  # another protocol version
        [1, 99, 9],  # unknown op
        [1, Op.CALL, 9, "add", [], {}],  # missing session fields
        [1, Op.CALL, 9, "", [], {}, None, None, None],  # empty name
        [1, Op.CALL, 9, "add", "1", {}, None, None, None],  # args not an array
        [1, Op.CALL, 9, "add", [], {}, b"id", 1, 1],  # ack_seq not below seq
        [1, Op.CALL, 9, "add", [], {}, None, 1, None],  # partial session
        [1, Op.QUERY, 9, "get", [], {}, 3, 0],  # unknown consistency
        [1, Op.QUERY, 9, "get", [], {}, True, 0],  # a bool is not a level
        [1, Op.STATUS, 9, "extra"],
        [1, Op.TRANSFER_LEADERSHIP, 9, 5],
        [1, Op.AUTH, 9],
        [1, Op.AUTH, 9, b""],
        [1, Op.AUTH, 9, "a text token"],
    ],
)
def test_bad_requests_with_an_id_are_answered(item: list[Any]) -> None:
    with pytest.raises(UndecodableRequest) as raised:
        decode_request(cbor2.dumps(item))
    assert raised.value.request_id == 9
    response = decode_response(body_of(raised.value.response()))
    assert response.request_id == 9
    assert isinstance(response.error(), BadRequest)


@pytest.mark.parametrize(
    "item",
    [
        [1, Op.CALL, 1, 0, None, None, None],  # 7 fields
        [1, Op.CALL, 1, 99, None, None, None, 0],  # unknown status
        [1, Op.CALL, -1, 0, None, None, None, 0],
        [1, Op.CALL, 1, 0, 5, None, None, 0],  # message not text
        [1, Op.CALL, 1, 0, None, None, None, -1],  # negative index
    ],
)
def test_bad_responses_are_protocol_violations(item: list[Any]) -> None:
    with pytest.raises(ProtocolViolation):
        decode_response(cbor2.dumps(item))


def test_consistency_parses_names_and_refuses_others() -> None:
    assert Consistency.parse("read_your_writes") is Consistency.READ_YOUR_WRITES
    assert Consistency.parse(Consistency.STALE) is Consistency.STALE
    with pytest.raises(BadRequest):
        Consistency.parse("eventual")


def test_a_bad_auth_request_never_shows_its_token() -> None:
    token = b"secret-token-" * 30
    with pytest.raises(UndecodableRequest) as raised:
        decode_request(cbor2.dumps([1, Op.AUTH, 9, token]))
    assert "not shown" in str(raised.value)
    assert b"secret" not in raised.value.response()
