"""A state of hundreds of MB is snapshotted and restored as a stream: neither side holds a
second copy of it (peak memory measured in separate processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[4]
MEGABYTES = 256
SLACK_BYTES = 64 * 1024 * 1024
"""Memory allowed beyond the state itself: buffers, one record, allocator noise."""


def child(*arguments: str) -> dict[str, Any]:
    finished = subprocess.run(
        [sys.executable, "-m", "tests.unit.rsm.snapshots.large_state_child", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    report: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.slow
def test_a_large_state_streams_without_a_second_copy(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.bin"
    written = child("write", str(snapshot), str(MEGABYTES))
    assert written["snapshot_bytes"] > MEGABYTES * 1024 * 1024
    # Writing: a few records and chunks at a time, never the whole stream.
    assert written["snapshot_overhead_bytes"] < SLACK_BYTES
    restored = child("read", str(snapshot))
    assert restored["keys"] == MEGABYTES * 1024
    # Reading: the state being rebuilt, plus far less than another copy of it.
    assert restored["restore_bytes"] < written["state_bytes"] + SLACK_BYTES
    assert restored["restore_bytes"] < written["state_bytes"] + written["snapshot_bytes"] // 4
