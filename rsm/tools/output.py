"""How the investigation commands talk: JSON, tables, progress, reproduce lines.

* `--json` prints one object per report (or one per line, NDJSON, for
  streams such as `rsm log dump`), each with `"schema": SCHEMA_VERSION`;
  bytes become text when they are UTF-8, else hex (`dumps`).
* Without it, a table (`rsm.host.aligned`).
* `Progress` writes the index reached, the rate and the time left to
  stderr, at most every `limits` interval, and only when stderr is a
  terminal and the work has lasted over a second: captured output stays
  exact.
* Every problem report ends with `reproduce: rsm ...`, the command line
  that shows the problem again (`reproduce`).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from rsm.tools.records import plain_value

_PROGRESS_FIRST_S: Final = 1.0
_PROGRESS_EVERY_S: Final = 0.5


def dumps(value: Any) -> str:
    return json.dumps(value, default=plain_value, ensure_ascii=False, sort_keys=True)


def reproduce(words: Sequence[str]) -> str:
    """The reproduce line of a problem report."""
    return "reproduce: rsm " + shlex.join(words)


def utc(time_ms: int) -> str:
    """A logged time as ISO 8601 UTC with milliseconds."""
    moment = datetime.fromtimestamp(time_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{time_ms % 1000:03d}Z"


class Progress:
    """Progress towards index `end` on stderr (see the module docstring)."""

    def __init__(self, what: str, start: int, end: int) -> None:
        self._what = what
        self._start = start
        self._end = end
        self._began = time.monotonic()
        self._shown = self._began
        self._enabled = sys.stderr.isatty()
        self._drawn = False

    def __call__(self, index: int) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._began < _PROGRESS_FIRST_S or now - self._shown < _PROGRESS_EVERY_S:
            return
        self._shown = now
        done = index - self._start
        rate = done / (now - self._began)
        left = (self._end - index) / rate if rate > 0 else float("inf")
        sys.stderr.write(
            f"\r{self._what}: index {index} of {self._end}, {rate:,.0f} commands/s, "
            f"{left:,.0f} s left  "
        )
        sys.stderr.flush()
        self._drawn = True

    def done(self) -> None:
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def unknown_command_line(target: str, name: str, index: int) -> str:
    """The problem line of a logged command class `target` does not know."""
    return (
        f"PROBLEM: {target} has no command {name!r} (first logged at index {index}): an "
        "older log or a renamed command; applied as an UnknownCommand error"
    )
