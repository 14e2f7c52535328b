"""Bookie protocol messages: one immutable record per request and response.

Pure data, no I/O.  The byte layout is in `bookie/wire/codec.py` and
`docs/protocol.md`; this module only names the fields, in wire order.

Messages are `NamedTuple`s rather than dataclasses on purpose: every add
passes through them several times (client encode, bookie decode, bookie
encode, client decode), a tuple is built in one C call, and its fields are
already the CBOR array the codec writes.  Field order is the wire order; never
reorder fields, only append new optional ones with a protocol version bump.

Vocabulary: a *packet* is an entry as the client framed it (header, digest,
payload; see `bookie/wire/packet.py`).  The bookie stores packets verbatim and
never looks inside except to read the LAC field of the header.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Op(enum.IntEnum):
    """Operation codes (wire values, never renumber)."""

    ADD = 1
    READ = 2
    READ_LAC = 3
    WRITE_LAC = 4
    GET_BOOKIE_INFO = 5
    LIST_ENTRIES = 6
    LEDGER_STATE = 7
    IDENTIFY = 8
    AUTH = 9


ADD_FLAG_RECOVERY = 0x1
"""ADD flag: a recovery add, accepted even when the ledger is fenced."""

READ_FLAG_FENCE = 0x1
"""READ flag: fence the ledger (durably) before reading."""

ENTRY_ID_LAST = -1
"""READ of this entry id answers the highest entry the bookie holds for the ledger."""

LAC_NONE = -1
"""The LAC of a ledger of which no entry is confirmed yet."""


# --- requests ---------------------------------------------------------------------------------


class AddRequest(NamedTuple):
    """Store `packet` as entry `entry_id` of `ledger_id`; answered after the journal fsync."""

    request_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes
    flags: int
    packet: bytes


class ReadRequest(NamedTuple):
    """Read one entry (or the last one, `ENTRY_ID_LAST`).

    With `READ_FLAG_FENCE` the ledger is fenced first and the reply waits until
    the fence is durable; a fencing read needs the master key.  With
    `previous_lac` set, the read parks until the bookie's LAC for the ledger
    exceeds it or `timeout_ms` passes (long poll), then reads.
    """

    request_id: int
    ledger_id: int
    entry_id: int
    flags: int
    master_key: bytes | None
    previous_lac: int | None
    timeout_ms: int | None


class ReadLacRequest(NamedTuple):
    """Ask for the explicit-LAC packet and the last entry's packet of a ledger."""

    request_id: int
    ledger_id: int


class WriteLacRequest(NamedTuple):
    """Record an explicit LAC (`packet` is the digest-framed LAC packet)."""

    request_id: int
    ledger_id: int
    master_key: bytes
    lac: int
    packet: bytes


class GetBookieInfoRequest(NamedTuple):
    """Ask for free and total disk bytes and the read-only flag."""

    request_id: int


class ListEntriesRequest(NamedTuple):
    """Ask which entries of a ledger the bookie holds."""

    request_id: int
    ledger_id: int


class LedgerStateRequest(NamedTuple):
    """Ask whether a ledger is fenced and its LAC, from memory (no storage read, no fsync).

    A writer uses it to confirm it still owns its ledger without appending
    anything: the basis of fast linearizable reads (docs/protocol.md).
    """

    request_id: int
    ledger_id: int


class IdentifyRequest(NamedTuple):
    """Ask which bookie this is: its bookie id and its cluster's instance id.

    A client asks it first on every connection, so that it never talks to
    another bookie that now listens at the address it knew (docs/protocol.md).
    """

    request_id: int


class AuthRequest(NamedTuple):
    """Present a client token; on a bookie that requires one, nothing else is served on the
    connection until an AUTH succeeds (docs/protocol.md)."""

    request_id: int
    token: bytes


Request = (
    AddRequest
    | ReadRequest
    | ReadLacRequest
    | WriteLacRequest
    | GetBookieInfoRequest
    | ListEntriesRequest
    | LedgerStateRequest
    | IdentifyRequest
    | AuthRequest
)

# --- responses --------------------------------------------------------------------------------
#
# Every response starts with (request_id, status, message).  `message` is None
# on success and a short human-readable reason otherwise.  The op-specific
# fields that follow are present in every response of that op, None where the
# status leaves them without meaning.


class AddResponse(NamedTuple):
    request_id: int
    status: int
    message: str | None
    ledger_id: int | None = None
    entry_id: int | None = None


class ReadResponse(NamedTuple):
    """`lac` is the highest LAC the bookie knows for the ledger (-1 if none), even on ENOENTRY."""

    request_id: int
    status: int
    message: str | None
    ledger_id: int | None = None
    entry_id: int | None = None
    packet: bytes | None = None
    lac: int | None = None


class ReadLacResponse(NamedTuple):
    request_id: int
    status: int
    message: str | None
    ledger_id: int | None = None
    lac_packet: bytes | None = None
    last_entry_packet: bytes | None = None


class WriteLacResponse(NamedTuple):
    request_id: int
    status: int
    message: str | None
    ledger_id: int | None = None


class GetBookieInfoResponse(NamedTuple):
    request_id: int
    status: int
    message: str | None
    free_bytes: int | None = None
    total_bytes: int | None = None
    read_only: bool | None = None


class ListEntriesResponse(NamedTuple):
    """`ranges` lists the held entry ids as inclusive `[first, last]` pairs, ascending."""

    request_id: int
    status: int
    message: str | None
    ledger_id: int | None = None
    ranges: list[list[int]] | None = None


class LedgerStateResponse(NamedTuple):
    """`fenced` and `lac` of the ledger as the bookie knows them when it answers.

    ENOLEDGER for a ledger the bookie holds nothing of: such a ledger is not
    fenced there (a fence would have created it).
    """

    request_id: int
    status: int
    message: str | None
    ledger_id: int | None = None
    fenced: bool | None = None
    lac: int | None = None


class IdentifyResponse(NamedTuple):
    """The bookie's id and its cluster's instance id; None where it has none (a bookie
    started without an identity, as some tests do)."""

    request_id: int
    status: int
    message: str | None
    bookie_id: str | None = None
    instance_id: str | None = None


class AuthResponse(NamedTuple):
    """The principal the token names; None on a bookie that requires no token."""

    request_id: int
    status: int
    message: str | None
    principal: str | None = None


Response = (
    AddResponse
    | ReadResponse
    | ReadLacResponse
    | WriteLacResponse
    | GetBookieInfoResponse
    | ListEntriesResponse
    | LedgerStateResponse
    | IdentifyResponse
    | AuthResponse
)

REQUEST_TYPES: dict[Op, type[Request]] = {
    Op.ADD: AddRequest,
    Op.READ: ReadRequest,
    Op.READ_LAC: ReadLacRequest,
    Op.WRITE_LAC: WriteLacRequest,
    Op.GET_BOOKIE_INFO: GetBookieInfoRequest,
    Op.LIST_ENTRIES: ListEntriesRequest,
    Op.LEDGER_STATE: LedgerStateRequest,
    Op.IDENTIFY: IdentifyRequest,
    Op.AUTH: AuthRequest,
}

RESPONSE_TYPES: dict[Op, type[Response]] = {
    Op.ADD: AddResponse,
    Op.READ: ReadResponse,
    Op.READ_LAC: ReadLacResponse,
    Op.WRITE_LAC: WriteLacResponse,
    Op.GET_BOOKIE_INFO: GetBookieInfoResponse,
    Op.LIST_ENTRIES: ListEntriesResponse,
    Op.LEDGER_STATE: LedgerStateResponse,
    Op.IDENTIFY: IdentifyResponse,
    Op.AUTH: AuthResponse,
}

OP_OF_REQUEST: dict[type[Request], Op] = {cls: op for op, cls in REQUEST_TYPES.items()}
OP_OF_RESPONSE: dict[type[Response], Op] = {cls: op for op, cls in RESPONSE_TYPES.items()}
