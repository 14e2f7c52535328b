"""Smoke test of bench/replay_bench.py: it runs end to end on a small log (against the
session's ZooKeeper) and its last line is one JSON object with its configuration, its
results and the baseline measured in the same run.  The numbers are not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "replay_bench.py"
TIMEOUT_S = 240


def test_bench_prints_one_json_object(zookeeper: LocalZooKeeper, tmp_path: Path) -> None:
    words = ["--commands", "20000", "--snapshot-every", "5000", "--batch", "100"]
    words += ["--to-samples", "2", "--zk", zookeeper.connect_string, "--data-dir", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, str(BENCH), *words],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["benchmark"] == "replay"
    assert report["config"]["commands"] == 20_000
    assert report["config"]["snapshots"] == 4
    names = [entry["name"] for entry in report["results"]]
    assert names == ["replay-bookies", "export", "replay-file", "replay-to", "replay-to-cli"]
    assert [entry["name"] for entry in report["baselines"]] == ["python-loop"]
    assert report["results"][-1]["from_snapshot"] is not None
