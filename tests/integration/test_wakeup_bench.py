"""Smoke test of bench/wakeup_bench.py: it runs end to end (2,000 round trips) and
prints one JSON object: the two-core run, the one-core baseline, on the cores it says.  The
numbers are not checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "wakeup_bench.py"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="compares two cores with one")
def test_bench_prints_one_json_object() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--round-trips", "2000"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["benchmark"] == "wakeup"
    assert report["config"]["round_trips"] == 2000
    [two_cores] = report["results"]
    [one_core] = report["baselines"]
    assert one_core["cpus"][0] == one_core["cpus"][1]
    assert two_cores["cpus"][0] != two_cores["cpus"][1]
    for run in (two_cores, one_core):
        assert run["round_trip_us"] > 0
        assert set(run["cpu_us_per_round_trip"]) == {"sender", "echo"}
    assert report["ratios"]["sender_cpu_two_cores_vs_one"] > 0
