"""Smoke test of bench/kvstore_bench.py: it runs end to end (briefly, against the session's
ZooKeeper) and its last line is one JSON object of the shape docs/operations.md ("Benchmark") gives.
The numbers themselves are not checked: benchmarks are compared by people, not tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from tests.integration.support.tools import required_tool

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "kvstore_bench.py"
TIMEOUT_S = 300
QUICK_RATE_SEARCH = (
    "--pysyncobj-probe-seconds", "1", "--pysyncobj-rate-max", "2000",
    "--pysyncobj-resolution", "1000",
)  # fmt: skip
"""PySyncObj's own method, cut to two short probes: the row is there, not its value."""


def test_bench_prints_one_json_object(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    required_tool("redis-benchmark")
    required_tool("redis-server")
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--seconds",
            "0.5",
            "--clients",
            "10",
            "--pipeline",
            "4",
            "--rounds",
            "2",
            "--zk",
            zookeeper.connect_string + zk_root,
            "--data-dir",
            str(tmp_path),
            "--metrics-rounds",
            "1",
            *QUICK_RATE_SEARCH,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "kvstore"
    names = {entry["name"] for entry in report["results"]}
    assert names == {"SET", "GET", "SET-P4", "GET-P4", "via-follower-SET", "via-follower-GET"}
    baselines = {entry["name"] for entry in report["baselines"]}
    assert baselines == {
        "redis-fsync-SET",
        "redis-fsync-GET",
        "redis-fsync-SET-P4",
        "redis-fsync-GET-P4",
        "minimal-python-SET",
        "minimal-python-GET",
        "minimal-python-SET-P4",
        "minimal-python-GET-P4",
        "pysyncobj-own-method-100B",
        "pysyncobj-ReplDict-SET",
        "pysyncobj-ReplDict-SET-tuned",
    }
    for entry in report["results"] + report["baselines"]:
        assert entry["ops_per_s"] > 0, entry
        if entry["name"] != "pysyncobj-own-method-100B":
            assert entry["p50_ms"] is not None
            assert entry["p99_ms"] is not None
    assert report["ratios"]["set_vs_pysyncobj"] > 0
    metrics = report["metrics"]
    assert sorted((run["name"], run["metrics"]) for run in metrics["runs"]) == [
        ("GET", "off"),
        ("GET", "on"),
        ("SET", "off"),
        ("SET", "on"),
    ]
    assert metrics["scrapes"] > 0
    assert set(metrics["on_over_off_ops"]) == {"SET", "GET"}
    assert all(ratio > 0 for ratio in metrics["on_over_off_leader_cpu_per_request"].values())
    assert report["ratios"]["get_vs_minimal_python"] > 0
    # The store's runs and its peers' alternate, two rounds each; the reported run is one of
    # them.
    for entry in report["results"] + report["baselines"]:
        if not entry["name"].startswith("pysyncobj"):
            assert len(entry["rounds_ops_per_s"]) == 2, entry
            assert entry["ops_per_s"] in entry["rounds_ops_per_s"]
    # Each redis-benchmark run says where the CPU went: every serving process by role.
    for entry in report["results"]:
        cpu = entry["cpu_us_per_request"]
        assert set(cpu) == {"leader", "followers", "bookies", "redis_benchmark", "machine_busy_pct"}
        assert cpu["leader"] > 0, entry
        assert len(cpu["followers"]) == 2, entry
        assert len(cpu["bookies"]) == 3, entry
        assert min(cpu["followers"] + cpu["bookies"] + [cpu["redis_benchmark"]]) >= 0, entry
        assert cpu["machine_busy_pct"] > 0, entry
    for entry in report["baselines"]:
        if entry["name"].startswith("redis-fsync"):
            cpu = entry["cpu_us_per_request"]
            assert set(cpu) == {"redis_server", "redis_benchmark", "machine_busy_pct"}, entry
            assert cpu["redis_server"] >= 0, entry
        if entry["name"].startswith("minimal-python"):
            cpu = entry["cpu_us_per_request"]
            assert set(cpu) == {"minimal_server", "redis_benchmark", "machine_busy_pct"}, entry
            assert cpu["minimal_server"] > 0, entry
    assert set(report["targets"]) <= set(report["ratios"])
    assert isinstance(report["meets_targets"], bool)
