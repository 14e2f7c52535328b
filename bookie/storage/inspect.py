"""Read-only views of a bookie's files, for the `bookie shell` commands.

Nothing here writes: journal files and entry logs are read as they are (a
damaged record is reported, never repaired), and the index is opened
read-only, so these helpers are safe on the directories of a running bookie
or of a stopped one that refuses to start.

Each walk yields one item per valid record and, when a file does not end on
a valid record, one final *tail* item saying where the valid part ends and
whether a valid record follows later (corruption before the tail, which
replay refuses) or not (a torn or junk tail, which replay truncates).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bookie.storage.entry_log import entry_log_ids, entry_log_path
from bookie.storage.format import (
    ENTRY_LOG_MAGIC,
    FILE_HEADER_BYTES,
    JOURNAL_MAGIC,
    JournalKind,
    decode_entry_log_record_at,
    decode_file_header,
    decode_journal_record,
    find_journal_record,
    is_zeros,
)
from bookie.storage.index import read_checkpoint_mark
from bookie.storage.journal import JournalMark, journal_files


@dataclass(frozen=True, slots=True)
class JournalRecordInfo:
    """One valid journal record."""

    path: Path
    offset: int
    kind: JournalKind
    ledger_id: int
    """The ledger; for PREVIOUS_FILE, the id of the journal file before this one."""
    argument: int
    """The entry id (ENTRY), the LAC (EXPLICIT_LAC), the tombstone flag (DELETE), the
    previous journal file's length in bytes (PREVIOUS_FILE), else 0."""
    size_bytes: int
    """The whole record, prefix included."""
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class EntryLogRecordInfo:
    """One valid entry-log record."""

    path: Path
    offset: int
    ledger_id: int
    entry_id: int
    size_bytes: int
    packet_bytes: int


@dataclass(frozen=True, slots=True)
class FileTail:
    """The valid part of a file ends at `offset` before its end (`file_bytes`)."""

    path: Path
    offset: int
    file_bytes: int
    next_valid_offset: int | None
    """Offset of a valid record after the damage (corruption before the tail), or None."""
    header_ok: bool
    zeros: bool
    """Every byte from `offset` on is zero (a journal's space allocated ahead, unused)."""


def journal_records(path: Path) -> Iterator[JournalRecordInfo | FileTail]:
    """Every record of a journal file, or of every journal file of a directory in order."""
    paths = [file for _, file in journal_files(path)] if path.is_dir() else [path]
    for file in paths:
        data = memoryview(file.read_bytes())
        if decode_file_header(JOURNAL_MAGIC, data) is None:
            yield FileTail(
                file,
                0,
                len(data),
                find_journal_record(data, 0),
                header_ok=False,
                zeros=is_zeros(data, 0),
            )
            continue
        offset = FILE_HEADER_BYTES
        while (record := decode_journal_record(data, offset)) is not None:
            yield JournalRecordInfo(
                path=file,
                offset=offset,
                kind=record.kind,
                ledger_id=record.ledger_id,
                argument=record.argument,
                size_bytes=record.end - offset,
                payload_bytes=len(record.payload),
            )
            offset = record.end
        if offset < len(data):
            yield FileTail(
                file,
                offset,
                len(data),
                find_journal_record(data, offset + 1),
                header_ok=True,
                zeros=is_zeros(data, offset),
            )


def entry_log_records(path: Path) -> Iterator[EntryLogRecordInfo | FileTail]:
    """Every record of an entry log, or of every entry log of a ledger directory in order.

    An entry log's tail past the last checkpoint may hold junk after a crash;
    the index never points there, so a tail item is not by itself damage.
    """
    paths = (
        [entry_log_path(path, log_id) for log_id in entry_log_ids(path)]
        if path.is_dir()
        else [path]
    )
    for file in paths:
        data = memoryview(file.read_bytes())
        if decode_file_header(ENTRY_LOG_MAGIC, data) is None:
            yield FileTail(file, 0, len(data), None, header_ok=False, zeros=is_zeros(data, 0))
            continue
        offset = FILE_HEADER_BYTES
        while (record := decode_entry_log_record_at(data, offset)) is not None:
            yield EntryLogRecordInfo(
                path=file,
                offset=offset,
                ledger_id=record.ledger_id,
                entry_id=record.entry_id,
                size_bytes=record.end - offset,
                packet_bytes=len(record.packet),
            )
            offset = record.end
        if offset < len(data):
            yield FileTail(
                file, offset, len(data), None, header_ok=True, zeros=is_zeros(data, offset)
            )


def checkpoint_mark(ledger_dirs: Iterable[Path]) -> JournalMark | None:
    """The journal mark replay would start from: the smallest of the directories' marks
    (None when a directory has not checkpointed yet: replay starts at the beginning)."""
    marks = [read_checkpoint_mark(directory) for directory in ledger_dirs]
    if None in marks:
        return None
    return min((mark for mark in marks if mark is not None), default=None)
