"""Reading a file that holds a secret (a password, credentials) named by configuration.

`read_secret_file(path, bytes_max)` returns the file's bytes, at most
`bytes_max` of them, without one final line ending (LF or CR LF), so a
file written by `echo` holds what was typed.  It raises `ValueError` with
the reason (cannot be read, larger than the bound, empty), which never
quotes the file's content; callers name the file in their own
configuration error.  `secret_from_environment(variable, bytes_max)` reads
the file an environment variable names (None when the variable is unset or
empty), its `ValueError` naming `VARIABLE=path`.
"""

from __future__ import annotations

import os
from pathlib import Path


def read_secret_file(path: str | Path, bytes_max: int) -> bytes:
    """The secret `path` holds (see the module docstring); `ValueError` saying why not."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(bytes_max + 1)
    except OSError as error:
        raise ValueError(f"cannot be read: {error.strerror}") from None
    if len(data) > bytes_max:
        raise ValueError(f"larger than {bytes_max} bytes")
    secret = data.removesuffix(b"\n").removesuffix(b"\r")
    if not secret:
        raise ValueError("the file is empty")
    return secret


def secret_from_environment(variable: str, bytes_max: int) -> bytes | None:
    """The secret in the file `variable` names (None: unset or empty); `ValueError` naming
    the variable and the file."""
    path = os.environ.get(variable, "")
    if not path:
        return None
    try:
        return read_secret_file(path, bytes_max)
    except ValueError as error:
        raise ValueError(f"{variable}={path}: {error}") from None
