"""Who may change things through an admin HTTP API: the admin token, checked on every POST.

The token is the bytes of the file the environment variable
`BOOKIE_ADMIN_TOKEN_FILE` names (`bookie.secret_file`: one final line ending
dropped); every admin server of the process (a bookie's, a replica's) reads
it.  Unset or empty: no token, every request is served, as before.  With a
token, a POST (read-only toggles, garbage collection, snapshots, leadership
transfers) must carry `Authorization: Bearer <token>`:

    no Authorization header, or not Bearer    401, counted as "missing"
    another token                             403, counted as "wrong"

GET requests (metrics, health, status) stay open.  The comparison hashes
both tokens with SHA-256 and compares the digests with
`hmac.compare_digest`, so its time says nothing about the token, not even
its length.  Refusals are exported as `admin_requests_refused_total{reason}`.

Invariants: no message, count or log line holds the token or what a client
sent in its place.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import Metric

from bookie import limits
from bookie.errors import HttpError, InvalidConfig
from bookie.metrics import counter
from bookie.secret_file import secret_from_environment

ADMIN_TOKEN_FILE_ENV: Final = "BOOKIE_ADMIN_TOKEN_FILE"
_BEARER: Final = "bearer "


def admin_token_from_environment() -> bytes | None:
    """The token `BOOKIE_ADMIN_TOKEN_FILE` names (None: unset or empty); `InvalidConfig`
    naming the variable and the file."""
    try:
        return secret_from_environment(ADMIN_TOKEN_FILE_ENV, limits.admin_token_file_bytes_max)
    except ValueError as error:
        raise InvalidConfig(str(error)) from None


@dataclass(slots=True)
class AdminGuard:
    """The token POSTs must carry, and the refusals counted."""

    token: bytes
    missing: int = 0
    wrong: int = 0

    def refusal(self, authorization: str | None) -> HttpError | None:
        """Why a POST with this Authorization header is refused (None: it is not)."""
        if authorization is None or not authorization.lower().startswith(_BEARER):
            self.missing += 1
            return HttpError(401, "this POST needs the admin token: Authorization: Bearer <token>")
        offered = hashlib.sha256(authorization[len(_BEARER) :].strip().encode("latin-1"))
        if not hmac.compare_digest(offered.digest(), hashlib.sha256(self.token).digest()):
            self.wrong += 1
            return HttpError(403, "the admin token is not this server's")
        return None

    def families(self) -> Iterator[Metric]:
        yield counter(
            "admin_requests_refused",
            "admin POST requests refused for a missing or wrong admin token",
            {("missing",): self.missing, ("wrong",): self.wrong},
            labels=("reason",),
        )
