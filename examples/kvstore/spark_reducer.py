"""The key-value store's Spark reducer (`KVStore.spark_reducer`): its state computed by key.

For logs of the commands `kvstore.store.reduction` accepts (each confined to
the keys it names, no TTLs), the state after an index is, key by key, what
that key's own commands make of it, applied in index order.  Keys fall in
two kinds, decided in Spark SQL from the `arguments` column (parsed in the
JVM, `args` an array of strings):

* a **blind** command is a SET of exactly a key and a value, an MSET of
  pairs, or a DEL or UNLINK whose outcome the session table does not keep,
  with every key and value within the store's bounds, no keyword argument
  and no argument written as `{"hex": ...}` (the store logs only byte
  strings): it sets or deletes its keys whatever they held.  A **simple**
  key is one only blind commands name; every other key is **complex** (so
  every key that is not UTF-8 is complex, and so is a UTF-8 key whose text
  is that of one).
* Simple keys are reduced in the JVM, by one aggregation over the commands'
  (index, position of the key among the command's keys) "ops", each
  ordered by one number, `at` = index * 2^20 + position (a blind command
  names fewer than 2^20 keys): a key's value is its last set's, its
  version that set's index; it was created by its first set after its last
  delete; when its last op deletes it, its
  tombstone is the first delete after its last set (none if it never held
  a value); a key whose sets and deletes interleave takes one more
  aggregation, over such keys only.  Only the final records reach Python.
* Complex keys are reduced in Python: every row naming one (and every
  command that is not blind naming no key, so that an unreducible one is
  refused) goes to the parts owning its complex keys, part
  `crc32(key) mod P` (P twice Spark's default parallelism; a row naming
  no key goes to part 0).  Each Spark partition applies its rows in index
  order, once per index, to one fresh `KVStore` through
  `rsm.spark.apply_logged` (the replicas' apply, at the command's logged
  index, time and epoch), skipping what the session table did not let
  through, and gives back, per complex key of its parts, its value,
  version and creation (index, position) or its tombstone (index,
  position); per deletion, one count; and the outcomes the session table
  keeps (for DEL and UNLINK, the count of owned keys each deleted, summed
  on the driver).  Why that is exact: a key's commands all reach its
  part, in log order, and nothing else changes a key (no TTL, no
  multi-key move); a multi-key command is applied whole, so it validates
  all its arguments the same everywhere, and only the owned keys are kept.
* The outcomes the table keeps of blind commands (SET and MSET) do not
  depend on the state: the driver applies each to an empty store.

The driver then builds the state: `values` and `versions` in the order
replay inserted them (by creation index, then position among the
command's keys), `tombstones` in deletion order the same way, no TTLs; the
derived indexes and the hash are rebuilt by `restore`'s own
`_rebuild_derived`.  A command the reducer does not accept fails the job
with `NotReducible`, as do more deletions than
`limits.watch_tombstones_max`, past which replay forgets tombstones in an
order that depends on every key.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any, Final

import cbor2
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from kvstore import limits
from kvstore.state_machine import KVStore
from kvstore.store.reduction import (
    EVERY_ARGUMENT,
    EVERY_OTHER_ARGUMENT,
    SINGLE_KEY,
    command_keys,
)
from rsm.errors import NotReducible
from rsm.spark import Outcome, Reduced, ReduceRequest, apply_logged, byte_arguments

KEY: Final = "key"
TOMBSTONE: Final = "tombstone"
OUTCOME: Final = "outcome"
DELETIONS: Final = "deletions"
SET_OP: Final = "s"
DELETE_OP: Final = "d"

_HEX_ARGUMENT: Final = '{"hex":'
"""How the `arguments` column starts a byte string that is not UTF-8."""
_ARGS_END: Final = "]}"
"""How the `arguments` column of a command without keyword arguments ends."""
_POSITIONS: Final = 1 << 20
"""`at` = index * _POSITIONS + position: a blind command names fewer keys."""
_ROW_COLUMNS: Final = ("index", "time_ms", "epoch", "command", "arguments")
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
        StructField("position", LongType()),
        StructField("created", LongType()),
        StructField("count", LongType()),
    ]
)
_FOLDED_ARROW: Final = to_arrow_schema(_FOLDED)


def reduce(request: ReduceRequest) -> Reduced:
    """The state after `request.last_index` (see the module docstring)."""
    log = request.log
    spark = log.sparkSession
    commands = _commands(log, spark, request.skipped, request.wanted)
    ops = _ops(commands)
    simple = _SimpleKeys()
    complex_keys: set[str] = set()
    keyless = False
    for summary in _summaries(ops):
        key = summary["key"]
        if summary["complex"]:
            if key is None:
                keyless = True
            else:
                complex_keys.add(key)
        elif key is not None:
            simple.add(summary)
    if simple.interleaved:
        simple.resolve(ops)
    keys, tombstones = simple.keys, simple.tombstones
    outcomes = _blind_outcomes(log, spark, request.wanted)
    deletions = 0
    complex_frame = spark.createDataFrame(
        pa.table({"key": pa.array(sorted(complex_keys), pa.string())})
    )
    if complex_keys or keyless:
        rows = _complex_rows(commands, ops, complex_frame)
        folded = _fold_complex(rows, frozenset(complex_keys), request.skipped, request.wanted)
        deletions = _gather(folded, keys, tombstones, outcomes)
    if deletions + simple.delete_ops > limits.watch_tombstones_max:
        deletions += _exact_deletions(ops.join(F.broadcast(complex_frame), "key", "left_anti"))
    if deletions > limits.watch_tombstones_max:
        raise NotReducible(
            f"{deletions} deletions, more than {limits.watch_tombstones_max}: the key-value "
            "store's reducer does not reduce the order in which WATCH forgets them (replay does)"
        )
    machine = KVStore()
    keys.sort()
    machine.values = {key: value for _created, _position, key, value, _version in keys}
    machine.versions = {key: version for _created, _position, key, _value, version in keys}
    tombstones.sort()
    machine.tombstones = {key: (index, None) for index, _position, key in tombstones}
    machine._rebuild_derived()
    return Reduced(machine, outcomes)


def _commands(
    log: DataFrame, spark: SparkSession, skipped: frozenset[int], wanted: frozenset[int]
) -> DataFrame:
    """The command rows the session table let through, with their parsed `args`, their
    `keys` (null for a command `command_keys` refuses) and whether they are `blind`."""
    commands = log.where(F.col("command").isNotNull()).select(
        "index",
        F.unix_millis("leader_time").alias("time_ms"),
        "epoch",
        "command",
        "arguments",
        F.from_json("arguments", "args ARRAY<STRING>")["args"].alias("args"),
    )
    if skipped:
        commands = commands.join(F.broadcast(_indexes(spark, skipped)), "index", "left_anti")
    wanted_frame = _indexes(spark, wanted).withColumn("wanted", F.lit(True))
    commands = commands.join(F.broadcast(wanted_frame), "index", "left_outer")
    command, args = F.col("command"), F.col("args")
    keys = (
        F.when(command.isin(*SINGLE_KEY), F.slice(args, 1, 1))
        .when(command.isin(*EVERY_ARGUMENT), args)
        .when(command.isin(*EVERY_OTHER_ARGUMENT), F.filter(args, lambda _item, i: i % 2 == 0))
    )
    return commands.select(
        *_ROW_COLUMNS, "args", keys.alias("keys"), _blind(command, args).alias("blind")
    )


def _blind(command: Column, args: Column) -> Column:
    """Whether a command row is blind (see the module docstring)."""
    count = F.size(args)

    def fits(column: Column, bound: int) -> Column:
        return F.octet_length(column) <= bound

    pair_fits = fits(F.try_element_at(args, F.lit(1)), limits.key_bytes_max_default) & fits(
        F.try_element_at(args, F.lit(2)), limits.value_bytes_max_default
    )
    pairs_fit = F.forall(
        F.filter(args, lambda _item, i: i % 2 == 0),
        lambda key: fits(key, limits.key_bytes_max_default),
    ) & F.forall(
        F.filter(args, lambda _item, i: i % 2 == 1),
        lambda value: fits(value, limits.value_bytes_max_default),
    )
    blind = (
        F.when((command == "set") & (count == 2), pair_fits)
        .when(
            command.isin(*EVERY_OTHER_ARGUMENT),
            (count >= 2) & (count % 2 == 0) & (count < _POSITIONS) & pairs_fit,
        )
        .when(command.isin(*EVERY_ARGUMENT), F.col("wanted").isNull() & (count < _POSITIONS))
        .otherwise(F.lit(False))
    )
    arguments = F.col("arguments")
    plain = ~arguments.contains(_HEX_ARGUMENT) & arguments.endswith(_ARGS_END)
    return F.coalesce(blind & plain, F.lit(False))


def _indexes(spark: SparkSession, indexes: Iterable[int]) -> DataFrame:
    return spark.createDataFrame(pa.table({"index": pa.array(sorted(indexes), pa.int64())}))


def _ops(commands: DataFrame) -> DataFrame:
    """One row per key a command names (`key` null for a command naming none): its command's
    `index`, its `op`, set or delete, at `at` (`_at`; in order for a blind command's keys);
    a set's `value`."""
    command, args = F.col("command"), F.col("args")
    return commands.select(
        "index",
        "blind",
        F.posexplode_outer("keys").alias("position", "key"),
        "command",
        "args",
    ).select(
        "index",
        "blind",
        "key",
        (F.col("index") * _POSITIONS + F.coalesce(F.col("position"), F.lit(0))).alias("at"),
        F.when(command.isin(*EVERY_ARGUMENT), DELETE_OP).otherwise(SET_OP).alias("op"),
        F.when(command == "set", F.try_element_at(args, F.lit(2)))
        .when(
            command.isin(*EVERY_OTHER_ARGUMENT), F.try_element_at(args, 2 * F.col("position") + 2)
        )
        .alias("value"),
    )


def _at(at: int) -> tuple[int, int]:
    """The (index, position among its command's keys) of an op at `at`."""
    return divmod(at, _POSITIONS)


def _when(op: str) -> Column:
    """`at` for an op of kind `op`, else null."""
    return F.when(F.col("op") == op, F.col("at"))


def _summaries(ops: DataFrame) -> list[dict[str, Any]]:
    """Per key (null: the commands naming none), one aggregation: whether it is `complex`,
    its first and last set and delete (`at`), its last set's value and its count of delete
    ops."""
    sets, deletes = _when(SET_OP), _when(DELETE_OP)
    summary = ops.groupBy("key").agg(
        F.max((~F.col("blind")).cast("int")).alias("complex"),
        F.max_by("value", sets).alias("value"),
        F.count(deletes).alias("deletes"),
        F.min(sets).alias("first_set"),
        F.max(sets).alias("last_set"),
        F.min(deletes).alias("first_delete"),
        F.max(deletes).alias("last_delete"),
    )
    table: pa.Table = summary.toArrow()
    summaries: list[dict[str, Any]] = table.to_pylist()
    return summaries


class _SimpleKeys:
    """The simple keys' records, from their summaries: a key whose sets and deletes
    interleave (a delete between two sets, or a set between two deletes, where it matters)
    waits for `resolve`."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int, bytes, bytes, int]] = []
        """(creation index, position, key, value, version)."""
        self.tombstones: list[tuple[int, int, bytes]] = []
        """(deletion index, position, key)."""
        self.delete_ops = 0
        """A bound on their deletions."""
        self.interleaved: dict[str, dict[str, Any]] = {}
        """Key -> summary, for `resolve`."""

    def add(self, summary: dict[str, Any]) -> None:
        key = summary["key"]
        self.delete_ops += summary["deletes"]
        last_set, last_delete = summary["last_set"], summary["last_delete"]
        if last_set is None:
            return  # never held a value: its deletes deleted nothing
        if last_delete is None or last_delete < summary["first_set"]:
            self._value(summary, summary["first_set"])
        elif last_delete > last_set and summary["first_delete"] > last_set:
            self.tombstones.append((*_at(summary["first_delete"]), key.encode()))
        else:
            self.interleaved[key] = summary

    def _value(self, summary: dict[str, Any], created: int) -> None:
        version, _position = _at(summary["last_set"])
        self.keys.append(
            (*_at(created), summary["key"].encode(), summary["value"].encode(), version)
        )

    def resolve(self, ops: DataFrame) -> None:
        """The interleaved keys' creation (the first set after their last delete) or
        tombstone (the first delete after their last set), in one more aggregation."""
        interleaved = self.interleaved.values()
        bounds = ops.sparkSession.createDataFrame(
            pa.table(
                {
                    name: pa.array([summary[name] for summary in interleaved], type)
                    for name, type in (
                        ("key", pa.string()),
                        ("last_set", pa.int64()),
                        ("last_delete", pa.int64()),
                    )
                }
            )
        )
        at = F.col("at")
        found = (
            ops.join(F.broadcast(bounds), "key")
            .groupBy("key")
            .agg(
                F.min(F.when(at > F.col("last_delete"), _when(SET_OP))).alias("created"),
                F.min(F.when(at > F.col("last_set"), _when(DELETE_OP))).alias("buried"),
            )
        )
        for row in found.toArrow().to_pylist():
            summary = self.interleaved[row["key"]]
            if summary["last_set"] > summary["last_delete"]:
                self._value(summary, row["created"])
            else:
                self.tombstones.append((*_at(row["buried"]), row["key"].encode()))
        self.interleaved = {}


def _complex_rows(commands: DataFrame, ops: DataFrame, complex_frame: DataFrame) -> DataFrame:
    """The command rows naming a complex key, and those not blind naming none."""
    naming = ops.join(F.broadcast(complex_frame), "key", "left_semi").select("index").distinct()
    return commands.where(
        ~F.col("blind") & F.coalesce(F.size("keys") <= 0, F.lit(True))
    ).unionByName(commands.join(naming, "index", "left_semi"))


def _exact_deletions(simple: DataFrame) -> int:
    """How many of the simple keys' delete ops deleted a value (a set came just before)."""
    previous = F.lag("op").over(Window.partitionBy("key").orderBy("at"))
    return (
        simple.where(F.col("key").isNotNull())
        .select("op", previous.alias("previous"))
        .where((F.col("op") == DELETE_OP) & (F.col("previous") == SET_OP))
        .count()
    )


def _blind_outcomes(
    log: DataFrame, spark: SparkSession, wanted: frozenset[int]
) -> dict[int, Outcome]:
    """The outcomes the session table keeps of blind commands: each applied to an empty
    store, since they do not depend on the state (the others' come from `_fold`)."""
    outcomes: dict[int, Outcome] = {}
    if not wanted:
        return outcomes
    rows = (
        _commands(
            log.join(F.broadcast(_indexes(spark, wanted)), "index", "left_semi"),
            spark,
            frozenset(),
            wanted,
        )
        .where(F.col("blind"))
        .select(*_ROW_COLUMNS)
        .collect()
    )
    for row in rows:
        index = row["index"]
        args = byte_arguments(row["arguments"], index)
        outcomes[index] = apply_logged(
            KVStore(),
            row["command"],
            args,
            {},
            index=index,
            time_ms=row["time_ms"],
            epoch=row["epoch"],
        )
    return outcomes


def _fold_complex(
    rows: DataFrame, complex_keys: frozenset[str], skipped: frozenset[int], wanted: frozenset[int]
) -> list[Any]:
    """What the Spark partitions give back for the complex keys (see the module docstring)."""
    parts = 2 * rows.sparkSession.sparkContext.defaultParallelism

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns: dict[str, list[Any]] = {field.name: [] for field in _ROUTED}
            for row in batch.to_pylist():
                keys = command_keys(
                    row["command"], byte_arguments(row["arguments"], row["index"]), row["index"]
                )
                owned = {_part(key, parts) for key in keys if _is_complex(key, complex_keys)}
                for part in sorted(owned or {0}):
                    columns["part"].append(part)
                    for name in _ROW_COLUMNS:
                        columns[name].append(row[name])
            yield pa.RecordBatch.from_pydict(columns)

    def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = (row for batch in batches for row in batch.to_pylist())
        yield pa.RecordBatch.from_pylist(
            list(_fold(rows, parts, complex_keys, skipped, wanted)), schema=_FOLDED_ARROW
        )

    return (
        rows.select(*_ROW_COLUMNS)
        .mapInArrow(route, _ROUTED)
        .repartition(parts, "part")
        .sortWithinPartitions("index")
        .mapInArrow(fold, _FOLDED)
        .collect()
    )


def _is_complex(key: bytes, complex_keys: frozenset[str]) -> bool:
    """Whether `key` is complex: not UTF-8 (a hex argument), or its text is a complex key."""
    try:
        return key.decode() in complex_keys
    except UnicodeDecodeError:
        return True


def _part(key: bytes, parts: int) -> int:
    return zlib.crc32(key) % parts


def _fold(
    rows: Iterator[dict[str, Any]],
    parts: int,
    complex_keys: frozenset[str],
    skipped: frozenset[int],
    wanted: frozenset[int],
) -> Iterator[dict[str, Any]]:
    """What one Spark partition gives back (see the module docstring)."""
    machine = KVStore()
    values = machine.values
    owned: set[bytes] = set()
    created: dict[bytes, tuple[int, int]] = {}
    buried: dict[bytes, int] = {}
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
        mine: dict[bytes, int] = {}
        for position, key in enumerate(command_keys(command, args, index)):
            if _part(key, parts) in here and _is_complex(key, complex_keys):
                mine.setdefault(key, position)
        before = [key in values for key in mine]
        outcome = apply_logged(
            machine, command, args, {}, index=index, time_ms=row["time_ms"], epoch=row["epoch"]
        )
        gone = 0
        for (key, position), existed in zip(mine.items(), before, strict=True):
            owned.add(key)
            exists = key in values
            if exists and not existed:
                created[key] = (index, position)
            elif existed and not exists:
                buried[key] = position
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
            index, position = created[key]
            yield _row(
                KEY,
                key=key,
                value=values[key],
                index=machine.versions[key],
                position=position,
                created=index,
            )
        elif key in machine.tombstones:
            index, expired_at_ms = machine.tombstones[key]
            assert expired_at_ms is None  # no TTLs
            yield _row(TOMBSTONE, key=key, index=index, position=buried[key])
    yield _row(DELETIONS, count=deletions)


def _row(
    kind: str,
    *,
    key: bytes | None = None,
    value: bytes | None = None,
    index: int | None = None,
    position: int | None = None,
    created: int | None = None,
    count: int | None = None,
) -> dict[str, Any]:
    return {
        "kind": kind,
        "key": key,
        "value": value,
        "index": index,
        "position": position,
        "created": created,
        "count": count,
    }


def _gather(
    folded: list[Any],
    keys: list[tuple[int, int, bytes, bytes, int]],
    tombstones: list[tuple[int, int, bytes]],
    outcomes: dict[int, Outcome],
) -> int:
    """Add the complex keys' records of `folded` to `keys`, `tombstones` and `outcomes`; how
    many deletions they made."""
    counts: dict[int, int] = {}
    deletions = 0
    for row in folded:
        kind = row["kind"]
        if kind == KEY:
            keys.append(
                (
                    row["created"],
                    row["position"],
                    bytes(row["key"]),
                    bytes(row["value"]),
                    row["index"],
                )
            )
        elif kind == TOMBSTONE:
            tombstones.append((row["index"], row["position"], bytes(row["key"])))
        elif kind == OUTCOME:
            outcome = Outcome.from_plain(cbor2.loads(bytes(row["value"])))
            index = row["index"]
            if row["count"] is not None and outcome.ok:
                counts[index] = counts.get(index, 0) + row["count"]
            outcomes.setdefault(index, outcome)
        else:
            deletions += row["count"]
    for index, count in counts.items():
        outcomes[index] = outcomes[index]._replace(value=count)
    return deletions
