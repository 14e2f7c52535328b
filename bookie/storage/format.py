"""Byte layouts of the bookie's files: journal files and entry logs.

Pure: this module packs and unpacks bytes and never touches a file, so the
journal, the entry logs, the replay and the inspection tools all agree on one
definition (docs/storage-format.md repeats it with the reasons).

All integers are big-endian.  Ledger and entry ids are signed 64-bit like in
the entry packet (bookie/wire/packet.py); they are never negative on disk.

Journal file ``<journal_dir>/<file_id:016x>.journal``::

    offset  size  field
    0       4     magic b"BKJL"
    4       4     version u32 = 1
    8       8     file_id u64 (equals the number in the file name)
    16      ...   records, back to back, no padding

Journal record::

    0       4     length u32: bytes from offset 8 to the end of the record (17 + n)
    4       4     crc32c u32 of bytes [8, 8 + length)
    8       1     kind u8 (JournalKind)
    9       8     ledger_id i64; PREVIOUS_FILE: the previous journal file's id
    17      8     argument i64: entry_id (ENTRY), lac (EXPLICIT_LAC),
                  1 if a fenced tombstone is kept else 0 (DELETE), 0 (MASTER_KEY, FENCE),
                  the previous journal file's length in bytes (PREVIOUS_FILE)
    25      n     payload: entry packet (ENTRY), master key (MASTER_KEY),
                  explicit-LAC packet (EXPLICIT_LAC), empty (FENCE, DELETE, PREVIOUS_FILE)

A journal file whose predecessor (id one less) exists when it is started has a
PREVIOUS_FILE record first, written and synced with the header: where that
file ended, so that replay can tell a predecessor that lost its end on a record
boundary from one that ended there.  It changes no ledger.

A record is *valid at offset p* when its length lies in
[RECORD_BODY_MIN_BYTES, RECORD_BODY_MAX_BYTES], the record ends inside the
data, and the CRC matches.  The CRC covers the kind and ids as well as the
payload, so a record can never be replayed against the wrong ledger.

Entry log file ``<ledger_dir>/<log_id:08x>.log``::

    0       4     magic b"BKEL"
    4       4     version u32 = 1
    8       8     log_id u64 (equals the number in the file name)
    16      ...   records

Entry-log record::

    0       4     length u32: bytes from offset 8 to the end of the record (16 + n)
    4       4     crc32c u32 of bytes [8, 8 + length)
    8       8     ledger_id i64
    16      8     entry_id i64
    24      n     entry packet, verbatim

Entry-log records carry their ledger and entry ids so that a compactor can
walk a log, ask the index which records are still live and copy only those.

Invariants: every encoder has a decoder here that accepts exactly its output
(checked by Hypothesis round trips), and decoders never raise on junk except
the entry-log reader, whose caller was promised an intact record by the index.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import crc32c

from bookie import limits
from bookie.errors import EntryLogCorrupt

FORMAT_VERSION: Final = 1

# --- file headers -------------------------------------------------------------------------------

JOURNAL_MAGIC: Final = b"BKJL"
ENTRY_LOG_MAGIC: Final = b"BKEL"
_FILE_HEADER: Final = struct.Struct(">4sIQ")
FILE_HEADER_BYTES: Final = _FILE_HEADER.size


def encode_file_header(magic: bytes, file_id: int) -> bytes:
    """The 16-byte header that starts a journal file or an entry log."""
    assert magic in (JOURNAL_MAGIC, ENTRY_LOG_MAGIC)
    assert file_id >= 0
    return _FILE_HEADER.pack(magic, FORMAT_VERSION, file_id)


def decode_file_header(magic: bytes, data: bytes | memoryview) -> int | None:
    """The file id of a header with this magic and our version; None for anything else."""
    assert magic in (JOURNAL_MAGIC, ENTRY_LOG_MAGIC)
    if len(data) < FILE_HEADER_BYTES:
        return None
    got_magic, version, file_id = _FILE_HEADER.unpack_from(data)
    if got_magic != magic or version != FORMAT_VERSION:
        return None
    return int(file_id)


# --- journal records ----------------------------------------------------------------------------


class JournalKind(enum.IntEnum):
    """Journal record kinds (stored on disk; never renumber)."""

    ENTRY = 1
    MASTER_KEY = 2
    FENCE = 3
    EXPLICIT_LAC = 4
    DELETE = 5
    PREVIOUS_FILE = 6


_RECORD_PREFIX: Final = struct.Struct(">II")
_JOURNAL_BODY_HEAD: Final = struct.Struct(">Bqq")
RECORD_PREFIX_BYTES: Final = _RECORD_PREFIX.size
RECORD_BODY_MIN_BYTES: Final = _JOURNAL_BODY_HEAD.size
RECORD_BODY_MAX_BYTES: Final = RECORD_BODY_MIN_BYTES + limits.frame_size_bytes_max
"""No payload is larger than a frame: a bigger length field can only be junk."""
_KINDS: Final = frozenset(int(kind) for kind in JournalKind)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One decoded journal record; `payload` is a view into the scanned data."""

    offset: int
    end: int
    kind: JournalKind
    ledger_id: int
    argument: int
    payload: memoryview


def append_journal_record(
    buffer: bytearray, kind: int, ledger_id: int, argument: int, payload: bytes
) -> None:
    """Append one record to `buffer` (the add path: three appends, two C CRC calls)."""
    head = _JOURNAL_BODY_HEAD.pack(kind, ledger_id, argument)
    crc = crc32c.crc32c(payload, crc32c.crc32c(head))
    buffer += _RECORD_PREFIX.pack(RECORD_BODY_MIN_BYTES + len(payload), crc)
    buffer += head
    buffer += payload


def decode_journal_record(data: memoryview, offset: int) -> JournalRecord | None:
    """The record valid at `offset`, or None when the bytes there are not one."""
    assert offset >= 0
    end_of_data = len(data)
    if offset + RECORD_PREFIX_BYTES + RECORD_BODY_MIN_BYTES > end_of_data:
        return None
    length, crc = _RECORD_PREFIX.unpack_from(data, offset)
    body = offset + RECORD_PREFIX_BYTES
    end = body + length
    if not RECORD_BODY_MIN_BYTES <= length <= RECORD_BODY_MAX_BYTES or end > end_of_data:
        return None
    if crc32c.crc32c(data[body:end]) != crc:
        return None
    kind, ledger_id, argument = _JOURNAL_BODY_HEAD.unpack_from(data, body)
    if kind not in _KINDS:
        # A CRC-valid record of a kind we do not know was written by a newer
        # format; replaying around it would drop a mutation, so it is not valid.
        return None
    return JournalRecord(
        offset=offset,
        end=end,
        kind=JournalKind(kind),
        ledger_id=ledger_id,
        argument=argument,
        payload=data[body + RECORD_BODY_MIN_BYTES : end],
    )


_NON_ZERO: Final = re.compile(rb"[^\x00]")


def find_journal_record(data: memoryview, start: int) -> int | None:
    """The first offset >= `start` at which a valid record begins, or None.

    Used to tell a junk tail (nothing valid follows the first bad record) from
    corruption before the tail (something valid does).  Runs of zero bytes
    (the usual content of a torn tail after a power cut) are skipped in one
    step, since a valid record's length field is never zero.
    """
    assert start >= 0
    last = len(data) - RECORD_PREFIX_BYTES - RECORD_BODY_MIN_BYTES
    position = start
    while position <= last:
        if _RECORD_PREFIX.unpack_from(data, position)[0] == 0:
            found = _NON_ZERO.search(data, position)
            if found is None:
                return None
            position = max(position + 1, found.start() - 3)
            continue
        if decode_journal_record(data, position) is not None:
            return position
        position += 1
    return None


def is_zeros(data: memoryview, start: int) -> bool:
    """Whether every byte of `data` from `start` on is zero (true for none)."""
    return _NON_ZERO.search(data, start) is None


def iter_journal_records(data: memoryview, start: int) -> Iterator[JournalRecord]:
    """Every valid record from `start` on, stopping at the first offset that is not one."""
    offset = start
    while True:
        record = decode_journal_record(data, offset)
        if record is None:
            return
        yield record
        offset = record.end


# --- entry-log records --------------------------------------------------------------------------

_ENTRY_BODY_HEAD: Final = struct.Struct(">qq")
ENTRY_RECORD_HEAD_BYTES: Final = RECORD_PREFIX_BYTES + _ENTRY_BODY_HEAD.size
ENTRY_BODY_MIN_BYTES: Final = _ENTRY_BODY_HEAD.size
ENTRY_BODY_MAX_BYTES: Final = ENTRY_BODY_MIN_BYTES + limits.frame_size_bytes_max


@dataclass(frozen=True, slots=True)
class EntryLogRecord:
    """One decoded entry-log record (for inspection and compaction)."""

    offset: int
    end: int
    ledger_id: int
    entry_id: int
    packet: memoryview


def append_entry_log_record(buffer: bytearray, ledger_id: int, entry_id: int, packet: bytes) -> int:
    """Append one record to `buffer`; returns its size in bytes."""
    head = _ENTRY_BODY_HEAD.pack(ledger_id, entry_id)
    crc = crc32c.crc32c(packet, crc32c.crc32c(head))
    buffer += _RECORD_PREFIX.pack(ENTRY_BODY_MIN_BYTES + len(packet), crc)
    buffer += head
    buffer += packet
    return ENTRY_RECORD_HEAD_BYTES + len(packet)


def decode_entry_log_record(
    data: bytes | bytearray | memoryview, ledger_id: int, entry_id: int
) -> bytes:
    """The packet of the record in `data` (exactly one record), which the index says
    belongs to (ledger_id, entry_id).

    Raises `EntryLogCorrupt` when the record is short, fails its CRC or belongs
    to another entry: the index promised this record, so it is damaged, never absent.
    """
    view = memoryview(data)
    if len(view) < ENTRY_RECORD_HEAD_BYTES:
        raise EntryLogCorrupt(
            f"entry {ledger_id}:{entry_id}: record of {len(view)} bytes is shorter than its header"
        )
    length, crc = _RECORD_PREFIX.unpack_from(view)
    if length != len(view) - RECORD_PREFIX_BYTES:
        raise EntryLogCorrupt(
            f"entry {ledger_id}:{entry_id}: record length {length} does not match its index size"
        )
    if crc32c.crc32c(view[RECORD_PREFIX_BYTES:]) != crc:
        raise EntryLogCorrupt(f"entry {ledger_id}:{entry_id}: record fails its checksum")
    got_ledger, got_entry = _ENTRY_BODY_HEAD.unpack_from(view, RECORD_PREFIX_BYTES)
    if got_ledger != ledger_id or got_entry != entry_id:
        raise EntryLogCorrupt(
            f"entry {ledger_id}:{entry_id}: record holds entry {got_ledger}:{got_entry}"
        )
    return bytes(view[ENTRY_RECORD_HEAD_BYTES:])


def entry_log_record_size_at(data: memoryview, offset: int) -> int | None:
    """The size of the record at `offset` as its length field says, or None when there is
    no length field there or it is out of bounds (junk).

    Lets a reader that sees only part of a log tell a record cut by the end of
    its buffer (read more) from junk (stop): compaction reads logs piece by piece.
    """
    assert offset >= 0
    if offset + RECORD_PREFIX_BYTES > len(data):
        return None
    length = _RECORD_PREFIX.unpack_from(data, offset)[0]
    if not ENTRY_BODY_MIN_BYTES <= length <= ENTRY_BODY_MAX_BYTES:
        return None
    return int(RECORD_PREFIX_BYTES + length)


def decode_entry_log_record_at(data: memoryview, offset: int) -> EntryLogRecord | None:
    """The entry-log record valid at `offset`, or None (inspection walks logs with it)."""
    assert offset >= 0
    if offset + ENTRY_RECORD_HEAD_BYTES > len(data):
        return None
    length, crc = _RECORD_PREFIX.unpack_from(data, offset)
    body = offset + RECORD_PREFIX_BYTES
    end = body + length
    if not ENTRY_BODY_MIN_BYTES <= length <= ENTRY_BODY_MAX_BYTES or end > len(data):
        return None
    if crc32c.crc32c(data[body:end]) != crc:
        return None
    ledger_id, entry_id = _ENTRY_BODY_HEAD.unpack_from(data, body)
    return EntryLogRecord(
        offset=offset,
        end=end,
        ledger_id=ledger_id,
        entry_id=entry_id,
        packet=data[body + ENTRY_BODY_MIN_BYTES : end],
    )
