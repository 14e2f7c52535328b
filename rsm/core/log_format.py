"""Bytes <-> log entries (batches of commands) and the framework's znode values.

Pure: no ledgers, no ZooKeeper.  The leader encodes, every replica and every
tool decodes; decoding validates every framework field and raises
`MalformedValue` (never another exception) on anything else, because a log
entry or znode value that does not follow this layout must stop a replica
loudly rather than be applied by guesswork.  Application data (command
arguments) is checked only to be CBOR; its meaning is the state machine's.

All values are one CBOR data item (RFC 8949), with nothing after it.
Integers are major types 0/1, byte strings major type 2, text major type 3,
arrays major type 4, maps major type 5, null is simple value 22 (0xf6).

Log entry (one ledger entry's payload = one batch), a CBOR array of 7::

    [1, epoch, first_index, timestamp_ms, seed, items, state_hash]

    1             uint    format tag of a batch (version 1)
    epoch         uint    epoch of the leader that wrote it, >= 1
    first_index   uint    index of items[0], >= 1; for an empty batch, the index
                          the next command will take
    timestamp_ms  uint    the leader's clock, never decreasing along the log
    seed          uint    u64 drawn by the leader; commands' randomness derives from it
    items         array   the commands, item k at index first_index + k
                          (empty: takes no index; the leader writes none)
    state_hash    null or [index: uint, digest: bytes (1..64)]

The leader builds the batch from items it encoded one by one when they
arrived (`encode_command`), so `encode_batch` writes the head bytes itself and
concatenates the items without re-encoding them::

    0x87                            array(7)
    0x01                            uint 1
    uint(epoch) uint(first_index) uint(timestamp_ms) uint(seed)
    head(4, n) item_1 ... item_n    array(n) of pre-encoded items
    0xf6 | [index, digest]

where `uint(v)` / `head(major, n)` are the shortest CBOR head: one byte
`major << 5 | v` for v < 24, else `major << 5 | 24..27` followed by v in
1, 2, 4 or 8 big-endian bytes.

Items::

    [0, name, args, kwargs, client_id, seq, ack_seq]    an application command
        name      text   the state machine's command key ("name" or "name@version")
        args      array  positional arguments
        kwargs    map    text -> any: keyword arguments
        client_id bytes (1..32) | null   session of the command
        seq       uint >= 1 | null       command number within the session
        ack_seq   uint < seq | null      the client has the answers of every seq <= ack_seq
        (client_id, seq and ack_seq are all null or all set)
    [1, replica_id]                                     the leader-start marker
        replica_id text                  the replica that took over

Znode values are CBOR maps with a version key "v", encoded canonically
(RFC 8949 §4.2.1: sorted keys, shortest forms) so equal values give equal
bytes::

    log         {"v": 1, "epoch": uint, "segments": [[ledger_id, epoch, first_index,
                                                      state, last_index], ...]}
                state 1 = OPEN, 3 = CLOSED; last_index is -1 while OPEN
                (see log_state.py for the invariants checked on decode)
    leader      {"v": 1, "replica_id": text, "address": text, "epoch": uint}
             or {"v": 2, "replica_id": text, ["address": text,] "tls_address": text,
                 "epoch": uint}
    candidate   {"v": 1, "replica_id": text, "address": text}
             or {"v": 2, "replica_id": text, ["address": text,] "tls_address": text}
    handoff     {"v": 1, "target": text, "epoch": uint}

The `leader` znode, candidacies and `replicas/<id>` (a candidate value) say
where a replica serves its protocol: "address" is its plain port,
"tls_address" its TLS port.  A replica with a plain port only writes version
1, byte for byte what readers that know only version 1 expect; a replica
with a TLS port writes version 2, which carries "tls_address" always and
"address" when the replica also has a plain port.  Readers accept both; a
version 1 value's address is a plain one.  Addresses are 1..256 characters.

Unknown keys, missing keys, wrong types and out-of-range values are all
`MalformedValue`.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import cbor2

from bookie.errors import preview
from rsm import limits
from rsm.core.log_state import Log, Segment, SegmentState, check_invariants, violation
from rsm.errors import BadArguments, BadRequest, MalformedValue, NoAddressForTransport

FORMAT_VERSION: Final = 1
TLS_FORMAT_VERSION: Final = 2
"""The version of `leader` and candidate values that carry a TLS address."""
BATCH_TAG: Final = 1
ITEM_COMMAND: Final = 0
ITEM_LEADER_START: Final = 1

_U63_END: Final = 1 << 63
_U64_END: Final = 1 << 64
_NULL: Final = b"\xf6"
_BATCH_HEAD: Final = b"\x87\x01"
_HEAD_1: Final = struct.Struct(">BB")
_HEAD_2: Final = struct.Struct(">BH")
_HEAD_4: Final = struct.Struct(">BI")
_HEAD_8: Final = struct.Struct(">BQ")
_MAJOR_UINT: Final = 0
_MAJOR_BYTES: Final = 2
_MAJOR_TEXT: Final = 3
_MAJOR_ARRAY: Final = 4


# --- values -----------------------------------------------------------------------------------


# Items are NamedTuples rather than dataclasses on purpose: one is built per
# command on every replica, and a tuple is built in one C call.


class CommandItem(NamedTuple):
    """One application command as logged."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    client_id: bytes | None = None
    seq: int | None = None
    ack_seq: int | None = None


class LeaderStart(NamedTuple):
    """The marker a new leader logs first: applying it means the takeover is complete."""

    replica_id: str


Item = CommandItem | LeaderStart


@dataclass(frozen=True, slots=True)
class StateHash:
    """A replica's state hash after applying `index` (see snapshots.md)."""

    index: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class Batch:
    """One decoded log entry."""

    epoch: int
    first_index: int
    timestamp_ms: int
    seed: int
    items: tuple[Item, ...]
    state_hash: StateHash | None = None

    @property
    def is_barrier(self) -> bool:
        return not self.items

    @property
    def next_index(self) -> int:
        """The index the first item of the following batch takes."""
        return self.first_index + len(self.items)


def dial_address(
    replica_id: str, address: str | None, tls_address: str | None, *, tls: bool
) -> str:
    """The address a client that speaks TLS (`tls`) or plain TCP dials to reach replica
    `replica_id`; `NoAddressForTransport` naming the replica if it has no such port."""
    chosen = tls_address if tls else address
    if chosen is None:
        raise NoAddressForTransport(replica_id, tls=tls)
    return chosen


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """The `leader` znode: how clients find the leader, and of which epoch.  `address` (its
    plain port) or `tls_address` (its TLS port) is set, or both."""

    replica_id: str
    address: str | None
    epoch: int
    tls_address: str | None = None

    def dial(self, *, tls: bool) -> str:
        return dial_address(self.replica_id, self.address, self.tls_address, tls=tls)


@dataclass(frozen=True, slots=True)
class CandidateInfo:
    """The data of one `election/n-<seq>` candidacy, and of one `replicas/<id>`.  `address`
    (its plain port) or `tls_address` (its TLS port) is set, or both."""

    replica_id: str
    address: str | None
    tls_address: str | None = None

    def dial(self, *, tls: bool) -> str:
        return dial_address(self.replica_id, self.address, self.tls_address, tls=tls)


@dataclass(frozen=True, slots=True)
class Handoff:
    """The `handoff` znode: the leader of `epoch` hands leadership to replica `target`."""

    target: str
    epoch: int


# --- field checks -----------------------------------------------------------------------------
#
# `type(v) is int` on purpose: CBOR true/false decode to bool, an int subclass.


def _u63(v: Any) -> bool:
    return type(v) is int and 0 <= v < _U63_END


def _u64(v: Any) -> bool:
    return type(v) is int and 0 <= v < _U64_END


def _positive(v: Any) -> bool:
    return type(v) is int and 1 <= v < _U63_END


def _text(v: Any, chars_max: int) -> bool:
    return type(v) is str and 1 <= len(v) <= chars_max


def _is_list(v: Any) -> bool:
    return type(v) is list


def _replica_id(v: Any) -> bool:
    return _text(v, limits.replica_id_chars_max)


def _address(v: Any) -> bool:
    return _text(v, limits.address_chars_max)


def _client_id(v: Any) -> bool:
    return type(v) is bytes and 1 <= len(v) <= limits.client_id_bytes_max


def _session_problem(client_id: Any, seq: Any, ack_seq: Any) -> str | None:
    """Why the session fields are not acceptable, or None when they are."""
    if client_id is None and seq is None and ack_seq is None:
        return None
    if not _client_id(client_id):
        return f"client id {preview(client_id)} is not 1..{limits.client_id_bytes_max} bytes"
    if not _positive(seq):
        return f"seq {preview(seq, 40)} is not a positive u63"
    if not (_u63(ack_seq) and ack_seq < seq):
        return f"ack_seq {preview(ack_seq, 40)} is not a u63 below seq {seq}"
    return None


# --- CBOR heads -------------------------------------------------------------------------------


def _head(major: int, value: int) -> bytes:
    """The shortest CBOR head of major type `major` with argument `value` (RFC 8949 §3)."""
    assert 0 <= value < _U64_END
    initial = major << 5
    if value < 24:
        return bytes((initial | value,))
    if value < 0x100:
        return _HEAD_1.pack(initial | 24, value)
    if value < 0x10000:
        return _HEAD_2.pack(initial | 25, value)
    if value < 0x1_0000_0000:
        return _HEAD_4.pack(initial | 26, value)
    return _HEAD_8.pack(initial | 27, value)


_SMALL_BYTES_HEADS: Final = tuple(_head(_MAJOR_BYTES, size) for size in range(256))
_SMALL_TEXT_HEADS: Final = tuple(_head(_MAJOR_TEXT, size) for size in range(256))
_SMALL_ARRAY_HEADS: Final = tuple(_head(_MAJOR_ARRAY, size) for size in range(256))
_COMMAND_HEAD: Final = bytes((0x87, ITEM_COMMAND))
"""array(7), then the item kind (< 24: a one-byte uint)."""
_NO_KEYWORDS: Final = b"\xa0"
"""map(0)"""
_NO_SESSION: Final = _NULL * 3
assert limits.client_id_bytes_max < len(_SMALL_BYTES_HEADS), "a client id takes a small head"


def _encode_bytes_command(
    name: str,
    args: Sequence[Any],
    client_id: bytes | None,
    seq: int | None,
    ack_seq: int | None,
) -> bytes | None:
    """The item of a command with an ASCII name and at most 255 arguments, all byte strings
    (what a key-value store logs), byte for byte as `cbor2.dumps` encodes it but built
    here, because this is cheaper than cbor2 and lies on the leader's path of every such
    command.  None for any other command.  The name and session fields are already checked."""
    if len(args) > 255 or not name.isascii():
        return None
    parts = [_COMMAND_HEAD, _SMALL_TEXT_HEADS[len(name)], name.encode("ascii")]
    parts.append(_SMALL_ARRAY_HEADS[len(args)])
    for arg in args:
        if type(arg) is not bytes:
            return None
        size = len(arg)
        parts.append(_SMALL_BYTES_HEADS[size] if size < 256 else _head(_MAJOR_BYTES, size))
        parts.append(arg)
    parts.append(_NO_KEYWORDS)
    if client_id is None:
        parts.append(_NO_SESSION)
    else:
        assert seq is not None
        assert ack_seq is not None
        parts.append(_SMALL_BYTES_HEADS[len(client_id)])
        parts.append(client_id)
        parts.append(_head(_MAJOR_UINT, seq))
        parts.append(_head(_MAJOR_UINT, ack_seq))
    return b"".join(parts)


def _load(data: bytes | bytearray | memoryview, what: str) -> Any:
    """The one CBOR item `data` holds; `MalformedValue` on junk or on bytes after it."""
    size_bytes = len(data)
    stream = io.BytesIO(data)
    try:
        value = cbor2.CBORDecoder(stream, allow_duplicate_keys=False).decode()
    except Exception as error:  # cbor2 raises several unrelated types on junk
        raise MalformedValue(f"{what} is not CBOR: {error}") from None
    if stream.tell() != size_bytes:
        raise MalformedValue(f"{what} has {size_bytes - stream.tell()} bytes after its value")
    return value


# --- log entries ------------------------------------------------------------------------------


def encode_command(
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    client_id: bytes | None = None,
    seq: int | None = None,
    ack_seq: int | None = None,
) -> bytes:
    """One encoded command item, ready to be placed in a batch.

    Raises `BadArguments` when the arguments cannot be encoded in CBOR and
    `BadRequest` when a framework field is invalid or the item exceeds
    `limits.request_bytes_max`: a command that would not decode is never logged.
    """
    if not _text(name, limits.command_name_chars_max):
        raise BadRequest(
            f"command name {preview(name)} is not 1..{limits.command_name_chars_max} chars"
        )
    problem = _session_problem(client_id, seq, ack_seq)
    if problem is not None:
        raise BadRequest(problem)
    if not kwargs:
        item = _encode_bytes_command(name, args, client_id, seq, ack_seq)
        if item is not None:
            if len(item) > limits.request_bytes_max:
                raise BadRequest(f"command of {len(item)} bytes exceeds {limits.request_bytes_max}")
            return item
    keywords = dict(kwargs) if kwargs else {}
    if keywords and any(type(key) is not str for key in keywords):
        raise BadArguments("keyword argument names must be text")
    try:
        item = cbor2.dumps([ITEM_COMMAND, name, list(args), keywords, client_id, seq, ack_seq])
    except Exception as error:  # cbor2 raises several types for values it cannot encode
        raise BadArguments(f"arguments of {name!r} cannot be encoded in CBOR: {error}") from None
    if len(item) > limits.request_bytes_max:
        raise BadRequest(f"command of {len(item)} bytes exceeds {limits.request_bytes_max}")
    return item


def decoded_command(
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    *,
    client_id: bytes | None,
    seq: int | None,
    ack_seq: int | None,
) -> CommandItem | None:
    """The item `decode_batch` returns for the item `encode_command` made of these values,
    when that is certain without decoding; else None.

    Certain for a command whose arguments are all byte strings and which has
    no keyword arguments (what a key-value store logs): CBOR carries byte
    strings, text, unsigned integers and empty maps unchanged, so the item
    decodes to exactly these values (the arguments as a list).  Other Python
    values may come back as other types (a tuple as a list, a bytearray as
    bytes).  Call it after `encode_command` accepted the same values.
    """
    if kwargs:
        return None
    for arg in args:
        if type(arg) is not bytes:
            return None
    return tuple.__new__(CommandItem, (name, list(args), {}, client_id, seq, ack_seq))


def encode_leader_start(replica_id: str) -> bytes:
    """The encoded leader-start marker item."""
    assert _replica_id(replica_id), replica_id
    return cbor2.dumps([ITEM_LEADER_START, replica_id])


def encode_item(item: Item) -> bytes:
    """The encoding of a decoded item (tools and tests; the leader encodes as items arrive)."""
    if isinstance(item, LeaderStart):
        return encode_leader_start(item.replica_id)
    return encode_command(
        item.name,
        item.args,
        item.kwargs,
        client_id=item.client_id,
        seq=item.seq,
        ack_seq=item.ack_seq,
    )


def encode_batch(
    *,
    epoch: int,
    first_index: int,
    timestamp_ms: int,
    seed: int,
    items: Sequence[bytes],
    state_hash: StateHash | None = None,
) -> bytes:
    """One log entry from items already encoded (layout in the module docstring)."""
    assert _positive(epoch)
    assert _positive(first_index)
    assert first_index + len(items) < _U63_END
    assert _u63(timestamp_ms)
    assert _u64(seed)
    if state_hash is None:
        tail = _NULL
    else:
        assert _u63(state_hash.index)
        assert 1 <= len(state_hash.digest) <= limits.state_hash_bytes_max
        tail = cbor2.dumps([state_hash.index, state_hash.digest])
    return b"".join(
        (
            _BATCH_HEAD,
            _head(_MAJOR_UINT, epoch),
            _head(_MAJOR_UINT, first_index),
            _head(_MAJOR_UINT, timestamp_ms),
            _head(_MAJOR_UINT, seed),
            _head(_MAJOR_ARRAY, len(items)),
            *items,
            tail,
        )
    )


def decode_batch(data: bytes | bytearray | memoryview) -> Batch:
    """The batch one log entry holds; `MalformedValue` for anything off the layout."""
    value = _load(data, "log entry")
    if type(value) is not list or len(value) != 7:
        raise MalformedValue("log entry is not an array of 7")
    tag, epoch, first_index, timestamp_ms, seed, raw_items, raw_hash = value
    if type(tag) is not int or tag != BATCH_TAG:
        raise MalformedValue(f"log entry has format tag {preview(tag, 40)}, not {BATCH_TAG}")
    if not _positive(epoch):
        raise MalformedValue(f"log entry epoch {preview(epoch, 40)} is not a positive u63")
    if not _positive(first_index):
        raise MalformedValue(
            f"log entry first index {preview(first_index, 40)} is not a positive u63"
        )
    if not _u63(timestamp_ms):
        raise MalformedValue(f"log entry timestamp {preview(timestamp_ms, 40)} is not a u63")
    if not _u64(seed):
        raise MalformedValue(f"log entry seed {preview(seed, 40)} is not a u64")
    if type(raw_items) is not list:
        raise MalformedValue("log entry items are not an array")
    if first_index + len(raw_items) >= _U63_END:
        raise MalformedValue("log entry indexes overflow u63")
    items = tuple([_decode_item(raw, first_index + k) for k, raw in enumerate(raw_items)])
    return Batch(epoch, first_index, timestamp_ms, seed, items, _decode_state_hash(raw_hash))


def _decode_item(raw: Any, index: int) -> Item:
    if type(raw) is not list or not raw or type(raw[0]) is not int:
        raise MalformedValue(f"item at index {index} is not a tagged array")
    kind = raw[0]
    if kind == ITEM_COMMAND and len(raw) == 7:
        _, name, args, kwargs, client_id, seq, ack_seq = raw
        if not (type(name) is str and 1 <= len(name) <= limits.command_name_chars_max):
            raise MalformedValue(
                f"item at index {index}: command name {preview(name)} is not valid"
            )
        if type(args) is not list:
            raise MalformedValue(f"item at index {index}: args are not an array")
        if type(kwargs) is not dict or (kwargs and any(type(key) is not str for key in kwargs)):
            raise MalformedValue(f"item at index {index}: kwargs are not a map with text keys")
        if not (
            # What `_session_problem` accepts with a session, tested inline (this runs for
            # every command on every replica); anything else gets its verdict.
            type(client_id) is bytes
            and 1 <= len(client_id) <= limits.client_id_bytes_max
            and type(seq) is int
            and type(ack_seq) is int
            and 0 <= ack_seq < seq < _U63_END
        ):
            problem = _session_problem(client_id, seq, ack_seq)
            if problem is not None:
                raise MalformedValue(f"item at index {index}: {problem}")
        # One C call instead of the NamedTuple's Python-level __new__: this runs
        # for every command on every replica.
        return tuple.__new__(CommandItem, raw[1:])
    if kind == ITEM_LEADER_START and len(raw) == 2:
        if not _replica_id(raw[1]):
            raise MalformedValue(
                f"item at index {index}: replica id {preview(raw[1])} is not valid"
            )
        return LeaderStart(raw[1])
    raise MalformedValue(
        f"item at index {index}: kind {preview(kind, 40)} with {len(raw)} fields is unknown"
    )


def _decode_state_hash(raw: Any) -> StateHash | None:
    if raw is None:
        return None
    if (
        type(raw) is not list
        or len(raw) != 2
        or not _u63(raw[0])
        or type(raw[1]) is not bytes
        or not 1 <= len(raw[1]) <= limits.state_hash_bytes_max
    ):
        raise MalformedValue(f"state hash {preview(raw)} is not [index, digest]")
    return StateHash(raw[0], raw[1])


# --- znode values -----------------------------------------------------------------------------


def _dump_map(value: dict[str, Any], version: int = FORMAT_VERSION) -> bytes:
    return cbor2.dumps({"v": version, **value}, canonical=True)


Checks = Mapping[str, Callable[[Any], bool]]
"""A map's fields and the check of each; a field whose check accepts None may be left out."""


def _load_map(
    data: bytes, what: str, checks: Checks, versions: Mapping[int, Checks] | None = None
) -> tuple[int, dict[str, Any]]:
    """The version and the fields of a versioned znode map, each checked; the "v" key is
    removed.  `checks` are the fields of every version; `versions` adds the fields of each
    version it accepts (default: version `FORMAT_VERSION`, no further fields)."""
    value = _load(data, what)
    if type(value) is not dict:
        raise MalformedValue(f"{what} is not a map")
    version = value.pop("v", None)
    known = versions or {FORMAT_VERSION: {}}
    if type(version) is not int or version not in known:
        raise MalformedValue(
            f"{what} has version {preview(version, 40)}, not {' or '.join(map(str, known))}"
        )
    fields = {**checks, **known[version]}
    required = {key for key, check in fields.items() if not check(None)}
    if not required <= value.keys() <= fields.keys():
        optional = sorted(fields.keys() - required)
        raise MalformedValue(
            f"{what} has keys {preview(sorted(map(preview, value)), 200)}, not {sorted(required)}"
            + (f" and optionally {optional}" if optional else "")
        )
    for key, check in fields.items():
        if key in value and (value[key] is None or not check(value[key])):
            raise MalformedValue(f"{what} field {key} = {preview(value[key])} is not valid")
    return version, value


def encode_log(log: Log) -> bytes:
    """The log znode value."""
    check_invariants(log)
    segments = [
        [s.ledger_id, s.epoch, s.first_index, int(s.state), s.last_index] for s in log.segments
    ]
    return _dump_map({"epoch": log.epoch, "segments": segments})


def decode_log(data: bytes) -> Log:
    """The log a znode value holds, with every invariant of log_state checked."""
    _, fields = _load_map(data, "log znode", {"epoch": _u63, "segments": _is_list})
    segments: list[Segment] = []
    for position, raw in enumerate(fields["segments"]):
        if (
            type(raw) is not list
            or len(raw) != 5
            or not all(type(v) is int for v in raw)
            or raw[3] not in (SegmentState.OPEN, SegmentState.CLOSED)
        ):
            raise MalformedValue(f"log znode segment {position} = {preview(raw)} is not valid")
        ledger_id, epoch, first_index, state, last_index = raw
        segments.append(Segment(ledger_id, epoch, first_index, SegmentState(state), last_index))
    log = Log(fields["epoch"], tuple(segments))
    problem = violation(log)
    if problem is not None:
        raise MalformedValue(f"log znode breaks an invariant: {problem}")
    return log


def _optional_address(v: Any) -> bool:
    return v is None or _address(v)


_ADDRESS_VERSIONS: Final[Mapping[int, Checks]] = {
    FORMAT_VERSION: {"address": _address},
    TLS_FORMAT_VERSION: {"address": _optional_address, "tls_address": _address},
}


def _dump_addresses(fields: dict[str, Any], address: str | None, tls_address: str | None) -> bytes:
    """A leader or candidate value: version 1 without a TLS address, else version 2."""
    if tls_address is None:
        assert _address(address)
        return _dump_map({**fields, "address": address})
    assert _address(tls_address)
    assert _optional_address(address)
    if address is not None:
        fields = {**fields, "address": address}
    return _dump_map({**fields, "tls_address": tls_address}, TLS_FORMAT_VERSION)


def _load_addresses(data: bytes, what: str, checks: Checks) -> dict[str, Any]:
    """The fields of a leader or candidate value of either version."""
    _, fields = _load_map(data, what, checks, _ADDRESS_VERSIONS)
    return fields


def encode_leader(leader: LeaderInfo) -> bytes:
    assert _replica_id(leader.replica_id)
    assert _positive(leader.epoch)
    return _dump_addresses(
        {"replica_id": leader.replica_id, "epoch": leader.epoch},
        leader.address,
        leader.tls_address,
    )


def decode_leader(data: bytes) -> LeaderInfo:
    fields = _load_addresses(data, "leader znode", {"replica_id": _replica_id, "epoch": _positive})
    return LeaderInfo(
        fields["replica_id"], fields.get("address"), fields["epoch"], fields.get("tls_address")
    )


def encode_candidate(candidate: CandidateInfo) -> bytes:
    assert _replica_id(candidate.replica_id)
    return _dump_addresses(
        {"replica_id": candidate.replica_id}, candidate.address, candidate.tls_address
    )


def decode_candidate(data: bytes) -> CandidateInfo:
    fields = _load_addresses(data, "candidate znode", {"replica_id": _replica_id})
    return CandidateInfo(fields["replica_id"], fields.get("address"), fields.get("tls_address"))


def encode_handoff(handoff: Handoff) -> bytes:
    assert _replica_id(handoff.target)
    assert _positive(handoff.epoch)
    return _dump_map({"target": handoff.target, "epoch": handoff.epoch})


def decode_handoff(data: bytes) -> Handoff:
    _, fields = _load_map(data, "handoff znode", {"target": _replica_id, "epoch": _positive})
    return Handoff(fields["target"], fields["epoch"])
