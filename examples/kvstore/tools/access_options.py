"""Who may use a replica's RESP port: `kvstore serve`'s `--acl-file` and `--requirepass-file`.

    --acl-file PATH          users and their rules, Redis's aclfile format
                             (`kvstore.connection.acl`)
    --requirepass-file PATH  the default user's password (Redis's requirepass): the
                             file's bytes, without one final line ending

Secrets come from files, never from the command line, where `ps` shows
them.  Neither option: no password, as Redis without one.  Both: a
configuration error (the ACL file's default user takes the password).  A
file that cannot be read, is larger than `limits.access_file_bytes_max`,
is empty, or holds a bad rule: `InvalidConfig`
naming the file (and the line), never quoting a password.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bookie.secret_file import read_secret_file
from kvstore import limits
from kvstore.connection.acl import AccessControl, parse_acl_file, with_default_password
from rsm.errors import InvalidConfig


def add_access_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--acl-file", type=Path, help="ACL users of the RESP port (Redis's aclfile format)"
    )
    parser.add_argument(
        "--requirepass-file", type=Path, help="a file holding the default user's password"
    )


def access_of(arguments: argparse.Namespace) -> AccessControl | None:
    """The users `--acl-file` or `--requirepass-file` give (None: neither was given)."""
    acl_file: Path | None = arguments.acl_file
    password_file: Path | None = arguments.requirepass_file
    if acl_file is not None and password_file is not None:
        raise InvalidConfig(
            "--acl-file and --requirepass-file exclude each other: give the default user "
            "its password in the ACL file"
        )
    if acl_file is not None:
        return parse_acl_file(_read(acl_file).decode("latin-1"), str(acl_file))
    if password_file is not None:
        return with_default_password(_read(password_file))
    return None


def _read(path: Path) -> bytes:
    try:
        return read_secret_file(path, limits.access_file_bytes_max)
    except ValueError as error:
        raise InvalidConfig(f"{path}: {error}") from None
