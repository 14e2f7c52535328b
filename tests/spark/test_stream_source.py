"""`spark.readStream.format("rsm-log")`: micro-batches bounded by maxCommandsPerTrigger, and a
query restarted from its checkpoint goes on exactly where it stopped, across a takeover."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.sql import SparkSession

from .frames import parquet_rows
from .history import KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

TIMEOUT_S = 120


def _run_available_now(
    spark: SparkSession, known: KnownCluster, output: Path, checkpoint: Path
) -> list[dict[str, object]]:
    """One `Trigger.AvailableNow` run of the stream into Parquet; its progress reports."""
    query = (
        spark.readStream.format("rsm-log")
        .options(**known.options("stream"))
        .option("maxCommandsPerTrigger", "4")
        .load()
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S)
    assert query.exception() is None
    return [json.loads(progress.json) for progress in query.recentProgress]


def test_a_restarted_stream_reads_every_index_exactly_once(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, tmp_path: Path
) -> None:
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    expected = known.expected["stream"]
    first = _run_available_now(spark, known, output, checkpoint)
    assert parquet_rows(spark, output) == expected.rows
    batches = [p for p in first if p["numInputRows"]]
    assert all(p["numInputRows"] <= 4 for p in batches)
    assert len(batches) == -(-len(expected.rows) // 4)
    end = batches[-1]["sources"][0]["endOffset"]
    assert end == {"index": len(expected.rows) + 1}

    # More commands, a takeover (new segment, new epoch), more commands; then a restart.
    portal.call(known.writers["stream"].append, 3)
    portal.call(known.take_over, "stream")
    portal.call(known.writers["stream"].append, 2)
    _run_available_now(spark, known, output, checkpoint)
    rows = parquet_rows(spark, output)
    assert rows == expected.rows
    assert [row[0] for row in rows] == list(range(1, len(rows) + 1))
    assert {row[1] for row in rows} == {1, 2}
    # The checkpoint holds readable offsets: the next index to read.
    names = [path.name for path in (checkpoint / "offsets").iterdir() if path.name.isdigit()]
    offsets = checkpoint / "offsets" / max(names, key=int)
    last_line = offsets.read_text().strip().splitlines()[-1]
    assert json.loads(last_line) == {"index": len(rows) + 1}
