"""Streaming admission: minCommandsPerTrigger holds micro-batches back until maxTriggerDelay, and
Trigger.AvailableNow reads everything without waiting for the minimum."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.sql import SparkSession

from .frames import parquet_rows
from .history import KnownCluster
from .kv_log import kv_commands, kv_writer

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

TIMEOUT_S = 120
COMMANDS = 60


@pytest.fixture(scope="module")
def app(known: KnownCluster, portal: BlockingPortal) -> Iterator[tuple[str, int]]:
    """An application whose log holds COMMANDS commands; its name and last index."""
    with kv_writer(known.zk, known.ledger_root, portal, "admitted-kv") as writer:
        portal.call(writer.segment, kv_commands(COMMANDS, seed=6))
        yield writer.app, writer.index - 1


def _stream(spark: SparkSession, known: KnownCluster, app: str, **options: str) -> Any:
    return (
        spark.readStream.format("rsm-log")
        .options(zk=known.zk, ledgerRoot=known.ledger_root, app=app, **options)
        .load()
    )


def test_available_now_reads_everything_though_the_minimum_is_never_reached(
    spark: SparkSession, known: KnownCluster, app: tuple[str, int], tmp_path: Path
) -> None:
    name, last = app
    query = (
        _stream(spark, known, name, minCommandsPerTrigger="1000", maxCommandsPerTrigger="25")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S)
    assert query.exception() is None
    rows = parquet_rows(spark, tmp_path / "out")
    assert [row[0] for row in rows] == list(range(1, last + 1))
    batches = [json.loads(p.json)["numInputRows"] for p in query.recentProgress]
    assert [count for count in batches if count] == [25, 25, last - 50]


def test_a_minimum_holds_batches_back_until_the_delay(
    spark: SparkSession, known: KnownCluster, app: tuple[str, int], tmp_path: Path
) -> None:
    name, last = app
    delay_s = 6.0  # well past what starting the query takes, so only the hold explains it
    started = time.monotonic()
    query = (
        _stream(spark, known, name, minCommandsPerTrigger="1000", maxTriggerDelay="6s")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        deadline = started + TIMEOUT_S
        counts: list[int] = []
        while not any(counts) and time.monotonic() < deadline:
            query.awaitTermination(0.2)  # a bounded wait for the next progress reports
            counts = [json.loads(p.json)["numInputRows"] for p in query.recentProgress]
        waited_s = time.monotonic() - started
    finally:
        query.stop()
    assert query.exception() is None
    assert [count for count in counts if count] == [last], "one batch, once the delay passed"
    assert waited_s >= delay_s
