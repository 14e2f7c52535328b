"""What an investigation command does when its output cannot be written: a full disk is one
error line, a reader that left (`| head`) ends it quietly; never a traceback, and nothing
more when the interpreter exits."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from rsm.core.log_state import Segment, SegmentState
from rsm.tools.export_format import ExportWriter
from tests.unit.rsm.tools.test_export_format import HEADER, entry


def exported() -> bytes:
    """A log of one segment, two entries of two commands each."""
    stream = io.BytesIO()
    segment = Segment(7, 1, 1, SegmentState.CLOSED, 4)
    writer = ExportWriter(stream, replace(HEADER, segments=(segment,), last_index=4))
    writer.add(entry(7, 0, 1, 2))
    writer.add(entry(7, 1, 3, 2))
    writer.finish()
    return stream.getvalue()


def dump(log: Path, stdout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsm.tools.cli", "log", "dump", "--log", str(log)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_full_disk_is_one_error_line(tmp_path: Path) -> None:
    log = tmp_path / "notes.rsmlog"
    log.write_bytes(exported())
    with open("/dev/full", "wb") as full:
        done = dump(log, full.fileno())
    assert (done.returncode, done.stderr) == (
        1,
        "error: OSError: [Errno 28] No space left on device\n",
    )


def test_a_reader_that_left_ends_it_quietly(tmp_path: Path) -> None:
    log = tmp_path / "notes.rsmlog"
    log.write_bytes(exported())
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write gets EPIPE
    try:
        done = dump(log, write_end)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")
