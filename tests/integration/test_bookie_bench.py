"""Smoke test of bench/bookie_bench.py: it runs end to end (briefly, against the session's
ZooKeeper) and its last line is one JSON object of the shape docs/operations.md ("Benchmark") gives.
The numbers themselves are not checked: benchmarks are compared by people, not tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bookie_bench.py"
TIMEOUT_S = 120


def test_bench_prints_one_json_object(zookeeper: LocalZooKeeper, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--seconds",
            "1",
            "--zk",
            zookeeper.connect_string,
            "--data-dir",
            str(tmp_path),
            "--window",
            "50",
            "--connections",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "bookie"
    assert report["config"]["seconds"] == 1.0
    assert report["config"]["window"] == 50
    names = [item["name"] for item in report["results"]]
    assert names == ["add-100B", "add-1KiB"]
    for item in report["results"]:
        assert item["ops_per_s"] > 0
        assert 0 < item["p50_ms"] <= item["p99_ms"] <= item["p999_ms"]
    baselines = {item["name"]: item for item in report["baselines"]}
    assert set(baselines) == {"fdatasync-100B", "group-commit-loop-100B"}
    assert all(item["ops_per_s"] > 0 for item in baselines.values())
    metrics = report["metrics"]
    assert [(run["name"], run["metrics"]) for run in metrics["runs"]] == [
        ("add-100B", "off"),
        ("add-100B", "on"),
        ("add-1KiB", "off"),
        ("add-1KiB", "on"),
    ]
    assert set(metrics["on_over_off_ops"]) == {"add-100B", "add-1KiB"}
    assert set(metrics["on_over_off_bookie_cpu_per_op"]) == {"add-100B", "add-1KiB"}
    assert metrics["scrapes"] >= 2, "each metrics-on run is scraped at least once"
    tls = report["tls"]
    assert [(run["name"], run["tls"]) for run in tls["runs"]] == [
        ("add-100B", "off"),
        ("add-100B", "on"),
        ("add-1KiB", "off"),
        ("add-1KiB", "on"),
    ]
    assert all(run["ops_per_s"] > 0 for run in tls["runs"])
    assert set(tls["on_over_off_ops"]) == {"add-100B", "add-1KiB"}
    assert list(tmp_path.iterdir()) == [], "the benchmark cleans up after itself"
