"""Real `bookie serve` processes for integration tests.

`BookieCluster` (an `async with` block, owning a task group) writes each
bookie's config file, starts its process with the test's interpreter, and
reads its stderr: every JSON log line is kept as an event (and appended to
`<bookie dir>/bookie.log` for post-mortems).  `BookieProcess.wait_event`
returns once a named event appears, and fails at once, with the last log
lines, if the process exits first; nothing sleeps.  Leaving the block SIGKILLs
whatever still runs.

Configs use a short ZooKeeper session timeout (`SESSION_TIMEOUT_MS`) so that
the registration of a SIGKILLed bookie expires quickly; a restarted bookie
waits that long for its old znode before `bookie.ready`.  Tests that only need
the server up wait for `bookie.listening`, which comes before registration.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from bookie.local.cluster import bookie_command
from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.server.config import render_toml

HOST = "127.0.0.1"
SESSION_TIMEOUT_MS = 2_000
WAIT_S = 30.0
"""Bound on any wait for a process event (start-up is about a second)."""
LOG_LINES_SHOWN = 30


@dataclass(frozen=True, slots=True)
class BookieSetup:
    """Where one test bookie lives and how it is configured."""

    name: str
    directory: Path
    port: int
    journal_dir: Path
    ledger_dirs: tuple[Path, ...]

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def bookie_id(self) -> str:
        return self.address

    @property
    def config_file(self) -> Path:
        return self.directory / "bookie.toml"

    @property
    def log_file(self) -> Path:
        return self.directory / "bookie.log"


class ProcessExited(AssertionError):
    """The process ended while a test waited for one of its events."""


class BookieProcess:
    """One run of `bookie serve`; its events are collected as they are logged."""

    def __init__(self, setup: BookieSetup, process: anyio.abc.Process) -> None:
        self.setup = setup
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self._changed = anyio.Event()
        self._ended = False

    @property
    def pid(self) -> int:
        return self.process.pid

    async def read_log(self) -> None:
        """Collect stderr until the process closes it (run in a task group)."""
        stream = self.process.stderr
        assert stream is not None
        pending = b""
        with self.setup.log_file.open("ab") as log:
            try:
                async for chunk in stream:
                    log.write(chunk)
                    log.flush()
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for raw in complete:
                        self._line(raw.decode(errors="replace"))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            finally:
                if pending:
                    self._line(pending.decode(errors="replace"))
                self._ended = True
                self._notify()

    def _line(self, line: str) -> None:
        self.lines.append(line)
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and "event" in event:
                self.events.append(event)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def named(self, name: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["event"] == name]

    async def wait_event(
        self, name: str, *, since: int = 0, timeout_s: float = WAIT_S, **fields: object
    ) -> dict[str, Any]:
        """The first event `name` (with these field values) at index >= `since`."""
        with anyio.fail_after(timeout_s):
            while True:
                for event in self.events[since:]:
                    if event["event"] == name and all(
                        event.get(key) == value for key, value in fields.items()
                    ):
                        return event
                if self._ended:
                    raise ProcessExited(
                        f"{self.setup.name} exited (status {self.process.returncode}) "
                        f"before logging {name}:\n{self.tail()}"
                    )
                await self._changed.wait()

    async def wait_exit(self, timeout_s: float = WAIT_S) -> int:
        with anyio.fail_after(timeout_s):
            status = await self.process.wait()
            while not self._ended:
                await self._changed.wait()
        return status

    def tail(self) -> str:
        return "\n".join(self.lines[-LOG_LINES_SHOWN:])

    def send(self, signum: signal.Signals) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no drain, no checkpoint, no unregistration."""
        self.send(signal.SIGKILL)


class BookieCluster:
    """Bookie processes of one test against the session's ZooKeeper, under `zk_root`."""

    def __init__(self, zookeeper: LocalZooKeeper, zk_root: str, root: Path) -> None:
        self.zk_servers = zookeeper.connect_string
        self.zk_root = zk_root
        self.root = root
        self._processes: list[BookieProcess] = []
        self._task_group: anyio.abc.TaskGroup | None = None
        self._count = 0
        self._ports: set[int] = set()
        """Ports given to this cluster's bookies: a bookie is known by its address, and
        `free_port` may hand out a port again while the bookie it went to is not up yet."""

    async def __aenter__(self) -> BookieCluster:
        task_group = self._task_group = anyio.create_task_group()
        await task_group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._task_group is not None
        with anyio.CancelScope(shield=True):
            for running in self._processes:
                running.kill()
            for running in self._processes:
                await running.process.wait()
                await running.process.aclose()
        try:
            return await self._task_group.__aexit__(exc_type, exc, traceback)
        except BaseExceptionGroup as group:
            # The log readers do not raise: a group holds the test's own error.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    def add_bookie(
        self, *, ledger_dirs: int = 2, config: Mapping[str, object] | None = None
    ) -> BookieSetup:
        """A new bookie (directories and a config file with `config` added; not started)."""
        self._count += 1
        name = f"bookie-{self._count}"
        directory = self.root / name
        port = free_port(HOST, taken=self._ports)
        self._ports.add(port)
        setup = BookieSetup(
            name=name,
            directory=directory,
            port=port,
            journal_dir=directory / "journal",
            ledger_dirs=tuple(directory / f"ledgers{index}" for index in range(ledger_dirs)),
        )
        directory.mkdir(parents=True)
        self.write_config(setup, **(config or {}))
        return setup

    def write_config(self, setup: BookieSetup, **config: object) -> None:
        """(Re)write the bookie's config file; `config` adds or overrides keys."""
        values: dict[str, object] = {
            "listen_address": setup.address,
            "journal_dir": setup.journal_dir,
            "ledger_dirs": list(setup.ledger_dirs),
            "zk_servers": self.zk_servers,
            "zk_root": self.zk_root,
            "zk_session_timeout_ms": SESSION_TIMEOUT_MS,
        }
        values.update(config)
        setup.config_file.write_text(render_toml(values))

    async def start(
        self,
        setup: BookieSetup,
        *flags: str,
        wait_for: str | None = "bookie.listening",
        env: Mapping[str, str] | None = None,
    ) -> BookieProcess:
        """Start the bookie; return once it logged `wait_for` (None: at once)."""
        assert self._task_group is not None
        process = await anyio.open_process(
            bookie_command(setup.config_file, *flags),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        running = BookieProcess(setup, process)
        self._processes.append(running)
        self._task_group.start_soon(running.read_log)
        if wait_for is not None:
            await running.wait_event(wait_for)
        return running

    async def run_to_exit(self, setup: BookieSetup, *flags: str) -> BookieProcess:
        """Start the bookie and wait for it to exit by itself (a refused start)."""
        running = await self.start(setup, *flags, wait_for=None)
        await running.wait_exit()
        return running
