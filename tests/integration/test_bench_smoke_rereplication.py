"""Smoke test of bench/rereplication_bench.py: it runs end to end on a little data (against
the session's ZooKeeper) and its last line is one JSON object of the documented shape.  The
numbers themselves are not checked: benchmarks are compared by people, not tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "rereplication_bench.py"
TIMEOUT_S = 120


def test_rereplication_bench_prints_one_json_object(zookeeper: LocalZooKeeper) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--megabytes",
            "1",
            "--ledgers",
            "2",
            "--sizes",
            "1024",
            "--seconds",
            "60",
            "--kv-seconds",
            "1",
            "--zk",
            zookeeper.connect_string,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "rereplication"
    assert report["config"]["sizes"] == [1024]
    item, kvstore = report["results"]
    assert kvstore["name"] == "kvstore-writes-during-rereplication"
    assert kvstore["ledgers_marked"] >= 1
    assert kvstore["before_ops_per_s"] > 0
    assert kvstore["during_vs_before"] is not None
    assert item["name"] == "rereplicate-1024B"
    assert item["entries_copied"] > 0
    assert 0 < item["copy_s"] <= item["kill_to_replicated_s"]
    assert item["mb_per_s"] > 0
    assert report["target"]["value"] == 20.0
