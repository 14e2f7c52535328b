"""The client tokens a server accepts, the role each grants, and the token a client presents.

A bookie configured with `client_tokens_file` (a replica with
`--client-tokens-file`) serves a connection only after the client presented
one of its tokens in an AUTH request (docs/protocol.md, AUTH); every other
request before that is answered EUNAUTHENTICATED (UNAUTHENTICATED).  The file
names one client per line:

    # a comment, and blank lines, are ignored
    PRINCIPAL TOKEN [ROLE]

* PRINCIPAL: 1 to `limits.principal_chars_max` characters of `A-Z a-z 0-9 . _ -`,
  each principal at most once.  It names the client in logs and metrics.
* TOKEN: `limits.auth_token_bytes_min` to `limits.auth_token_bytes_max` printable
  ASCII characters without spaces, each token at most once.
* ROLE: `read`, `write` (the default) or `admin`, each allowing what the ones
  before it allow.  On a bookie `read` allows reading without fencing; `write`
  adding, explicit LACs and fencing (recovery).  On a replica `read` allows
  queries and status; `write` commands; `admin` snapshots and leadership
  transfers.  A request its role does not allow is answered EFORBIDDEN
  (FORBIDDEN) and does nothing.

A client's token file holds the token alone (surrounding whitespace ignored).

Tokens are kept only as SHA-256 digests and compared with
`hmac.compare_digest` against every entry, so neither the memory of a bookie
nor the time an answer takes tells which principal a wrong token nearly
matched.  No token is ever part of an error message: a bad line is named by
its number.  Pure: parsing takes the file's text, not its path.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
from typing import Final, NamedTuple

from bookie import limits
from bookie.errors import InvalidConfig

_PRINCIPAL: Final = re.compile(r"[A-Za-z0-9._-]+")
_TOKEN: Final = re.compile(r"[!-~]+")


class Role(enum.IntEnum):
    """What a token allows; each role allows what the lower ones do."""

    READ = 1
    WRITE = 2
    ADMIN = 3


class Grant(NamedTuple):
    """Who presented a known token, and what it allows."""

    principal: str
    role: Role


class TokenTable:
    """Grants by token digest (see the module docstring)."""

    __slots__ = ("_entries",)

    def __init__(self, tokens: dict[str, tuple[bytes, Role]]) -> None:
        """`tokens`: principal -> (token, role)."""
        assert tokens, "a token table names at least one client"
        self._entries = [
            (hashlib.sha256(token).digest(), Grant(principal, role))
            for principal, (token, role) in tokens.items()
        ]

    @property
    def grants(self) -> list[Grant]:
        return [grant for _, grant in self._entries]

    def grant_of(self, token: bytes) -> Grant | None:
        """What this token grants, or None; the time taken does not depend on which entry (if
        any) matches."""
        digest = hashlib.sha256(token).digest()
        found = None
        for known, grant in self._entries:
            if hmac.compare_digest(known, digest):
                found = grant
        return found


def parse_token_table(text: str, source: str) -> TokenTable:
    """The table a `client_tokens_file` holds; `InvalidConfig` naming `source` and the line."""
    tokens: dict[str, tuple[bytes, Role]] = {}
    seen: set[bytes] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{source}, line {number}"
        fields = stripped.split()
        if len(fields) not in (2, 3):
            raise InvalidConfig(
                f"{where}: expected 'PRINCIPAL TOKEN [ROLE]', found {len(fields)} fields"
            )
        principal, token_text, *role_text = fields
        role = _role(role_text[0] if role_text else "write", where)
        if not _PRINCIPAL.fullmatch(principal) or len(principal) > limits.principal_chars_max:
            raise InvalidConfig(
                f"{where}: a principal is 1 to {limits.principal_chars_max} characters of "
                "A-Z a-z 0-9 . _ -"
            )
        if principal in tokens:
            raise InvalidConfig(f"{where}: principal {principal} is named twice")
        token = _checked_token(token_text, where)
        if token in seen:
            raise InvalidConfig(f"{where}: this token is given to two principals")
        seen.add(token)
        tokens[principal] = (token, role)
    if not tokens:
        raise InvalidConfig(f"{source}: names no client (every line is blank or a comment)")
    return TokenTable(tokens)


def parse_client_token(text: str, source: str) -> bytes:
    """The token a client's token file holds; `InvalidConfig` naming `source`."""
    return _checked_token(text.strip(), source)


def _role(text: str, where: str) -> Role:
    try:
        return Role[text.upper()]
    except KeyError:
        names = ", ".join(role.name.lower() for role in Role)
        raise InvalidConfig(f"{where}: a role is one of {names}") from None


def _checked_token(text: str, where: str) -> bytes:
    if not (
        limits.auth_token_bytes_min <= len(text) <= limits.auth_token_bytes_max
        and _TOKEN.fullmatch(text)
    ):
        raise InvalidConfig(
            f"{where}: a token is {limits.auth_token_bytes_min} to "
            f"{limits.auth_token_bytes_max} printable ASCII characters without spaces"
        )
    return text.encode("ascii")
