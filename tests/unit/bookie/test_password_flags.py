"""The `bookie` commands' ledger-password flags: from the command line or from a file."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bookie.errors import InvalidConfig
from bookie.tools.cli import main
from bookie.tools.password_flags import add_password_arguments, password_from


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


def test_standalone_autorecovery_with_an_unreadable_password_file_exits_2(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    code = main(["autorecovery", "--zk", "127.0.0.1:1", "--password-file", str(missing)])
    assert code == 2, "bad input, before any connection"
    error = capfd.readouterr().err
    assert "autorecovery.invalid_arguments" in error
    assert "--password-file" in error
