"""The PySpark data sources `rsm-log` (an application's log) and `ledger` (raw ledgers).

Built on PySpark's Python data source API.  `reader()` checks the options
(`rsm/spark/options.py`); `partitions()` runs on the driver and plans the
read once (`Cluster.plan_log`, `Cluster.plan_ledgers`); `read()` runs on
executors, connects to ZooKeeper and the bookies itself and yields one Arrow
record batch per chunk of entries (tuples with `arrow=false`).  Schemas are
in `rsm/spark/rows.py`.

`spark.readStream.format("rsm-log")` is `LogStreamReader` (below).

Filter pushdown: PySpark refuses to plan a reader that overrides
`pushFilters` while `spark.sql.python.filterPushdown.enabled` is off, so the
log source comes in two classes, and `rsm.spark.register` registers the one
the session's setting allows.  The pushing reader turns `column op literal`
terms on `index`, `epoch`, `ledger_id` and `leader_time` into bounds, which
prune whole segments and entry ranges before partitions are cut and are
applied exactly to every row, so Spark does not apply those terms again.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from rsm.machines import load_machine
from rsm.spark.admission import Admission, batch_end
from rsm.spark.cluster import Cluster, LedgerPartition, LogPartition
from rsm.spark.options import LedgerOptions, LogOptions, ledger_options, log_options
from rsm.spark.planning import Bounds, Interval, Term, bounds_from_terms
from rsm.spark.rows import (
    arrow_schema,
    ledger_columns,
    ledger_record_batch,
    ledger_schema,
    log_columns,
    log_record_batch,
    log_schema,
    log_tuples,
)
from rsm.spark.typed_arguments import TYPED_COLUMN, Typer, typed_struct

LOG_FORMAT = "rsm-log"
LEDGER_FORMAT = "ledger"
OFFSET_KEY = "index"
"""The one key of a streaming offset: the next index to read."""

_OPERATORS: dict[type[Filter], str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}
_UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)


def term(spark_filter: Filter) -> Term | None:
    """The comparison a pushed-down filter makes, if it is one this source can bound."""
    op = _OPERATORS.get(type(spark_filter))
    attribute: tuple[str, ...] = getattr(spark_filter, "attribute", ())
    if op is None or len(attribute) != 1:
        return None
    value: Any = getattr(spark_filter, "value", None)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_UTC)
        delta = value - _EPOCH
        value = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    elif type(value) is not int:
        return None
    return Term(attribute[0], op, value)


# --- rsm-log -----------------------------------------------------------------------------------


def read_log_partition(
    options: LogOptions, schema: StructType, partition: InputPartition
) -> Iterator[Any]:
    """The rows of one planned partition of a log read, batch or streaming (on an executor);
    `schema` is the read's (`log_schema`)."""
    planned = partition.value
    if planned is None:
        return  # PySpark's stand-in when there is nothing to read
    assert isinstance(planned, LogPartition)
    arrow = options.split.arrow
    permissive = options.split.permissive
    typer = None
    if TYPED_COLUMN in schema.names:
        typed = schema[TYPED_COLUMN].dataType
        assert isinstance(typed, StructType)
        typer = Typer(typed, as_tuples=not arrow)
    batch_schema = arrow_schema(schema)
    with Cluster.open(options.cluster) as cluster:
        for chunk in cluster.log_entries(planned, permissive=permissive):
            columns = log_columns(
                chunk,
                planned.segment.ledger_id,
                planned.bounds,
                permissive=permissive,
                typer=typer,
            )
            if not columns[0]:
                continue
            if arrow:
                yield log_record_batch(columns, batch_schema)
            else:
                yield from log_tuples(columns)


def log_source_schema(options: LogOptions) -> StructType:
    """The schema of a read with `options` (on the driver: a `machine` is imported here)."""
    typed = None
    if options.machine is not None:
        typed = typed_struct(load_machine(options.machine))
    return log_schema(options.split.permissive, typed)


class LogReader(DataSourceReader):
    """Reads an application's log; no filter pushdown."""

    def __init__(self, options: LogOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._pushed = Bounds()

    def partitions(self) -> list[InputPartition]:
        options = self._options
        with Cluster.open(options.cluster) as cluster:
            planned = cluster.plan_log(
                options.app,
                options.bounds.meet(self._pushed),
                options.split,
                on_data_loss=options.on_data_loss,
            )
        return [InputPartition(partition) for partition in planned]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_log_partition(self._options, self._schema, partition)


class PushdownLogReader(LogReader):
    """Reads an application's log, with filters on index, epoch, ledger and time pushed down."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        bounds, taken = bounds_from_terms([term(spark_filter) for spark_filter in filters])
        self._pushed = bounds
        kept = set(taken)
        return [
            spark_filter for position, spark_filter in enumerate(filters) if position not in kept
        ]


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Structured Streaming over an application's log.

    An offset is `{"index": N}`: the micro-batch from offset A to offset B
    reads indexes `[A, B)`, so a query restarted from its checkpoint goes on
    at exactly the next index, across segment rollovers and leader changes
    (indexes are dense along the whole log).  The first offset is
    `startingIndex` (default: the log's first index when the query starts);
    the latest is one past the last index readable without fencing.
    `maxCommandsPerTrigger` bounds a micro-batch to that many indexes, unless
    Spark asks for everything (`ReadAllAvailable`); `minCommandsPerTrigger`
    holds a micro-batch back until that many are readable or
    `maxTriggerDelay` passed since the last one (`rsm/spark/admission.py`);
    `Trigger.AvailableNow` reads up to the end readable when the query
    starts, without waiting for a minimum.  With `endingIndex` the stream ends there: no
    offset passes it.  A start below the
    log's first index (truncated away) fails the query, naming the range.
    """

    def __init__(self, options: LogOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._available_now_end: int | None = None
        self._last_batch_s: float | None = None
        """When the last micro-batch was admitted (the driver's monotonic clock)."""

    def _readable_end(self) -> int:
        """One past the last index readable now, capped at `endingIndex`."""
        with Cluster.open(self._options.cluster) as cluster:
            readable = cluster.readable_end(self._options.app)
        ending = self._options.bounds.index.end
        return readable if ending is None else min(readable, ending)

    def initialOffset(self) -> dict[str, int]:
        start = self._options.bounds.index.start
        if start is None:
            with Cluster.open(self._options.cluster) as cluster:
                start = cluster.log(self._options.app).first_index
        return {OFFSET_KEY: start}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self._readable_end()

    def getDefaultReadLimit(self) -> ReadLimit:
        """ReadMaxRows with a maximum, else ReadMinRows with a minimum (which the reader
        applies itself, `rsm/spark/admission.py`), else ReadAllAvailable: Spark passes it
        back to `latestOffset`, or ReadAllAvailable to ask for everything."""
        options = self._options
        if options.max_commands_per_trigger is not None:
            return ReadMaxRows(options.max_commands_per_trigger)
        if options.min_commands_per_trigger is not None:
            return ReadMinRows(options.min_commands_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        first = start[OFFSET_KEY]
        readable = self._readable_end()
        if self._available_now_end is not None:
            readable = min(readable, self._available_now_end)
        options = self._options
        admission = Admission(
            max_commands=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
            min_commands=options.min_commands_per_trigger,
            max_delay_ms=options.max_trigger_delay_ms,
        )
        now_s = time.monotonic()
        if self._last_batch_s is None:
            self._last_batch_s = now_s  # the wait for a first batch starts with the query
        end = batch_end(
            first,
            readable,
            admission,
            waited_ms=(now_s - self._last_batch_s) * 1000,
            everything=isinstance(limit, ReadAllAvailable) or self._available_now_end is not None,
        )
        if end > first:
            self._last_batch_s = now_s
        return {OFFSET_KEY: end}

    def reportLatestOffset(self) -> dict[str, int]:
        return {OFFSET_KEY: self._readable_end()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        options = self._options
        first, stop = start[OFFSET_KEY], end[OFFSET_KEY]
        ending = options.bounds.index.end
        if ending is not None:
            stop = min(stop, ending)
        if first >= stop:
            return []
        bounds = Bounds(index=Interval(first, stop), time_ms=options.bounds.time_ms)
        with Cluster.open(options.cluster) as cluster:
            planned = cluster.plan_log(
                options.app, bounds, options.split, on_data_loss=options.on_data_loss
            )
        return [InputPartition(partition) for partition in planned]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_log_partition(self._options, self._schema, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the checkpoint holds the offsets, and reading holds no resource."""


class LogSource(DataSource):
    """`spark.read.format("rsm-log")`: one row per logged command (rsm/spark/rows.py)."""

    @classmethod
    def name(cls) -> str:
        return LOG_FORMAT

    def schema(self) -> StructType:
        return log_source_schema(log_options(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogReader(log_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogStreamReader(log_options(self.options), schema)


class PushdownLogSource(LogSource):
    def reader(self, schema: StructType) -> DataSourceReader:
        return PushdownLogReader(log_options(self.options), schema)


# --- ledger ------------------------------------------------------------------------------------


class LedgerReader(DataSourceReader):
    """Reads raw ledgers, one row per entry."""

    def __init__(self, options: LedgerOptions) -> None:
        self._options = options

    def partitions(self) -> list[InputPartition]:
        options = self._options
        with Cluster.open(options.cluster) as cluster:
            planned = cluster.plan_ledgers(options.ledger_ids, options.split)
        return [InputPartition(partition) for partition in planned]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        planned = partition.value
        if planned is None:
            return
        assert isinstance(planned, LedgerPartition)
        arrow = self._options.split.arrow
        permissive = self._options.split.permissive
        with Cluster.open(self._options.cluster) as cluster:
            for chunk in cluster.ledger_entries(planned, permissive=permissive):
                columns = ledger_columns(chunk, planned.ledger_id, permissive=permissive)
                if arrow:
                    yield ledger_record_batch(columns)
                else:
                    yield from zip(*columns, strict=True)


class LedgerSource(DataSource):
    """`spark.read.format("ledger")`: one row per ledger entry (rsm/spark/rows.py)."""

    @classmethod
    def name(cls) -> str:
        return LEDGER_FORMAT

    def schema(self) -> StructType:
        return ledger_schema(ledger_options(self.options).split.permissive)

    def reader(self, schema: StructType) -> DataSourceReader:
        return LedgerReader(ledger_options(self.options))
