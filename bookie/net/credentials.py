"""Reading tokens from files: the client token a process presents, and a server's table.

`BOOKIE_TOKEN_FILE` names a file holding the token (bookie.core.tokens says
what a token is): every bookie connection the process opens presents it in an
AUTH request before anything else (docs/protocol.md, AUTH), so replicas,
tools, autorecovery and Spark executors authenticate without each being told.
A file rather than the token itself, so that the token is neither on a
command line (`ps` shows those) nor in an environment dump.  Unset: no token,
and a bookie that requires one answers EUNAUTHENTICATED.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from bookie.core.tokens import TokenTable, parse_client_token, parse_token_table
from bookie.errors import InvalidConfig

TOKEN_FILE_VARIABLE: Final = "BOOKIE_TOKEN_FILE"


def environment_token(variable: str = TOKEN_FILE_VARIABLE) -> bytes | None:
    """The token the file named by the environment `variable` holds, or None when it is
    unset; `InvalidConfig` when the file cannot be read or holds no valid token.  The
    replica protocol's clients use it with their own variable (`rsm.link`)."""
    path = os.environ.get(variable)
    if not path:
        return None
    source = f"{variable}={path}"
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            text = file.read(4096)
    except OSError as error:
        raise InvalidConfig(f"{source}: cannot read it: {error.strerror or error}") from None
    return parse_client_token(text, source)


def read_token_table(path: Path, source: str) -> TokenTable:
    """The table of a server's client tokens file at `path` (`source` names the setting in
    errors); `InvalidConfig` naming the file and a line, never a token."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise InvalidConfig(f"{source} {path}: {error.strerror or error}") from None
    return parse_token_table(text, f"{source} {path}")
