"""`kvstore serve` refuses what it could not mean before it connects to anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvstore import limits
from kvstore.tools import cli
from kvstore.tools.access_options import access_of

SERVE = ["serve", "--zk", "127.0.0.1:1", "--listen", "h:1", "--resp", "h:2"]


def test_serve_refuses_a_follower_nice_outside_linux_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main([*SERVE, "--follower-nice", "-1"]) == cli.EXIT_USAGE
    assert "follower nice -1 is outside 0..19" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("user a on >hunter2 +@nope\n", ":1: ERR Error in ACL SETUSER modifier '+@nope'"),
        ("user a on <hunter2\n", ":1: ERR Error in ACL SETUSER modifier '<': no such password"),
        ("usr a on >hunter2\n", ":1: ERR an ACL file line is 'user <name> <rule> ...'"),
    ],
)
def test_serve_refuses_a_bad_acl_file_without_showing_passwords(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users.acl"
    path.write_text(content)
    assert cli.main([*SERVE, "--acl-file", str(path)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"kvstore: InvalidConfig: {path}{message}" in err
    assert "hunter2" not in err
    assert "Traceback" not in err


def test_serve_refuses_bad_access_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing"
    assert cli.main([*SERVE, "--requirepass-file", str(missing)]) == cli.EXIT_USAGE
    assert f"{missing}: cannot be read: No such file or directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert cli.main([*SERVE, "--requirepass-file", str(empty)]) == cli.EXIT_USAGE
    assert f"{empty}: the file is empty" in capsys.readouterr().err
    both = [*SERVE, "--requirepass-file", str(empty), "--acl-file", str(empty)]
    assert cli.main(both) == cli.EXIT_USAGE
    assert "--acl-file and --requirepass-file exclude each other" in capsys.readouterr().err
    large = tmp_path / "large"
    large.write_bytes(b"#" * (limits.access_file_bytes_max + 1))
    assert cli.main([*SERVE, "--acl-file", str(large)]) == cli.EXIT_USAGE
    assert f"{large}: larger than {limits.access_file_bytes_max} bytes" in capsys.readouterr().err


def test_a_password_file_holds_the_default_users_password(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_bytes(b"s3cret\r\n")
    parsed = cli._parser().parse_args([*SERVE, "--requirepass-file", str(path)])
    access = access_of(parsed)
    assert access is not None
    assert access.required
    assert access.authenticate(b"default", b"s3cret") is not None
    assert access.authenticate(b"default", b"s3cret\r\n") is None
