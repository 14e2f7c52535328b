"""Stalling real processes for a block: SIGSTOP on entry, SIGCONT on exit, whatever happens.

A stopped process keeps its sockets open and answers nothing: its peers see a
slow or frozen process (a long GC pause, a frozen disk, a suspended VM), not a
dead one, until they give up on it by a timeout of their own.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


@contextmanager
def stopped(process_ids: Iterable[int]) -> Iterator[None]:
    """SIGSTOP every process of `process_ids` for the block; SIGCONT them after it (also
    when the block raises, so that a failing test leaves no frozen process behind)."""
    stalled = list(process_ids)
    for process_id in stalled:
        os.kill(process_id, signal.SIGSTOP)
    try:
        yield
    finally:
        for process_id in stalled:
            os.kill(process_id, signal.SIGCONT)
