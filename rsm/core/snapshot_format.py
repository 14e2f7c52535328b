"""Bytes of a snapshot: chunks (one per ledger entry), records, and the framework's section.

Pure.  A snapshot is one byte stream in two *sections*, cut into chunks of at
most `chunk_bytes` data bytes, each chunk one entry of the snapshot's ledger
(entry id = chunk sequence number):

* section 0, the framework's: length-prefixed CBOR records, the header first,
  then the session table in runs (the session table is part of every
  snapshot: exactly-once survives a restore);
* section 1, the application's: the bytes its `snapshot()` yielded, in order
  (the default codec's records, `rsm/core/snapshot_state.py`, or whatever an
  application writes itself).  Chunk boundaries are not the application's:
  `restore()` receives the same bytes, cut wherever.

Every chunk of section 0 comes before every chunk of section 1; a section
never shares a chunk with the other.

Chunk (one ledger entry), big-endian::

    offset size  field
    0      4     magic b"RSNP"
    4      1     format version (1)
    5      1     section: 0 framework, 1 application
    6      2     flags, 0
    8      4     sequence number: 0, 1, 2, ... (the ledger entry id)
    12     4     data length n (1 .. limits.snapshot_chunk_bytes_max)
    16     4     CRC32C of bytes 0..15 followed by the data
    20     n     data

Record (inside section 0, and inside the default codec's section 1)::

    length u32 big-endian (1 .. limits.snapshot_record_bytes_max) | one CBOR data item

Framework records::

    header    {"v": 1, "app": text, "index": uint, "time_ms": uint, "epoch": uint,
               "cursor": [ledger_id, entry_id] | null, "machine": text,
               "codec": "default" | "custom", "clock_ms": uint, "sessions": uint,
               "replica_id": text, "created_ms": uint}
    sessions  [session, ...]   up to limits.snapshot_session_run_sessions each, in the
              session table's activity order, `session` as `SessionTable.plain_sessions`
              yields it; as many runs as it takes to reach header["sessions"]

`index`, `time_ms` and `epoch` are the replica's applied position when the
state was captured, `cursor` the last ledger entry applied (so a restored
replica reads on right after it), `clock_ms` the session table's clock.

Checks, all of which a reader makes (`SnapshotReader`): the magic, version,
flags and CRC of every chunk; sequence numbers dense from 0; sections in
order; and at the end, against the manifest: the chunk count, the total of
the payload sizes and the SHA-256 of all data bytes (both sections, in
order).  Integrity rests on those: a record's CBOR is trusted to be exactly
as long as its length says.

Invariants: `SnapshotWriter` emits chunks whose concatenated data is exactly
the bytes it was given, section by section; `SnapshotReader` accepts exactly
the chunk sequences a writer can emit and returns their data unchanged.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import cbor2
import crc32c

from bookie.errors import preview
from rsm import limits
from rsm.errors import BadSnapshotState, SnapshotCorrupt

MAGIC: Final = b"RSNP"
FORMAT_VERSION: Final = 1
SECTION_FRAMEWORK: Final = 0
SECTION_STATE: Final = 1
HEADER_VERSION: Final = 1
CODEC_DEFAULT: Final = "default"
CODEC_CUSTOM: Final = "custom"

_CHUNK_HEAD: Final = struct.Struct(">4sBBHII")
_CRC: Final = struct.Struct(">I")
RECORD_HEAD: Final = struct.Struct(">I")

assert _CHUNK_HEAD.size + _CRC.size == limits.snapshot_chunk_head_bytes


# --- chunks -----------------------------------------------------------------------------------


def encode_chunk(section: int, sequence: int, data: bytes | bytearray | memoryview) -> bytes:
    """One chunk: header, CRC and data (layout in the module docstring)."""
    assert section in (SECTION_FRAMEWORK, SECTION_STATE)
    assert 0 <= sequence < 1 << 32
    assert 1 <= len(data) <= limits.snapshot_chunk_bytes_max
    head = _CHUNK_HEAD.pack(MAGIC, FORMAT_VERSION, section, 0, sequence, len(data))
    crc = crc32c.crc32c(data, crc32c.crc32c(head))
    return b"".join((head, _CRC.pack(crc), data))


def decode_chunk(payload: bytes | memoryview, sequence: int) -> tuple[int, memoryview]:
    """(section, data) of chunk `sequence`; `SnapshotCorrupt` if any check fails."""
    view = memoryview(payload)
    head_bytes = limits.snapshot_chunk_head_bytes
    if len(view) <= head_bytes:
        raise SnapshotCorrupt(f"chunk {sequence} has {len(view)} bytes: shorter than its header")
    magic, version, section, flags, found_sequence, length = _CHUNK_HEAD.unpack_from(view)
    if magic != MAGIC or version != FORMAT_VERSION or flags != 0:
        raise SnapshotCorrupt(
            f"chunk {sequence} is not a version {FORMAT_VERSION} snapshot chunk "
            f"(magic {bytes(magic)!r}, version {version}, flags {flags})"
        )
    if found_sequence != sequence:
        raise SnapshotCorrupt(f"chunk {sequence} carries sequence number {found_sequence}")
    if section not in (SECTION_FRAMEWORK, SECTION_STATE):
        raise SnapshotCorrupt(f"chunk {sequence} belongs to unknown section {section}")
    data = view[head_bytes:]
    if length != len(data) or length > limits.snapshot_chunk_bytes_max:
        raise SnapshotCorrupt(f"chunk {sequence} says {length} data bytes and has {len(data)}")
    (crc,) = _CRC.unpack_from(view, _CHUNK_HEAD.size)
    if crc32c.crc32c(data, crc32c.crc32c(view[: _CHUNK_HEAD.size])) != crc:
        raise SnapshotCorrupt(f"chunk {sequence} fails its CRC32C")
    return section, data


@dataclass(frozen=True, slots=True)
class StreamSummary:
    """What a whole snapshot stream came to; the manifest records it and readers check it."""

    chunk_count: int
    size_bytes: int
    """Bytes of all chunks, headers included: what the snapshot's ledger holds."""
    content_sha256: bytes
    """SHA-256 of the data of every chunk, both sections, in order."""
    state_sha256: bytes
    """SHA-256 of section 1 alone: the default state hash, when the default codec wrote it."""


class SnapshotWriter:
    """Cuts the two sections into chunks of `chunk_bytes` and sums them up.

    `framework` and `state` return the chunks completed by the bytes given
    (possibly none); `finish` returns the last ones and the summary.
    """

    __slots__ = (
        "_chunk_bytes",
        "_section",
        "_pending",
        "_sequence",
        "_size_bytes",
        "_content",
        "_state",
        "_finished",
    )

    def __init__(self, chunk_bytes: int = limits.snapshot_chunk_bytes_default) -> None:
        assert 1 <= chunk_bytes <= limits.snapshot_chunk_bytes_max
        self._chunk_bytes = chunk_bytes
        self._section = SECTION_FRAMEWORK
        self._pending = bytearray()
        self._sequence = 0
        self._size_bytes = 0
        self._content = hashlib.sha256()
        self._state = hashlib.sha256()
        self._finished = False

    def framework(self, data: bytes) -> list[bytes]:
        assert self._section == SECTION_FRAMEWORK, "the framework section comes first"
        return self._add(data)

    def state(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        chunks: list[bytes] = []
        if self._section == SECTION_FRAMEWORK:
            self._flush(chunks)
            self._section = SECTION_STATE
        self._state.update(data)
        return self._add(data, chunks)

    def finish(self) -> tuple[list[bytes], StreamSummary]:
        assert not self._finished
        self._finished = True
        chunks: list[bytes] = []
        self._flush(chunks)
        summary = StreamSummary(
            self._sequence, self._size_bytes, self._content.digest(), self._state.digest()
        )
        return chunks, summary

    def _add(
        self, data: bytes | bytearray | memoryview, chunks: list[bytes] | None = None
    ) -> list[bytes]:
        assert not self._finished
        out: list[bytes] = [] if chunks is None else chunks
        self._content.update(data)
        view = memoryview(data)
        chunk_bytes = self._chunk_bytes
        pending = self._pending
        if pending:
            taken = chunk_bytes - len(pending)
            pending += view[:taken]
            view = view[taken:]
            if len(pending) < chunk_bytes:
                return out
            self._emit(pending, out)
            pending.clear()
        while len(view) >= chunk_bytes:
            self._emit(view[:chunk_bytes], out)
            view = view[chunk_bytes:]
        pending += view
        return out

    def _flush(self, out: list[bytes]) -> None:
        if self._pending:
            self._emit(self._pending, out)
            self._pending.clear()

    def _emit(self, data: bytes | bytearray | memoryview, out: list[bytes]) -> None:
        chunk = encode_chunk(self._section, self._sequence, data)
        self._sequence += 1
        self._size_bytes += len(chunk)
        out.append(chunk)


class SnapshotReader:
    """Checks chunks in order (`take`) and, at the end, the stream against its manifest."""

    __slots__ = ("_sequence", "_section", "_size_bytes", "_content", "_state")

    def __init__(self) -> None:
        self._sequence = 0
        self._section = SECTION_FRAMEWORK
        self._size_bytes = 0
        self._content = hashlib.sha256()
        self._state = hashlib.sha256()

    def take(self, payload: bytes | memoryview) -> tuple[int, memoryview]:
        """(section, data) of the next chunk; `SnapshotCorrupt` when it is not the next one."""
        section, data = decode_chunk(payload, self._sequence)
        if section < self._section:
            raise SnapshotCorrupt(f"chunk {self._sequence} goes back to section {section}")
        self._section = section
        self._sequence += 1
        self._size_bytes += len(payload)
        self._content.update(data)
        if section == SECTION_STATE:
            self._state.update(data)
        return section, data

    def finish(self, chunk_count: int, size_bytes: int, content_sha256: bytes) -> StreamSummary:
        """The summary of what was read, checked against the manifest's numbers."""
        summary = StreamSummary(
            self._sequence, self._size_bytes, self._content.digest(), self._state.digest()
        )
        if summary.chunk_count != chunk_count or summary.size_bytes != size_bytes:
            raise SnapshotCorrupt(
                f"read {summary.chunk_count} chunks of {summary.size_bytes} bytes; the manifest "
                f"says {chunk_count} chunks of {size_bytes} bytes"
            )
        if summary.content_sha256 != content_sha256:
            raise SnapshotCorrupt("the snapshot's SHA-256 differs from its manifest's")
        return summary


# --- records ----------------------------------------------------------------------------------


def encode_record(value: Any) -> bytes:
    """One length-prefixed CBOR record of a plain value."""
    return record_of(cbor2.dumps(value))


def record_of(body: bytes) -> bytes:
    """The record of an encoded CBOR item; `BadSnapshotState` when it is too large for one."""
    if len(body) > limits.snapshot_record_bytes_max:
        raise BadSnapshotState(
            f"a value encodes to {len(body)} bytes, over {limits.snapshot_record_bytes_max}"
        )
    return RECORD_HEAD.pack(len(body)) + body


class RecordReader:
    """Splits a byte stream fed in pieces into records and decodes each.

    Holds at most one incomplete record (plus the piece being fed): records
    are decoded in place and their bytes dropped at once, which is what lets
    a large snapshot load without a second copy of it in memory.
    """

    __slots__ = ("_buffer", "_options")

    def __init__(self, **options: Any) -> None:
        self._buffer = bytearray()
        self._options = options

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Any]:
        """The values of every record `data` completes, in order."""
        buffer = self._buffer
        buffer += data
        values: list[Any] = []
        head_bytes = RECORD_HEAD.size
        offset = 0
        end = len(buffer)
        while end - offset >= head_bytes:
            (length,) = RECORD_HEAD.unpack_from(buffer, offset)
            if not 1 <= length <= limits.snapshot_record_bytes_max:
                raise SnapshotCorrupt(f"a snapshot record says it has {length} bytes")
            if end - offset - head_bytes < length:
                break
            start = offset + head_bytes
            # Decoded in place; both views are released before the buffer shrinks.
            with memoryview(buffer) as view, view[start : start + length] as record:
                values.append(self._decode(record))
            offset = start + length
        if offset:
            del buffer[:offset]
        return values

    def _decode(self, view: memoryview) -> Any:
        try:
            return cbor2.loads(view, **self._options)
        except SnapshotCorrupt:
            raise
        except Exception as error:  # cbor2 raises several unrelated types on junk
            raise SnapshotCorrupt(f"a snapshot record is not CBOR: {error}") from None

    def finish(self) -> None:
        """Raise `SnapshotCorrupt` if the stream ended inside a record."""
        if self._buffer:
            raise SnapshotCorrupt(f"the stream ends inside a record ({len(self._buffer)} bytes)")


# --- the framework section --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """The first record of a snapshot: where the state stands and what wrote it."""

    app: str
    index: int
    time_ms: int
    epoch: int
    cursor: tuple[int, int] | None
    """(ledger id, entry id) of the last entry applied, or None."""
    machine: str
    """`module:qualname` of the StateMachine class, for tools and error messages."""
    codec: str
    clock_ms: int
    sessions: int
    replica_id: str
    created_ms: int
    """The capturing replica's wall clock (ms since the Unix epoch): for people, not for logic."""


def framework_records(header: SnapshotHeader, sessions: Iterable[list[Any]]) -> Iterator[bytes]:
    """The framework section: the header record, then the sessions in runs."""
    yield encode_record(
        {
            "v": HEADER_VERSION,
            "app": header.app,
            "index": header.index,
            "time_ms": header.time_ms,
            "epoch": header.epoch,
            "cursor": None if header.cursor is None else list(header.cursor),
            "machine": header.machine,
            "codec": header.codec,
            "clock_ms": header.clock_ms,
            "sessions": header.sessions,
            "replica_id": header.replica_id,
            "created_ms": header.created_ms,
        }
    )
    run: list[list[Any]] = []
    written = 0
    for session in sessions:
        run.append(session)
        if len(run) == limits.snapshot_session_run_sessions:
            yield encode_record(run)
            written += len(run)
            run = []
    if run:
        yield encode_record(run)
        written += len(run)
    assert written == header.sessions, (written, header.sessions)


_HEADER_KEYS: Final = frozenset(
    {
        "v",
        "app",
        "index",
        "time_ms",
        "epoch",
        "cursor",
        "machine",
        "codec",
        "clock_ms",
        "sessions",
        "replica_id",
        "created_ms",
    }
)


def _natural(v: Any) -> bool:
    return type(v) is int and 0 <= v < 1 << 63


def decode_header(value: Any) -> SnapshotHeader:
    """The header a first record holds; `SnapshotCorrupt` when it is not one."""
    if type(value) is not dict or value.keys() != _HEADER_KEYS:
        raise SnapshotCorrupt("the snapshot's first record is not its header")
    if value["v"] != HEADER_VERSION:
        raise SnapshotCorrupt(f"snapshot header version {preview(value['v'], 20)} is not supported")
    cursor = value["cursor"]
    if cursor is not None and not (
        type(cursor) is list and len(cursor) == 2 and all(_natural(v) for v in cursor)
    ):
        raise SnapshotCorrupt(f"snapshot header cursor {preview(cursor)} is not [ledger, entry]")
    if (
        not all(
            _natural(value[key])
            for key in ("index", "time_ms", "epoch", "clock_ms", "sessions", "created_ms")
        )
        or not all(type(value[key]) is str for key in ("app", "machine", "replica_id"))
        or value["codec"] not in (CODEC_DEFAULT, CODEC_CUSTOM)
    ):
        raise SnapshotCorrupt(
            f"snapshot header {preview(value, 200)} has a field of the wrong type"
        )
    return SnapshotHeader(
        app=value["app"],
        index=value["index"],
        time_ms=value["time_ms"],
        epoch=value["epoch"],
        cursor=None if cursor is None else (cursor[0], cursor[1]),
        machine=value["machine"],
        codec=value["codec"],
        clock_ms=value["clock_ms"],
        sessions=value["sessions"],
        replica_id=value["replica_id"],
        created_ms=value["created_ms"],
    )


class FrameworkDecoder:
    """Reads section 0: the header, then the session runs it announces."""

    __slots__ = ("_records", "header", "sessions")

    def __init__(self) -> None:
        self._records = RecordReader()
        self.header: SnapshotHeader | None = None
        self.sessions: list[Any] = []
        """The session table's sessions in plain form, in order (`SessionTable.from_plain`)."""

    def feed(self, data: bytes | memoryview) -> None:
        for value in self._records.feed(data):
            if self.header is None:
                self.header = decode_header(value)
                continue
            if type(value) is not list or not value:
                raise SnapshotCorrupt("a session run of the snapshot is not a non-empty array")
            self.sessions.extend(value)
            if len(self.sessions) > self.header.sessions:
                raise SnapshotCorrupt(
                    f"the snapshot holds more than the {self.header.sessions} sessions it announces"
                )

    def finish(self) -> SnapshotHeader:
        """The header, once the section is complete; `SnapshotCorrupt` otherwise."""
        self._records.finish()
        header = self.header
        if header is None:
            raise SnapshotCorrupt("the snapshot has no header")
        if len(self.sessions) != header.sessions:
            raise SnapshotCorrupt(
                f"the snapshot holds {len(self.sessions)} sessions, not {header.sessions}"
            )
        return header
