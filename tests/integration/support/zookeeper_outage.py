"""A ZooKeeper server of a test's own, to take away and bring back, and the JSON logs of the
processes that live through it.

`own_zookeeper` starts a `LocalZooKeeper` in a directory of the test (not the session's
server, which other tests share); `kill_zookeeper` is `kill -9` of it, and
`restart_zookeeper` starts it again on the same port and data directory, as an operator
restarting it would.  `pause_zookeeper` is SIGSTOP until the block ends, then SIGCONT.

`LogFile` reads a process's log file (JSON lines, appended by the process) and
`wait_event` waits for a named event in it with `wait_for`: a condition, not a delay.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bookie.local.zookeeper import LocalZooKeeper
from tests.unit.kvstore.local_store import wait_for


@contextlib.contextmanager
def own_zookeeper(directory: Path) -> Iterator[LocalZooKeeper]:
    """A standalone ZooKeeper for the block, with its data in `directory`."""
    server = LocalZooKeeper(directory)
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            if server.pid is not None:
                os.killpg(server.pid, signal.SIGCONT)
        server.stop()


def kill_zookeeper(server: LocalZooKeeper) -> None:
    """kill -9 of the server (and reap it): no snapshot, no goodbye to its clients."""
    assert server.pid is not None
    os.killpg(server.pid, signal.SIGKILL)
    server.stop()


def restart_zookeeper(server: LocalZooKeeper) -> None:
    """Start the server again on its port and data directory; return once it serves."""
    assert server.pid is None
    assert server.port is not None
    server.start()


@contextlib.contextmanager
def pause_zookeeper(server: LocalZooKeeper) -> Iterator[None]:
    """SIGSTOP the server for the block (its sockets stay open, nothing answers)."""
    assert server.pid is not None
    os.killpg(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(server.pid, signal.SIGCONT)


class LogFile:
    """The JSON events a process appended to its log file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and "event" in event:
                    found.append(event)
        return found

    def named(self, name: str, **fields: object) -> list[dict[str, Any]]:
        return [
            event
            for event in self.events()
            if event["event"] == name
            and all(event.get(key) == value for key, value in fields.items())
        ]

    def count(self) -> int:
        """How many events there are now (pass as `since` to wait for a later one)."""
        return len(self.events())

    def wait_event(self, name: str, *, since: int = 0, **fields: object) -> dict[str, Any]:
        """The first event `name` with these field values among those from index `since`."""

        def found() -> dict[str, Any] | None:
            for event in self.events()[since:]:
                if event["event"] == name and all(
                    event.get(key) == value for key, value in fields.items()
                ):
                    return event
            return None

        return wait_for(found)
