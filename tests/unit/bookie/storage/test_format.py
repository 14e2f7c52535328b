"""Byte layouts of bookie/storage/format.py: round trips, and junk never decodes."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.errors import EntryLogCorrupt
from bookie.storage.format import (
    ENTRY_LOG_MAGIC,
    FILE_HEADER_BYTES,
    JOURNAL_MAGIC,
    JournalKind,
    append_entry_log_record,
    append_journal_record,
    decode_entry_log_record,
    decode_entry_log_record_at,
    decode_file_header,
    decode_journal_record,
    encode_file_header,
    find_journal_record,
    iter_journal_records,
)

ids = st.integers(min_value=0, max_value=2**63 - 1)
arguments = st.integers(min_value=-(2**63), max_value=2**63 - 1)
payloads = st.binary(max_size=300)
records = st.tuples(st.sampled_from(JournalKind), ids, arguments, payloads)


@given(st.sampled_from([JOURNAL_MAGIC, ENTRY_LOG_MAGIC]), st.integers(0, 2**64 - 1))
def test_file_header_round_trip(magic: bytes, file_id: int) -> None:
    header = encode_file_header(magic, file_id)
    assert len(header) == FILE_HEADER_BYTES
    assert decode_file_header(magic, header) == file_id
    other = ENTRY_LOG_MAGIC if magic == JOURNAL_MAGIC else JOURNAL_MAGIC
    assert decode_file_header(other, header) is None
    assert decode_file_header(magic, header[:-1]) is None


def test_file_header_layout_is_documented() -> None:
    assert encode_file_header(JOURNAL_MAGIC, 0x1234) == b"BKJL" + struct.pack(">IQ", 1, 0x1234)


def test_journal_record_layout_is_documented() -> None:
    buffer = bytearray()
    append_journal_record(buffer, JournalKind.ENTRY, 7, 9, b"abc")
    body = struct.pack(">Bqq", 1, 7, 9) + b"abc"
    assert bytes(buffer) == struct.pack(">II", len(body), crc32c.crc32c(body)) + body


@given(st.lists(records, max_size=20))
def test_journal_records_round_trip(items: list[tuple[JournalKind, int, int, bytes]]) -> None:
    buffer = bytearray(encode_file_header(JOURNAL_MAGIC, 1))
    for kind, ledger_id, argument, payload in items:
        append_journal_record(buffer, kind, ledger_id, argument, payload)
    decoded = list(iter_journal_records(memoryview(bytes(buffer)), FILE_HEADER_BYTES))
    assert [(r.kind, r.ledger_id, r.argument, bytes(r.payload)) for r in decoded] == items
    assert (decoded[-1].end if decoded else FILE_HEADER_BYTES) == len(buffer)


@given(records, st.data())
def test_a_truncated_journal_record_never_decodes(
    record: tuple[JournalKind, int, int, bytes], data: st.DataObject
) -> None:
    buffer = bytearray()
    append_journal_record(buffer, *record)
    cut = data.draw(st.integers(0, len(buffer) - 1))
    assert decode_journal_record(memoryview(bytes(buffer[:cut])), 0) is None


@given(records, st.data())
def test_a_flipped_bit_never_decodes(
    record: tuple[JournalKind, int, int, bytes], data: st.DataObject
) -> None:
    buffer = bytearray()
    append_journal_record(buffer, *record)
    bit = data.draw(st.integers(0, 8 * len(buffer) - 1))
    buffer[bit // 8] ^= 1 << (bit % 8)
    assert decode_journal_record(memoryview(bytes(buffer)), 0) is None


def test_an_unknown_kind_is_not_a_valid_record() -> None:
    body = struct.pack(">Bqq", 99, 1, 2)
    data = struct.pack(">II", len(body), crc32c.crc32c(body)) + body
    assert decode_journal_record(memoryview(data), 0) is None


def test_find_skips_zeros_and_junk_to_the_next_record() -> None:
    record = bytearray()
    append_journal_record(record, JournalKind.FENCE, 3, 0, b"")
    data = memoryview(bytes(5000) + b"\xff\x01junk" + bytes(record) + bytes(100))
    assert find_journal_record(data, 0) == 5006
    assert find_journal_record(data, 5007) is None
    assert find_journal_record(memoryview(bytes(10_000_000)), 0) is None


@given(ids, ids, st.binary(max_size=300))
def test_entry_log_record_round_trip(ledger_id: int, entry_id: int, packet: bytes) -> None:
    buffer = bytearray(b"xx")
    size = append_entry_log_record(buffer, ledger_id, entry_id, packet)
    assert size == len(buffer) - 2
    assert decode_entry_log_record(bytes(buffer[2:]), ledger_id, entry_id) == packet
    record = decode_entry_log_record_at(memoryview(bytes(buffer)), 2)
    assert record is not None
    assert (record.ledger_id, record.entry_id, bytes(record.packet)) == (
        ledger_id,
        entry_id,
        packet,
    )
    assert record.end == len(buffer)


def test_entry_log_record_read_for_another_entry_is_corrupt() -> None:
    buffer = bytearray()
    append_entry_log_record(buffer, 1, 2, b"packet")
    with pytest.raises(EntryLogCorrupt, match="holds entry 1:2"):
        decode_entry_log_record(bytes(buffer), 1, 3)


@given(st.binary(min_size=1, max_size=100), st.data())
def test_damaged_entry_log_record_raises(packet: bytes, data: st.DataObject) -> None:
    buffer = bytearray()
    append_entry_log_record(buffer, 1, 2, packet)
    bit = data.draw(st.integers(0, 8 * len(buffer) - 1))
    buffer[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(EntryLogCorrupt):
        decode_entry_log_record(bytes(buffer), 1, 2)
    with pytest.raises(EntryLogCorrupt):
        decode_entry_log_record(bytes(buffer[:-1]), 1, 2)
