"""The ledger-password flags of the `bookie` commands: `--password P` or `--password-file FILE`.

A password given on the command line is visible to every user of the machine
(`ps`, `/proc/PID/cmdline`) and lands in shell histories and in the shell's
`reproduce:` lines; `--password-file` reads it from a file the operator keeps
readable by the command's user alone.  The password is the file's bytes
without one trailing line end (`\\n` or `\\r\\n`), so a file written by `echo`
or an editor holds what `--password` would have given.  A file that cannot
be read is bad input (`InvalidConfig` naming it); an empty one is the empty
password.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bookie.errors import InvalidConfig


def add_password_arguments(parser: argparse.ArgumentParser, *, what: str) -> None:
    """Add `--password` and `--password-file` (one or the other) to `parser`; `what`
    says whose password it is, for the help."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--password", help=f"{what} (visible to other users: prefer --password-file)"
    )
    group.add_argument("--password-file", type=Path, metavar="FILE", help=f"a file holding {what}")


def password_from(arguments: argparse.Namespace) -> bytes | None:
    """The password the flags give, None when neither was given."""
    if arguments.password is not None:
        return str(arguments.password).encode()
    path: Path | None = arguments.password_file
    if path is None:
        return None
    try:
        content = path.read_bytes()
    except OSError as error:
        raise InvalidConfig(f"--password-file {str(path)!r}: {error.strerror}") from None
    if content.endswith(b"\r\n"):
        return content[:-2]
    if content.endswith(b"\n"):
        return content[:-1]
    return content
