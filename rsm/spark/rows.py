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
                              `rsm` investigation tools write them)
    payload_bytes  bigint     the size of the whole entry (the batch) holding it

`ledger`, one row per entry:

    ledger_id      bigint
    entry_id       bigint
    payload        binary     the entry's payload, its digest verified on the read
    payload_bytes  bigint
    digest         string     "verified" (an entry whose digest fails on every copy
                              fails the read, naming it)
    bookies        array<string>  the bookies of the entry's write set

Invariant: a batch's Arrow schema equals `arrow_schema(schema)`, which is
what PySpark checks the first batch of each partition against.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
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
_COMPACT: Final = (",", ":")
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=_COMPACT)
_string: Final = encode_basestring
"""A str as a JSON string (C-accelerated), as `_ENCODER` writes it."""
_ARGS_OPEN: Final = '{"args":['
_ARGS_CLOSE: Final = "]}"
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema PySpark expects of a source's record batches."""
    return to_arrow_schema(schema, timezone="UTC")


_LOG_ARROW: Final = arrow_schema(LOG_SCHEMA)
_LEDGER_ARROW: Final = arrow_schema(LEDGER_SCHEMA)


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
    entries: Iterable[tuple[int, Batch, int]], ledger_id: int, bounds: Bounds
) -> list[list[Any]]:
    """The columns (one list each, in schema order) of the rows of `entries` within `bounds`.

    `leader_time` is in microseconds since the Unix epoch.
    """
    columns: list[list[Any]] = [[] for _ in range(len(LOG_SCHEMA.fields))]
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
    for entry_id, batch, size in entries:
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
            else:
                client_ids.append(item.client_id)
                seqs.append(item.seq)
                acks.append(item.ack_seq)
                commands.append(item.name)
                arguments.append(arguments_json(item.args, item.kwargs))
    return columns


def log_record_batch(columns: list[list[Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(column, type=field.type)
            for column, field in zip(columns, _LOG_ARROW, strict=True)
        ],
        schema=_LOG_ARROW,
    )


def log_tuples(columns: list[list[Any]]) -> list[tuple[Any, ...]]:
    """The same rows as tuples (`leader_time` as a datetime), for sources not yielding Arrow."""
    rows = list(zip(*columns, strict=True))
    return [(*row[:5], _EPOCH + datetime.timedelta(microseconds=row[5]), *row[6:]) for row in rows]


def ledger_columns(
    entries: Iterable[tuple[LedgerEntry, tuple[str, ...]]], ledger_id: int
) -> list[list[Any]]:
    ids: list[int] = []
    payloads: list[bytes] = []
    bookies: list[list[str]] = []
    for entry, holders in entries:
        ids.append(entry.entry_id)
        payloads.append(entry.payload)
        bookies.append(list(holders))
    count = len(ids)
    return [
        [ledger_id] * count,
        ids,
        payloads,
        [len(payload) for payload in payloads],
        [DIGEST_VERIFIED] * count,
        bookies,
    ]


def ledger_record_batch(columns: list[list[Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(column, type=field.type)
            for column, field in zip(columns, _LEDGER_ARROW, strict=True)
        ],
        schema=_LEDGER_ARROW,
    )
