"""The exported log file: a round trip, and every kind of damage gives a clear error."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from rsm.core.log_format import encode_batch, encode_command
from rsm.core.log_state import Segment, SegmentState
from rsm.core.snapshot_manifest import Manifest
from rsm.errors import ExportCorrupt
from rsm.tools.export_format import (
    MAGIC,
    ExportedEntry,
    ExportHeader,
    ExportReader,
    ExportSummary,
    ExportWriter,
)

HEADER = ExportHeader(
    app="notes",
    segments=(Segment(7, 1, 1, SegmentState.CLOSED, 4), Segment(9, 2, 5, SegmentState.OPEN, -1)),
    first_index=1,
    last_index=6,
    exported_ms=1_700_000_000_000,
    source="--app notes --zk z:1",
)


def entry(ledger_id: int, entry_id: int, first_index: int, count: int) -> ExportedEntry:
    items = [encode_command("put", [f"k{n}".encode(), b"v"]) for n in range(count)]
    payload = encode_batch(
        epoch=1, first_index=first_index, timestamp_ms=5, seed=3, items=items, state_hash=None
    )
    return ExportedEntry(ledger_id, entry_id, first_index, count, payload)


ENTRIES = [entry(7, 0, 1, 2), entry(7, 1, 3, 2), entry(9, 0, 5, 0), entry(9, 1, 5, 2)]


def exported(entries: list[ExportedEntry] = ENTRIES) -> bytes:
    stream = io.BytesIO()
    writer = ExportWriter(stream, HEADER)
    for one in entries:
        writer.add(one)
    summary = writer.finish()
    assert summary == ExportSummary(4, sum(len(e.payload) for e in entries), 6)
    return stream.getvalue()


def read_all(data: bytes) -> tuple[ExportReader, list[ExportedEntry]]:
    reader = ExportReader(io.BytesIO(data), "x.rsmlog")
    return reader, list(reader)


def test_a_file_reads_back_exactly_what_was_written() -> None:
    reader, entries = read_all(exported())
    assert reader.header == HEADER
    assert entries == ENTRIES
    assert reader.summary == ExportSummary(4, sum(len(e.payload) for e in ENTRIES), 6)


def test_the_layout_starts_with_the_magic_and_ends_with_the_end_record() -> None:
    data = exported()
    assert data.startswith(MAGIC)
    assert data[-29] == 0xFF


@pytest.mark.parametrize("cut", [5, 20, 200, -40, -29, -3])
def test_a_truncated_file_says_where_it_ends(cut: int) -> None:
    data = exported()
    with pytest.raises(ExportCorrupt, match="truncated: it ends at byte"):
        read_all(data[:cut])


def test_a_truncation_inside_an_entry_counts_the_intact_entries_before_it() -> None:
    data = exported()
    with pytest.raises(ExportCorrupt, match="the 3 entries before it are intact"):
        read_all(data[:-40])


@pytest.mark.parametrize("where", [3, -30])
def test_a_flipped_byte_in_an_entry_fails_its_checksum(where: int) -> None:
    """In its payload (3 bytes in) or its head (30 bytes before the payload: the ledger
    id), the entry is named by position only: its ids are not to be trusted."""
    data = bytearray(exported())
    payload = ENTRIES[1].payload
    offset = bytes(data).index(payload) + where
    data[offset] ^= 0x40
    with pytest.raises(ExportCorrupt, match=r": entry 2 at byte \d+ fails its checksum$"):
        read_all(bytes(data))


def test_a_flipped_byte_in_the_header_fails_the_header_checksum() -> None:
    data = bytearray(exported())
    data[20] ^= 0x01
    with pytest.raises(ExportCorrupt, match="header fails its checksum"):
        read_all(bytes(data))


def test_other_files_and_other_versions_are_refused_by_name() -> None:
    with pytest.raises(ExportCorrupt, match="not an exported rsm log"):
        read_all(b"PK\x03\x04" + bytes(40))
    with pytest.raises(ExportCorrupt, match="format version 2"):
        read_all(MAGIC[:7] + b"\x02" + bytes(40))


def test_bytes_after_the_end_record_are_refused() -> None:
    with pytest.raises(ExportCorrupt, match="after its end record"):
        read_all(exported() + b"\x00")


def test_entries_out_of_order_are_refused() -> None:
    with pytest.raises(ExportCorrupt, match="starts at index 5, not 3"):
        read_all(exported([ENTRIES[0], ENTRIES[2], ENTRIES[1], ENTRIES[3]]))


MANIFEST = Manifest(
    app="notes",
    index=4,
    time_ms=5,
    epoch=1,
    ledger_id=11,
    state_hash=b"\x01" * 32,
    sha256=b"\x02" * 32,
    size_bytes=10,
    chunk_count=2,
    created_ms=6,
    replica_id="r1",
)


def with_snapshot(chunks: list[bytes]) -> bytes:
    stream = io.BytesIO()
    writer = ExportWriter(stream, replace(HEADER, first_index=5, snapshot=MANIFEST))
    for chunk in chunks:
        writer.add_chunk(chunk)
    for one in ENTRIES[2:]:
        writer.add(one)
    writer.finish()
    return stream.getvalue()


def test_a_snapshot_travels_in_the_file_before_the_entries() -> None:
    data = with_snapshot([b"first chunk", b"second"])
    reader, entries = read_all(data)
    assert reader.header.snapshot == MANIFEST
    assert entries == ENTRIES[2:]
    assert list(ExportReader(io.BytesIO(data)).chunks()) == [b"first chunk", b"second"]


def test_a_missing_snapshot_chunk_is_refused() -> None:
    data = with_snapshot([b"only one"])
    with pytest.raises(
        ExportCorrupt, match="holds 1 snapshot chunks before its entries; its header says 2"
    ):
        read_all(data)
    with pytest.raises(ExportCorrupt, match="holds 1 snapshot chunks"):
        list(ExportReader(io.BytesIO(data)).chunks())


def test_a_damaged_snapshot_chunk_fails_its_checksum() -> None:
    data = bytearray(with_snapshot([b"first chunk", b"second"]))
    data[bytes(data).index(b"second")] ^= 0x20
    with pytest.raises(ExportCorrupt, match=r"snapshot chunk 2 at byte \d+ fails its checksum"):
        list(ExportReader(io.BytesIO(bytes(data))).chunks())
