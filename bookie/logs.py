"""Structured logs for the bookie process: one event per line on stderr.

Operators and tools read a bookie's log as data, so every line is one JSON
object (the default format)::

    {"time": "2026-11-22T13:00:34.123Z", "level": "info", "event": "bookie.ready",
     "logger": "bookie.server.node", "bookie_id": "127.0.0.1:3181", ...}

* `time`: UTC, ISO 8601 with milliseconds and a `Z`;
* `level`: `debug`, `info`, `warning`, `error` or `critical`;
* `event`: a dotted name that says what happened (`bookie.read_only`), stable
  across versions so scripts can match on it; for records logged by code that
  does not use `emit` (plain `logging` calls), the formatted message;
* `logger`: the Python logger that emitted it;
* then the event's own fields, and `error` (type and message) plus `traceback`
  when an exception is attached.

The `text` format writes the same content for a human at a terminal:
`13:00:34.123 info  bookie.ready bookie_id=127.0.0.1:3181 ...`.

Invariant: a line is never split.  Field values that are not JSON types are
rendered with `str`, newlines inside values are escaped by JSON (text format:
by `repr`), so one `emit` is exactly one line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Final, TextIO

LEVELS: Final = ("debug", "info", "warning", "error", "critical")
FORMATS: Final = ("json", "text")

_FIELDS_ATTRIBUTE: Final = "bookie_fields"
_EVENT_ATTRIBUTE: Final = "bookie_event"


def emit(logger: logging.Logger, level: int, event: str, /, **fields: object) -> None:
    """Log `event` with `fields` as one structured line (if `level` is enabled)."""
    if logger.isEnabledFor(level):
        logger.log(
            level,
            event,
            extra={_EVENT_ATTRIBUTE: event, _FIELDS_ATTRIBUTE: fields},
            stacklevel=2,
        )


def _timestamp(created: float) -> str:
    seconds = int(created)
    milliseconds = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{milliseconds:03d}Z"


def record_fields(record: logging.LogRecord) -> tuple[str, Mapping[str, object]]:
    """A record's event name and fields (a plain `logging` call: its message, no fields)."""
    event = getattr(record, _EVENT_ATTRIBUTE, None)
    fields: Mapping[str, object] = getattr(record, _FIELDS_ATTRIBUTE, {})
    if event is None:
        event = record.getMessage()
    return event, fields


class JsonLinesFormatter(logging.Formatter):
    """Formats a record as one JSON object (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        event, fields = record_fields(record)
        line: dict[str, object] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "event": event,
            "logger": record.name,
        }
        for key, value in fields.items():
            # The envelope's keys win: an event field may not disguise the level or time.
            line.setdefault(key, value)
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["error"] = f"{type(error).__name__}: {error}"
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Formats a record as one human-readable line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        event, fields = record_fields(record)
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        milliseconds = int((record.created % 1) * 1000)
        parts = [f"{clock}.{milliseconds:03d}", f"{record.levelname.lower():<7}", event]
        for key, value in fields.items():
            text = value if isinstance(value, str) and value.isprintable() else repr(value)
            parts.append(f"{key}={text}")
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            parts.append(repr(f"{type(error).__name__}: {error}"))
        return " ".join(parts)


def configure(level: str = "info", log_format: str = "json", stream: TextIO | None = None) -> None:
    """Send every log record of the process to `stream` (stderr) in `log_format`.

    Replaces handlers installed earlier, so calling it again (a reloaded
    configuration) changes the level or format in place.
    """
    assert level in LEVELS, level
    assert log_format in FORMATS, log_format
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLinesFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # kazoo logs every reconnect attempt at INFO; only its warnings help an operator.
    logging.getLogger("kazoo").setLevel(max(logging.WARNING, root.level))
