"""Real `rsm run` replica processes on real bookie processes, for integration tests.

`RsmProcesses` (an `async with` block) starts bookies through `BookieCluster`
(tests/integration/support/processes.py) and replicas of
`rsm.testing.workload:AuditCounter` as `rsm run` processes against the
session's ZooKeeper, each under a unique application name.  A replica's
stderr is read as JSON log lines: `ReplicaProcess.wait_event` returns once a
named event appears and fails at once, with the last log lines, if the process
exits first; nothing sleeps.  Leaving the block SIGKILLs whatever still runs.

`CounterLoad` drives the counter with concurrent clients, each one `rsm.Client`
(one exactly-once session; a new one when `switch` moves the clients to
another connector) calling `add(client, seq)` in a loop, and records
every call in a `HistoryRecorder` (kinds "add" and "read" of the checker's
`Counter` model).  `check_exactly_once` compares what the clients were told
with the counter's `audit`: every acknowledged increment applied exactly once.

`ZkProxy` forwards TCP connections to ZooKeeper; `cut()` breaks them and
refuses new ones, which partitions whoever connects through it from ZooKeeper
only (its bookies and clients still reach it).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from bookie.local.zookeeper import LocalZooKeeper, free_port
from rsm.client import Client, ClientConfig, connect, tcp_connector
from rsm.errors import RsmError
from rsm.link import Connector
from rsm.testing.history import HistoryRecorder

from .processes import HOST, LOG_LINES_SHOWN, WAIT_S, BookieCluster

MACHINE = "rsm.testing.workload:AuditCounter"
POLL_S = 0.01
"""How often a wait on several processes' events looks again."""


class ReplicaProcess:
    """One run of `rsm run`; its JSON log events are collected as they come."""

    def __init__(self, name: str, address: str, process: anyio.abc.Process, log_file: Path):
        self.name = name
        self.address = address
        self.process = process
        self.log_file = log_file
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self._changed = anyio.Event()
        self.ended = False

    async def read_log(self) -> None:
        """Collect stderr until the process closes it (run in a task group); stdout, for a
        process started with its stderr sent there."""
        stream = self.process.stderr or self.process.stdout
        assert stream is not None
        pending = b""
        with self.log_file.open("ab") as log:
            try:
                async for chunk in stream:
                    log.write(chunk)
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for raw in complete:
                        self._line(raw.decode(errors="replace"))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            finally:
                self.ended = True
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
                if self.ended:
                    raise AssertionError(
                        f"{self.name} exited (status {self.process.returncode}) "
                        f"before logging {name}:\n{self.tail()}"
                    )
                await self._changed.wait()

    async def wait_lines(self, found: Callable[[list[str]], bool], what: str) -> None:
        """Return once `found(lines)`, for any output (not only JSON events); fails if the
        process ends first or past `WAIT_S`."""
        with anyio.move_on_after(WAIT_S):
            while not found(self.lines):
                if self.ended:
                    raise AssertionError(f"{self.name} ended before {what}:\n{self.tail()}")
                await self._changed.wait()
            return
        raise AssertionError(f"{self.name} did not print {what} in {WAIT_S} s:\n{self.tail()}")

    async def wait_exit(self) -> int:
        """The process's exit status, once it exited and its output is read."""
        with anyio.fail_after(WAIT_S):
            status = await self.process.wait()
            while not self.ended:
                await self._changed.wait()
        return status

    def tail(self) -> str:
        return "\n".join(self.lines[-LOG_LINES_SHOWN:])

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def send(self, signum: signal.Signals) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signum)

    def kill(self) -> None:
        self.send(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process is partitioned from everything, its sockets stay open."""
        self.send(signal.SIGSTOP)

    def resume(self) -> None:
        self.send(signal.SIGCONT)


class RsmProcesses:
    """Bookie and replica processes of one test; see the module docstring."""

    def __init__(self, zookeeper: LocalZooKeeper, zk_root: str, root: Path) -> None:
        self.zookeeper = zookeeper
        self.zk_root = zk_root
        self.root = root
        self.app = "app" + zk_root.replace("/", "-")
        self.bookies = BookieCluster(zookeeper, zk_root, root / "bookies")
        self.replicas: dict[str, ReplicaProcess] = {}
        self._ports: dict[str, int] = {}
        self._task_group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> RsmProcesses:
        await self.bookies.__aenter__()
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
            for replica in self.replicas.values():
                replica.resume()
                replica.kill()
            for replica in self.replicas.values():
                await replica.process.wait()
                await replica.process.aclose()
        try:
            await self._task_group.__aexit__(exc_type, exc, traceback)
        finally:
            await self.bookies.__aexit__(exc_type, exc, traceback)
        return None

    async def start_bookies(self, count: int = 3) -> None:
        """Start `count` bookies at once; return once every one is registered."""
        setups = [self.bookies.add_bookie(ledger_dirs=1) for _ in range(count)]
        async with anyio.create_task_group() as task_group:
            for setup in setups:
                task_group.start_soon(
                    functools.partial(self.bookies.start, setup, wait_for="bookie.ready")
                )

    async def start_replicas(self, names: list[str], *, zk: str | None = None) -> None:
        """Start replicas at once; return once each serves clients (`rsm.ready`)."""
        async with anyio.create_task_group() as task_group:
            for name in names:
                task_group.start_soon(functools.partial(self.start_replica, name, zk=zk))

    async def start_replica(
        self, name: str, *, zk: str | None = None, flags: Sequence[str] = ()
    ) -> ReplicaProcess:
        """Start (or restart) replica `name` on its port; return once it serves clients.

        `zk` replaces the ZooKeeper address (a `ZkProxy`'s, say); `flags` are added to
        `rsm run`'s."""
        assert self._task_group is not None
        port = self._ports.get(name)
        if port is None:
            port = self._ports[name] = free_port(HOST, taken=set(self._ports.values()))
        address = f"{HOST}:{port}"
        command = [
            sys.executable,
            "-m",
            "rsm.tools.cli",
            "run",
            MACHINE,
            "--app",
            self.app,
            "--zk",
            zk or self.zookeeper.connect_string,
            "--listen",
            address,
            "--ledger-root",
            self.zk_root,
            "--log-format",
            "json",
            *flags,
        ]
        process = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.root.mkdir(parents=True, exist_ok=True)
        replica = ReplicaProcess(name, address, process, self.root / f"{name}.log")
        old = self.replicas.get(name)
        if old is not None:
            assert not old.running, f"{name} still runs"
            await old.process.aclose()
        self.replicas[name] = replica
        self._task_group.start_soon(replica.read_log)
        await replica.wait_event("rsm.ready")
        return replica

    def by_address(self, address: str) -> ReplicaProcess:
        for replica in self.replicas.values():
            if replica.address == address:
                return replica
        raise KeyError(address)

    async def wait_leader(self, *, above_epoch: int = 0) -> tuple[ReplicaProcess, int]:
        """The running replica that logged `rsm.leader` for the highest epoch above
        `above_epoch`, once there is one (and its epoch)."""

        def leader() -> tuple[ReplicaProcess, int] | None:
            best: tuple[ReplicaProcess, int] | None = None
            for replica in self.replicas.values():
                if not replica.running:
                    continue
                for event in replica.named("rsm.leader"):
                    epoch = int(event["epoch"])
                    if epoch > above_epoch and (best is None or epoch > best[1]):
                        best = (replica, epoch)
            return best

        return await wait_for(leader)

    @contextlib.asynccontextmanager
    async def client(
        self, *, connector: Connector | None = None, **options: Any
    ) -> AsyncIterator[Client]:
        """An rsm client of the application (ZooKeeper discovery), over `connector` (TCP by
        default); `options` go to `ClientConfig`."""
        async with connect(
            self.app,
            zk=self.zookeeper.connect_string,
            connector=connector,
            config=ClientConfig(**options),
        ) as client:
            yield client

    @contextlib.asynccontextmanager
    async def pinned_client(self, address: str, **options: Any) -> AsyncIterator[Client]:
        """A client that only ever talks to the replica at `address`, whatever it is told."""

        async def to_pinned(_address: str) -> anyio.abc.ByteStream:
            return await tcp_connector(address)

        async with connect(
            self.app,
            zk=self.zookeeper.connect_string,
            connector=to_pinned,
            config=ClientConfig(**options),
        ) as client:
            yield client


async def wait_for(probe: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """Wait until `probe()` returns something true (awaited first when it is awaitable,
    such as a status request to a replica); it is looked at every `POLL_S`."""
    with anyio.fail_after(timeout_s):
        while True:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            await anyio.sleep(POLL_S)


# --- load and checks --------------------------------------------------------------------------


class CounterLoad:
    """Concurrent clients adding to the `AuditCounter`; see the module docstring."""

    def __init__(
        self,
        cluster: RsmProcesses,
        clients: int,
        *,
        connector: Connector | None = None,
        **options: Any,
    ) -> None:
        """`clients` clients over `connector` (TCP by default), with `ClientConfig(**options)`."""
        self._cluster = cluster
        self._clients = clients
        self._connector = connector
        self._options = options
        self.recorder = HistoryRecorder(anyio.current_time)
        self.acknowledged: dict[str, list[int]] = {}
        """Client name -> the seqs whose `add` was acknowledged."""
        self.unknown: dict[str, list[int]] = {}
        """Client name -> the seqs whose `add` ended with an error (outcome unknown)."""
        self.errors: Counter[str] = Counter()
        self._stopping = False
        self._progress = anyio.Event()

    @property
    def total_acknowledged(self) -> int:
        return sum(len(seqs) for seqs in self.acknowledged.values())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[CounterLoad]:
        """Run the clients for the block; leaving it lets each finish its current call."""
        async with anyio.create_task_group() as task_group:
            for number in range(1, self._clients + 1):
                task_group.start_soon(self._run, f"c{number}")
            try:
                yield self
            finally:
                self._stopping = True

    async def wait_acknowledged(self, count: int, timeout_s: float = WAIT_S) -> None:
        """Wait until at least `count` adds in all were acknowledged since the start."""
        with anyio.fail_after(timeout_s):
            while self.total_acknowledged < count:
                await self._progress.wait()

    def switch(self, connector: Connector | None) -> None:
        """Have each client go on over `connector` (None: TCP) from its next call: it opens
        a new client, a new session, and goes on with its seqs."""
        self._connector = connector

    async def _run(self, name: str) -> None:
        self.acknowledged.setdefault(name, [])
        self.unknown.setdefault(name, [])
        seq = 0
        while not self._stopping:
            connector = self._connector
            async with self._cluster.client(connector=connector, **self._options) as client:
                while not self._stopping and self._connector is connector:
                    seq += 1
                    await self._add(client, name, seq)

    async def _add(self, client: Client, name: str, seq: int) -> None:
        try:
            with self.recorder.invoke(name, "add", 1) as call:
                call.ok(await client.call("add", name, seq))
        except RsmError as error:
            self.errors[type(error).__name__] += 1
            self.unknown[name].append(seq)
        else:
            self.acknowledged[name].append(seq)
        progress, self._progress = self._progress, anyio.Event()
        progress.set()


def check_exactly_once(audit: dict[str, Any], load: CounterLoad) -> None:
    """Every acknowledged add is applied exactly once; nothing else is applied but adds
    whose outcome was unknown, each at most once."""
    seqs: dict[str, list[int]] = audit["seqs"]
    for name, applied in seqs.items():
        counts = Counter(applied)
        twice = sorted(seq for seq, count in counts.items() if count > 1)
        assert not twice, f"client {name}: seqs {twice} applied more than once"
        acknowledged = load.acknowledged.get(name, [])
        missing = sorted(set(acknowledged) - set(applied))
        assert not missing, f"client {name}: acknowledged seqs {missing} are not applied"
        extra = set(applied) - set(acknowledged) - set(load.unknown.get(name, []))
        assert not extra, f"client {name}: seqs {sorted(extra)} applied but never sent"
    assert audit["value"] == sum(len(applied) for applied in seqs.values())
    assert audit["value"] >= load.total_acknowledged


class ZkProxy:
    """A TCP forwarder to ZooKeeper that can be cut (see the module docstring)."""

    def __init__(self, zookeeper: LocalZooKeeper) -> None:
        self._target = (zookeeper.host, zookeeper.port)
        self.port = free_port(HOST)
        self._cut = False
        self.forwarded = 0
        """Connections forwarded so far."""
        self._streams: list[anyio.abc.ByteStream] = []
        self._task_group: anyio.abc.TaskGroup | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ZkProxy]:
        listener = await anyio.create_tcp_listener(local_host=HOST, local_port=self.port)
        async with listener, anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_group.start_soon(listener.serve, self._forward)
            yield self
            task_group.cancel_scope.cancel()

    def cut(self) -> None:
        """Break every forwarded connection now, and refuse new ones until `heal`."""
        self._cut = True
        streams, self._streams = self._streams, []
        assert self._task_group is not None
        for stream in streams:
            self._task_group.start_soon(stream.aclose)

    def heal(self) -> None:
        self._cut = False

    async def _forward(self, inbound: anyio.abc.SocketStream) -> None:
        async with inbound:
            if self._cut:
                return
            host, port = self._target
            try:
                outbound = await anyio.connect_tcp(host, port)
            except OSError:
                return
            async with outbound, anyio.create_task_group() as task_group:
                self._streams += [inbound, outbound]
                self.forwarded += 1

                async def pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
                    with contextlib.suppress(
                        anyio.EndOfStream,
                        anyio.BrokenResourceError,
                        anyio.ClosedResourceError,
                        OSError,
                    ):
                        async for chunk in source:
                            await sink.send(chunk)
                    task_group.cancel_scope.cancel()

                task_group.start_soon(pump, inbound, outbound)
                task_group.start_soon(pump, outbound, inbound)
