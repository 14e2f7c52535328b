"""Test applications and the client workload of the whole-cluster simulation.

Two state machines, both deterministic and both observable from outside:

* `SimStore`: a key-value store whose one command, `kv(kind, key, args, op)`,
  runs a key-value operation with exactly the semantics of the checker's
  `KvModel` (set, incrby, cas, del; the model's own functions do the work, so
  the store and the specification can never disagree on what an operation
  means: what the simulation tests is replication, not string arithmetic).
  `op` is a unique label the workload gives every call; the store reports each
  command it applies (index, epoch, op, result) to its class's `observer`,
  which is how the simulation sees every replica's applied sequence.  A
  class made by `observed_store` carries one observer: a class attribute, so
  the instance's attributes stay the application's state alone (`observed`
  makes such a class of any state machine that reports to its `observer`).
* `AuditCounter`: a counter that also keeps, per client, the sequence numbers
  it applied, so a test of real processes can read back "every acknowledged
  increment exactly once" from the state (`audit`).  `pad` makes a command as
  large as a benchmark wants without changing what it does.

`KvWorkload` runs the simulation's clients: each client is one `rsm.Client`
(one exactly-once session) shared by a few *slots*, each slot a sequential
process of the history that issues random operations on a few keys (set,
incrby, cas, del through the log; linearizable get as a query) with random
think times, until told to stop or out of operations.  Every call is recorded
in a `HistoryRecorder` on the virtual clock; an error is indeterminate (INFO),
since the client already retried everything retryable.  The workload keeps
what each acknowledged command answered (`acknowledged`), for the checks that
compare client answers with the log.  Its processes' lifetime (stop, wait until
all ended) is `Processes`, which other workloads share.

Determinism: every choice comes from `Random`s derived in a fixed order from
the one given; values written are drawn from one counter, so they are unique,
which keeps the linearizability search small.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

import anyio
import anyio.abc

from bookie.testing.simcluster import Trace
from rsm.client import Client
from rsm.core.state_machine import StateMachine, command, query
from rsm.errors import RsmError, SessionExpired, Timeout
from rsm.testing.history import HistoryRecorder, Value, freeze_value
from rsm.testing.models import KV_OPERATIONS

# --- the simulation's state machine -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Applied:
    """One command a `SimStore` applied: where in the log, under which epoch, and its result."""

    index: int
    epoch: int
    op: str
    kind: str
    result: Value


Observer = Callable[[Applied], None]

M = TypeVar("M", bound=StateMachine)

WRITE_KINDS = ("set", "incrby", "cas", "del")
"""The key-value operations the workload sends through the log (`kv` refuses others)."""


class SimStore(StateMachine):
    """Keys to string values; see the module docstring."""

    observer: ClassVar[Observer | None] = None

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    @command
    def kv(self, kind: str, key: str, args: list[Any], op: str) -> Any:
        if kind not in WRITE_KINDS:
            raise ValueError(f"unknown operation {kind!r}")
        # The model's operation takes its arguments as a tuple after the key.
        result, after = KV_OPERATIONS[kind](self.values.get(key), tuple(args))
        if after is None:
            self.values.pop(key, None)
        else:
            self.values[key] = after
        observer = type(self).observer
        if observer is not None:
            context = self.context
            observer(Applied(context.index, context.epoch, op, kind, result))
        return result

    @query
    def get(self, key: str) -> str | None:
        return self.values.get(key)


def observed(
    machine: type[M], observer: Observer, on_restore: Callable[[], None] | None = None
) -> type[M]:
    """A subclass of `machine` whose `observer` class attribute is `observer` (the class reports
    the commands it applies there) and whose instances call `on_restore`, if given, after their
    state came from a snapshot."""
    attributes: dict[str, Any] = {"observer": staticmethod(observer)}
    if on_restore is not None:

        def restore(self: M, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
            machine.restore(self, chunks)
            on_restore()

        attributes["restore"] = restore
    return cast(type[M], type(machine.__name__, (machine,), attributes))


def observed_store(
    observer: Observer, on_restore: Callable[[], None] | None = None
) -> type[SimStore]:
    """A `SimStore` class whose instances report every applied command to `observer` (and
    every restore from a snapshot to `on_restore`)."""
    return observed(SimStore, observer, on_restore)


# --- the audited counter (real processes, benchmark) ------------------------------------------


class AuditCounter(StateMachine):
    """A counter that remembers which (client, seq) increments it applied; see the module."""

    def __init__(self) -> None:
        self.value = 0
        self.seqs: dict[str, list[int]] = {}

    @command
    def add(self, client: str, seq: int, pad: str = "") -> int:
        self.value += 1
        self.seqs.setdefault(client, []).append(seq)
        return self.value

    @query
    def get(self) -> int:
        return self.value

    @query
    def audit(self) -> dict[str, Any]:
        return {"value": self.value, "seqs": self.seqs}


# --- the workload -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    """What a seed decides about the clients."""

    clients: int
    slots: int
    """Concurrent processes per client (they share its session)."""
    keys: int
    ops_max: int
    """Operations all processes together issue at most (the final round not counted)."""
    think_ms_mean: float
    read_fraction: float

    def __post_init__(self) -> None:
        assert self.clients >= 1
        assert self.slots >= 1
        assert self.keys >= 1
        assert self.ops_max >= 0
        assert self.think_ms_mean >= 0
        assert 0 <= self.read_fraction <= 1


ClientFactory = Callable[[str], AbstractAsyncContextManager[Client]]
"""Opens the rsm client of host `name` for a block."""


class Processes:
    """The concurrent processes of a workload: they look at `stopping` before each operation,
    and `wait_idle` waits for every one started (`_start`) to end."""

    def __init__(self) -> None:
        self._stopping = False
        self._active = 0
        self._idle = anyio.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Issue no new operation (those in flight finish)."""
        self._stopping = True

    async def wait_idle(self) -> None:
        """Return once every process has finished (after `stop`, or out of operations)."""
        if self._active:
            await self._idle.wait()

    def _start(
        self, task_group: anyio.abc.TaskGroup, process: Callable[..., Awaitable[None]], *args: Any
    ) -> None:
        """Run `process(*args)` in `task_group` as one of the processes."""
        self._active += 1
        task_group.start_soon(self._run, functools.partial(process, *args))

    async def _run(self, process: Callable[[], Awaitable[None]]) -> None:
        try:
            await process()
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()


class KvWorkload(Processes):
    """The clients of one simulated run; see the module docstring."""

    def __init__(
        self,
        plan: WorkloadPlan,
        rng: random.Random,
        trace: Trace,
        open_client: ClientFactory,
    ) -> None:
        super().__init__()
        self.plan = plan
        self._rng = rng
        self._trace = trace
        self._open_client = open_client
        self.recorder = HistoryRecorder(anyio.current_time)
        self.acknowledged: dict[str, tuple[str, Value]] = {}
        """Op label -> (kind, the answer) of every command acknowledged to a client."""
        self.stats: Counter[str] = Counter()
        self._values = itertools.count(1)
        self._ops_left = plan.ops_max
        self._clients: dict[str, Client] = {}

    @property
    def keys(self) -> list[str]:
        return [f"k{number}" for number in range(self.plan.keys)]

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Open every client and run every slot for the block; leaving it waits for the slots
        to finish their current operation (call `stop` first)."""
        async with contextlib.AsyncExitStack() as stack:
            for number in range(1, self.plan.clients + 1):
                name = f"client-{number}"
                self._clients[name] = await stack.enter_async_context(self._open_client(name))
            async with anyio.create_task_group() as task_group:
                for name in self._clients:
                    for slot in range(self.plan.slots):
                        rng = random.Random(self._rng.getrandbits(64))
                        self._start(task_group, self._issue, name, f"{name}.{slot}", rng)
                yield
            self._clients.clear()

    async def final_round(self) -> list[str]:
        """One write per client, after the faults: the processes whose write was not
        acknowledged (liveness wants none).

        A client whose session expired during the faults may have to give up its
        write: when an attempt of it may have been logged under the old session, it
        cannot tell whether it was applied (rsm/client.py, `Timeout` caused by
        `SessionExpired`).  It then writes once more, under its new session, and
        that write must be acknowledged.
        """
        failed: list[str] = []
        for name, client in self._clients.items():
            process = f"{name}.final"
            key = self.keys[self._rng.randrange(self.plan.keys)]
            answer = await self._write(client, process, key, "set", [str(next(self._values))])
            if isinstance(answer, Timeout) and isinstance(answer.__cause__, SessionExpired):
                self.stats["final-write-again-after-session-expired"] += 1
                process = f"{name}.final-again"
                answer = await self._write(client, process, key, "set", [str(next(self._values))])
            if isinstance(answer, RsmError):
                failed.append(process)
        return failed

    async def _issue(self, name: str, process: str, rng: random.Random) -> None:
        last_seen: dict[str, str | None] = {}
        while not self._stopping and self._ops_left > 0:
            self._ops_left -= 1
            think_ms = (
                rng.expovariate(1 / self.plan.think_ms_mean) if self.plan.think_ms_mean else 0
            )
            await anyio.sleep(think_ms / 1000)
            if self.stopping:
                return
            client = self._clients[name]
            key = f"k{rng.randrange(self.plan.keys)}"
            if rng.random() < self.plan.read_fraction:
                await self._read(client, process, key, last_seen)
                continue
            kind = rng.choice(WRITE_KINDS)
            args: list[Any]
            if kind == "set":
                value = str(next(self._values))
                args = [value]
            elif kind == "incrby":
                args = [rng.randint(1, 5)]
            elif kind == "cas":
                new = None if rng.random() < 0.2 else str(next(self._values))
                args = [last_seen.get(key), new]
            else:
                args = []
            answer = await self._write(client, process, key, kind, args)
            if kind == "set" and not isinstance(answer, RsmError):
                last_seen[key] = args[0]

    async def _write(
        self, client: Client, process: str, key: str, kind: str, args: list[Any]
    ) -> Value | RsmError:
        """Send one command; its answer, or the error that left its outcome unknown."""
        op = f"{process}:{len(self.recorder)}"
        try:
            with self.recorder.invoke(process, kind, (key, *args)) as call:
                result = freeze_value(await client.call("kv", kind, key, args, op))
                call.ok(result)
        except RsmError as error:
            self._unknown(process, f"{kind}({key}, {args}) [{op}]", error)
            return error
        self.acknowledged[op] = (kind, result)
        self.stats["acknowledged"] += 1
        self._trace.record(process, f"{kind}({key}, {args}) [{op}] -> {result!r}")
        return result

    async def _read(
        self, client: Client, process: str, key: str, last_seen: dict[str, str | None]
    ) -> None:
        try:
            with self.recorder.invoke(process, "get", (key,)) as call:
                value = await client.query("get", key)
                call.ok(value)
        except RsmError as error:
            self._unknown(process, f"get({key})", error)
            return
        last_seen[key] = value
        self.stats["read"] += 1
        self._trace.record(process, f"get({key}) -> {value!r}")

    def _unknown(self, process: str, what: str, error: RsmError) -> None:
        self.stats[f"client-{type(error).__name__}"] += 1
        self._trace.record(process, f"{what} -> ? {type(error).__name__}")
