"""Smoke test of bench/recovery_bench.py: it runs end to end on a small history and its last
line is one JSON object of the shape docs/operations.md ("Benchmark") gives.  The
numbers are for people on a quiet machine; only their presence and sanity are checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "recovery_bench.py"
TIMEOUT_S = 240


def test_bench_prints_one_json_object() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--commands", "20000", "--keys", "2000", "--tail", "100"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "recovery"
    assert report["config"]["commands"] == 20_000
    results = {item["name"]: item["value"] for item in report["results"]}
    assert results["replay_ready_s"] > 0
    assert results["snapshot_ready_s"] > 0
    assert results["snapshot_bytes"] > 2_000 * 100
    assert results["disk_before_bytes"] > 0
    assert results["disk_after_bytes"] > 0
    assert results["snapshot_write_mb_per_s"] > 0
    assert results["snapshot_load_mb_per_s"] > 0
