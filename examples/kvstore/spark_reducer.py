"""The key-value store's Spark reducer (`KVStore.spark_reducer`): its state computed by key.

For logs of the commands `kvstore.store.reduction` accepts (each confined to
the keys it names, no TTLs), the state after an index is, key by key, what
that key's own commands make of it, applied in index order.  So:

1. Every command row goes to the parts owning its keys: part
   `crc32(key) mod P`, P twice Spark's default parallelism (a row naming
   no key goes to part 0: it fails and changes nothing).  A command the
   reducer does not accept fails the job with `NotReducible`.
2. Spark partitions the rows by part and sorts each partition by index.
   Each partition applies its rows, once per index, to one fresh `KVStore`
   through `rsm.spark.apply_logged` (the replicas' apply, at the command's
   logged index, time and epoch), skipping what the session table did not
   let through.  The keys it owns (those of its parts) then hold what
   replay gives them: their commands all came, in order, and nothing else
   touches a key (the other keys it holds, changed by the multi-key
   commands it applied whole, are dropped).  It gives back, per owned key,
   its value, its version and the index that last created it; per owned
   deleted key, its tombstone; per owned deletion, one count; and the
   outcomes the session table keeps (for DEL and UNLINK, the count of
   owned keys each deleted, summed on the driver).
3. The driver builds the state: `values` and `versions` in the order
   replay inserted them (by creation index), `tombstones` in deletion order
   (`forgotten_index` 0), no TTLs; the derived indexes and the hash are
   rebuilt by `restore`'s own `_rebuild_derived`.

Refused as well (`NotReducible`): more deletions than
`limits.watch_tombstones_max`, past which replay forgets tombstones in an
order that depends on every key.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, Final

import cbor2
import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from kvstore import limits
from kvstore.state_machine import KVStore
from kvstore.store.reduction import EVERY_ARGUMENT, command_keys
from rsm.errors import NotReducible
from rsm.spark import Outcome, Reduced, ReduceRequest, apply_logged, byte_arguments

KEY: Final = "key"
TOMBSTONE: Final = "tombstone"
OUTCOME: Final = "outcome"
DELETIONS: Final = "deletions"

_ROUTED = StructType(
    [
        StructField("part", LongType()),
        StructField("index", LongType()),
        StructField("time_ms", LongType()),
        StructField("epoch", LongType()),
        StructField("command", StringType()),
        StructField("arguments", StringType()),
    ]
)
_FOLDED = StructType(
    [
        StructField("kind", StringType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("index", LongType()),
        StructField("created", LongType()),
        StructField("count", LongType()),
    ]
)
_FOLDED_ARROW: Final = to_arrow_schema(_FOLDED)


def reduce(request: ReduceRequest) -> Reduced:
    """The state after `request.last_index` (see the module docstring)."""
    log = request.log
    parts = 2 * log.sparkSession.sparkContext.defaultParallelism
    routed = log.where(F.col("command").isNotNull()).select(
        "index",
        F.unix_millis("leader_time").alias("time_ms"),
        "epoch",
        "command",
        "arguments",
    )
    skipped, wanted = request.skipped, request.wanted

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns: dict[str, list[Any]] = {field.name: [] for field in _ROUTED}
            for row in batch.to_pylist():
                keys = command_keys(
                    row["command"], byte_arguments(row["arguments"], row["index"]), row["index"]
                )
                for part in sorted({_part(key, parts) for key in keys} or {0}):
                    columns["part"].append(part)
                    for name in ("index", "time_ms", "epoch", "command", "arguments"):
                        columns[name].append(row[name])
            yield pa.RecordBatch.from_pydict(columns)

    def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = (row for batch in batches for row in batch.to_pylist())
        yield pa.RecordBatch.from_pylist(
            list(_fold(rows, parts, skipped, wanted)), schema=_FOLDED_ARROW
        )

    folded = (
        routed.mapInArrow(route, _ROUTED)
        .repartition(parts, "part")
        .sortWithinPartitions("index")
        .mapInArrow(fold, _FOLDED)
        .collect()
    )
    return _assemble(folded)


def _part(key: bytes, parts: int) -> int:
    return zlib.crc32(key) % parts


def _fold(
    rows: Iterator[dict[str, Any]], parts: int, skipped: frozenset[int], wanted: frozenset[int]
) -> Iterator[dict[str, Any]]:
    """What one Spark partition gives back (see the module docstring, step 2)."""
    machine = KVStore()
    values = machine.values
    owned: set[bytes] = set()
    created: dict[bytes, int] = {}
    deletions = 0
    pending: list[dict[str, Any]] = []

    def apply(group: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        nonlocal deletions
        row = group[0]
        index = row["index"]
        if index in skipped:
            return
        command = row["command"]
        args = byte_arguments(row["arguments"], index)
        here = {member["part"] for member in group}
        mine = [
            key
            for key in dict.fromkeys(command_keys(command, args, index))
            if _part(key, parts) in here
        ]
        before = [key in values for key in mine]
        outcome = apply_logged(
            machine, command, args, {}, index=index, time_ms=row["time_ms"], epoch=row["epoch"]
        )
        gone = 0
        for key, existed in zip(mine, before, strict=True):
            owned.add(key)
            exists = key in values
            if exists and not existed:
                created[key] = index
            elif existed and not exists:
                gone += 1
        deletions += gone
        if index in wanted:
            count = gone if command in EVERY_ARGUMENT else None
            yield _row(OUTCOME, index=index, value=cbor2.dumps(outcome.to_plain()), count=count)

    for row in rows:
        if pending and pending[0]["index"] != row["index"]:
            yield from apply(pending)
            pending = []
        pending.append(row)
    if pending:
        yield from apply(pending)
    if machine.tombstones_forgotten_index:
        raise NotReducible(
            f"more than {limits.watch_tombstones_max} deletions: the key-value store's reducer "
            "does not reduce the order in which WATCH forgets them (replay does)"
        )
    for key in owned:
        if key in values:
            yield _row(
                KEY, key=key, value=values[key], index=machine.versions[key], created=created[key]
            )
        elif key in machine.tombstones:
            index, expired_at_ms = machine.tombstones[key]
            assert expired_at_ms is None  # no TTLs
            yield _row(TOMBSTONE, key=key, index=index)
    yield _row(DELETIONS, count=deletions)


def _row(
    kind: str,
    *,
    key: bytes | None = None,
    value: bytes | None = None,
    index: int | None = None,
    created: int | None = None,
    count: int | None = None,
) -> dict[str, Any]:
    return {
        "kind": kind,
        "key": key,
        "value": value,
        "index": index,
        "created": created,
        "count": count,
    }


def _assemble(folded: list[Any]) -> Reduced:
    """The driver's step 3 (see the module docstring)."""
    keys: list[tuple[int, bytes, bytes, int]] = []
    tombstones: list[tuple[int, bytes]] = []
    outcomes: dict[int, Outcome] = {}
    counts: dict[int, int] = {}
    deletions = 0
    for row in folded:
        kind = row["kind"]
        if kind == KEY:
            keys.append((row["created"], bytes(row["key"]), bytes(row["value"]), row["index"]))
        elif kind == TOMBSTONE:
            tombstones.append((row["index"], bytes(row["key"])))
        elif kind == OUTCOME:
            outcome = Outcome.from_plain(cbor2.loads(bytes(row["value"])))
            index = row["index"]
            if row["count"] is not None and outcome.ok:
                counts[index] = counts.get(index, 0) + row["count"]
            outcomes.setdefault(index, outcome)
        else:
            deletions += row["count"]
    if deletions > limits.watch_tombstones_max:
        raise NotReducible(
            f"{deletions} deletions, more than {limits.watch_tombstones_max}: the key-value "
            "store's reducer does not reduce the order in which WATCH forgets them (replay does)"
        )
    for index, count in counts.items():
        outcomes[index] = outcomes[index]._replace(value=count)
    machine = KVStore()
    keys.sort()
    machine.values = {key: value for _created, key, value, _version in keys}
    machine.versions = {key: version for _created, key, _value, version in keys}
    tombstones.sort()
    machine.tombstones = {key: (index, None) for index, key in tombstones}
    machine._rebuild_derived()
    return Reduced(machine, outcomes)
