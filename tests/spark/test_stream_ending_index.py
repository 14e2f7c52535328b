"""A stream of `rsm-log` with `endingIndex` stops there, as the batch read does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.sql import SparkSession

from .frames import parquet_rows
from .history import KnownCluster
from .kv_log import kv_commands, kv_writer

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

TIMEOUT_S = 120


@pytest.mark.parametrize("max_commands", [None, "4"])
def test_a_stream_with_an_ending_index_stops_there(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    tmp_path: Path,
    max_commands: str | None,
) -> None:
    app = f"stream-ending-{max_commands}-{os.getpid()}"
    with kv_writer(known.zk, known.ledger_root, portal, app) as writer:
        portal.call(writer.segment, kv_commands(60, seed=5))
    assert writer.index > 40
    reader = (
        spark.readStream.format("rsm-log")
        .option("zk", known.zk)
        .option("ledgerRoot", known.ledger_root)
        .option("app", app)
        .option("startingIndex", "10")
        .option("endingIndex", "30")
    )
    if max_commands is not None:
        reader = reader.option("maxCommandsPerTrigger", max_commands)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S)
    assert query.exception() is None

    assert [row[0] for row in parquet_rows(spark, output)] == list(range(10, 30))
