"""Every decoder of untrusted or on-disk bytes, as a fuzz target with its contract.

A `Target` wraps one decoder as `run(data)`: bytes in, a value out, or one of
the target's `errors` (the package's own documented exceptions).  Anything
else a target raises is a bug in the decoder.  `seeds` are valid encodings,
made by the encoders, for mutation-based fuzzing and the corpus.

Decoders that keep state (frame splitters, the RESP parser, the snapshot
stream readers) are fed the bytes in two pieces cut where the data says
(`_cut`), so a split inside a field is fuzzed too.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvstore.endpoints import Endpoint, decode_endpoint, encode_endpoint
from kvstore.errors import ProtocolError
from kvstore.protocol.resp import RespParser

from bookie.core.metadata import FORMAT_VERSION, LedgerMetadata, LedgerState
from bookie.errors import (
    BadMetadata,
    DigestMismatch,
    EntryLogCorrupt,
    JournalCorrupt,
    RemoteProtocolError,
)
from bookie.meta import ledger_format
from bookie.meta.bookies import BookieInfo, Cookie, decode_registration, encode_registration
from bookie.meta.underreplication import decode_mark, decode_owner, encode_mark, encode_owner
from bookie.storage import format as storage_format
from bookie.storage.inspect import entry_log_records, journal_records
from bookie.storage.journal import JournalMark, journal_file_path, scan_journal
from bookie.wire import codec
from bookie.wire.messages import (
    AddRequest,
    AddResponse,
    ListEntriesResponse,
    ReadRequest,
    ReadResponse,
)
from bookie.wire.packet import Digest, DigestType, packet_entry_id, packet_lac
from rsm.core import log_format, protocol, snapshot_format
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.core.sessions import PLAIN_VERSION, Outcome, SessionTable
from rsm.core.snapshot_manifest import Manifest, SnapshotsValue, decode_snapshots, encode_snapshots
from rsm.core.snapshot_state import StateDecoder, encode_state
from rsm.errors import MalformedValue, ProtocolViolation, RsmStatus, SnapshotCorrupt

LEDGER_ID = 7
ENTRY_ID = 3
PASSWORD = b"fuzz"


@dataclass(frozen=True)
class Target:
    """One decoder: `run` takes any bytes and returns a value or raises one of `errors`.

    `envelope` says how CBOR sits in its input, for fuzzing at the level of
    values: "cbor" (the input is one item), "tagged" (one selector byte, then
    one item), "frames" (items each after a u32 big-endian length: protocol
    frames and snapshot records alike), or None (not CBOR).
    """

    name: str
    run: Callable[[bytes], object]
    errors: tuple[type[Exception], ...]
    seeds: tuple[bytes, ...]
    envelope: str | None = None


def _cut(data: bytes) -> tuple[bytes, bytes]:
    """Two pieces of `data`, cut at a place its first byte chooses."""
    if not data:
        return b"", b""
    at = data[0] % (len(data) + 1)
    return data[:at], data[at:]


# --- bookie protocol ------------------------------------------------------------------------------


def _bookie_stream(data: bytes) -> list[object]:
    """Frames split from a byte stream and each decoded as a request, as the bookie does."""
    decoder = codec.FrameDecoder()
    requests: list[object] = []
    for piece in _cut(data):
        for body in decoder.feed(piece):
            try:
                requests.append(codec.decode_request(body))
            except codec.UndecodableRequest as error:
                requests.append(error)
        assert decoder.buffered_bytes <= len(data)
    return requests


_ADD = AddRequest(1, LEDGER_ID, ENTRY_ID, b"k" * 32, 0, b"packet")
_READ = ReadRequest(2, LEDGER_ID, -1, 1, b"k" * 32, 4, 1000)
_BOOKIE_REQUESTS = (codec.encode_request(_ADD), codec.encode_request(_READ))
_BOOKIE_RESPONSES = (
    codec.encode_response(AddResponse(1, 0, None, LEDGER_ID, ENTRY_ID)),
    codec.encode_response(ReadResponse(2, 0, None, LEDGER_ID, ENTRY_ID, b"packet", 2)),
    codec.encode_response(ListEntriesResponse(3, 0, None, LEDGER_ID, [[0, 4], [9, 9]])),
)

_DIGESTS = {kind: Digest(kind, PASSWORD) for kind in DigestType}


def _entry_packet(data: bytes) -> object:
    packet_lac(data)
    packet_entry_id(data)
    digest = _DIGESTS[DigestType.CRC32C if len(data) % 2 else DigestType.HMAC_SHA256]
    if data[:1] == b"L":
        return digest.verify_lac(data[1:], LEDGER_ID)
    return digest.verify_entry(data, LEDGER_ID, ENTRY_ID)


_PACKETS = (
    _DIGESTS[DigestType.CRC32C].build_entry(LEDGER_ID, ENTRY_ID, 2, 300, b"payload"),
    _DIGESTS[DigestType.HMAC_SHA256].build_entry(LEDGER_ID, ENTRY_ID, -1, 7, b"payload!"),
    b"L" + _DIGESTS[DigestType.CRC32C].build_lac(LEDGER_ID, 5),
)

# --- bookie storage -------------------------------------------------------------------------------


def _journal_bytes(data: bytes) -> list[object]:
    view = memoryview(data)
    storage_format.decode_file_header(storage_format.JOURNAL_MAGIC, view)
    records: list[object] = list(storage_format.iter_journal_records(view, 0))
    records.append(storage_format.find_journal_record(view, 0))
    return records


class _Scratch:
    """One scratch directory per process for the targets that read files, removed at exit."""

    _directory: Path | None = None

    @classmethod
    def directory(cls, name: str) -> Path:
        if cls._directory is None:
            cls._directory = Path(tempfile.mkdtemp(prefix="fuzz-"))
            atexit.register(shutil.rmtree, cls._directory, ignore_errors=True)
        path = cls._directory / name
        path.mkdir(exist_ok=True)
        return path


def _journal_file(data: bytes) -> list[object]:
    """One journal file as replay scans it and as `bookie shell` lists it."""
    directory = _Scratch.directory("journal")
    path = journal_file_path(directory, 1)
    path.write_bytes(data)
    scans: list[object] = list(scan_journal(directory, JournalMark(1, 0)))
    return scans + list(journal_records(path))


def _journal_seed() -> bytes:
    buffer = bytearray(storage_format.encode_file_header(storage_format.JOURNAL_MAGIC, 1))
    storage_format.append_journal_record(
        buffer, storage_format.JournalKind.ENTRY, LEDGER_ID, ENTRY_ID, _PACKETS[0]
    )
    storage_format.append_journal_record(
        buffer, storage_format.JournalKind.FENCE, LEDGER_ID, 0, b""
    )
    return bytes(buffer)


def _entry_log_record(data: bytes) -> object:
    view = memoryview(data)
    storage_format.entry_log_record_size_at(view, 0)
    storage_format.decode_entry_log_record_at(view, 0)
    return storage_format.decode_entry_log_record(data, LEDGER_ID, ENTRY_ID)


def _entry_log_file(data: bytes) -> list[object]:
    path = _Scratch.directory("entry-log") / "00000001.log"
    path.write_bytes(data)
    return list(entry_log_records(path))


def _entry_log_seed() -> bytes:
    buffer = bytearray(storage_format.encode_file_header(storage_format.ENTRY_LOG_MAGIC, 1))
    storage_format.append_entry_log_record(buffer, LEDGER_ID, ENTRY_ID, _PACKETS[0])
    storage_format.append_entry_log_record(buffer, LEDGER_ID, ENTRY_ID + 1, _PACKETS[1])
    return bytes(buffer)


def _entry_log_record_seed() -> bytes:
    buffer = bytearray()
    storage_format.append_entry_log_record(buffer, LEDGER_ID, ENTRY_ID, _PACKETS[0])
    return bytes(buffer)


# --- bookie metadata ------------------------------------------------------------------------------

_METADATA = LedgerMetadata(
    ledger_id=LEDGER_ID,
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    digest_type=DigestType.CRC32C,
    password_hash=b"p" * 32,
    ensembles=((0, ("b1", "b2", "b3")), (5, ("b1", "b4", "b3"))),
    state=LedgerState.CLOSED,
    last_entry_id=9,
    length=1000,
    ctime_ms=1_700_000_000_000,
    custom={"app": b"kv"},
    format_version=FORMAT_VERSION,
)
_COOKIE = Cookie(
    instance_id="i-1",
    bookie_id="b1",
    advertised_address="127.0.0.1:3181",
    journal_dir="/data/journal",
    ledger_dirs=("/data/ledgers",),
)


def _metadata_record(data: bytes) -> object:
    """The metadata layer's other records, chosen by the first byte."""
    decoders: tuple[Callable[[bytes], object], ...] = (
        Cookie.decode,
        lambda value: decode_registration(value, "registration"),
        lambda value: decode_mark(value, "mark"),
        lambda value: decode_owner(value, "owner"),
    )
    if not data:
        return Cookie.decode(data)
    return decoders[data[0] % len(decoders)](data[1:])


_METADATA_RECORDS = (
    b"\x00" + _COOKIE.encode(),
    b"\x01" + encode_registration(BookieInfo("127.0.0.1:3181", "rack-1"), 77),
    b"\x02" + encode_mark(["b1", "b2"]),
    b"\x03" + encode_owner("worker-1"),
)

# --- the replica protocol -------------------------------------------------------------------------


def _replica_stream(data: bytes) -> list[object]:
    """Frames split from a byte stream and each decoded as a request, as a replica does."""
    decoder = codec.FrameDecoder(protocol.limits.frame_bytes_max)
    requests: list[object] = []
    for piece in _cut(data):
        for body in decoder.feed(piece):
            try:
                requests.append(protocol.decode_request(body))
            except protocol.UndecodableRequest as error:
                requests.append(error.response())
    return requests


_REPLICA_REQUESTS = (
    protocol.encode_request(protocol.CallRequest(1, "set", [b"k", b"v"], {}, b"c" * 16, 5, 4)),
    protocol.encode_request(
        protocol.QueryRequest(2, "get", [b"k"], {"at": 3}, protocol.Consistency.STALE, 9)
    ),
    protocol.encode_request(protocol.TransferRequest(3, "r2")),
    protocol.encode_request(protocol.StatusRequest(4)),
)
_REPLICA_RESPONSES = (
    protocol.encode_response(1, 7, Outcome(RsmStatus.OK, [b"v", 3]), 12),
    protocol.encode_response(
        1, 8, Outcome(RsmStatus.NOT_LEADER, None, "not leader", "127.0.0.1:9000"), 0
    ),
)

# --- the log and its znodes -----------------------------------------------------------------------

_BATCHES = (
    log_format.encode_batch(
        epoch=3,
        first_index=10,
        timestamp_ms=1_700_000_000_000,
        seed=2**64 - 1,
        items=[
            log_format.encode_command("set", [b"k", b"v"], client_id=b"c", seq=2, ack_seq=1),
            log_format.encode_command("incr", [1, "x", None], {"by": 2.5}),
            log_format.encode_leader_start("r1"),
        ],
        state_hash=log_format.StateHash(9, b"h" * 32),
    ),
    log_format.encode_batch(epoch=1, first_index=1, timestamp_ms=0, seed=0, items=[]),
)


def _znode(data: bytes) -> object:
    """The framework's znode values, chosen by the first byte."""
    decoders: tuple[Callable[[bytes], object], ...] = (
        log_format.decode_log,
        log_format.decode_leader,
        log_format.decode_candidate,
        log_format.decode_handoff,
        decode_snapshots,
    )
    if not data:
        return decode_snapshots(data)
    return decoders[data[0] % len(decoders)](data[1:])


_LOG = Log(
    4,
    (
        Segment(100, 1, 1, SegmentState.CLOSED, 50),
        Segment(101, 4, 51, SegmentState.OPEN, -1),
    ),
)
_MANIFEST = Manifest(
    app="kv",
    index=50,
    time_ms=1_700_000_000_000,
    epoch=4,
    ledger_id=300,
    state_hash=b"h" * 32,
    sha256=b"s" * 32,
    size_bytes=2048,
    chunk_count=2,
    created_ms=1_700_000_000_500,
    replica_id="r1",
)
_ZNODES = (
    b"\x00" + log_format.encode_log(_LOG),
    b"\x01" + log_format.encode_leader(log_format.LeaderInfo("r1", "127.0.0.1:9000", 4)),
    b"\x02" + log_format.encode_candidate(log_format.CandidateInfo("r2", "127.0.0.1:9001")),
    b"\x01"
    + log_format.encode_leader(log_format.LeaderInfo("r1", "127.0.0.1:9000", 4, "127.0.0.1:9100")),
    b"\x02" + log_format.encode_candidate(log_format.CandidateInfo("r2", None, "127.0.0.1:9101")),
    b"\x03" + log_format.encode_handoff(log_format.Handoff("r2", 4)),
    b"\x04" + encode_snapshots(SnapshotsValue((_MANIFEST,), (), (299,))),
)

# --- snapshots ------------------------------------------------------------------------------------


def _snapshot_chunks(data: bytes) -> list[object]:
    """Chunks one after another, each prefixed by its u16 length, through a `SnapshotReader`."""
    reader = snapshot_format.SnapshotReader()
    taken: list[object] = []
    offset = 0
    while offset + 2 <= len(data):
        size = int.from_bytes(data[offset : offset + 2], "big")
        taken.append(reader.take(data[offset + 2 : offset + 2 + size]))
        offset += 2 + size
    return taken


def _snapshot_chunks_seed() -> bytes:
    writer = snapshot_format.SnapshotWriter(chunk_bytes=16)
    chunks = writer.framework(b"framework section bytes")
    chunks += writer.state(b"state bytes")
    last, _summary = writer.finish()
    return b"".join(len(chunk).to_bytes(2, "big") + chunk for chunk in chunks + last)


def _snapshot_framework(data: bytes) -> SessionTable:
    """Section 0 as the loader reads it: header, session runs, then the session table."""
    decoder = snapshot_format.FrameworkDecoder()
    for piece in _cut(data):
        decoder.feed(piece)
    header = decoder.finish()
    plain = {"v": PLAIN_VERSION, "clock_ms": header.clock_ms, "sessions": decoder.sessions}
    return SessionTable.from_plain(plain)


def _snapshot_framework_seed() -> bytes:
    table = SessionTable.from_plain(
        {
            "v": PLAIN_VERSION,
            "clock_ms": 1_000,
            "sessions": [[b"c" * 16, 900, 0, [[1, [0, b"ok"]]]]],
        }
    )
    header = snapshot_format.SnapshotHeader(
        app="kv",
        index=50,
        time_ms=1_000,
        epoch=4,
        cursor=(101, 7),
        machine="kvstore.state_machine:KVStore",
        codec="default",
        clock_ms=1_000,
        sessions=len(list(table.plain_sessions())),
        replica_id="r1",
        created_ms=1_700_000_000_500,
    )
    return b"".join(snapshot_format.framework_records(header, table.plain_sessions()))


class _State:
    """A bare object a fuzzed state stream is restored into."""


def _snapshot_state(data: bytes) -> _State:
    state = _State()
    decoder = StateDecoder(state)
    for piece in _cut(data):
        decoder.feed(piece)
    decoder.finish()
    return state


def _snapshot_state_seed() -> bytes:
    state = _State()
    state.__dict__.update(
        counter=3,
        names={"a", "b"},
        table={str(k): k for k in range(1_100)},
        pair=(1, b"x"),
    )
    return b"".join(encode_state(state))


# --- the key-value store --------------------------------------------------------------------------


def _resp(data: bytes, parser: RespParser) -> list[list[bytes]]:
    """Every command in `data`, fed as a server feeds it: at most `room_bytes` at a time,
    after taking every complete command."""
    commands: list[list[bytes]] = []
    rest = data
    while True:
        while (command := parser.next_command()) is not None:
            assert command, "a command has at least one argument"
            assert all(type(argument) is bytes for argument in command)
            commands.append(command)
        if not rest:
            return commands
        room = parser.room_bytes
        assert room > 0, "a parser holding no complete command has room for more"
        parser.feed(rest[:room])
        rest = rest[room:]


def _resp_default(data: bytes) -> list[list[bytes]]:
    parser = RespParser()
    first, second = _cut(data)
    commands = _resp(first, parser)
    return commands + _resp(second, parser)


def small_resp_parser() -> RespParser:
    """A parser with bounds small enough for fuzzed inputs to reach them."""
    return RespParser(
        request_bytes_max=40,
        bulk_bytes_max=16,
        multibulk_args_max=6,
        inline_bytes_max=24,
        buffered_bytes_max=80,
    )


def _resp_small(data: bytes) -> list[list[bytes]]:
    return _resp(data, small_resp_parser())


_RESP = (
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
    b"SET k \"a\\x41\\n\" 'b\\'c'\r\nPING\n\r\n",
    b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n",
)


def _endpoint(data: bytes) -> Endpoint:
    return decode_endpoint("r1", data)


# --- all of them ----------------------------------------------------------------------------------

TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target("bookie_stream", _bookie_stream, (RemoteProtocolError,), _BOOKIE_REQUESTS, "frames"),
        Target(
            "bookie_request",
            codec.decode_request,
            (RemoteProtocolError,),
            tuple(frame[4:] for frame in _BOOKIE_REQUESTS),
            "cbor",
        ),
        Target(
            "bookie_response",
            codec.decode_response,
            (RemoteProtocolError,),
            tuple(frame[4:] for frame in _BOOKIE_RESPONSES),
            "cbor",
        ),
        Target("entry_packet", _entry_packet, (DigestMismatch,), _PACKETS),
        Target("journal_records", _journal_bytes, (), (_journal_seed(),)),
        Target("journal_file", _journal_file, (JournalCorrupt,), (_journal_seed(),)),
        Target(
            "entry_log_record", _entry_log_record, (EntryLogCorrupt,), (_entry_log_record_seed(),)
        ),
        Target("entry_log_file", _entry_log_file, (), (_entry_log_seed(),)),
        Target(
            "ledger_metadata",
            ledger_format.decode,
            (BadMetadata,),
            (ledger_format.encode(_METADATA),),
            "cbor",
        ),
        Target("metadata_records", _metadata_record, (BadMetadata,), _METADATA_RECORDS, "tagged"),
        Target(
            "replica_stream",
            _replica_stream,
            (RemoteProtocolError, ProtocolViolation),
            _REPLICA_REQUESTS,
            "frames",
        ),
        Target(
            "replica_request",
            protocol.decode_request,
            (ProtocolViolation,),
            tuple(frame[4:] for frame in _REPLICA_REQUESTS),
            "cbor",
        ),
        Target(
            "replica_response",
            protocol.decode_response,
            (ProtocolViolation,),
            tuple(frame[4:] for frame in _REPLICA_RESPONSES),
            "cbor",
        ),
        Target("log_batch", log_format.decode_batch, (MalformedValue,), _BATCHES, "cbor"),
        Target("znodes", _znode, (MalformedValue,), _ZNODES, "tagged"),
        Target("snapshot_chunks", _snapshot_chunks, (SnapshotCorrupt,), (_snapshot_chunks_seed(),)),
        Target(
            "snapshot_framework",
            _snapshot_framework,
            (SnapshotCorrupt, MalformedValue),
            (_snapshot_framework_seed(),),
            "frames",
        ),
        Target(
            "snapshot_state",
            _snapshot_state,
            (SnapshotCorrupt,),
            (_snapshot_state_seed(),),
            "frames",
        ),
        Target("resp", _resp_default, (ProtocolError,), _RESP),
        Target("resp_small_bounds", _resp_small, (ProtocolError,), _RESP),
        Target(
            "kv_endpoint",
            _endpoint,
            (MalformedValue,),
            (encode_endpoint(Endpoint("r1", "127.0.0.1:6379", "127.0.0.1:9000")),),
        ),
    )
}
