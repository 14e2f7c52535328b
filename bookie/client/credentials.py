"""The client token this process presents to bookies that require one.

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
from typing import Final

from bookie.core.tokens import parse_client_token
from bookie.errors import InvalidConfig

TOKEN_FILE_VARIABLE: Final = "BOOKIE_TOKEN_FILE"


def environment_token() -> bytes | None:
    """The token the file named by `BOOKIE_TOKEN_FILE` holds, or None when it is unset;
    `InvalidConfig` when the file cannot be read or holds no valid token."""
    path = os.environ.get(TOKEN_FILE_VARIABLE)
    if not path:
        return None
    source = f"{TOKEN_FILE_VARIABLE}={path}"
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            text = file.read(4096)
    except OSError as error:
        raise InvalidConfig(f"{source}: cannot read it: {error.strerror or error}") from None
    return parse_client_token(text, source)
