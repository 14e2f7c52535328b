"""Structured log lines: one JSON object (or one text line) per event, fields included,
exceptions attached, never split across lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bookie.logs import configure, emit

logger = logging.getLogger("bookie.test_logs")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure("info", "json", stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_event_is_one_json_line_with_its_fields(captured: io.StringIO) -> None:
    emit(logger, logging.WARNING, "bookie.example", count=3, where="a\nb", path=object)
    [line] = lines(captured)
    record = json.loads(line)
    assert record["event"] == "bookie.example"
    assert record["level"] == "warning"
    assert record["logger"] == "bookie.test_logs"
    assert record["count"] == 3
    assert record["where"] == "a\nb"
    assert record["path"] == str(object)
    assert record["time"].endswith("Z")
    assert len(record["time"]) == len("2026-11-22T13:00:34.123Z")


def test_fields_cannot_overwrite_the_envelope(captured: io.StringIO) -> None:
    emit(logger, logging.INFO, "bookie.example", time="yesterday", logger="fake")
    record = json.loads(lines(captured)[0])
    assert record["time"] != "yesterday"
    assert record["logger"] == "bookie.test_logs"


def test_plain_records_and_exceptions(captured: io.StringIO) -> None:
    logger.info("replayed %d records", 7)
    try:
        raise ValueError("broken\nvalue")
    except ValueError:
        logger.exception("bookie.crashed")
    first, second = (json.loads(line) for line in lines(captured))
    assert first["event"] == "replayed 7 records"
    assert second["error"] == "ValueError: broken\nvalue"
    assert "Traceback" in second["traceback"]


def test_level_filters_and_text_format(captured: io.StringIO) -> None:
    emit(logger, logging.DEBUG, "bookie.hidden")
    assert lines(captured) == []
    stream = io.StringIO()
    configure("debug", "text", stream)
    emit(logger, logging.DEBUG, "bookie.shown", path="/x y", reasons=["a"])
    [line] = lines(stream)
    assert " debug   bookie.shown path=/x y reasons=['a']" in line
