"""The bound on one reply of strings, which every replica applies alike.

A request of a few bytes can ask for a reply of hundreds of megabytes: MGET
naming one big key hundreds of times, KEYS matching every key, a
transaction of many GETs of a big key.  The replica would build it, copy it
through the framework's CBOR round trip, and encode it; a transaction's
reply is kept in the session table of every replica besides.  So a reply
that could pass `limits.reply_bytes_max` (its size as
`kvstore.protocol.resp.reply_bytes_bound` counts it, in either protocol) is
an error instead, and within EXEC each reply past the transaction's running
total is replaced by an error (the command itself ran: the writes of a
transaction are never cut short).  The rule reads only the replies, so
replicas decide alike and EXEC's recorded result is the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kvstore import limits
from kvstore.errors import RedisError
from kvstore.protocol.resp import SCALAR_BYTES_MAX

REPLY_TOO_LARGE: Final = (
    f"ERR the reply would pass the bound of {limits.reply_bytes_max} bytes on one reply; "
    "ask for fewer keys at a time"
)
REPLY_DROPPED: Final = (
    "ERR the command ran, but its reply was dropped: the transaction's replies reached the "
    f"bound of {limits.reply_bytes_max} bytes on one reply"
)


def check_strings(strings: Sequence[bytes | None]) -> None:
    """Raise `REPLY_TOO_LARGE` when an array of `strings` could pass the bound."""
    size_bytes = sum(map(len, filter(None, strings))) + SCALAR_BYTES_MAX * (len(strings) + 1)
    if size_bytes > limits.reply_bytes_max:
        raise RedisError(REPLY_TOO_LARGE)
