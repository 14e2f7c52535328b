"""The `bookie` commands' ledger-password flags: from the command line or from a file."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bookie.errors import InvalidConfig
from bookie.tools.password_flags import add_password_arguments, password_from

WAIT_S = 60.0


def parsed(*words: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_password_arguments(parser, what="the ledger's password")
    return parser.parse_args(words)


@pytest.mark.parametrize(
    ("content", "password"),
    [
        (b"secret\n", b"secret"),
        (b"secret\r\n", b"secret"),
        (b"secret", b"secret"),
        (b"two\nlines\n", b"two\nlines"),
        (b"ends in spaces  \n\n", b"ends in spaces  \n"),
        (b"", b""),
    ],
)
def test_a_password_file_gives_its_bytes_without_one_line_end(
    tmp_path: Path, content: bytes, password: bytes
) -> None:
    path = tmp_path / "password"
    path.write_bytes(content)
    assert password_from(parsed("--password-file", str(path))) == password


def test_the_command_lines_password_and_none() -> None:
    assert password_from(parsed("--password", "secret")) == b"secret"
    assert password_from(parsed()) is None


def test_a_password_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(InvalidConfig, match=r"--password-file .*missing.*No such file"):
        password_from(parsed("--password-file", str(missing)))


def test_both_flags_at_once_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parsed("--password", "a", "--password-file", str(tmp_path))
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_standalone_autorecovery_with_an_unreadable_password_file_exits_2(tmp_path: Path) -> None:
    # In a process of its own: the command configures the process's logging.
    missing = tmp_path / "missing"
    words = ["autorecovery", "--zk", "127.0.0.1:1", "--password-file", str(missing)]
    done = subprocess.run(
        [sys.executable, "-m", "bookie.tools.cli", *words],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 2, "bad input, before any connection"
    assert "autorecovery.invalid_arguments" in done.stderr
    assert "--password-file" in done.stderr
