"""Ledger metadata <-> the bytes of its znode.

Pure.  `encode` turns a `bookie.core.metadata.LedgerMetadata` into the value
stored at `layout.ledger(ledger_id)`; `decode` turns any bytes back into a
`LedgerMetadata` that satisfies every invariant of `core.metadata`, or raises
`BadMetadata` saying what is wrong.  Decoding is total: junk, truncation, a
future format version, a wrong type or an impossible combination (Qa > Qw, a
CLOSED-only field set on an OPEN ledger, ...) is `BadMetadata`, never another
exception and never a record that would trip an assertion later.

Format version 1.  The value is one CBOR data item, canonically encoded (see
`records.py`): a map with exactly these text keys::

    key    CBOR type                         field
    "v"    uint                              format version: 1
    "id"   uint                              ledger id, 0 .. 2^63-1; equals the id of the path
    "st"   uint                              state: 1 OPEN, 2 IN_RECOVERY, 3 CLOSED
    "e"    uint                              ensemble size E, 1 .. limits.ensemble_size_max
    "qw"   uint                              write quorum Qw, 1 .. E
    "qa"   uint                              ack quorum Qa, 1 .. Qw
    "dt"   uint                              digest type: 1 CRC32C, 2 HMAC_SHA256
    "pw"   bytes (32)                        SHA-256(b"password" + password)
    "ens"  array of [uint, array of text]    segments, ascending: [first entry id, E bookie ids]
    "le"   int                               last entry id: -1 unless CLOSED; -1 .. 2^63-1
    "len"  uint                              ledger length in bytes: 0 unless CLOSED
    "ct"   uint                              creation time, ms since the Unix epoch
    "cm"   map text -> bytes                 custom metadata (application-defined)

Segment rules: the first segment starts at entry 0, first entry ids strictly
increase, each ensemble holds exactly E distinct non-empty bookie ids.  A
CLOSED ledger's last segment starts at most one past its last entry (a
writer opens a segment at its last add confirmed + 1), and a ledger closed
empty (last entry -1) has length 0.

Example: ledger 7, E=3 Qw=2 Qa=2, CRC32C, OPEN, one segment, encodes as a
13-entry map (CBOR header byte 0xad) whose keys come in canonical order,
shorter first, then bytewise: "e" "v", then "cm" "ct" "dt" "id" "le" "pw"
"qa" "qw" "st", then "ens" "len".  So it starts 0xad 0x61 0x65 0x03 ("e": 3)
0x61 0x76 0x01 ("v": 1).

A reader meeting a version it does not know refuses it (BadMetadata) rather
than guessing: a newer writer may have added a field whose meaning matters
for safety.
"""

from __future__ import annotations

from typing import Final

from bookie import limits
from bookie.core.metadata import FORMAT_VERSION, LedgerMetadata, LedgerState, check_invariants
from bookie.errors import BadMetadata
from bookie.meta.records import (
    decode_record,
    encode_record,
    expect_array,
    expect_bytes,
    expect_int,
    expect_map,
    expect_text,
)
from bookie.wire.packet import DigestType

PASSWORD_HASH_BYTES: Final = 32

_KEYS: Final = ("id", "st", "e", "qw", "qa", "dt", "pw", "ens", "le", "len", "ct", "cm")
_ENTRY_ID_MAX: Final = (1 << 63) - 1


def encode(metadata: LedgerMetadata) -> bytes:
    """The znode value of `metadata` (which must satisfy `check_invariants`)."""
    check_invariants(metadata)
    assert metadata.format_version == FORMAT_VERSION, "only the current format is written"
    assert len(metadata.password_hash) == PASSWORD_HASH_BYTES
    data = encode_record(
        {
            "v": FORMAT_VERSION,
            "id": metadata.ledger_id,
            "st": int(metadata.state),
            "e": metadata.ensemble_size,
            "qw": metadata.write_quorum,
            "qa": metadata.ack_quorum,
            "dt": int(metadata.digest_type),
            "pw": metadata.password_hash,
            "ens": [[first, list(ensemble)] for first, ensemble in metadata.ensembles],
            "le": metadata.last_entry_id,
            "len": metadata.length,
            "ct": metadata.ctime_ms,
            "cm": dict(metadata.custom),
        }
    )
    assert decode(data) == metadata, "encoding must round-trip"
    return data


def decode(data: bytes, what: str = "ledger metadata") -> LedgerMetadata:
    """The ledger metadata stored in `data`; `BadMetadata` if it is not valid.

    `what` names the value in error messages (the manager passes the ledger and path).
    """
    record = decode_record(data, what, _KEYS, FORMAT_VERSION)
    ledger_id = expect_int(record["id"], f"{what}: ledger id", 0, limits.ledger_id_max)
    state = LedgerState(
        expect_int(record["st"], f"{what}: state", min(LedgerState), max(LedgerState))
    )
    ensemble_size = expect_int(record["e"], f"{what}: ensemble size", 1, limits.ensemble_size_max)
    write_quorum = expect_int(record["qw"], f"{what}: write quorum", 1, ensemble_size)
    ack_quorum = expect_int(record["qa"], f"{what}: ack quorum", 1, write_quorum)
    digest_type = DigestType(
        expect_int(record["dt"], f"{what}: digest type", min(DigestType), max(DigestType))
    )
    password_hash = expect_bytes(record["pw"], f"{what}: password hash")
    if len(password_hash) != PASSWORD_HASH_BYTES:
        raise BadMetadata(
            f"{what}: password hash has {len(password_hash)} bytes, not {PASSWORD_HASH_BYTES}"
        )
    ensembles = _decode_ensembles(record["ens"], f"{what}: ensembles", ensemble_size)
    last_entry_id = expect_int(record["le"], f"{what}: last entry id", -1, _ENTRY_ID_MAX)
    length = expect_int(record["len"], f"{what}: length", 0, _ENTRY_ID_MAX)
    if state is not LedgerState.CLOSED and (last_entry_id != -1 or length != 0):
        raise BadMetadata(
            f"{what}: a {state.name} ledger has no last entry id or length yet "
            f"(found {last_entry_id}, {length})"
        )
    if state is LedgerState.CLOSED and last_entry_id == -1 and length != 0:
        raise BadMetadata(f"{what}: a ledger closed empty has length {length}, not 0")
    if state is LedgerState.CLOSED and ensembles[-1][0] > last_entry_id + 1:
        raise BadMetadata(
            f"{what}: the last segment starts at entry {ensembles[-1][0]}, "
            f"past the end of the ledger ({last_entry_id})"
        )
    ctime_ms = expect_int(record["ct"], f"{what}: creation time", 0, _ENTRY_ID_MAX)
    custom = {
        key: expect_bytes(value, f"{what}: custom metadata {key!r}")
        for key, value in expect_map(record["cm"], f"{what}: custom metadata").items()
    }
    metadata = LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        digest_type=digest_type,
        password_hash=password_hash,
        ensembles=ensembles,
        state=state,
        last_entry_id=last_entry_id,
        length=length,
        ctime_ms=ctime_ms,
        custom=custom,
        format_version=FORMAT_VERSION,
    )
    check_invariants(metadata)
    return metadata


def _decode_ensembles(
    value: object, where: str, ensemble_size: int
) -> tuple[tuple[int, tuple[str, ...]], ...]:
    segments = expect_array(value, where)
    if not segments:
        raise BadMetadata(f"{where}: no segment")
    decoded: list[tuple[int, tuple[str, ...]]] = []
    previous = -1
    for index, segment in enumerate(segments):
        at = f"{where}[{index}]"
        pair = expect_array(segment, at)
        if len(pair) != 2:
            raise BadMetadata(f"{at}: expected [first entry id, bookies], found {len(pair)} items")
        first_entry_id = expect_int(pair[0], f"{at}: first entry id", 0, _ENTRY_ID_MAX)
        if index == 0 and first_entry_id != 0:
            raise BadMetadata(f"{at}: the first segment starts at entry {first_entry_id}, not 0")
        if first_entry_id <= previous:
            raise BadMetadata(f"{at}: first entry id {first_entry_id} does not follow {previous}")
        bookies = expect_array(pair[1], f"{at}: bookies")
        ensemble = tuple(expect_text(bookie, f"{at}: bookie id") for bookie in bookies)
        if len(ensemble) != ensemble_size or len(set(ensemble)) != ensemble_size:
            raise BadMetadata(
                f"{at}: an ensemble needs {ensemble_size} distinct bookies, found {list(ensemble)}"
            )
        decoded.append((first_entry_id, ensemble))
        previous = first_entry_id
    return tuple(decoded)
