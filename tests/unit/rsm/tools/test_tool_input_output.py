"""The investigation commands on an exported log of four commands: a range or an argument
that does not exist is a usage error (exit 2, one line), never an empty answer; an output
that cannot be written is one error line (a full disk, a directory), and a reader that
left (`| head`) ends it quietly; never a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rsm.core.log_state import Segment, SegmentState
from rsm.tools import cli
from rsm.tools.export_format import ExportWriter
from rsm.tools.options import EXIT_USAGE
from tests.unit.rsm.tools.test_export_format import HEADER, entry

HEADER_OF_FOUR = replace(HEADER, segments=(Segment(7, 1, 1, SegmentState.CLOSED, 4),), last_index=4)
"""The header of a log of one segment of four commands."""


def exported() -> bytes:
    """A log of one segment, two entries of two commands each."""
    stream = io.BytesIO()
    writer = ExportWriter(stream, HEADER_OF_FOUR)
    writer.add(entry(7, 0, 1, 2))
    writer.add(entry(7, 1, 3, 2))
    writer.finish()
    return stream.getvalue()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "notes.rsmlog"
    path.write_bytes(exported())
    return path


def dump(log: Path, stdout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsm.tools.cli", "log", "dump", "--log", str(log)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_full_disk_is_one_error_line(log: Path) -> None:
    with open("/dev/full", "wb") as full:
        done = dump(log, full.fileno())
    assert (done.returncode, done.stderr) == (
        1,
        "error: OSError: [Errno 28] No space left on device\n",
    )


def test_a_reader_that_left_ends_it_quietly(log: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write gets EPIPE
    try:
        done = dump(log, write_end)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")


PAST_THE_END = "error: InvalidConfig: index 9 is past the log's readable end, index 4\n"
CLASS = ("--class", "rsm.testing.workload:AuditCounter")


@pytest.mark.parametrize(
    "words",
    [
        ("log", "dump", "--from", "9"),
        ("log", "dump", "--to", "9"),
        ("log", "export", "--to", "out.rsmlog", "--from", "9"),
        ("log", "export", "--to", "out.rsmlog", "--through", "9"),
        ("replay", *CLASS, "--to", "9"),
        ("replay", *CLASS, "--break-at", "9"),
        ("verify", *CLASS, "--to", "9"),
        ("bisect", "--old", CLASS[1], "--new", CLASS[1], "--to", "9"),
        ("determinism", *CLASS, "--to", "9"),
        ("blame", "--class", "kvstore.state_machine:KVStore", "key", "--from", "9"),
    ],
    ids=" ".join,
)
def test_a_range_past_the_end_is_a_usage_error(
    words: tuple[str, ...],
    log: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(log.parent)  # where an export would go if it were not refused
    assert cli.main([*words, "--log", str(log)]) == EXIT_USAGE
    assert capsys.readouterr().err == PAST_THE_END


def test_a_break_past_the_replay_s_end_is_a_usage_error(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", *CLASS, "--to", "3", "--break-at", "4", "--log", str(log)]
    assert cli.main(argv) == EXIT_USAGE
    assert capsys.readouterr().err == "error: InvalidConfig: --break-at 4 is past --to 3\n"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--last", "-3", "is not a count of at least 1"),
        ("--limit", "0", "is not a count of at least 1"),
        ("--session", "zz", "is not a client id in hex"),
    ],
)
def test_bad_dump_arguments_are_refused(
    option: str, value: str, message: str, log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["log", "dump", "--log", str(log), option, value])
    assert exited.value.code == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_an_export_to_a_directory_is_refused_and_leaves_nothing(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "existing"
    target.mkdir()
    assert cli.main(["log", "export", "--log", str(log), "--to", str(target)]) == EXIT_USAGE
    assert (
        capsys.readouterr().err
        == f"error: InvalidConfig: cannot write {target}: it is a directory\n"
    )
    unwritable = tmp_path / "notes.rsmlog" / "inside"  # under a file: cannot be made
    assert cli.main(["log", "export", "--log", str(log), "--to", str(unwritable)]) == EXIT_USAGE
    assert "Not a directory" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["existing", "notes.rsmlog"]


def test_an_export_no_snapshot_covers_says_it_cannot_be_replayed(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = tmp_path / "whole.rsmlog"
    assert cli.main(["log", "export", "--log", str(log), "--to", str(whole), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["replayable"] is True
    part = tmp_path / "part.rsmlog"
    argv = ["log", "export", "--log", str(log), "--to", str(part), "--from", "3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "note: no snapshot is at an index from 2 to 4" in out
    assert cli.main(["log", "dump", "--log", str(part)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3, "a header and its two commands"


@pytest.mark.parametrize("stdin", ["q\n", ""], ids=["q", "end of input"])
def test_quitting_the_debugger_ends_the_replay_quietly(log: Path, stdin: str) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "rsm.tools.cli", "replay", *CLASS),
            *("--to", "3", "--break-at", "2", "--log", str(log)),
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "stopped before index 2 " in done.stdout
    assert "replayed" not in done.stdout


def test_a_log_without_state_hashes_says_how_to_get_them(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["verify", *CLASS, "--log", str(log)]) == 0
    assert capsys.readouterr().out == (
        "notes: the log carries no state hash up to index 4, so nothing was checked (replicas "
        "log one every 100,000 commands by default; `rsm run --state-hash-every N` logs them "
        "more often)\n"
    )


@pytest.mark.parametrize(
    "words",
    [("log", "dump"), ("replay", *CLASS), ("log", "export", "--to", "copy.rsmlog")],
    ids=" ".join,
)
def test_an_entry_that_does_not_follow_the_previous_one_is_a_problem(
    words: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second entry's batch says it starts at index 5 (its frame in the file says 3, as the
    ledger's position would): the tools stop there with an error, never reading past."""
    stream = io.BytesIO()
    writer = ExportWriter(stream, HEADER_OF_FOUR)
    writer.add(entry(7, 0, 1, 2))
    writer.add(replace(entry(7, 1, 3, 2), payload=entry(7, 1, 5, 2).payload))
    writer.finish()
    gapped = tmp_path / "gapped.rsmlog"
    gapped.write_bytes(stream.getvalue())
    monkeypatch.chdir(tmp_path)
    assert cli.main([*words, "--log", str(gapped)]) == 1
    assert capsys.readouterr().err == (
        "error: MalformedValue: ledger 7 entry 1 starts at index 5; the previous entry ended "
        "at 2 (`rsm log check` lists every such problem)\n"
    )
