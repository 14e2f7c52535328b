"""`CONNECTION_ERRORS`: what a broken, closed or stalled connection raises through anyio.

Shells catch this tuple, plus their own protocol's errors, where a lost peer
ends a connection rather than the program.
"""

from __future__ import annotations

from typing import Final

import anyio

CONNECTION_ERRORS: Final = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
    TimeoutError,
)
