"""DataFrames of the sources as plain tuples, comparable with tests/spark/history.py's rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

BLOCK_COLUMN = "index_from"


def rows_of(frame: DataFrame) -> list[tuple[Any, ...]]:
    """The `rsm-log` rows as tuples in schema order, leader_time in milliseconds, by index."""
    columns = [
        "unix_millis(leader_time)" if name == "leader_time" else name
        for name in frame.columns
        if name != BLOCK_COLUMN
    ]
    rows = [
        (*row[:6], None if row[6] is None else bytes(row[6]), *row[7:])
        for row in frame.selectExpr(*columns).collect()
    ]
    return sorted(rows, key=lambda row: row[0])


def parquet_rows(spark: SparkSession, path: Path) -> list[tuple[Any, ...]]:
    """The rows of a Parquet export, as `rows_of` gives them (without `index_from`)."""
    return rows_of(spark.read.parquet(str(path)))
