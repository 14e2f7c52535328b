"""Bytes <-> bookie protocol messages: length-prefixed CBOR frames.

Pure: no sockets, no files.  Both the bookie server and the client use it, as
does the in-process simulation.

Frame layout (all integers big-endian)::

    offset  size  field
    0       4     length: body bytes that follow (u32, 1 <= length <= frame_size_bytes_max)
    4       len   body: one CBOR data item (RFC 8949), an array

Request body, a CBOR array::

    [version: uint, op: uint, request_id: uint, field_1, ..., field_n]

Response body, a CBOR array::

    [version: uint, op: uint, request_id: uint, status: uint, message: text / null,
     field_1, ..., field_n]

`version` is `limits.protocol_version`; `op` is `messages.Op`; the fields are
those of the matching `messages.*Request` / `*Response` record, in order (see
docs/protocol.md for each).  Integers are CBOR major types 0/1, byte strings
major type 2, text major type 3, null is simple value 22.

What happens to bad input, in order of how bad it is:

* The length prefix exceeds the maximum, the body is not one well-formed CBOR
  item, not an array, or has no usable request id: `RemoteProtocolError`; the
  connection is closed, since nothing can be answered.
* The request id is usable but the version is not ours: `UndecodableRequest`
  carrying EBADVERSION, answered with an error response.
* The op is unknown, a field is missing, extra, of the wrong type or out of
  range: `UndecodableRequest` carrying EBADREQ, answered with an error
  response.  Nothing reaches storage.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import cbor2

from bookie import limits
from bookie.errors import LocalProtocolError, RemoteProtocolError, Status
from bookie.wire.messages import (
    OP_OF_REQUEST,
    OP_OF_RESPONSE,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    AddRequest,
    AddResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
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

_LENGTH: Final = struct.Struct(">I")
LENGTH_PREFIX_BYTES: Final = _LENGTH.size

_U63_END: Final = 1 << 63
_U64_END: Final = 1 << 64


class UndecodableRequest(RemoteProtocolError):
    """A request that can be answered with an error status (its request id is known)."""

    def __init__(self, request_id: int, op: int, status: Status, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.op = op
        self.status = status


# --- field validators -------------------------------------------------------------------------
#
# Each returns True when the value is acceptable.  `type(v) is int` on purpose:
# CBOR true/false decode to bool, which is an int subclass and must not pass.

Validator = Callable[[Any], bool]


def _u63(v: Any) -> bool:
    return type(v) is int and 0 <= v < _U63_END


def _entry_or_last(v: Any) -> bool:
    return type(v) is int and -1 <= v < _U63_END


def _lac(v: Any) -> bool:
    return type(v) is int and -1 <= v < _U63_END


def _flags(v: Any) -> bool:
    return type(v) is int and 0 <= v <= 0xFF


def _status(v: Any) -> bool:
    return type(v) is int and 0 <= v <= 0xFFFF


def _key(v: Any) -> bool:
    return type(v) is bytes and len(v) <= limits.master_key_bytes_max


def _packet(v: Any) -> bool:
    return type(v) is bytes and len(v) <= limits.frame_size_bytes_max


def _timeout(v: Any) -> bool:
    return type(v) is int and 0 <= v <= limits.long_poll_timeout_ms_max


def _text(v: Any) -> bool:
    return type(v) is str and len(v) <= 4096


def _bool(v: Any) -> bool:
    return type(v) is bool


def _ranges(v: Any) -> bool:
    return type(v) is list and all(
        type(r) is list and len(r) == 2 and _u63(r[0]) and _u63(r[1]) and r[0] <= r[1] for r in v
    )


def _optional(check: Validator) -> Validator:
    def optional(v: Any) -> bool:
        return v is None or check(v)

    return optional


_REQUEST_FIELDS: Final[dict[type[Request], tuple[Validator, ...]]] = {
    # request_id is checked separately; these are the fields after it.
    AddRequest: (_u63, _u63, _key, _flags, _packet),
    ReadRequest: (
        _u63,
        _entry_or_last,
        _flags,
        _optional(_key),
        _optional(_lac),
        _optional(_timeout),
    ),
    ReadLacRequest: (_u63,),
    WriteLacRequest: (_u63, _key, _lac, _packet),
    GetBookieInfoRequest: (),
    ListEntriesRequest: (_u63,),
}

_RESPONSE_FIELDS: Final[dict[type[Response], tuple[Validator, ...]]] = {
    # status and message are checked separately; these are the fields after them.
    AddResponse: (_optional(_u63), _optional(_u63)),
    ReadResponse: (
        _optional(_u63),
        _optional(_entry_or_last),
        _optional(_packet),
        _optional(_lac),
    ),
    ReadLacResponse: (_optional(_u63), _optional(_packet), _optional(_packet)),
    WriteLacResponse: (_optional(_u63),),
    GetBookieInfoResponse: (_optional(_u63), _optional(_u63), _optional(_bool)),
    ListEntriesResponse: (_optional(_u63), _optional(_ranges)),
}


def _first_invalid(values: Sequence[Any], checks: tuple[Validator, ...]) -> int | None:
    """Index of the first value its check rejects, or None when all pass."""
    for index, (value, check) in enumerate(zip(values, checks, strict=True)):
        if not check(value):
            return index
    return None


# --- frames -----------------------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    """Prefix `body` with its length."""
    assert 0 < len(body) <= limits.frame_size_bytes_max
    return _LENGTH.pack(len(body)) + body


class FrameDecoder:
    """Splits a byte stream into frame bodies (h11-style: feed bytes, pull frames).

    Bounded: at most one frame of `frame_size_bytes_max` plus one read chunk is
    ever buffered; a length prefix over the maximum (or zero) raises
    `RemoteProtocolError` and the decoder must not be used again.
    """

    __slots__ = ("_buffer", "_offset", "_frame_size_bytes_max")

    def __init__(self, frame_size_bytes_max: int = limits.frame_size_bytes_max) -> None:
        self._buffer = bytearray()
        self._offset = 0
        self._frame_size_bytes_max = frame_size_bytes_max

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Append received bytes and return every frame body now complete, in order."""
        buffer = self._buffer
        if self._offset and self._offset >= len(buffer) // 2:
            del buffer[: self._offset]
            self._offset = 0
        buffer += data
        frames: list[bytes] = []
        offset = self._offset
        end = len(buffer)
        while end - offset >= LENGTH_PREFIX_BYTES:
            (length,) = _LENGTH.unpack_from(buffer, offset)
            if length == 0 or length > self._frame_size_bytes_max:
                raise RemoteProtocolError(
                    f"frame length {length} outside 1..{self._frame_size_bytes_max}"
                )
            start = offset + LENGTH_PREFIX_BYTES
            if end - start < length:
                break
            frames.append(bytes(buffer[start : start + length]))
            offset = start + length
        self._offset = offset
        return frames

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer) - self._offset


# --- requests ---------------------------------------------------------------------------------


def encode_request(request: Request) -> bytes:
    """One framed request.  Raises `LocalProtocolError` for a field out of its range."""
    cls = type(request)
    if not _u63(request[0]):
        raise LocalProtocolError(f"request id {request[0]!r} is not a u63")
    bad = _first_invalid(request[1:], _REQUEST_FIELDS[cls])
    if bad is not None:
        field = cls._fields[bad + 1]
        raise LocalProtocolError(f"{cls.__name__}.{field} = {request[bad + 1]!r} is not valid")
    body = cbor2.dumps((limits.protocol_version, OP_OF_REQUEST[cls], *request))
    if len(body) > limits.frame_size_bytes_max:
        raise LocalProtocolError(f"{cls.__name__} of {len(body)} bytes exceeds the frame limit")
    return _LENGTH.pack(len(body)) + body


def decode_request(body: bytes) -> Request:
    """The request in one frame body; raises as the module docstring says."""
    try:
        item = cbor2.loads(body)
    except Exception as error:  # cbor2 raises several unrelated types on junk
        raise RemoteProtocolError(f"frame body is not CBOR: {error}") from None
    if type(item) is not list or len(item) < 3:
        raise RemoteProtocolError("frame body is not an array of at least 3 items")
    version, op, request_id = item[0], item[1], item[2]
    if not _u63(request_id):
        raise RemoteProtocolError(f"request id {request_id!r} is not a u63")
    if type(op) is not int:
        raise UndecodableRequest(request_id, 0, Status.EBADREQ, f"op {op!r} is not an integer")
    if version != limits.protocol_version or type(version) is not int:
        raise UndecodableRequest(
            request_id,
            op,
            Status.EBADVERSION,
            f"protocol version {version!r} is not {limits.protocol_version}",
        )
    try:
        cls = REQUEST_TYPES[Op(op)]
    except ValueError:
        raise UndecodableRequest(request_id, op, Status.EBADREQ, f"unknown op {op}") from None
    fields = item[3:]
    checks = _REQUEST_FIELDS[cls]
    if len(fields) != len(checks):
        raise UndecodableRequest(
            request_id,
            op,
            Status.EBADREQ,
            f"{cls.__name__} takes {len(checks)} fields after the request id, got {len(fields)}",
        )
    bad = _first_invalid(fields, checks)
    if bad is not None:
        name = cls._fields[bad + 1]
        message = f"{cls.__name__}.{name} = {fields[bad]!r:.80} is not valid"
        raise UndecodableRequest(request_id, op, Status.EBADREQ, message)
    return cls(request_id, *fields)


# --- responses --------------------------------------------------------------------------------


def encode_response(response: Response) -> bytes:
    """One framed response."""
    body = cbor2.dumps((limits.protocol_version, OP_OF_RESPONSE[type(response)], *response))
    return _LENGTH.pack(len(body)) + body


def encode_error_response(request_id: int, op: int, status: Status, message: str) -> bytes:
    """A framed error answer to a request that could not be decoded into a message."""
    assert status != Status.EOK
    body = cbor2.dumps((limits.protocol_version, op, request_id, int(status), message[:4096]))
    return _LENGTH.pack(len(body)) + body


def decode_response(body: bytes) -> Response:
    """The response in one frame body.  Any deviation raises `RemoteProtocolError`."""
    try:
        item = cbor2.loads(body)
    except Exception as error:  # cbor2 raises several unrelated types on junk
        raise RemoteProtocolError(f"frame body is not CBOR: {error}") from None
    if type(item) is not list or len(item) < 5:
        raise RemoteProtocolError("response is not an array of at least 5 items")
    version, op, request_id, status, message = item[:5]
    if version != limits.protocol_version:
        raise RemoteProtocolError(f"response protocol version {version!r}")
    if not _u63(request_id) or not _status(status) or not (message is None or _text(message)):
        raise RemoteProtocolError("response header fields are not valid")
    try:
        cls = RESPONSE_TYPES[Op(op)]
    except ValueError:
        raise RemoteProtocolError(f"response has unknown op {op!r}") from None
    fields = item[5:]
    checks = _RESPONSE_FIELDS[cls]
    if len(fields) > len(checks):
        raise RemoteProtocolError(f"{cls.__name__} has {len(fields)} fields, at most {len(checks)}")
    bad = _first_invalid(fields, checks[: len(fields)])
    if bad is not None:
        raise RemoteProtocolError(f"{cls.__name__} field {bad} = {fields[bad]!r:.80} is not valid")
    return cls(request_id, status, message, *fields)
