"""Snapshot chunks and records: what a writer cuts, a reader accepts unchanged, and every
corruption a reader must refuse."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm import limits
from rsm.core.snapshot_format import (
    SECTION_FRAMEWORK,
    SECTION_STATE,
    FrameworkDecoder,
    RecordReader,
    SnapshotHeader,
    SnapshotReader,
    SnapshotWriter,
    StreamSummary,
    decode_chunk,
    encode_chunk,
    encode_record,
    framework_records,
)
from rsm.errors import SnapshotCorrupt

pieces = st.lists(st.binary(min_size=0, max_size=300), max_size=12)


def write(
    framework: list[bytes], state: list[bytes], chunk_bytes: int
) -> tuple[list[bytes], StreamSummary]:
    writer = SnapshotWriter(chunk_bytes)
    chunks: list[bytes] = []
    for piece in framework:
        chunks += writer.framework(piece)
    for piece in state:
        chunks += writer.state(piece)
    last, summary = writer.finish()
    return chunks + last, summary


@given(pieces, pieces, st.integers(min_value=1, max_value=64))
def test_a_reader_gets_back_each_section_exactly(
    framework: list[bytes], state: list[bytes], chunk_bytes: int
) -> None:
    chunks, summary = write(framework, state, chunk_bytes)
    reader = SnapshotReader()
    sections: dict[int, bytearray] = {SECTION_FRAMEWORK: bytearray(), SECTION_STATE: bytearray()}
    for chunk in chunks:
        section, data = reader.take(chunk)
        assert 1 <= len(data) <= chunk_bytes
        sections[section] += data
    framework_bytes, state_bytes = b"".join(framework), b"".join(state)
    assert sections[SECTION_FRAMEWORK] == framework_bytes
    assert sections[SECTION_STATE] == state_bytes
    content = hashlib.sha256(framework_bytes + state_bytes).digest()
    read = reader.finish(len(chunks), sum(map(len, chunks)), content)
    assert read == summary
    assert read.state_sha256 == hashlib.sha256(state_bytes).digest()


def test_sections_never_share_a_chunk() -> None:
    chunks, _summary = write([b"abc"], [b"defgh"], 4)
    reader = SnapshotReader()
    assert [reader.take(chunk)[0] for chunk in chunks] == [0, 1, 1]


@pytest.mark.parametrize("position", [0, 4, 5, 8, 12, 16, 19, 20, 23])
def test_any_flipped_byte_is_refused(position: int) -> None:
    chunk = bytearray(encode_chunk(SECTION_STATE, 0, b"some data"))
    chunk[position] ^= 0x40
    with pytest.raises(SnapshotCorrupt):
        decode_chunk(bytes(chunk), 0)


def test_chunks_out_of_order_or_missing_are_refused() -> None:
    chunks, summary = write([b"h" * 10], [b"s" * 10], 4)
    with pytest.raises(SnapshotCorrupt, match="sequence"):
        SnapshotReader().take(chunks[1])
    reader = SnapshotReader()
    for chunk in chunks[:-1]:
        reader.take(chunk)
    with pytest.raises(SnapshotCorrupt, match="manifest"):
        reader.finish(summary.chunk_count, summary.size_bytes, summary.content_sha256)


def test_a_section_cannot_come_back() -> None:
    reader = SnapshotReader()
    reader.take(encode_chunk(SECTION_STATE, 0, b"x"))
    with pytest.raises(SnapshotCorrupt, match="section"):
        reader.take(encode_chunk(SECTION_FRAMEWORK, 1, b"y"))


def test_a_wrong_hash_is_refused() -> None:
    chunks, _summary = write([b"h"], [b"s"], 4)
    reader = SnapshotReader()
    for chunk in chunks:
        reader.take(chunk)
    with pytest.raises(SnapshotCorrupt, match="SHA-256"):
        reader.finish(len(chunks), sum(map(len, chunks)), bytes(32))


@given(
    st.lists(st.one_of(st.integers(), st.binary(max_size=50), st.text(max_size=20)), max_size=8),
    st.integers(min_value=1, max_value=20),
)
def test_records_come_out_whatever_the_pieces(values: list[object], cut: int) -> None:
    stream = b"".join(encode_record(value) for value in values)
    reader = RecordReader()
    decoded: list[object] = []
    for start in range(0, len(stream), cut):
        decoded += reader.feed(stream[start : start + cut])
        assert reader.buffered_bytes < cut + max(map(len, map(encode_record, values)), default=0)
    reader.finish()
    assert decoded == values


def test_a_stream_that_stops_inside_a_record_is_refused() -> None:
    reader = RecordReader()
    reader.feed(encode_record(b"x" * 100)[:50])
    with pytest.raises(SnapshotCorrupt, match="inside a record"):
        reader.finish()
    with pytest.raises(SnapshotCorrupt, match="CBOR"):
        RecordReader().feed(b"\x00\x00\x00\x01\xff")


def header(sessions: int) -> SnapshotHeader:
    return SnapshotHeader(
        app="app",
        index=7,
        time_ms=1_000,
        epoch=2,
        cursor=(5, 3),
        machine="m:M",
        codec="default",
        clock_ms=900,
        sessions=sessions,
        replica_id="r",
        created_ms=2_000,
    )


@given(st.integers(min_value=0, max_value=limits.snapshot_session_run_sessions * 2 + 3))
def test_the_framework_section_round_trips(count: int) -> None:
    sessions = [[bytes([n % 256]) * 4, n, 0, []] for n in range(count)]
    decoder = FrameworkDecoder()
    for record in framework_records(header(count), iter(sessions)):
        decoder.feed(record)
    assert decoder.finish() == header(count)
    assert decoder.sessions == sessions


def test_a_framework_section_short_of_its_sessions_is_refused() -> None:
    decoder = FrameworkDecoder()
    records = list(framework_records(header(2), iter([[b"a", 0, 0, []], [b"b", 0, 0, []]])))
    decoder.feed(records[0])
    with pytest.raises(SnapshotCorrupt, match="sessions"):
        decoder.finish()
    with pytest.raises(SnapshotCorrupt, match="header"):
        FrameworkDecoder().feed(encode_record({"v": 1}))
