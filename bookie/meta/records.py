"""Metadata values as small CBOR records: one canonical encoder and a strict, total reader.

Pure.  Every value the metadata layer writes (ledger metadata, cookies, bookie
registrations) is one CBOR data item (RFC 8949): a map whose keys are short
text strings, one of which, "v", holds the record's format version.  Encoding
is canonical (RFC 8949 §4.2.1: shortest integer forms, map keys sorted by
their encoded bytes, definite lengths), so equal records are equal bytes.

The reader is total: whatever bytes it is given, it returns a record with
exactly the expected keys and the expected version, or raises `BadMetadata`
with a message naming the record, the field and what was wrong.  It never
lets a decoder exception, a wrong type or an out-of-range number through:

* a value longer than `limits.metadata_value_bytes_max`, trailing bytes after
  the item, indefinite lengths, duplicate map keys, non-string map keys and
  nesting deeper than `_DEPTH_MAX` are refused;
* booleans are not integers here, although Python's `bool` is an `int`.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Mapping
from typing import Final

import cbor2

from bookie import limits
from bookie.errors import BadMetadata, preview

VERSION_KEY: Final = "v"

_DEPTH_MAX: Final = 8
"""Deepest nesting any record has (ledger metadata: map > array > array > array) plus room."""


def encode_record(fields: Mapping[str, object]) -> bytes:
    """The canonical CBOR encoding of a record (its version must be among `fields`)."""
    assert VERSION_KEY in fields, "every record carries its format version"
    return cbor2.dumps(dict(fields), canonical=True)


def decode_record(
    data: bytes, what: str, keys: Collection[str], version: int, optional: Collection[str] = ()
) -> dict[str, object]:
    """The record encoded in `data`, with exactly the `keys` (plus "v" == `version`), and
    any of the `optional` keys.

    `what` names the record in error messages ("ledger 7 metadata", "cookie of b1").
    Raises `BadMetadata` for anything else.
    """
    if len(data) > limits.metadata_value_bytes_max:
        raise BadMetadata(f"{what}: {len(data)} bytes, more than a metadata value may hold")
    stream = io.BytesIO(data)
    decoder = cbor2.CBORDecoder(
        stream,
        max_depth=_DEPTH_MAX,
        allow_indefinite=False,
        allow_duplicate_keys=False,
        strict_hashable_types=True,
    )
    try:
        item = decoder.decode()
    except Exception as error:
        # The decoder raises more than CBORDecodeError on some junk (a malformed
        # semantic tag can raise ValueError or re.error); all of it is bad input.
        raise BadMetadata(f"{what}: not a CBOR value ({error})") from error
    if stream.tell() != len(data):
        raise BadMetadata(f"{what}: {len(data) - stream.tell()} junk bytes after the value")
    record = expect_map(item, what)
    found = record.get(VERSION_KEY)
    if isinstance(found, int) and not isinstance(found, bool) and found != version:
        raise BadMetadata(
            f"{what}: format version {preview(found, 40)} is not supported "
            f"(this build reads {version})"
        )
    expected = {VERSION_KEY, *keys}
    missing = sorted(expected - record.keys())
    unknown = sorted(str(key) for key in record.keys() - expected - set(optional))
    if missing or unknown:
        raise BadMetadata(f"{what}: missing fields {missing}, unknown fields {unknown}")
    expect_int(record[VERSION_KEY], f"{what}: format version", version, version)
    return record


def expect_int(value: object, where: str, low: int, high: int) -> int:
    """`value` as an int in [low, high], else `BadMetadata`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadMetadata(f"{where}: expected an integer, found {_kind(value)}")
    if not low <= value <= high:
        raise BadMetadata(f"{where}: {preview(value, 40)} is outside [{low}, {high}]")
    return value


def expect_text(value: object, where: str) -> str:
    """`value` as a non-empty str, else `BadMetadata`."""
    if not isinstance(value, str):
        raise BadMetadata(f"{where}: expected text, found {_kind(value)}")
    if not value:
        raise BadMetadata(f"{where}: empty text")
    return value


def expect_optional_text(value: object, where: str) -> str | None:
    return None if value is None else expect_text(value, where)


def expect_bytes(value: object, where: str) -> bytes:
    if not isinstance(value, bytes):
        raise BadMetadata(f"{where}: expected a byte string, found {_kind(value)}")
    return value


def expect_array(value: object, where: str) -> list[object]:
    if not isinstance(value, list):
        raise BadMetadata(f"{where}: expected an array, found {_kind(value)}")
    return value


def expect_map(value: object, where: str) -> dict[str, object]:
    """`value` as a map with text keys, else `BadMetadata`."""
    if not isinstance(value, dict):
        raise BadMetadata(f"{where}: expected a map, found {_kind(value)}")
    for key in value:
        if not isinstance(key, str):
            raise BadMetadata(f"{where}: map key {preview(key, 40)} is not text")
    return value


def _kind(value: object) -> str:
    return type(value).__name__
