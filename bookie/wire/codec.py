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

* The length prefix is zero or exceeds the maximum, the body does not start
  with one well-formed CBOR item, the item is not an array, or it has no usable
  request id: `RemoteProtocolError`; the connection is closed, since nothing
  can be answered.  (Bytes after the first item are ignored: checking for them
  would cost a second pass over every frame.)
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
from bookie.errors import LocalProtocolError, RemoteProtocolError, Status, preview
from bookie.wire.messages import (
    OP_OF_REQUEST,
    OP_OF_RESPONSE,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    IdentifyRequest,
    IdentifyResponse,
    LedgerStateRequest,
    LedgerStateResponse,
    ListEntriesRequest,
    ListEntriesResponse,
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
_TEXT_MAX: Final = 4096
"""Longest `message` of a response, in characters."""


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


def _token(v: Any) -> bool:
    return type(v) is bytes and 0 < len(v) <= limits.auth_token_bytes_max


def _packet(v: Any) -> bool:
    return type(v) is bytes and len(v) <= limits.frame_size_bytes_max


def _timeout(v: Any) -> bool:
    return type(v) is int and 0 <= v <= limits.long_poll_timeout_ms_max


def _text(v: Any) -> bool:
    return type(v) is str and len(v) <= _TEXT_MAX


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
    LedgerStateRequest: (_u63,),
    IdentifyRequest: (),
    AuthRequest: (_token,),
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
    LedgerStateResponse: (_optional(_u63), _optional(_bool), _optional(_lac)),
    IdentifyResponse: (_optional(_text), _optional(_text)),
    AuthResponse: (_optional(_text),),
}


_SECRET_FIELDS: Final = frozenset({(AuthRequest, "token")})
"""Fields whose value an error message never shows (only its type and length)."""


def _shown(cls: type[Request], field: str, value: Any) -> str:
    """How an error message shows the invalid `value` of `cls.field`."""
    if (cls, field) in _SECRET_FIELDS:
        size = f" of {len(value)} bytes" if isinstance(value, bytes | str) else ""
        return f"(a {type(value).__name__}{size}, not shown)"
    return preview(value)


def _first_invalid(values: Sequence[Any], checks: tuple[Validator, ...]) -> int | None:
    """Index of the first value its check rejects, or None when all pass."""
    for index, (value, check) in enumerate(zip(values, checks, strict=True)):
        if not check(value):
            return index
    return None


# --- fast paths -------------------------------------------------------------------------------
#
# Every add passes through the codec four times, so the hot messages get one
# inlined check of all their values (request id first) instead of one validator
# call per field.  Each accepts exactly what the tables above accept (a property
# test holds them to it); when one says no, the table path runs to name the bad
# field.

_KEY_MAX: Final = limits.master_key_bytes_max
_PACKET_MAX: Final = limits.frame_size_bytes_max
_TIMEOUT_MAX: Final = limits.long_poll_timeout_ms_max


def _add_request_ok(v: Sequence[Any]) -> bool:
    if len(v) != 6:
        return False
    request_id, ledger_id, entry_id, key, flags, packet = v
    return (
        type(request_id) is int
        and 0 <= request_id < _U63_END
        and type(ledger_id) is int
        and 0 <= ledger_id < _U63_END
        and type(entry_id) is int
        and 0 <= entry_id < _U63_END
        and type(key) is bytes
        and len(key) <= _KEY_MAX
        and type(flags) is int
        and 0 <= flags <= 0xFF
        and type(packet) is bytes
        and len(packet) <= _PACKET_MAX
    )


def _read_request_ok(v: Sequence[Any]) -> bool:
    if len(v) != 7:
        return False
    request_id, ledger_id, entry_id, flags, key, previous_lac, timeout_ms = v
    return (
        type(request_id) is int
        and 0 <= request_id < _U63_END
        and type(ledger_id) is int
        and 0 <= ledger_id < _U63_END
        and type(entry_id) is int
        and -1 <= entry_id < _U63_END
        and type(flags) is int
        and 0 <= flags <= 0xFF
        and (key is None or (type(key) is bytes and len(key) <= _KEY_MAX))
        and (previous_lac is None or (type(previous_lac) is int and -1 <= previous_lac < _U63_END))
        and (timeout_ms is None or (type(timeout_ms) is int and 0 <= timeout_ms <= _TIMEOUT_MAX))
    )


def _response_head_ok(request_id: Any, status: Any, message: Any) -> bool:
    return (
        type(request_id) is int
        and 0 <= request_id < _U63_END
        and type(status) is int
        and 0 <= status <= 0xFFFF
        and (message is None or (type(message) is str and len(message) <= _TEXT_MAX))
    )


def _add_response_ok(v: Sequence[Any]) -> bool:
    if len(v) != 5:
        return False
    request_id, status, message, ledger_id, entry_id = v
    return (
        _response_head_ok(request_id, status, message)
        and (ledger_id is None or (type(ledger_id) is int and 0 <= ledger_id < _U63_END))
        and (entry_id is None or (type(entry_id) is int and 0 <= entry_id < _U63_END))
    )


def _read_response_ok(v: Sequence[Any]) -> bool:
    if len(v) != 7:
        return False
    request_id, status, message, ledger_id, entry_id, packet, lac = v
    return (
        _response_head_ok(request_id, status, message)
        and (ledger_id is None or (type(ledger_id) is int and 0 <= ledger_id < _U63_END))
        and (entry_id is None or (type(entry_id) is int and -1 <= entry_id < _U63_END))
        and (packet is None or (type(packet) is bytes and len(packet) <= _PACKET_MAX))
        and (lac is None or (type(lac) is int and -1 <= lac < _U63_END))
    )


_FAST_REQUEST_CHECKS: Final[dict[type[Request], Callable[[Sequence[Any]], bool]]] = {
    AddRequest: _add_request_ok,
    ReadRequest: _read_request_ok,
}
_FAST_RESPONSE_CHECKS: Final[dict[type[Response], Callable[[Sequence[Any]], bool]]] = {
    AddResponse: _add_response_ok,
    ReadResponse: _read_response_ok,
}

# By plain int op: a dict lookup instead of building an `Op` (which costs as much
# as the rest of the fast path).
_REQUEST_CLASSES: Final[dict[int, type[Request]]] = {
    int(op): cls for op, cls in REQUEST_TYPES.items()
}
_RESPONSE_CLASSES: Final[dict[int, type[Response]]] = {
    int(op): cls for op, cls in RESPONSE_TYPES.items()
}
_REQUEST_OPS: Final[dict[type[Request], int]] = {cls: int(op) for cls, op in OP_OF_REQUEST.items()}
_RESPONSE_OPS: Final[dict[type[Response], int]] = {
    cls: int(op) for cls, op in OP_OF_RESPONSE.items()
}


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
    fast = _FAST_REQUEST_CHECKS.get(cls)
    if fast is None or not fast(request):
        if not _u63(request[0]):
            raise LocalProtocolError(f"request id {request[0]!r} is not a u63")
        bad = _first_invalid(request[1:], _REQUEST_FIELDS[cls])
        if bad is not None:
            field = cls._fields[bad + 1]
            shown = _shown(cls, field, request[bad + 1])
            raise LocalProtocolError(f"{cls.__name__}.{field} = {shown} is not valid")
        assert fast is None, "the fast check rejected what the field table accepts"
    body = cbor2.dumps((limits.protocol_version, _REQUEST_OPS[cls], *request))
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
        raise RemoteProtocolError(f"request id {preview(request_id)} is not a u63")
    if type(op) is not int:
        raise UndecodableRequest(
            request_id, 0, Status.EBADREQ, f"op {preview(op)} is not an integer"
        )
    if version != limits.protocol_version or type(version) is not int:
        raise UndecodableRequest(
            request_id,
            op,
            Status.EBADVERSION,
            f"protocol version {preview(version)} is not {limits.protocol_version}",
        )
    cls = _REQUEST_CLASSES.get(op)
    if cls is None:
        raise UndecodableRequest(request_id, op, Status.EBADREQ, f"unknown op {preview(op)}")
    values = item[2:]
    fast = _FAST_REQUEST_CHECKS.get(cls)
    if fast is not None and fast(values):
        # The check counted the values, so `_make`'s own length check is not needed.
        return tuple.__new__(cls, values)
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
        message = f"{cls.__name__}.{name} = {_shown(cls, name, fields[bad])} is not valid"
        raise UndecodableRequest(request_id, op, Status.EBADREQ, message)
    assert fast is None, "the fast check rejected what the field table accepts"
    return cls._make(values)


# --- responses --------------------------------------------------------------------------------


def encode_response(response: Response) -> bytes:
    """One framed response."""
    body = cbor2.dumps((limits.protocol_version, _RESPONSE_OPS[type(response)], *response))
    return _LENGTH.pack(len(body)) + body


def encode_error_response(request_id: int, op: int, status: Status, message: str) -> bytes:
    """A framed error answer to a request that could not be decoded into a message."""
    assert status != Status.EOK
    body = cbor2.dumps((limits.protocol_version, op, request_id, int(status), message[:_TEXT_MAX]))
    return _LENGTH.pack(len(body)) + body


def decode_response(body: bytes) -> Response:
    """The response in one frame body.  Any deviation raises `RemoteProtocolError`."""
    try:
        item = cbor2.loads(body)
    except Exception as error:  # cbor2 raises several unrelated types on junk
        raise RemoteProtocolError(f"frame body is not CBOR: {error}") from None
    if type(item) is not list or len(item) < 5:
        raise RemoteProtocolError("response is not an array of at least 5 items")
    version, op = item[0], item[1]
    if version != limits.protocol_version or type(version) is not int:
        raise RemoteProtocolError(f"response protocol version {preview(version)}")
    cls = _RESPONSE_CLASSES.get(op) if type(op) is int else None
    values = item[2:]
    if cls is not None:
        fast = _FAST_RESPONSE_CHECKS.get(cls)
        if fast is not None and fast(values):
            return tuple.__new__(cls, values)
    request_id, status, message = item[2:5]
    if not _response_head_ok(request_id, status, message):
        raise RemoteProtocolError("response header fields are not valid")
    if cls is None:
        raise RemoteProtocolError(f"response has unknown op {preview(op)}")
    fields = item[5:]
    checks = _RESPONSE_FIELDS[cls]
    if len(fields) > len(checks):
        raise RemoteProtocolError(f"{cls.__name__} has {len(fields)} fields, at most {len(checks)}")
    bad = _first_invalid(fields, checks[: len(fields)])
    if bad is not None:
        raise RemoteProtocolError(
            f"{cls.__name__} field {bad} = {preview(fields[bad])} is not valid"
        )
    return cls(request_id, status, message, *fields)
