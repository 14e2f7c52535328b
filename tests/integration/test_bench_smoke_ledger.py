"""Smoke test of bench/ledger_bench.py: it runs end to end (a second per configuration,
against the session's ZooKeeper) and its last line is one JSON object of the documented
shape.  The numbers themselves are not checked: benchmarks are compared by people, not
tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ledger_bench.py"
TIMEOUT_S = 120
WRITES = [
    "write-E3-Qw3-Qa2-100B",
    "write-E3-Qw3-Qa2-1KiB",
    "write-E3-Qw2-Qa2-100B",
    "write-E3-Qw2-Qa2-1KiB",
]


def test_ledger_bench_prints_one_json_object(zookeeper: LocalZooKeeper, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--seconds",
            "1",
            "--window",
            "200",
            "--zk",
            zookeeper.connect_string,
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "ledger"
    assert report["config"]["seconds"] == 1.0
    assert report["config"]["window"] == 200
    assert report["config"]["fsync"] is True
    results = {item["name"]: item for item in report["results"]}
    assert list(results) == [*WRITES, "read-sequential-E3-Qw3-Qa2-1KiB"]
    for name in WRITES:
        item = results[name]
        assert item["ops_per_s"] > 0
        assert 0 < item["p50_ms"] <= item["p99_ms"] <= item["p999_ms"]
    read = results["read-sequential-E3-Qw3-Qa2-1KiB"]
    assert read["entries"] > 0
    assert read["entries_per_s"] > 0
    assert read["mb_per_s"] > 0
    baselines = {item["name"]: item for item in report["baselines"]}
    assert set(baselines) == {"fdatasync-100B", "single-bookie-1KiB"}
    assert all(item["ops_per_s"] > 0 for item in baselines.values())
    target = report["target"]
    assert target["name"] == "write-E3-Qw3-Qa2-1KiB"
    assert target["ops_per_s"] == results["write-E3-Qw3-Qa2-1KiB"]["ops_per_s"]
    assert target["met"] == (target["ops_per_s"] >= target["ops_per_s_min"])
    assert list(tmp_path.iterdir()) == [], "the benchmark cleans up after itself"
