"""The exported log file: an application's log entries, self-contained, checksummed.

Pure (it reads and writes the binary file objects it is given).  `rsm log
export` writes one; every tool reads one with `--log FILE` instead of a
cluster.  Entries are stored exactly as the bookies returned them (each
payload is one batch, rsm/core/log_format.py), so replaying a file is
replaying the log.  All integers are big-endian; CRC-32 is zlib's
(ISO-HDLC, the one of gzip and PNG).

Layout::

    offset  size  field
    0       8     magic: b"RSMLOG" 0x00 then the format version (0x01)
    8       4     u32 H: bytes of the header
    12      H     header: one CBOR map, canonical (sorted keys)
    12+H    4     u32 CRC-32 of the H header bytes
    then records, each opening with a tag byte:

    snapshot chunk (tag 0x02), only when the header names a snapshot, all of
    them before the first entry, in order:
        1   tag 0x02
        4   u32 L              chunk bytes
        L   chunk              one entry of the snapshot's ledger, as stored
                               (rsm/core/snapshot_format.py)
        4   u32 CRC-32 of every byte of the record before it

    entry (tag 0x01), one ledger entry of the log, in log order:
        1   tag 0x01
        8   u64 ledger_id
        8   u64 entry_id
        8   u64 first_index    the batch's first index (as its payload says)
        4   u32 items          commands in the batch: it holds first_index .. +items-1
        4   u32 L              payload bytes
        L   payload            the entry's payload as stored on the bookies
        4   u32 CRC-32 of every byte of the record before it (tag .. payload)

    end (tag 0xFF), exactly once, last; nothing may follow it:
        1   tag 0xFF
        8   u64 entries        entry records in the file
        8   u64 payload_bytes  sum of their L
        8   u64 last_index     the last exported index (0: none)
        4   u32 CRC-32 of the 25 bytes before it

Header keys: "v" (1), "app" (text), "segments" (the log znode's segments at
export time, `[ledger_id, epoch, first_index, state, last_index]`, state 1 =
OPEN, 3 = CLOSED), "first_index" and "last_index" (the exported range,
inclusive; last < first for an empty range), "exported_ms" (wall clock of
the export), "source" (text: where it was read), "snapshot" (null, or the
bytes of a snapshots znode value holding one manifest,
rsm/core/snapshot_manifest.py: the snapshot whose chunks follow, from which
a replay of a range not starting at index 1 begins).

Invariants a reader checks: the magic, every CRC, as many chunks as the
manifest says, entries in log order
(each `first_index` equal to the previous entry's end, ledger ids in the
order of the header's segments), the end record's counts, nothing after it.
Any failure is `ExportCorrupt` naming the byte offset, the entry's position
and its (ledger, entry): a truncated file says how many entries before the
cut are intact.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

import cbor2

from rsm import limits
from rsm.core.log_state import Segment, SegmentState
from rsm.core.snapshot_manifest import Manifest, SnapshotsValue, decode_snapshots, encode_snapshots
from rsm.errors import ExportCorrupt

MAGIC: Final = b"RSMLOG\x00\x01"
FORMAT_VERSION: Final = 1
TAG_ENTRY: Final = 0x01
TAG_CHUNK: Final = 0x02
TAG_END: Final = 0xFF

_U32: Final = struct.Struct(">I")
_ENTRY_HEAD: Final = struct.Struct(">BQQQII")
_END: Final = struct.Struct(">BQQQ")
_CRC: Final = _U32


@dataclass(frozen=True, slots=True)
class ExportHeader:
    """What an exported file says about itself."""

    app: str
    segments: tuple[Segment, ...]
    first_index: int
    last_index: int
    exported_ms: int
    source: str
    snapshot: Manifest | None = None


@dataclass(frozen=True, slots=True)
class ExportedEntry:
    """One entry record: its coordinates, its index range and its payload."""

    ledger_id: int
    entry_id: int
    first_index: int
    items: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """The end record."""

    entries: int
    payload_bytes: int
    last_index: int


# --- writing ----------------------------------------------------------------------------------


def encode_header(header: ExportHeader) -> bytes:
    """The magic, the header and its CRC (the file's first bytes)."""
    body = cbor2.dumps(
        {
            "v": FORMAT_VERSION,
            "app": header.app,
            "segments": [
                [s.ledger_id, s.epoch, s.first_index, int(s.state), s.last_index]
                for s in header.segments
            ],
            "first_index": header.first_index,
            "last_index": header.last_index,
            "exported_ms": header.exported_ms,
            "source": header.source,
            "snapshot": None
            if header.snapshot is None
            else encode_snapshots(SnapshotsValue(snapshots=(header.snapshot,))),
        },
        canonical=True,
    )
    return b"".join((MAGIC, _U32.pack(len(body)), body, _CRC.pack(zlib.crc32(body))))


def encode_entry(entry: ExportedEntry) -> bytes:
    head = _ENTRY_HEAD.pack(
        TAG_ENTRY,
        entry.ledger_id,
        entry.entry_id,
        entry.first_index,
        entry.items,
        len(entry.payload),
    )
    crc = zlib.crc32(entry.payload, zlib.crc32(head))
    return b"".join((head, entry.payload, _CRC.pack(crc)))


def encode_chunk(chunk: bytes) -> bytes:
    head = bytes((TAG_CHUNK,)) + _U32.pack(len(chunk))
    return b"".join((head, chunk, _CRC.pack(zlib.crc32(chunk, zlib.crc32(head)))))


def encode_end(summary: ExportSummary) -> bytes:
    body = _END.pack(TAG_END, summary.entries, summary.payload_bytes, summary.last_index)
    return body + _CRC.pack(zlib.crc32(body))


class ExportWriter:
    """Writes a file to `stream`: the header at once, then `add` per entry, then `finish`."""

    def __init__(self, stream: BinaryIO, header: ExportHeader) -> None:
        self._stream = stream
        self._entries = 0
        self._payload_bytes = 0
        self._last_index = 0
        stream.write(encode_header(header))

    def add_chunk(self, chunk: bytes) -> None:
        """One chunk of the header's snapshot (all of them before the first entry)."""
        assert self._entries == 0
        self._stream.write(encode_chunk(chunk))

    def add(self, entry: ExportedEntry) -> None:
        self._stream.write(encode_entry(entry))
        self._entries += 1
        self._payload_bytes += len(entry.payload)
        if entry.items:
            self._last_index = entry.first_index + entry.items - 1

    def finish(self) -> ExportSummary:
        summary = ExportSummary(self._entries, self._payload_bytes, self._last_index)
        self._stream.write(encode_end(summary))
        return summary


# --- reading ----------------------------------------------------------------------------------


class ExportReader:
    """Reads a file from `stream` (positioned at its start); see the module docstring.

    `header` is read and checked at construction; iterating yields the
    entries, checked one by one, and checks the end record last.
    """

    def __init__(self, stream: BinaryIO, name: str = "the file") -> None:
        self._stream = stream
        self._name = name
        self._offset = 0
        self.summary: ExportSummary | None = None
        """The end record, once iteration reached it."""
        magic = self._read(len(MAGIC), "the magic")
        if magic[:6] != MAGIC[:6]:
            raise ExportCorrupt(f"{name} is not an exported rsm log (no RSMLOG magic)")
        if magic != MAGIC:
            raise ExportCorrupt(
                f"{name} has export format version {magic[7]}; this rsm reads {FORMAT_VERSION}"
            )
        (size,) = _U32.unpack(self._read(4, "the header length"))
        if size > limits.export_header_bytes_max:
            raise ExportCorrupt(f"{name}: header length {size} exceeds the bound; not an export")
        body = self._read(size, "the header")
        (crc,) = _CRC.unpack(self._read(4, "the header checksum"))
        if zlib.crc32(body) != crc:
            raise ExportCorrupt(f"{name}: the header fails its checksum (bytes 12..{12 + size})")
        self.header = _decode_header(body, name)
        self._chunks_read = 0

    def _read(self, size: int, what: str, entries: int | None = None) -> bytes:
        data = self._stream.read(size)
        if len(data) != size:
            intact = "" if entries is None else f"; the {entries} entries before it are intact"
            raise ExportCorrupt(
                f"{self._name} is truncated: it ends at byte {self._offset + len(data)}, "
                f"inside {what}{intact}"
            )
        self._offset += size
        return data

    def __iter__(self) -> Iterator[ExportedEntry]:
        count = 0
        payload_bytes = 0
        next_index: int | None = None
        last_index = 0
        ledgers = [segment.ledger_id for segment in self.header.segments]
        ledger_position = 0
        while True:
            start = self._offset
            tag = self._read(1, f"the record after entry {count}", count)[0]
            if tag == TAG_END:
                self._check_chunks()
                rest = self._read(_END.size - 1 + 4, "the end record", count)
                body = bytes((tag,)) + rest[:-4]
                if zlib.crc32(body) != _CRC.unpack(rest[-4:])[0]:
                    raise ExportCorrupt(
                        f"{self._name}: the end record at byte {start} fails its checksum"
                    )
                _tag, entries, total, last = _END.unpack(body)
                if (entries, total, last) != (count, payload_bytes, last_index):
                    raise ExportCorrupt(
                        f"{self._name}: the end record says {entries} entries, {total} bytes, "
                        f"last index {last}; the file holds {count}, {payload_bytes}, "
                        f"{last_index}"
                    )
                if self._stream.read(1):
                    raise ExportCorrupt(f"{self._name} has bytes after its end record")
                self.summary = ExportSummary(entries, total, last)
                return
            if tag == TAG_CHUNK and count == 0:
                self._chunk(start)
                continue
            if tag != TAG_ENTRY:
                raise ExportCorrupt(
                    f"{self._name}: unknown record tag {tag:#04x} at byte {start} "
                    f"(after entry {count})"
                )
            self._check_chunks()
            head = bytes((tag,)) + self._read(_ENTRY_HEAD.size - 1, f"entry {count + 1}", count)
            _tag, ledger_id, entry_id, first_index, items, size = _ENTRY_HEAD.unpack(head)
            # Its ledger and entry ids are named once its checksum vouches for them.
            unchecked = f"entry {count + 1} at byte {start}"
            if size > limits.batch_bytes_max + limits.batch_header_bytes_max:
                raise ExportCorrupt(f"{self._name}: {unchecked} claims {size} bytes; it is damaged")
            payload = self._read(size, unchecked, count)
            (crc,) = _CRC.unpack(self._read(4, f"the checksum of {unchecked}", count))
            if zlib.crc32(payload, zlib.crc32(head)) != crc:
                raise ExportCorrupt(f"{self._name}: {unchecked} fails its checksum")
            where = f"entry {count + 1} (ledger {ledger_id}, entry {entry_id}) at byte {start}"
            if next_index is not None and first_index != next_index:
                raise ExportCorrupt(
                    f"{self._name}: {where} starts at index {first_index}, not {next_index}"
                )
            while ledger_position < len(ledgers) and ledgers[ledger_position] != ledger_id:
                ledger_position += 1
            if ledger_position == len(ledgers):
                raise ExportCorrupt(
                    f"{self._name}: {where} is of a ledger the header's segments do not list "
                    "in this order"
                )
            next_index = first_index + items
            if items:
                last_index = next_index - 1
            count += 1
            payload_bytes += size
            yield ExportedEntry(ledger_id, entry_id, first_index, items, payload)

    def chunks(self) -> Iterator[bytes]:
        """The header's snapshot's chunks, in order (read instead of iterating the entries)."""
        manifest = self.header.snapshot
        for _chunk in range(0 if manifest is None else manifest.chunk_count):
            start = self._offset
            if self._read(1, f"snapshot chunk {self._chunks_read + 1}") != bytes((TAG_CHUNK,)):
                self._check_chunks()
            yield self._chunk(start)

    def _chunk(self, start: int) -> bytes:
        self._chunks_read += 1
        where = f"snapshot chunk {self._chunks_read} at byte {start}"
        head = bytes((TAG_CHUNK,)) + self._read(4, where)
        (size,) = _U32.unpack(head[1:])
        if size > limits.snapshot_chunk_head_bytes + limits.snapshot_chunk_bytes_max:
            raise ExportCorrupt(f"{self._name}: {where} claims {size} bytes; it is damaged")
        chunk = self._read(size, where)
        (crc,) = _CRC.unpack(self._read(4, f"the checksum of {where}"))
        if zlib.crc32(chunk, zlib.crc32(head)) != crc:
            raise ExportCorrupt(f"{self._name}: {where} fails its checksum")
        return chunk

    def _check_chunks(self) -> None:
        manifest = self.header.snapshot
        expected = 0 if manifest is None else manifest.chunk_count
        if self._chunks_read != expected:
            raise ExportCorrupt(
                f"{self._name} holds {self._chunks_read} snapshot chunks before its "
                f"entries; its header says {expected}"
            )


def _decode_header(body: bytes, name: str) -> ExportHeader:
    try:
        value: Any = cbor2.loads(body)
        segments = tuple(
            Segment(ledger_id, epoch, first_index, SegmentState(state), last_index)
            for ledger_id, epoch, first_index, state, last_index in value["segments"]
        )
        header = ExportHeader(
            app=value["app"],
            segments=segments,
            first_index=value["first_index"],
            last_index=value["last_index"],
            exported_ms=value["exported_ms"],
            source=value["source"],
            snapshot=None
            if value["snapshot"] is None
            else decode_snapshots(value["snapshot"]).snapshots[0],
        )
    except Exception as error:  # cbor2, key, unpacking and enum errors alike
        raise ExportCorrupt(f"{name}: the header is not a valid export header: {error}") from None
    if value.get("v") != FORMAT_VERSION or type(header.app) is not str:
        raise ExportCorrupt(f"{name}: the header has version {value.get('v')!r}, not 1")
    return header
