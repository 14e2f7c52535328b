"""Smoke test of bench/machine_loss_bench.py: one short trial end to end against the session's
ZooKeeper, and its last line is one JSON object of the shape docs/operations.md ("Benchmark")
gives.  The numbers themselves are not checked beyond being there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "machine_loss_bench.py"
TIMEOUT_S = 300


def test_bench_prints_one_json_object(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--trials",
            "1",
            "--seconds",
            "0.5",
            "--clients",
            "4",
            "--session-timeout-ms",
            "2000",
            "--zk",
            zookeeper.connect_string + zk_root,
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "machine_loss"
    assert report["config"]["session_timeout_ms"] == 2000
    [trial] = report["results"]
    assert trial["name"] == "trial-1"
    assert report["baselines"][0]["ops_per_s"] == report["before_ops_per_s"]
    assert trial["first_write_s"] > 0
    assert trial["before_ops_per_s"] > 0
    assert trial["degraded_ops_per_s"] > 0
    assert trial["segment_while_down"] in ("degraded", "ensemble_change_deferred")
    assert set(report["first_write_s"]) == {"p50", "p99", "max"}
    assert report["degraded_vs_before"] > 0
