"""Child process of test_large_state: build, snapshot or restore a large state, and report
how much memory that took (peak resident set size), as one JSON line on stdout.

    python -m tests.unit.rsm.snapshots.large_state_child write FILE MEGABYTES
    python -m tests.unit.rsm.snapshots.large_state_child read FILE

`write` builds a KV-like state of about MEGABYTES of values, measures the memory it
takes, then streams its snapshot chunk by chunk into FILE (each chunk length-prefixed)
and measures the peak again.  `read` restores FILE chunk by chunk into a fresh state
and reports the peak.  A separate process per side, so each peak is its own.
"""

from __future__ import annotations

import json
import resource
import struct
import sys
from pathlib import Path

from sortedcontainers import SortedDict  # type: ignore[import-untyped]

from rsm.core.sessions import SessionTable
from rsm.core.snapshot_format import (
    SECTION_STATE,
    FrameworkDecoder,
    SnapshotHeader,
    SnapshotReader,
)
from rsm.core.snapshot_state import StateDecoder
from rsm.core.state_machine import StateMachine
from rsm.snapshots.capture import CaptureResult, stream_snapshot

VALUE_BYTES = 1024
LENGTH = struct.Struct(">I")


class Big(StateMachine):
    def __init__(self) -> None:
        self.values: SortedDict = SortedDict()
        self.expiry: dict[bytes, int] = {}


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write(path: Path, megabytes: int) -> dict[str, int]:
    baseline = peak_bytes()
    machine = Big()
    for key in range(megabytes * 1024 * 1024 // VALUE_BYTES):
        name = key.to_bytes(8, "big")
        machine.values[name] = bytes([key % 251]) * VALUE_BYTES
        if key % 10 == 0:
            machine.expiry[name] = key
    built = peak_bytes()
    header = SnapshotHeader("big", 1, 0, 1, None, "big:Big", "default", 0, 0, "r", 0)
    written = 0
    with path.open("wb") as file:
        for item in stream_snapshot(machine, header, SessionTable(), 1 << 20):
            if isinstance(item, CaptureResult):
                file.write(LENGTH.pack(0))
                break
            file.write(LENGTH.pack(len(item)))
            file.write(item)
            written += len(item)
    return {
        "state_bytes": built - baseline,
        "snapshot_overhead_bytes": peak_bytes() - built,
        "snapshot_bytes": written,
    }


def read(path: Path) -> dict[str, int]:
    baseline = peak_bytes()
    machine = Big()
    reader = SnapshotReader()
    framework = FrameworkDecoder()
    decoder = StateDecoder(machine)
    with path.open("rb") as file:
        while length := LENGTH.unpack(file.read(LENGTH.size))[0]:
            section, data = reader.take(file.read(length))
            if section == SECTION_STATE:
                decoder.feed(data)
            else:
                framework.feed(data)
    decoder.finish()
    framework.finish()
    return {"restore_bytes": peak_bytes() - baseline, "keys": len(machine.values)}


def main() -> None:
    command, path = sys.argv[1], Path(sys.argv[2])
    report = write(path, int(sys.argv[3])) if command == "write" else read(path)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
