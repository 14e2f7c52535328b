"""How an operating-system error on the bookie's files becomes a storage error.

One mapping for the journal, the entry logs and the index, so the server sees
the same classes whatever part of the storage failed: ENOSPC (and EDQUOT, a
full quota) is `DiskFull`, anything else is `StorageIOError`.  Both keep the
original error as their cause.
"""

from __future__ import annotations

import errno

from bookie.errors import DiskFull, StorageError, StorageIOError

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def storage_error(error: OSError, doing: str) -> StorageError:
    """The storage error for `error`, raised while `doing` (a phrase for the message)."""
    cls: type[StorageError] = DiskFull if error.errno in _FULL_ERRNOS else StorageIOError
    failure = cls(f"{doing}: {error}")
    failure.__cause__ = error
    return failure
