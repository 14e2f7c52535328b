"""Smoke test of bench/rsm_bench.py: it runs end to end (briefly, against the session's
ZooKeeper, PySyncObj baseline included) and its last line is one JSON object of the shape
docs/operations.md ("Benchmark") gives.  The numbers themselves are not checked:
benchmarks are compared by people, on a quiet machine, not by tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "rsm_bench.py"
TIMEOUT_S = 240
QUICK_RATE_SEARCH = (
    "--pysyncobj-probe-seconds", "1", "--pysyncobj-rate-max", "2000",
    "--pysyncobj-resolution", "1000", "--in-process-rate-max", "2000",
)  # fmt: skip
"""PySyncObj's own method (and the framework's in-process row by it), cut to two short probes:
the rows are there, not their values."""


def test_bench_prints_one_json_object(zookeeper: LocalZooKeeper, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--seconds",
            "1",
            "--clients",
            "8",
            "--handoffs",
            "1",
            "--zk",
            zookeeper.connect_string,
            "--data-dir",
            str(tmp_path),
            *QUICK_RATE_SEARCH,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    # The bench's own output says why it failed; CalledProcessError would drop it.
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-4000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "rsm"
    assert report["config"]["clients"] == 8
    results = {item["name"]: item for item in report["results"]}
    assert list(results) == [
        "add-100B",
        "handoff",
        "failover",
        "framework-own-method-in-process-100B",
    ]
    throughput = results["add-100B"]
    assert throughput["ops_per_s"] > 0
    assert 0 < throughput["p50_ms"] <= throughput["p99_ms"] <= throughput["p999_ms"]
    assert throughput["consistent"]
    assert results["handoff"]["max_ms"] is not None
    assert results["failover"]["ms"] > 0
    in_process = results["framework-own-method-in-process-100B"]
    assert in_process["ops_per_s"] > 0
    assert [step["rate"] for step in in_process["search"]][:1] == [500]
    assert set(report["vs_pysyncobj_own_method"]) == {
        "add-100B_vs_pysyncobj",
        "in_process_vs_pysyncobj",
    }
    assert report["target"] == {"in_process_vs_pysyncobj": 1.2}
    own, waiting = report["baselines"]
    assert own["name"] == "pysyncobj-own-method-100B"
    assert own["ops_per_s"] > 0
    assert [step["rate"] for step in own["search"]][:1] == [500]
    assert waiting["name"] == "pysyncobj-add-100B-callers-waiting"
    assert waiting["ops_per_s"] > 0
