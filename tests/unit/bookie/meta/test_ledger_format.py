"""Ledger metadata encoding: round trip, the documented layout, and total decoding."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import limits
from bookie.core.metadata import LedgerMetadata, LedgerState, check_invariants
from bookie.errors import BadMetadata
from bookie.meta import ledger_format
from bookie.wire.packet import DigestType

from .strategies import ledger_metadata

EXAMPLE = LedgerMetadata(
    ledger_id=7,
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    digest_type=DigestType.CRC32C,
    password_hash=bytes(32),
    ensembles=((0, ("b1", "b2", "b3")),),
    ctime_ms=1_700_000_000_000,
)


def _record(metadata: LedgerMetadata = EXAMPLE) -> dict[str, Any]:
    decoded = cbor2.loads(ledger_format.encode(metadata))
    assert isinstance(decoded, dict)
    return decoded


def _encode(record: dict[str, Any]) -> bytes:
    return bytes(cbor2.dumps(record, canonical=True))


@given(ledger_metadata())
def test_round_trip(metadata: LedgerMetadata) -> None:
    data = ledger_format.encode(metadata)
    assert ledger_format.decode(data) == metadata
    assert ledger_format.encode(ledger_format.decode(data)) == data


def test_layout_matches_the_docstring() -> None:
    data = ledger_format.encode(EXAMPLE)
    assert data[0] == 0xAD, "a 13-entry map"
    assert data[1:7] == b"\x61e\x03\x61v\x01", '"e": 3 then "v": 1 (canonical key order)'
    assert _record() == {
        "v": 1,
        "id": 7,
        "st": 1,
        "e": 3,
        "qw": 2,
        "qa": 2,
        "dt": 1,
        "pw": bytes(32),
        "ens": [[0, ["b1", "b2", "b3"]]],
        "le": -1,
        "len": 0,
        "ct": 1_700_000_000_000,
        "cm": {},
    }


def test_closed_ledger_keeps_its_end() -> None:
    closed = dataclasses.replace(
        EXAMPLE,
        state=LedgerState.CLOSED,
        last_entry_id=41,
        length=4200,
        ensembles=((0, ("b1", "b2", "b3")), (10, ("b1", "b4", "b3"))),
        custom={"app": b"kv"},
    )
    assert ledger_format.decode(ledger_format.encode(closed)) == closed


@given(st.binary(max_size=200))
def test_junk_never_crashes_the_decoder(data: bytes) -> None:
    try:
        metadata = ledger_format.decode(data)
    except BadMetadata:
        return
    check_invariants(metadata)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.binary(max_size=5),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=4), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_any_cbor_value_is_valid_metadata_or_bad_metadata(value: object) -> None:
    with contextlib.suppress(BadMetadata):
        ledger_format.decode(_encode(value))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("v", 2, "format version 2 is not supported"),
        ("id", -1, "ledger id"),
        ("id", limits.ledger_id_max + 1, "ledger id"),
        ("id", True, "expected an integer"),
        ("st", 4, "state"),
        ("e", 0, "ensemble size"),
        ("e", limits.ensemble_size_max + 1, "ensemble size"),
        ("qw", 4, "write quorum"),
        ("qa", 3, "ack quorum"),
        ("dt", 9, "digest type"),
        ("pw", b"short", "password hash has 5 bytes"),
        ("pw", "text", "expected a byte string"),
        ("ens", [], "no segment"),
        ("ens", [[1, ["b1", "b2", "b3"]]], "starts at entry 1"),
        ("ens", [[0, ["b1", "b2", "b3"]], [0, ["b1", "b2", "b4"]]], "does not follow"),
        ("ens", [[0, ["b1", "b2"]]], "3 distinct bookies"),
        ("ens", [[0, ["b1", "b1", "b2"]]], "3 distinct bookies"),
        ("ens", [[0, ["b1", "b2", ""]]], "empty text"),
        ("ens", [[0]], "found 1 items"),
        ("ens", {"0": []}, "expected an array"),
        ("le", 5, "no last entry id or length yet"),
        ("len", 10, "no last entry id or length yet"),
        ("ct", -5, "creation time"),
        ("cm", {"k": "text"}, "custom metadata 'k'"),
        ("cm", [], "expected a map"),
    ],
)
def test_invalid_field_is_reported(field: str, value: object, message: str) -> None:
    record = _record()
    record[field] = value
    with pytest.raises(BadMetadata, match=message):
        ledger_format.decode(_encode(record))


@pytest.mark.parametrize(
    ("last_entry_id", "length", "message"),
    [(-1, 5, "closed empty has length 5"), (8, 100, "starts at entry 10, past the end")],
)
def test_impossible_end_of_a_closed_ledger_is_reported(
    last_entry_id: int, length: int, message: str
) -> None:
    record = _record()
    record.update(
        st=3, le=last_entry_id, len=length, ens=[[0, ["b1", "b2", "b3"]], [10, ["b1", "b2", "b4"]]]
    )
    with pytest.raises(BadMetadata, match=message):
        ledger_format.decode(_encode(record))


def test_missing_and_unknown_fields_are_reported() -> None:
    record = _record()
    del record["ct"]
    record["extra"] = 1
    with pytest.raises(BadMetadata, match=r"missing fields \['ct'\], unknown fields \['extra'\]"):
        ledger_format.decode(_encode(record))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a CBOR value"),
        (b"\xff", "not a CBOR value"),
        (ledger_format.encode(EXAMPLE) + b"\x00", "1 junk bytes after the value"),
        (ledger_format.encode(EXAMPLE)[:-1], "not a CBOR value"),
        (b"\x80", "expected a map"),
        (b"\xa1\x01\x02", "map key must be a text string"),
        (b"\xa1\x41a\x02", "map key b.a. is not text"),
        (b"\xbf\xff", "not a CBOR value"),
        (b"x" * (limits.metadata_value_bytes_max + 1), "more than a metadata value may hold"),
    ],
)
def test_malformed_bytes_are_reported(data: bytes, message: str) -> None:
    with pytest.raises(BadMetadata, match=message):
        ledger_format.decode(data, "ledger 7")


def test_error_names_the_value() -> None:
    with pytest.raises(BadMetadata, match=r"^ledger 7 at /ledgers/00/0000/L0007: "):
        ledger_format.decode(b"", "ledger 7 at /ledgers/00/0000/L0007")
