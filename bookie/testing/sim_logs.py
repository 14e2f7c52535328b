"""The log records of a simulated run go to its trace, not to stderr.

Code under simulation logs as it does in production (`bookie.logs.emit`:
an event name and fields).  In a seeded run those records belong in the
run's `Trace`, stamped with virtual time, where a failing seed's reader
finds them in order with everything else, and in its stats, where a soak's
summary counts them.  Left alone they would reach Python's last-resort
handler: bare event names on stderr, without time, host or fields.

`logs_traced` routes the named loggers to a `TraceLogHandler` for a block
(each at its own level, and not to their parents), and puts them back after.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from bookie.logs import record_fields
from bookie.testing.simcluster import Trace


class TraceLogHandler(logging.Handler):
    """Turns each log record into a trace line of `host()` and counts it by event name."""

    def __init__(self, trace: Trace, stats: Counter[str], host: Callable[[], str]) -> None:
        super().__init__(logging.DEBUG)
        self._trace = trace
        self._stats = stats
        self._host = host

    def emit(self, record: logging.LogRecord) -> None:
        event, fields = record_fields(record)
        text = " ".join(f"{key}={value}" for key, value in fields.items())
        self._trace.record(self._host(), f"{event} {text}".rstrip())
        self._stats[event] += 1
        self.count(event, fields)

    def count(self, event: str, fields: Mapping[str, object]) -> None:
        """Stats of one event beyond its own count (none here; simulations add theirs)."""


@contextlib.contextmanager
def logs_traced(handler: logging.Handler, levels: Mapping[str, int]) -> Iterator[None]:
    """For the block, each named logger's records at or above its level go to `handler`
    and nowhere else."""
    saved: list[tuple[logging.Logger, int, bool]] = []
    try:
        for name, level in levels.items():
            logger = logging.getLogger(name)
            saved.append((logger, logger.level, logger.propagate))
            logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = False
        yield
    finally:
        for logger, level, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
