"""Which errors a replica's loops wait out and retry, and which stop the replica.

Both exception trees (`bookie.errors`, `rsm.errors`) mark each class
`retryable`: the cause is transient (a bookie or ZooKeeper unreachable, a
lost compare-and-set, a recovery that could not decide yet).  A replica's
loops (following, election, takeover) retry those after a pause and let
everything else through, so a corrupt log or a wrong password stops the
replica loudly instead of looping forever.
"""

from __future__ import annotations

from bookie.errors import BookieError
from rsm.errors import RsmError


def is_transient(error: BaseException) -> bool:
    """Whether a loop should pause and try again after `error`."""
    return isinstance(error, BookieError | RsmError) and error.retryable
