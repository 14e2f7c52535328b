"""SIGHUP: `restart_needed` compares the reloaded file with the running configuration.

What the operations review saw: after adding `group_wait_ms = 7` and two SIGHUPs,
the second reported nothing though the value was not applied; after removing the
line, a reload reported `group_wait_ms` though the file then matched what runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from bookie.logs import record_fields
from bookie.server import node as node_module
from bookie.server.config import load_config
from bookie.server.node import BookieNode

BASE = """\
journal_dir = "journal"
ledger_dirs = ["l0", "l1"]
disk_usage_threshold = 0.95
"""


class _Reloads(logging.Handler):
    """The node's `bookie.reloaded` events."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[Mapping[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        event, fields = record_fields(record)
        if event == "bookie.reloaded":
            self.events.append(fields)


@pytest.fixture
def reloads(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Reloads]:
    # The node reconfigures the process's logging on reload; not pytest's here.
    levels: list[str] = []
    monkeypatch.setattr(node_module, "configure", lambda level, _format: levels.append(level))
    handler = _Reloads()
    node_logger = logging.getLogger(node_module.__name__)
    level = node_logger.level
    node_logger.setLevel(logging.INFO)
    node_logger.addHandler(handler)
    try:
        yield handler
    finally:
        node_logger.removeHandler(handler)
        node_logger.setLevel(level)


def test_restart_needed_is_measured_against_the_running_configuration(
    tmp_path: Path, reloads: _Reloads
) -> None:
    file = tmp_path / "bookie.toml"
    file.write_text(BASE)
    started = load_config(file)
    node = BookieNode(started, reload=lambda: load_config(file))

    file.write_text(BASE + "group_wait_ms = 7\n")
    node._reload_config()
    node._reload_config()
    assert [event["restart_needed"] for event in reloads.events] == [
        ["group_wait_ms"],
        ["group_wait_ms"],
    ], "not applied until a restart, so every reload says so"

    file.write_text(BASE.replace("0.95", "0.97"))
    node._reload_config()
    assert reloads.events[-1]["restart_needed"] == [], "the file matches what runs again"
    assert reloads.events[-1]["disk_usage_threshold"] == 0.97, "reloadable keys still apply"
