"""Smoke test of bench/spark_bench.py: it runs end to end on a small log (against the session's
ZooKeeper) and its last line is one JSON object of the documented shape.  The numbers are not
checked: benchmarks are compared by people, not tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "spark_bench.py"


def test_spark_bench_prints_one_json_object(zookeeper: LocalZooKeeper, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--commands",
            "3000",
            "--commands-per-entry",
            "10",
            "--zk",
            zookeeper.connect_string,
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "spark"
    assert [item["name"] for item in report["results"]] == [
        "spark-read-arrow",
        "spark-read-tuples",
        "spark-export-parquet",
        "spark-bulk-snapshot",
    ]
    assert [item["name"] for item in report["baselines"]] == [
        "python-decode",
        "python-replay",
        "python-replay-to-snapshot",
    ]
    assert all(item["commands"] == 3000 for item in report["results"] + report["baselines"])
    assert report["config"]["master"] == "local[2]"
    assert set(report["target"]) == {"name", "commands_per_s_min", "commands_per_s", "met"}
    assert report["bulk_snapshot"]["same_state_hash"] is True
    assert set(report["bulk_snapshot"]["bulk_stages_s"]) == {
        "plan",
        "read",
        "sessions",
        "rerun",
        "combine",
        "write",
    }
    assert report["bulk_snapshot"]["bulk_over_replay"] > 0
    assert report["bulk_snapshot"]["bulk_cpu_s"] > 0  # Spark's JVM works, whatever the log
    assert isinstance(report["bulk_snapshot"]["replay_cpu_s"], float)
