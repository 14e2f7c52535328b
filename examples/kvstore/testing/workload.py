"""The key-value store's side of the seeded simulation: an observed store and Redis clients.

* `ObservedKVStore`: the real `KVStore`, whose SET, INCR and DEL also report
  each time they are applied (index, epoch, op, result) to the class's
  `observer`, as `rsm.testing.workload.SimStore` does, so the simulation sees
  every replica's applied sequence.  The op label of a SET names its key and
  value (`set_label`): the workload writes every value once, so a SET applied
  twice shows as one label twice; INCR and DEL labels carry their index.
* `RedisConnection`: a minimal Redis client over any anyio byte stream (one
  command at a time, RESP2 replies), since the simulated network is not
  sockets.
* `RedisWorkload`: the clients of a run.  Each process of the history is one
  Redis connection to a replica's RESP server chosen at random (followers
  too: their routers forward to the leader), that issues SET, GET, INCR and
  DEL on a few keys with random think times.  Outcomes: an answer is OK; an
  error reply TRYAGAIN means "not applied" (FAIL); TIMEOUT, a lost connection
  or no answer within `command_timeout_ms` is indeterminate (INFO), and the
  process then reconnects, to a replica chosen again.  No answer at all is
  also counted (`redis-no-answer`), and in the final round, after every fault
  ended, apart (`final-write-no-answer`): a server must answer within its
  deadline once its links and its leader's work (what a stalled bookie's
  resumption leaves a client hanging on shows there).  Any other error reply
  is recorded as the answer `KV_ERROR`, which the model accepts only where
  Redis answers an error.  Acknowledged SETs are kept (`acknowledged`) for
  the check that each is in the log exactly once.

Determinism: every choice comes from `Random`s derived in a fixed order from
the one given; values come from one counter, so every SET writes a new value.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias

import anyio
import anyio.abc

from bookie.net.connection_errors import CONNECTION_ERRORS
from kvstore.state_machine import KVStore
from rsm import command
from rsm.testing.cluster import RsmCluster
from rsm.testing.history import HistoryRecorder, Value, freeze_value
from rsm.testing.models import KV_ERROR
from rsm.testing.workload import Applied, Observer, Processes, WorkloadPlan, observed

RESP_PORT = 6379
"""Where each replica's RESP server listens on the simulated network."""

CONNECT_TIMEOUT_S = 1.0
RECONNECT_DELAY_S = 0.2
"""How long a process waits after a failed connection before it tries again."""

FINAL_ATTEMPTS_MAX = 5
"""Attempts of a process's final write in a row (each may fail: its replica may still be
starting); after them it is tried again every `RECONNECT_DELAY_S` until the round has taken
`FINAL_ROUND_MS`."""

FINAL_ROUND_MS = 75_000
"""Virtual time the final round may take, within the simulation's liveness bound: long enough
for a session table the simulation keeps small (two sessions per process) to evict an idle
session (60 s) and make room for a process that reconnected more often than that."""

VALUE_STEP = 1_000
"""SET values are multiples of this, so the few INCRs between two SETs do not make a value
that another SET writes."""

WRITE_KINDS: Final = ("set", "incr", "del")
WRITE_WEIGHTS: Final = (6, 3, 1)

# --- the observed store -----------------------------------------------------------------------


def set_label(key: str, value: str) -> str:
    """The op label of `SET key value`."""
    return f"set {key} {value}"


class ObservedKVStore(KVStore):
    """`KVStore` reporting its SETs, INCRs and DELs; see the module docstring."""

    observer: ClassVar[Observer | None] = None

    @command
    def set(self, key: bytes, value: bytes, *options: bytes) -> str | bytes | None:
        result = super().set(key, value, *options)
        self._report("set", set_label(_text(key), _text(value)), result)
        return result

    @command
    def incr(self, key: bytes) -> int:
        result = super().incr(key)
        self._report("incr", f"incr {_text(key)} @{self.context.index}", result)
        return result

    @command(name="del")
    def delete(self, *keys: bytes) -> int:
        result = super().delete(*keys)
        names = " ".join(_text(key) for key in keys)
        self._report("del", f"del {names} @{self.context.index}", result)
        return result

    def _report(self, kind: str, op: str, result: object) -> None:
        observer = type(self).observer
        if observer is not None:
            context = self.context
            observer(Applied(context.index, context.epoch, op, kind, freeze_value(result)))


def observed_kvstore(
    observer: Observer, on_restore: Callable[[], None] | None = None
) -> type[ObservedKVStore]:
    """An `ObservedKVStore` class whose instances report to `observer` (and every restore from
    a snapshot to `on_restore`)."""
    return observed(ObservedKVStore, observer, on_restore)


def _text(data: bytes) -> str:
    return data.decode(errors="backslashreplace")


# --- a Redis client over a byte stream --------------------------------------------------------


class ErrorReply(str):
    """An error reply (`-TRYAGAIN ...`): its text."""


Reply: TypeAlias = str | int | bytes | list[Any] | None
"""A RESP2 reply: simple string (or `ErrorReply`), integer, bulk string or null, array."""


class ReplyError(Exception):
    """The server sent something that is not a RESP2 reply."""


def encode_command(words: Sequence[bytes]) -> bytes:
    """A command as a RESP multibulk request."""
    parts = [b"*%d\r\n" % len(words)]
    for word in words:
        parts.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(parts)


def parse_reply(buffer: bytes | bytearray, start: int = 0) -> tuple[Reply, int] | None:
    """The reply at `start` of `buffer` and where it ends, or None if it is not complete."""
    end = buffer.find(b"\r\n", start)
    if end < 0:
        return None
    kind = buffer[start : start + 1]
    line = bytes(buffer[start + 1 : end])
    after = end + 2
    try:
        if kind == b"+":
            return line.decode(), after
        if kind == b"-":
            return ErrorReply(line.decode()), after
        if kind == b":":
            return int(line), after
        if kind == b"$":
            length = int(line)
            if length < 0:
                return None, after
            if len(buffer) < after + length + 2:
                return None
            return bytes(buffer[after : after + length]), after + length + 2
        if kind == b"*":
            count = int(line)
            if count < 0:
                return None, after
            items: list[Any] = []
            for _ in range(count):
                parsed = parse_reply(buffer, after)
                if parsed is None:
                    return None
                item, after = parsed
                items.append(item)
            return items, after
    except ValueError as error:
        raise ReplyError(f"bad reply line {buffer[start:end]!r}") from error
    raise ReplyError(f"unknown reply type {kind!r}")


class RedisConnection:
    """One Redis connection over `stream`, one command at a time."""

    def __init__(self, stream: anyio.abc.ByteStream, replica: str, address: str) -> None:
        self.replica = replica
        """The replica host whose server it is connected to."""
        self.address = address
        self._stream = stream
        self._buffer = bytearray()

    async def command(self, words: Sequence[bytes]) -> Reply:
        """Send one command and return its reply (raises what the stream raises)."""
        await self._stream.send(encode_command(words))
        while True:
            parsed = parse_reply(self._buffer)
            if parsed is not None:
                reply, end = parsed
                del self._buffer[:end]
                return reply
            self._buffer += await self._stream.receive()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._stream.aclose()


_CONNECTION_ERRORS: Final = (*CONNECTION_ERRORS, ReplyError)

Connector = Callable[[str], Awaitable[anyio.abc.ByteStream]]

# --- the workload -----------------------------------------------------------------------------


class Result(enum.Enum):
    OK = "ok"
    FAIL = "fail"
    INFO = "info"
    NO_CONNECTION = "no-connection"
    """No operation: the process could not connect (nothing recorded)."""


@dataclass(eq=False)
class _Process:
    """One process of the history: a Redis connection, made again when it breaks."""

    name: str
    connector: Connector
    rng: random.Random
    connection: RedisConnection | None = None


class RedisWorkload(Processes):
    """The Redis clients of one simulated run; see the module docstring."""

    def __init__(
        self,
        plan: WorkloadPlan,
        rng: random.Random,
        cluster: RsmCluster,
        *,
        command_timeout_ms: int,
    ) -> None:
        assert command_timeout_ms > 0
        super().__init__()
        self.plan = plan
        self._rng = rng
        self._cluster = cluster
        self._trace = cluster.trace
        self._timeout_s = command_timeout_ms / 1000
        self.recorder = HistoryRecorder(anyio.current_time)
        self.acknowledged: dict[str, tuple[str, Value]] = {}
        """Op label -> ("set", "OK") of every SET acknowledged to a client."""
        self.stats: Counter[str] = Counter()
        self._values = itertools.count(1)
        self._ops_left = plan.ops_max
        self._processes: list[_Process] = []
        self._final = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run every process for the block; leaving it waits for the processes to finish their
        current operation (call `stop` first), then closes their connections."""
        network = self._cluster.world.network
        for number in range(1, self.plan.clients + 1):
            host = f"client-{number}"
            self._cluster.client_hosts.append(host)
            for slot in range(self.plan.slots):
                rng = random.Random(self._rng.getrandbits(64))
                self._processes.append(_Process(f"{host}.{slot}", network.connector(host), rng))
        try:
            async with anyio.create_task_group() as task_group:
                for process in self._processes:
                    self._start(task_group, self._issue, process)
                yield
        finally:
            for process in self._processes:
                await self._disconnect(process)

    async def final_round(self) -> list[str]:
        """One acknowledged SET per process, after the faults: the processes that got none
        within `FINAL_ROUND_MS` (liveness wants none)."""
        failed: list[str] = []
        self._final = True
        deadline_s = anyio.current_time() + FINAL_ROUND_MS / 1000
        for process in self._processes:
            for attempt in itertools.count(1):
                key = f"k{process.rng.randrange(self.plan.keys)}"
                result = await self._operation(process, "set", key)
                if result is Result.OK:
                    break
                self.stats[f"final-write-{result.value}"] += 1
                if attempt >= FINAL_ATTEMPTS_MAX and anyio.current_time() >= deadline_s:
                    failed.append(process.name)
                    break
                if result is Result.NO_CONNECTION or attempt >= FINAL_ATTEMPTS_MAX:
                    await anyio.sleep(RECONNECT_DELAY_S)
        return failed

    async def _issue(self, process: _Process) -> None:
        rng = process.rng
        plan = self.plan
        while not self._stopping and self._ops_left > 0:
            self._ops_left -= 1
            think_ms = rng.expovariate(1 / plan.think_ms_mean) if plan.think_ms_mean else 0
            await anyio.sleep(think_ms / 1000)
            if self.stopping:
                return
            key = f"k{rng.randrange(plan.keys)}"
            if rng.random() < plan.read_fraction:
                kind = "get"
            else:
                kind = rng.choices(WRITE_KINDS, weights=WRITE_WEIGHTS)[0]
            if await self._operation(process, kind, key) is Result.NO_CONNECTION:
                await anyio.sleep(RECONNECT_DELAY_S)

    async def _operation(self, process: _Process, kind: str, key: str) -> Result:
        """Send `kind` on `key` and record it in the history."""
        connection = await self._connection(process)
        if connection is None:
            return Result.NO_CONNECTION
        words = [kind.upper(), key]
        if kind == "set":
            value = str(next(self._values) * VALUE_STEP)
            words.append(value)
        what = f"{' '.join(words)} @{connection.address}"
        with self.recorder.invoke(process.name, kind, tuple(words[1:])) as call:
            try:
                with anyio.fail_after(self._timeout_s):
                    reply = await connection.command([word.encode() for word in words])
            except _CONNECTION_ERRORS as error:
                call.info()
                if isinstance(error, TimeoutError):
                    self.stats["redis-no-answer"] += 1
                    if self._final:
                        self.stats["final-write-no-answer"] += 1
                self._note(process, what, f"? {type(error).__name__}", "lost")
                await self._disconnect(process)
                return Result.INFO
            if isinstance(reply, ErrorReply):
                if reply.startswith("TRYAGAIN"):
                    call.fail()
                    self._note(process, what, reply, "tryagain")
                    return Result.FAIL
                if reply.startswith("TIMEOUT"):
                    call.info()
                    self._note(process, what, reply, "timeout")
                    return Result.INFO
                call.ok(KV_ERROR)
                self._note(process, what, reply, "error")
                return Result.OK
            output = _text(reply) if isinstance(reply, bytes) else reply
            call.ok(output)
        if kind == "set" and output == "OK":
            self.acknowledged[set_label(key, words[2])] = ("set", "OK")
        self.stats[f"redis-{kind}-ok"] += 1
        if not self._leads(connection.replica):
            self.stats["redis-ok-from-follower"] += 1
        self._trace.record(process.name, f"{what} -> {output!r}")
        return Result.OK

    def _leads(self, name: str) -> bool:
        """Whether replica `name` leads now."""
        replica = self._cluster.replicas[name].replica
        return replica is not None and replica.is_leader

    def _note(self, process: _Process, what: str, answer: str, stat: str) -> None:
        self.stats[f"redis-{stat}"] += 1
        self._trace.record(process.name, f"{what} -> {answer}")

    async def _connection(self, process: _Process) -> RedisConnection | None:
        """The process's connection, or a new one to a replica chosen at random."""
        if process.connection is not None:
            return process.connection
        replica = process.rng.choice(list(self._cluster.replicas))
        address = f"{replica}:{RESP_PORT}"
        try:
            with anyio.fail_after(CONNECT_TIMEOUT_S):
                stream = await process.connector(address)
        except (OSError, TimeoutError) as error:
            self.stats["redis-connect-failed"] += 1
            self._trace.record(process.name, f"connect {address}: {type(error).__name__}")
            return None
        process.connection = RedisConnection(stream, replica, address)
        return process.connection

    async def _disconnect(self, process: _Process) -> None:
        connection, process.connection = process.connection, None
        if connection is not None:
            await connection.aclose()
