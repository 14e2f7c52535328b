"""`bookie serve` and `bookie shell` on bad input that needs no cluster: a config file that is
not UTF-8, ledger ids outside 0..`limits.ledger_id_max`, and output that cannot be written
(a full disk, a reader that left); each is one line on stderr (or none for the reader that
left) and an exit status, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bookie import limits
from bookie.tools import cli

WAIT_S = 60.0
NOT_UTF8 = b'\xff\xfejournal_dir = "/j"\n'  # UTF-16's byte order mark
UTF8_ERROR = "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"


def run_cli(*words: str, stdout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bookie.tools.cli", *words],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def test_a_config_file_that_is_not_utf8_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bookie.toml"
    config.write_bytes(NOT_UTF8)
    assert cli.main(["shell", "readjournal", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"bookie shell readjournal: config file {config} is not valid TOML: {UTF8_ERROR}\n"
    )
    served = run_cli("serve", "--config", str(config), stdout=subprocess.DEVNULL)
    assert served.returncode == 2
    assert "bookie.invalid_config" in served.stderr
    assert UTF8_ERROR in served.stderr
    assert "Traceback" not in served.stderr


@pytest.mark.parametrize(
    "words",
    [
        ["ledgermetadata", "-5"],
        ["ledgermetadata", "99999999999999999999"],
        ["ledgermetadata", str(limits.ledger_id_max + 1)],
        ["readledger", "-1", "--password-file", "pw"],
        ["readentry", "127.0.0.1:1", "-1", "0"],
        ["listentries", "127.0.0.1:1", "-3"],
        ["readjournal", "--journal-dir", ".", "--ledger", "-2"],
    ],
)
def test_ledger_ids_outside_their_range_are_refused_as_arguments(
    words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["shell", *words])
    assert exited.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"bookie shell {words[0]}: error: argument ")
    assert error.endswith(f": ledger ids are 0..{limits.ledger_id_max}")


def test_ledger_id_arguments_span_every_ledger_id() -> None:
    assert cli.ledger_id_argument("0") == 0
    assert cli.ledger_id_argument(str(limits.ledger_id_max)) == limits.ledger_id_max


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_to_a_full_disk_is_one_line_and_status_1(tmp_path: Path) -> None:
    with Path("/dev/full").open("w") as full:
        done = run_cli("shell", "lastmark", "--ledger-dirs", str(tmp_path), stdout=full.fileno())
    assert (done.returncode, done.stderr) == (
        1,
        "bookie shell lastmark: cannot write the output: No space left on device\n",
    )


def test_a_reader_that_left_ends_the_command_quietly(tmp_path: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # the reader has left before the command writes anything
    try:
        done = run_cli("shell", "lastmark", "--ledger-dirs", str(tmp_path), stdout=writer)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (1, "")
