"""Rows of the Spark sources: their schemas, and decoded entries as Arrow batches or tuples.

`rsm-log`, one row per logged item (a command, or a leader-start marker):

    index          bigint     the item's index in the log (dense, from 1)
    epoch          bigint     the epoch of the leader that logged it
    ledger_id      bigint     the ledger (segment) holding its entry
    entry_id       bigint     the entry holding its batch
    slot           int        its position in the batch (0-based)
    leader_time    timestamp  the batch's timestamp, the leader's clock (UTC, ms precision)
    client_id      binary     its session's client id; null without a session
    client_seq     bigint     its number in that session; null without a session
    client_ack_seq bigint     the highest seq whose answer its client had (every lower one
                              too); null without a session
    command        string     the command key ("name" or "name@version");
                              null for a leader-start marker
    arguments      string     JSON {"args": [...]} plus "kwargs": {...} when it has any;
                              for a marker {"leader_start": replica_id}.  Byte strings are
                              text when they are UTF-8, else {"hex": "..."} (as the
                              `rsm` investigation tools write them); the floats JSON has
                              no number for are the strings "NaN", "Infinity", "-Infinity"
    payload_bytes  bigint     the size of the whole entry (the batch) holding it

`ledger`, one row per entry:

    ledger_id      bigint
    entry_id       bigint
    payload        binary     the entry's payload, its digest verified on the read
    payload_bytes  bigint
    digest         string     "verified"; with mode=PERMISSIVE also "mismatch" (the copies
                              that answered all failed their digest) or "unavailable"
                              (no copy could be served)
    bookies        array<string>  the bookies of the entry's write set

With the option `machine`, `rsm-log` has one more column after
`payload_bytes`, `typed_arguments` (rsm/spark/typed_arguments.py).

With `mode=PERMISSIVE` (rsm/spark/options.py) both sources have one more
column, last, and an entry that cannot be read or decoded is one row:

    _corrupt       string     null for a good row; for an unreadable entry
                              "ledger L entry E (on bookies B, ...) is unreadable: why"

In `rsm-log` that row has only `ledger_id`, `entry_id` and `_corrupt` (its
indexes, epoch and time are unknown, so it is kept whatever the bounds on
them); in `ledger`, `payload` and `payload_bytes` are null.  The default,
`FAILFAST`, fails the read with the same text (`EntryUnreadable`).

Invariant: a batch's Arrow schema equals `arrow_schema(schema)`, which is
what PySpark checks the first batch of each partition against.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from bookie.client.read_handle import LedgerEntry
from rsm.core.log_format import Batch, LeaderStart
from rsm.spark.planning import Bounds
from rsm.spark.typed_arguments import TYPED_COLUMN, Typer


def _struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, data_type, nullable=True) for name, data_type in fields])


LOG_SCHEMA: Final = _struct(
    ("index", LongType()),
    ("epoch", LongType()),
    ("ledger_id", LongType()),
    ("entry_id", LongType()),
    ("slot", IntegerType()),
    ("leader_time", TimestampType()),
    ("client_id", BinaryType()),
    ("client_seq", LongType()),
    ("client_ack_seq", LongType()),
    ("command", StringType()),
    ("arguments", StringType()),
    ("payload_bytes", LongType()),
)
LEDGER_SCHEMA: Final = _struct(
    ("ledger_id", LongType()),
    ("entry_id", LongType()),
    ("payload", BinaryType()),
    ("payload_bytes", LongType()),
    ("digest", StringType()),
    ("bookies", ArrayType(StringType())),
)
DIGEST_VERIFIED: Final = "verified"
DIGEST_MISMATCH: Final = "mismatch"
DIGEST_UNAVAILABLE: Final = "unavailable"
CORRUPT_COLUMN: Final = "_corrupt"


@dataclass(frozen=True, slots=True)
class CorruptEntry:
    """An entry that could not be read or decoded (`mode=PERMISSIVE`)."""

    entry_id: int
    digest: str
    """DIGEST_VERIFIED (its bytes came but are not a batch), DIGEST_MISMATCH or
    DIGEST_UNAVAILABLE."""
    message: str
    """Names the ledger, the entry, the bookies of its write set and why."""


def _permissive(schema: StructType) -> StructType:
    return StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType(), nullable=True)])


_COMPACT: Final = (",", ":")
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=_COMPACT, allow_nan=False)
"""Strict JSON: `_jsonable` writes the floats JSON has no number for as strings."""
_NON_FINITE: Final = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_string: Final = encode_basestring
"""A str as a JSON string (C-accelerated), as `_ENCODER` writes it."""
_ARGS_OPEN: Final = '{"args":['
_ARGS_CLOSE: Final = "]}"
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema PySpark expects of a source's record batches."""
    return to_arrow_schema(schema, timezone="UTC")


LEDGER_SCHEMA_PERMISSIVE: Final = _permissive(LEDGER_SCHEMA)
_LEDGER_ARROW: Final = {
    len(schema.fields): arrow_schema(schema) for schema in (LEDGER_SCHEMA, LEDGER_SCHEMA_PERMISSIVE)
}


def log_schema(permissive: bool, typed: StructType | None = None) -> StructType:
    """LOG_SCHEMA, then `typed_arguments` of type `typed` if given, then `_corrupt` if
    `permissive`."""
    schema = LOG_SCHEMA
    if typed is not None:
        schema = StructType([*schema.fields, StructField(TYPED_COLUMN, typed, nullable=True)])
    return _permissive(schema) if permissive else schema


def ledger_schema(permissive: bool) -> StructType:
    return LEDGER_SCHEMA_PERMISSIVE if permissive else LEDGER_SCHEMA


def _jsonable(value: Any) -> Any:
    if type(value) is bytes:
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"hex": value.hex()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE[repr(value)]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def arguments_json(args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """The `arguments` column of a command."""
    if not kwargs:
        # The common case (a key-value store's commands), without building a dict to encode.
        try:
            return _ARGS_OPEN + ",".join([_string(arg.decode()) for arg in args]) + _ARGS_CLOSE
        except (AttributeError, UnicodeDecodeError):
            pass  # an argument that is not UTF-8 bytes
    value: dict[str, Any] = {"args": _jsonable(args)}
    if kwargs:
        value["kwargs"] = _jsonable(kwargs)
    return _ENCODER.encode(value)


def log_columns(
    entries: Iterable[tuple[int, Batch, int] | CorruptEntry],
    ledger_id: int,
    bounds: Bounds,
    *,
    permissive: bool = False,
    typer: Typer | None = None,
) -> list[list[Any]]:
    """The columns (one list each, in schema order) of the rows of `entries` within `bounds`.

    `leader_time` is in microseconds since the Unix epoch.  A `CorruptEntry` (only read
    with `permissive`) is one row naming it.  With `typer`, the `typed_arguments` column.
    """
    columns: list[list[Any]] = [[] for _ in range(len(LOG_SCHEMA.fields))]
    typed: list[Any] = []
    corrupt: list[str | None] = []
    (
        indexes,
        epochs,
        ledgers,
        entry_ids,
        slots,
        times,
        client_ids,
        seqs,
        acks,
        commands,
        arguments,
        sizes,
    ) = columns
    index_start = bounds.index.start or 1
    index_end = bounds.index.end
    for entry in entries:
        if isinstance(entry, CorruptEntry):
            for column in columns:
                column.append(None)
            ledgers[-1] = ledger_id
            entry_ids[-1] = entry.entry_id
            typed.append(None)
            corrupt.append(entry.message)
            continue
        entry_id, batch, size = entry
        if not (
            bounds.epoch.holds(batch.epoch)
            and bounds.ledger_id.holds(ledger_id)
            and bounds.time_ms.holds(batch.timestamp_ms)
        ):
            continue
        first_index = batch.first_index
        items = batch.items
        low = max(0, index_start - first_index)
        high = len(items) if index_end is None else min(len(items), index_end - first_index)
        if low >= high:
            continue
        count = high - low
        indexes.extend(range(first_index + low, first_index + high))
        epochs.extend([batch.epoch] * count)
        ledgers.extend([ledger_id] * count)
        entry_ids.extend([entry_id] * count)
        slots.extend(range(low, high))
        times.extend([batch.timestamp_ms * 1000] * count)
        sizes.extend([size] * count)
        for item in items[low:high]:
            if isinstance(item, LeaderStart):
                client_ids.append(None)
                seqs.append(None)
                acks.append(None)
                commands.append(None)
                arguments.append(_ENCODER.encode({"leader_start": item.replica_id}))
                if typer is not None:
                    typed.append(None)
            else:
                client_ids.append(item.client_id)
                seqs.append(item.seq)
                acks.append(item.ack_seq)
                commands.append(item.name)
                arguments.append(arguments_json(item.args, item.kwargs))
                if typer is not None:
                    typed.append(typer(item.name, item.args, item.kwargs))
        if permissive:
            corrupt.extend([None] * count)
    if typer is not None:
        columns.append(typed)
    if permissive:
        columns.append(corrupt)
    return columns


def log_record_batch(columns: list[list[Any]], schema: pa.Schema) -> pa.RecordBatch:
    """The rows of `columns` as a batch of `schema` (`arrow_schema` of the read's schema)."""
    return _record_batch(columns, schema)


def _record_batch(columns: list[list[Any]], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)],
        schema=schema,
    )


def log_tuples(columns: list[list[Any]]) -> list[tuple[Any, ...]]:
    """The same rows as tuples (`leader_time` as a datetime), for sources not yielding Arrow."""
    rows = list(zip(*columns, strict=True))
    return [(*row[:5], _datetime(row[5]), *row[6:]) for row in rows]


def _datetime(microseconds: int | None) -> datetime.datetime | None:
    return None if microseconds is None else _EPOCH + datetime.timedelta(microseconds=microseconds)


def ledger_columns(
    entries: Iterable[tuple[LedgerEntry | CorruptEntry, tuple[str, ...]]],
    ledger_id: int,
    *,
    permissive: bool = False,
) -> list[list[Any]]:
    """The columns of the rows of `entries`; a `CorruptEntry` (only read with `permissive`)
    is a row without payload naming it."""
    ids: list[int] = []
    payloads: list[bytes | None] = []
    digests: list[str] = []
    bookies: list[list[str]] = []
    corrupt: list[str | None] = []
    for entry, holders in entries:
        ids.append(entry.entry_id)
        bookies.append(list(holders))
        if isinstance(entry, CorruptEntry):
            payloads.append(None)
            digests.append(entry.digest)
            corrupt.append(entry.message)
        else:
            payloads.append(entry.payload)
            digests.append(DIGEST_VERIFIED)
            corrupt.append(None)
    columns: list[list[Any]] = [
        [ledger_id] * len(ids),
        ids,
        payloads,
        [None if payload is None else len(payload) for payload in payloads],
        digests,
        bookies,
    ]
    if permissive:
        columns.append(corrupt)
    return columns


def ledger_record_batch(columns: list[list[Any]]) -> pa.RecordBatch:
    return _record_batch(columns, _LEDGER_ARROW[len(columns)])
