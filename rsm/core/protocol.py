"""Bytes <-> messages of the client<->replica protocol.

Pure: no sockets.  The replica's server (`rsm/runtime/server.py`) and the client
(`rsm/client.py`) both use it.  Frames are those of the bookie protocol
(`bookie.wire.codec.frame` / `FrameDecoder`): a 4-byte big-endian length, then
a body of that many bytes, 1 <= length <= `limits.frame_bytes_max`.  A body
is one CBOR data item (RFC 8949), an array.

Request body::

    [version, op, request_id, field_1, ..., field_n]

    version     uint   `limits.protocol_version` (1)
    op          uint   1 CALL, 2 QUERY, 3 STATUS, 4 TRANSFER_LEADERSHIP, 5 SNAPSHOT, 6 AUTH
    request_id  uint   < 2^63, chosen by the client, echoed in the response

    CALL     name: text, args: array, kwargs: map text -> any,
             client_id: bytes | null, seq: uint | null, ack_seq: uint | null
             (session fields all null or all set: see rsm/core/sessions.py)
    QUERY    name: text, args: array, kwargs: map text -> any,
             consistency: uint (0 linearizable, 1 read_your_writes, 2 stale),
             min_index: uint (read_your_writes waits until this index is applied)
    STATUS   (no field)
    TRANSFER_LEADERSHIP   target: text (a replica id) | null (any caught-up replica)
    SNAPSHOT (no field)   take a snapshot of this replica's state now
    AUTH     token: bytes (1..`bookie.limits.auth_token_bytes_max`)   present a client
             token; on a replica that requires one, nothing else is served on the
             connection until an AUTH succeeds (docs/security.md).  Never shown in errors.

Response body, the same 8 fields for every op::

    [version, op, request_id, status, message, detail, value, index]

    op       uint          the request's op (whatever it was, for an unknown one)
    status   uint          an `RsmStatus`; 0 is OK
    message  text | null   the error's message (null when OK)
    detail   text | null   NotLeader: the leader's address; CommandFailed: the
                           exception's type name; null otherwise
    value    any           CALL/QUERY: the result; STATUS: a map (see
                           `rsm.runtime.replica.Replica.status`); TRANSFER_LEADERSHIP:
                           {"target": text, "window_ms": uint}; SNAPSHOT: the
                           snapshot's manifest as a map (`rsm.snapshots.inspect.manifest_plain`);
                           AUTH: the token's principal, null on a replica that requires
                           no token; null on errors
    index    uint          CALL: the command's index in the log (also when the
                           command failed; 0 when it was never logged); QUERY:
                           the index the replica had applied when it answered;
                           0 otherwise.  A client passes the highest index it
                           saw as `min_index` to read its own writes elsewhere.

Bad input, by how bad it is:

* unframeable bytes (zero or oversized length), a body that is not CBOR, not an
  array of at least 3, or has no usable request id: `ProtocolViolation`, and
  the connection is closed, since nothing can be answered;
* a known request id with a wrong version, an unknown op or a field of the
  wrong type: `UndecodableRequest`, answered with a BAD_REQUEST response.

Invariants: `decode_request(encode_request(r)[4:]) == r` for every valid
request, and likewise for responses; decoding never raises anything but
`ProtocolViolation` (and its subclass `UndecodableRequest`).
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Final, NamedTuple

import cbor2

from bookie.errors import preview
from bookie.limits import auth_token_bytes_max
from bookie.wire.codec import frame
from rsm import limits
from rsm.core.sessions import Outcome
from rsm.errors import BadRequest, ProtocolViolation, RsmStatus, StatusError, error_for_status

_U63_END: Final = 1 << 63
_VERSION: Final = limits.protocol_version
_LENGTH: Final = struct.Struct(">I")


class Op(enum.IntEnum):
    """Operation codes (wire values, never renumber)."""

    CALL = 1
    QUERY = 2
    STATUS = 3
    TRANSFER_LEADERSHIP = 4
    SNAPSHOT = 5
    AUTH = 6


class Consistency(enum.IntEnum):
    """How fresh a query's answer must be (wire values, never renumber)."""

    LINEARIZABLE = 0
    """On the leader, after the next entry it sends is acknowledged by Qa bookies and applied."""
    READ_YOUR_WRITES = 1
    """On any replica, once it has applied `min_index`."""
    STALE = 2
    """On any replica, from its local state at once."""

    @classmethod
    def parse(cls, value: Consistency | str) -> Consistency:
        """`Consistency.X`, or its name in lower case ("linearizable", ...)."""
        if isinstance(value, Consistency):
            return value
        try:
            return cls[value.upper()]
        except KeyError:
            names = ", ".join(member.name.lower() for member in cls)
            raise BadRequest(f"consistency {value!r} is not one of {names}") from None


class CallRequest(NamedTuple):
    request_id: int
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    client_id: bytes | None = None
    seq: int | None = None
    ack_seq: int | None = None


class QueryRequest(NamedTuple):
    request_id: int
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    consistency: Consistency = Consistency.LINEARIZABLE
    min_index: int = 0


class StatusRequest(NamedTuple):
    request_id: int


class TransferRequest(NamedTuple):
    request_id: int
    target: str | None = None


class SnapshotRequest(NamedTuple):
    request_id: int


class AuthRequest(NamedTuple):
    request_id: int
    token: bytes


Request = (
    CallRequest | QueryRequest | StatusRequest | TransferRequest | SnapshotRequest | AuthRequest
)


class Response(NamedTuple):
    op: int
    request_id: int
    status: RsmStatus
    message: str | None
    detail: str | None
    value: Any
    log_index: int
    """The `index` field: see the module docstring."""

    @property
    def ok(self) -> bool:
        return self.status == RsmStatus.OK

    def error(self) -> StatusError:
        """The error a non-OK response stands for (a new exception object)."""
        assert not self.ok
        return error_for_status(self.status, self.message or "", self.detail)


class UndecodableRequest(ProtocolViolation):
    """A request whose id is known but which is otherwise not acceptable: answer BAD_REQUEST."""

    def __init__(self, request_id: int, op: int, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.op = op

    def response(self) -> bytes:
        return encode_error(self.op, self.request_id, BadRequest(str(self)))


# --- field checks -----------------------------------------------------------------------------
#
# `type(v) is int` on purpose: CBOR true/false decode to bool, an int subclass.


def _u63(v: Any) -> bool:
    return type(v) is int and 0 <= v < _U63_END


def _name(v: Any) -> bool:
    return type(v) is str and 1 <= len(v) <= limits.command_name_chars_max


def _optional_text(v: Any, chars_max: int) -> bool:
    return v is None or (type(v) is str and len(v) <= chars_max)


def _session(client_id: Any, seq: Any, ack_seq: Any) -> bool:
    if client_id is None and seq is None and ack_seq is None:
        return True
    return (
        type(client_id) is bytes
        and 1 <= len(client_id) <= limits.client_id_bytes_max
        and _u63(seq)
        and seq >= 1
        and _u63(ack_seq)
        and ack_seq < seq
    )


def _call_ok(item: list[Any]) -> bool:
    """Whether a 9-item body is a valid CALL (`_call_problem` says why not)."""
    version, _op, request_id, name, args, kwargs, client_id, seq, ack_seq = item
    return (
        type(version) is int
        and version == _VERSION
        and type(request_id) is int
        and 0 <= request_id < _U63_END
        and type(name) is str
        and 0 < len(name) <= limits.command_name_chars_max
        and type(args) is list
        and type(kwargs) is dict
        and (
            (client_id is None and seq is None and ack_seq is None)
            or (
                type(client_id) is bytes
                and 0 < len(client_id) <= limits.client_id_bytes_max
                and type(seq) is int
                and type(ack_seq) is int
                and 0 <= ack_seq < seq < _U63_END
            )
        )
    )


def _call_problem(fields: list[Any]) -> str | None:
    if len(fields) != 6:
        return f"CALL takes 6 fields, got {len(fields)}"
    name, args, kwargs, client_id, seq, ack_seq = fields
    if not _name(name):
        return f"command name {preview(name)} is not 1..{limits.command_name_chars_max} chars"
    if type(args) is not list or type(kwargs) is not dict:
        return "CALL args must be an array and kwargs a map"
    if not _session(client_id, seq, ack_seq):
        return "CALL session fields (client_id, seq, ack_seq) are not valid"
    return None


def _query_problem(fields: list[Any]) -> str | None:
    if len(fields) != 5:
        return f"QUERY takes 5 fields, got {len(fields)}"
    name, args, kwargs, consistency, min_index = fields
    if not _name(name):
        return f"query name {preview(name)} is not 1..{limits.command_name_chars_max} chars"
    if type(args) is not list or type(kwargs) is not dict:
        return "QUERY args must be an array and kwargs a map"
    if type(consistency) is not int or consistency not in _CONSISTENCIES:
        return f"consistency {preview(consistency, 40)} is not 0, 1 or 2"
    if not _u63(min_index):
        return f"min_index {preview(min_index, 40)} is not a u63"
    return None


_CONSISTENCIES: Final = frozenset(int(c) for c in Consistency)
_STATUSES: Final = frozenset(int(s) for s in RsmStatus)


# --- requests ---------------------------------------------------------------------------------


def encode_request(request: Request) -> bytes:
    """One framed request.  Raises `BadRequest` when it does not fit in a frame or in CBOR."""
    if type(request) is CallRequest:
        _request_id, *fields = request
        body_fields: list[Any] = [Op.CALL, *fields]
    elif type(request) is QueryRequest:
        _request_id, name, args, kwargs, consistency, min_index = request
        body_fields = [Op.QUERY, name, args, kwargs, int(consistency), min_index]
    elif type(request) is StatusRequest:
        body_fields = [Op.STATUS]
    elif type(request) is SnapshotRequest:
        body_fields = [Op.SNAPSHOT]
    elif type(request) is AuthRequest:
        body_fields = [Op.AUTH, request.token]
    else:
        assert type(request) is TransferRequest
        body_fields = [Op.TRANSFER_LEADERSHIP, request.target]
    assert _u63(request.request_id)
    op = int(body_fields[0])
    try:
        body = cbor2.dumps([limits.protocol_version, op, request.request_id, *body_fields[1:]])
    except Exception as error:  # cbor2 raises several types for values it cannot encode
        raise BadRequest(f"request cannot be encoded in CBOR: {error}") from None
    if len(body) > limits.frame_bytes_max:
        raise BadRequest(f"request of {len(body)} bytes exceeds {limits.frame_bytes_max}")
    return frame(body)


def decode_request(body: bytes) -> Request:
    """The request in one frame body; raises as the module docstring says."""
    try:
        item = cbor2.loads(body)
    except Exception as error:  # cbor2 raises several unrelated types on junk
        raise ProtocolViolation(f"frame body is not CBOR: {error}") from None
    if type(item) is list and len(item) == 9 and item[1] == Op.CALL and _call_ok(item):
        # The common case, checked in one expression (every request is a CALL
        # under load); anything else takes the path that names the problem.
        return tuple.__new__(CallRequest, item[2:])
    if type(item) is not list or len(item) < 3:
        raise ProtocolViolation("frame body is not an array of at least 3 items")
    version, op, request_id = item[0], item[1], item[2]
    if not _u63(request_id):
        raise ProtocolViolation(f"request id {preview(request_id, 40)} is not a u63")
    if type(op) is not int or op not in _OPS:
        raise UndecodableRequest(request_id, op if _u63(op) else 0, f"unknown op {preview(op, 40)}")
    if type(version) is not int or version != limits.protocol_version:
        raise UndecodableRequest(
            request_id,
            op,
            f"protocol version {preview(version, 40)} is not {limits.protocol_version}",
        )
    fields = item[3:]
    if op == Op.CALL:
        problem = _call_problem(fields)
        if problem is None:
            return CallRequest(request_id, *fields)
    elif op == Op.QUERY:
        problem = _query_problem(fields)
        if problem is None:
            name, args, kwargs, consistency, min_index = fields
            return QueryRequest(request_id, name, args, kwargs, Consistency(consistency), min_index)
    elif op == Op.STATUS:
        problem = None if not fields else f"STATUS takes no field, got {len(fields)}"
        if problem is None:
            return StatusRequest(request_id)
    elif op == Op.SNAPSHOT:
        problem = None if not fields else f"SNAPSHOT takes no field, got {len(fields)}"
        if problem is None:
            return SnapshotRequest(request_id)
    elif op == Op.AUTH:
        token = fields[0] if len(fields) == 1 else None
        problem = (
            None
            if type(token) is bytes and 0 < len(token) <= auth_token_bytes_max
            else f"AUTH takes one field: a token of 1..{auth_token_bytes_max} bytes (not shown)"
        )
        if problem is None:
            assert type(token) is bytes
            return AuthRequest(request_id, token)
    else:
        target = fields[0] if len(fields) == 1 else None
        problem = (
            None
            if len(fields) == 1 and _optional_text(target, limits.replica_id_chars_max)
            else "TRANSFER_LEADERSHIP takes one field: a replica id or null"
        )
        if problem is None:
            return TransferRequest(request_id, target)
    assert problem is not None
    raise UndecodableRequest(request_id, op, problem)


_OPS: Final = frozenset(int(op) for op in Op)


# --- responses --------------------------------------------------------------------------------


def encode_response(op: int, request_id: int, outcome: Outcome, index: int) -> bytes:
    """One framed response carrying `outcome`.  An answer that cannot be sent as it is (not
    CBOR, or larger than a frame) becomes a BAD_REQUEST error saying so, never an exception."""
    status, value, message, detail = outcome
    if status == RsmStatus.OK:
        item = [_VERSION, op, request_id, 0, None, None, value, index]
    else:
        if detail is not None:
            detail = detail[: limits.address_chars_max]
        message = message[: limits.error_message_chars_max]
        item = [_VERSION, op, request_id, int(status), message, detail, None, index]
    try:
        body = cbor2.dumps(item)
    except Exception as error:  # cbor2 raises several types for values it cannot encode
        return encode_error(op, request_id, BadRequest(f"answer is not CBOR: {error}"))
    size_bytes = len(body)
    if size_bytes > limits.frame_bytes_max:
        return encode_error(
            op,
            request_id,
            BadRequest(f"answer of {size_bytes} bytes exceeds {limits.frame_bytes_max}"),
        )
    return _LENGTH.pack(size_bytes) + body


def encode_error(op: int, request_id: int, error: StatusError, index: int = 0) -> bytes:
    """One framed error response."""
    return encode_response(op, request_id, Outcome.failure(error), index)


def decode_response(body: bytes) -> Response:
    """The response in one frame body; any deviation raises `ProtocolViolation`."""
    try:
        item = cbor2.loads(body)
    except Exception as error:  # cbor2 raises several unrelated types on junk
        raise ProtocolViolation(f"response is not CBOR: {error}") from None
    if type(item) is not list or len(item) != 8:
        raise ProtocolViolation("response is not an array of 8 items")
    version, op, request_id, status, message, detail, value, index = item
    if (
        type(version) is not int
        or version != limits.protocol_version
        or not _u63(op)
        or not _u63(request_id)
        or type(status) is not int
        or status not in _STATUSES
        or not _optional_text(message, limits.error_message_chars_max)
        or not _optional_text(detail, limits.address_chars_max)
        or not _u63(index)
    ):
        raise ProtocolViolation(f"response header {preview(item[:6], 120)} is not valid")
    return Response(op, request_id, RsmStatus(status), message, detail, value, index)
