"""The PySpark data sources `rsm-log` (an application's log) and `ledger` (raw ledgers).

Built on PySpark's Python data source API.  `reader()` checks the options
(`rsm/spark/options.py`); `partitions()` runs on the driver and plans the
read once (`Cluster.plan_log`, `Cluster.plan_ledgers`); `read()` runs on
executors, connects to ZooKeeper and the bookies itself and yields one Arrow
record batch per chunk of entries (tuples with `arrow=false`).  Schemas are
in `rsm/spark/rows.py`.

Filter pushdown: PySpark refuses to plan a reader that overrides
`pushFilters` while `spark.sql.python.filterPushdown.enabled` is off, so each
source comes in two classes, and `rsm.spark.register` registers the one the
session's setting allows.  The pushing reader turns `column op literal`
terms on `index`, `epoch`, `ledger_id` and `leader_time` into bounds, which
prune whole segments and entry ranges before partitions are cut and are
applied exactly to every row, so Spark does not apply those terms again.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from rsm.spark.cluster import Cluster, LedgerPartition, LogPartition
from rsm.spark.options import LedgerOptions, LogOptions, ledger_options, log_options
from rsm.spark.planning import Bounds, Term, bounds_from_terms
from rsm.spark.rows import (
    LEDGER_SCHEMA,
    LOG_SCHEMA,
    ledger_columns,
    ledger_record_batch,
    log_columns,
    log_record_batch,
    log_tuples,
)

LOG_FORMAT = "rsm-log"
LEDGER_FORMAT = "ledger"

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


class LogReader(DataSourceReader):
    """Reads an application's log; no filter pushdown."""

    def __init__(self, options: LogOptions) -> None:
        self._options = options
        self._pushed = Bounds()

    def partitions(self) -> list[InputPartition]:
        options = self._options
        with Cluster.open(options.cluster) as cluster:
            planned = cluster.plan_log(
                options.app, options.bounds.meet(self._pushed), options.split
            )
        return [InputPartition(partition) for partition in planned]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        planned = partition.value
        if planned is None:
            return  # PySpark's stand-in when there is nothing to read
        assert isinstance(planned, LogPartition)
        arrow = self._options.split.arrow
        with Cluster.open(self._options.cluster) as cluster:
            for chunk in cluster.log_entries(planned):
                columns = log_columns(chunk, planned.segment.ledger_id, planned.bounds)
                if not columns[0]:
                    continue
                if arrow:
                    yield log_record_batch(columns)
                else:
                    yield from log_tuples(columns)


class PushdownLogReader(LogReader):
    """Reads an application's log, with filters on index, epoch, ledger and time pushed down."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        bounds, taken = bounds_from_terms([term(spark_filter) for spark_filter in filters])
        self._pushed = bounds
        kept = set(taken)
        return [
            spark_filter for position, spark_filter in enumerate(filters) if position not in kept
        ]


class LogSource(DataSource):
    """`spark.read.format("rsm-log")`: one row per logged command (rsm/spark/rows.py)."""

    @classmethod
    def name(cls) -> str:
        return LOG_FORMAT

    def schema(self) -> StructType:
        return LOG_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogReader(log_options(self.options))


class PushdownLogSource(LogSource):
    def reader(self, schema: StructType) -> DataSourceReader:
        return PushdownLogReader(log_options(self.options))


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
        with Cluster.open(self._options.cluster) as cluster:
            for chunk in cluster.ledger_entries(planned):
                columns = ledger_columns(chunk, planned.ledger_id)
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
        return LEDGER_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return LedgerReader(ledger_options(self.options))
