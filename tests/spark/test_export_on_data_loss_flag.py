"""`rsm spark export --on-data-loss snapshot`: an incremental export whose next index the log
truncated away goes on from the log's first index when a snapshot covers the gap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rsm.spark.jobs import STATE_FILE
from rsm.tools import cli

from .frames import parquet_rows
from .history import KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]


def test_the_export_command_takes_on_data_loss(
    spark: SparkSession, known: KnownCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = known.apps["truncated"]  # indexes [3, 50) truncated away, a snapshot at 49
    path = tmp_path / "export"
    path.mkdir()
    record = {"v": 1, "app": app, "block_commands": 10, "next_index": 3}
    (path / STATE_FILE).write_text(json.dumps(record))
    command = [
        *("spark", "export", "--zk", known.zk, "--ledger-root", known.ledger_root),
        *("--app", app, "--to", str(path), "--since-last", "--master", "local[2]"),
    ]

    assert cli.main(command) == 1
    assert "error: Truncated: indexes [3, 50)" in capsys.readouterr().err
    assert cli.main([*command, "--on-data-loss", "snapshot"]) == 0

    assert parquet_rows(spark, path) == known.expected["truncated"].rows
    assert json.loads((path / STATE_FILE).read_text())["next_index"] == (
        known.expected["truncated"].rows[-1][0] + 1
    )
