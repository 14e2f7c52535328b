"""Replicas, clients and their observation in the seeded whole-cluster simulation.

`RsmCluster` puts the framework's real shells (`Replica`, `rsm.Client`) on
the simulated world of `bookie.testing.simcluster.SimCluster` (virtual-time
loop, simulated network, bookies over memory disks, in-memory metadata with
sessions), so a nemesis can break them and the checks can watch:

* Replicas are hosts `replica-1`, `replica-2`, ... on the network, each
  incarnation with its own metadata session, ledger client and state
  machine, made by `machine` (default: a `SimStore`, `rsm.testing.workload`)
  with an observer that records every command it applies, with the replica
  incarnation (`replica-1#2`) and whether the replica was then the leader of
  that command's epoch (its term is of that epoch: the leader applies its own
  batches only once Qa bookies confirmed them, so that is "this replica got a
  batch of this epoch acknowledged").  `beside`, if given, runs beside each
  incarnation for as long as it runs (an application's own server, which its
  clients call instead of the framework's port).
* `crash` is `kill -9`: the host goes down (its connections reset), the
  incarnation's tasks are cancelled, its session is cut off and expires
  `session_timeout_ms` later, as ZooKeeper would expire it; `restart` starts a
  new incarnation, which replays the log from the start.
* `cut_off` partitions one host from the metadata service only: its session
  is suspended, and expires if the cut lasts longer than the session timeout;
  `reconnect` ends the cut (after an expiry the host hears LOST, then gets a
  new session).  `expire` expires a session at once.
* `stall` is SIGSTOP of a group of hosts (replicas or bookies) for a while:
  every link of each is clogged both ways, its metadata session included
  (held, not dropped: `SimNetwork.stall`), so nothing it receives is
  answered and nothing it sends leaves; its session is suspended without its
  hearing of it, and expires if the stall outlasts the session timeout (the
  replicas' `session_timeout_ms`, the bookies' `bookie_session_timeout_ms`).
  When the stall ends (after its length, or at `resume`) the held bytes
  arrive and the host hears, at once, what happened to its session
  meanwhile.  What the model leaves out: a stalled process's own timers
  still fire, so it behaves as a process whose every peer fell silent.  A
  stalled host is not crashed (callers end the stall first).
* `transfer` asks a replica for a graceful handover, in a task of that
  incarnation (a crash cancels it).
* Log events of the framework (`rsm.takeover`, `rsm.step_down`, ...) become
  trace lines stamped with the incarnation that logged them (a context
  variable set in each incarnation's task, inherited by every task it
  starts), and counts in `world.stats` ("step-down-fenced": a leader was
  fenced by a successor while it still ran).
* `read_log` reads the final log as a fresh host would, recovering its OPEN
  segment (do it once the replicas are gone), and replays it through the
  framework's own `Applier` into a fresh store: the canonical applied
  sequence every replica's must be a prefix of.

An incarnation that stops with an exception is a failure of the framework (a
replica must survive every fault the nemesis injects, or stop only to avoid
diverging, which is a failure too): it goes to `failures`.

Determinism: everything random comes from `world.derive_rng()`, called in
program order; collections are lists and dicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from bookie.client.config import ClientConfig as LedgerConfig
from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import ReadHandle
from bookie.errors import BookieError
from bookie.meta.api import SessionState
from bookie.meta.memory import MemoryMetadataStore
from bookie.testing.sim_logs import TraceLogHandler, logs_traced
from bookie.testing.simcluster import SimCluster, Trace
from rsm.client import Client, connect
from rsm.client import ClientConfig as RsmClientConfig
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_format import Batch, CommandItem, LeaderStart
from rsm.core.log_state import Log, Segment
from rsm.core.state_machine import StateMachine
from rsm.errors import RsmError, RsmStatus
from rsm.runtime.applier import Applier
from rsm.runtime.log import LogStore, SegmentReader, replay_log
from rsm.runtime.replica import Replica
from rsm.runtime.transient import is_transient
from rsm.testing.workload import Applied, Observer, observed_store

APP = "sim"
REPLICA_PORT = 7000
READ_LOG_ATTEMPTS_MAX = 20
"""Tries to read the final log (the bookies may still be coming back) before giving up."""
READ_LOG_RETRY_S = 0.5

_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("rsm_sim_host", default="world")
"""The incarnation (or client) whose task is running: who logged an event."""


@dataclass(eq=False)
class SimReplica:
    """One replica host across its incarnations."""

    name: str
    incarnation: int = 0
    up: bool = False
    replica: Replica | None = None
    """The running incarnation's replica, once its `async with` block is entered."""
    store: MemoryMetadataStore | None = None
    scope: anyio.CancelScope | None = None
    tasks: anyio.abc.TaskGroup | None = None

    @property
    def address(self) -> str:
        return f"{self.name}:{REPLICA_PORT}"

    @property
    def label(self) -> str:
        return f"{self.name}#{self.incarnation}"


MachineFactory = Callable[[Observer, Callable[[], None] | None], Callable[[], StateMachine]]
"""Makes the application's state machine (a class or a factory) whose instances report every
command they apply to the observer, and every restore from a snapshot to the callback (if any)."""

Beside = Callable[["RsmCluster", SimReplica, Replica], AbstractAsyncContextManager[object]]
"""What runs beside one replica incarnation of the cluster, for as long as it runs."""


@dataclass(eq=False)
class Stall:
    """Hosts stopped together (`RsmCluster.stall`), until they resume together."""

    hosts: tuple[str, ...]
    length_ms: float
    suspended: dict[str, MemoryMetadataStore]
    """Host -> the metadata session this stall suspended (those that were connected)."""


@dataclass(frozen=True, slots=True)
class FinalLog:
    """The log as a fresh host reads it at the end of a run."""

    log: Log
    applied: tuple[Applied, ...]
    """The canonical applied sequence: the log replayed through a fresh `Applier`."""
    markers: dict[int, str]
    """Epoch -> the replica id in the leader-start marker of its first segment."""
    command_items: int
    """Command items in the log, duplicates (a retry logged twice) included."""
    sessions_expired: int
    """Command items the session table refused with `SessionExpired` (applied nothing)."""
    overloaded: int
    """Command items the session table refused with `Overloaded`: a new session past
    `sessions_max` while no session could be evicted (applied nothing)."""
    end_index: int
    """The index of the log's last item (commands and leader-start markers)."""
    state_hash: bytes
    """The state hash of the replayed state."""


class _CountingApplier(Applier):
    """An `Applier` that also counts the command items of the entries it applies, and
    those refused because their session had expired or the session table was full."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command_items = 0
        self.sessions_expired = 0
        self.overloaded = 0

    def apply(self, batch: Batch, ledger_id: int, entry_id: int) -> Any:
        outcomes = super().apply(batch, ledger_id, entry_id)
        if outcomes is not None:
            self.command_items += sum(isinstance(item, CommandItem) for item in batch.items)
            statuses = [outcome.status for outcome in outcomes]
            self.sessions_expired += statuses.count(RsmStatus.SESSION_EXPIRED)
            self.overloaded += statuses.count(RsmStatus.OVERLOADED)
        return outcomes


class _EventTrace(TraceLogHandler):
    """Log events of the framework and the ledger client as trace lines and counts, plus
    step-down causes and recovered takeovers."""

    def count(self, event: str, fields: Mapping[str, object]) -> None:
        if event == "rsm.step_down":
            self._stats[f"step-down-{_step_down_cause(str(fields.get('reason', '')))}"] += 1
        elif event == "rsm.leader" and fields.get("recovered"):
            self._stats["takeover-recovered"] += 1


def _step_down_cause(reason: str) -> str:
    if "Fenced" in reason:
        return "fenced"
    if "session" in reason:
        return "session"
    if "leader-elect" in reason:
        return "replaced"
    return "other"


def events_traced(trace: Trace, stats: Counter[str]) -> contextlib.AbstractContextManager[None]:
    """For the block, the framework's INFO events and the ledger client's and bookies'
    warnings go to `trace` and `stats` (and nowhere else: the simulation logs far more
    than a test log should hold)."""
    handler = _EventTrace(trace, stats, _HOST.get)
    return logs_traced(handler, {"rsm": logging.INFO, "bookie": logging.WARNING})


@dataclass(eq=False)
class RsmCluster:
    """The replicas and clients of one run on `world`; see the module docstring."""

    world: SimCluster
    replica_config: ReplicaConfig
    ledger_config: LedgerConfig
    client_config: RsmClientConfig
    session_timeout_ms: int
    replica_count: int = 3
    lease_clock_rates: tuple[float, ...] = ()
    """Per replica, in order: how fast its lease clock runs against the loop's (default 1)."""
    machine: MachineFactory = observed_store
    beside: Beside | None = None
    replicas: dict[str, SimReplica] = field(init=False)
    applied: dict[str, list[Applied]] = field(init=False)
    """Incarnation label -> the commands it applied, in order."""
    snapshot_loaders: set[str] = field(init=False)
    """Incarnation labels whose state came from a snapshot (so they start mid-log)."""
    leaders: dict[int, list[str]] = field(init=False)
    """Epoch -> the replicas that applied a command of it as its leader (one, or a bug)."""
    client_stores: dict[str, MemoryMetadataStore] = field(init=False)
    client_hosts: list[str] = field(init=False)
    """Hosts of clients without a metadata session (an application's own clients), which
    their workload adds: partitions and resets may pick them."""
    failures: list[str] = field(init=False)
    _cuts: dict[str, tuple[MemoryMetadataStore, int]] = field(init=False)
    _stalls: list[Stall] = field(init=False)
    _cut_numbers: Iterator[int] = field(init=False)
    _task_group: anyio.abc.TaskGroup | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        assert self.replica_count >= 1
        assert len(self.lease_clock_rates) in (0, self.replica_count)
        assert self.session_timeout_ms > 0
        names = [f"replica-{number}" for number in range(1, self.replica_count + 1)]
        self.replicas = {name: SimReplica(name) for name in names}
        self.applied = {}
        self.snapshot_loaders = set()
        self.leaders = {}
        self.client_stores = {}
        self.client_hosts = []
        self.failures = []
        self._cuts = {}
        self._stalls = []
        self._cut_numbers = itertools.count(1)

    def loaded_snapshot(self, label: str) -> bool:
        """Whether incarnation `label` started from (or later reloaded) a snapshot."""
        return label in self.snapshot_loaders

    @property
    def trace(self) -> Trace:
        return self.world.trace

    @property
    def hosts(self) -> list[str]:
        """Every host on the network that matters to partitions: bookies, replicas, clients."""
        return (
            self.world.bookie_ids
            + list(self.replicas)
            + list(self.client_stores)
            + self.client_hosts
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[RsmCluster]:
        """Start every replica; leaving the block stops every incarnation abruptly."""
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            for replica in self.replicas.values():
                task_group.start_soon(self._run_replica, replica)
            yield self
            task_group.cancel_scope.cancel()
        self._task_group = None

    # --- replicas -----------------------------------------------------------------------------

    def up(self) -> list[SimReplica]:
        return [replica for replica in self.replicas.values() if replica.up]

    def leader(self) -> SimReplica | None:
        """The serving leader of the highest epoch, if any replica serves now."""
        serving = [
            replica
            for replica in self.up()
            if replica.replica is not None and replica.replica.is_leader
        ]
        if not serving:
            return None
        return max(serving, key=lambda replica: replica.replica.epoch if replica.replica else 0)

    def crash(self, name: str) -> None:
        """`kill -9` replica `name` (see the module docstring)."""
        sim = self.replicas[name]
        assert sim.up
        assert sim.scope is not None
        assert sim.store is not None
        assert not self.world.network.is_stalled(name), f"{name} is stalled: resume it first"
        store = sim.store
        self.world.network.crash(name)
        self._cuts.pop(name, None)
        sim.up = False
        sim.replica = None
        sim.store = None
        sim.scope.cancel()
        if store.session_state is SessionState.CONNECTED:
            store.suspend()
        self.trace.record(sim.label, "crash")
        assert self._task_group is not None
        self._task_group.start_soon(self._expire_crashed, sim.label, store)

    def restart(self, name: str) -> None:
        sim = self.replicas[name]
        assert not sim.up
        self.world.network.restart(name)
        assert self._task_group is not None
        self._task_group.start_soon(self._run_replica, sim)

    def transfer(self, name: str, to: str | None) -> None:
        """Ask replica `name` to hand leadership to `to` (None: anyone), in the background."""
        sim = self.replicas[name]
        if sim.tasks is None or sim.replica is None:
            return
        sim.tasks.start_soon(self._transfer, sim, sim.replica, to)

    async def _transfer(self, sim: SimReplica, replica: Replica, to: str | None) -> None:
        try:
            result = await replica.transfer_leadership(to)
        except (RsmError, BookieError) as error:
            self.world.stats["transfer-refused"] += 1
            self.trace.record(sim.label, f"transfer to {to} refused: {type(error).__name__}")
            return
        self.world.stats["transfer-done"] += 1
        self.trace.record(sim.label, f"transfer done: {result}")

    async def _run_replica(self, sim: SimReplica) -> None:
        sim.incarnation += 1
        incarnation = sim.incarnation
        label = sim.label
        _HOST.set(label)
        world = self.world
        store = world.metadata.client()
        listener = world.network.listen(sim.address)
        self.applied[label] = []
        machine = self.machine(
            functools.partial(self._observe, sim, incarnation),
            functools.partial(self.snapshot_loaders.add, label),
        )
        scope = anyio.CancelScope()
        sim.up = True
        sim.store = store
        sim.scope = scope
        self.trace.record(label, "start")
        try:
            with scope:
                async with (
                    LedgerClient.open(
                        store,
                        root=world.config.root,
                        connector=world.network.connector(sim.name),
                        rng=world.derive_rng(),
                        config=self.ledger_config,
                        wall_clock_ms=world.wall_clock_ms,
                    ) as ledgers,
                    Replica(
                        machine,
                        app=APP,
                        store=store,
                        ledgers=ledgers,
                        replica_id=sim.name,
                        listener=listener,
                        advertise=sim.address,
                        config=self.replica_config,
                        rng=world.derive_rng(),
                        wall_clock_ms=world.wall_clock_ms,
                        lease_clock_s=self._lease_clock(sim.name),
                    ) as replica,
                    self._beside(sim, replica),
                    anyio.create_task_group() as tasks,
                ):
                    sim.replica = replica
                    sim.tasks = tasks
                    await anyio.sleep_forever()
        except Exception as error:
            self.failures.append(f"{label} stopped with {error!r}")
            self.trace.record(label, f"failed: {error!r}")
        finally:
            sim.tasks = None
            # A crash handed the session over to `_expire_crashed`; otherwise it is ours.
            if sim.store is store:
                sim.up = False
                sim.replica = None
                sim.store = None
                self._cuts.pop(sim.name, None)
                with anyio.CancelScope(shield=True):
                    await store.aclose()

    def _beside(self, sim: SimReplica, replica: Replica) -> AbstractAsyncContextManager[object]:
        if self.beside is None:
            return contextlib.nullcontext()
        return self.beside(self, sim, replica)

    def _lease_clock(self, name: str) -> Callable[[], float]:
        rates = dict(zip(self.replicas, self.lease_clock_rates, strict=False))
        rate = rates.get(name, 1.0)  # every replica's, or none's (checked above)
        loop = asyncio.get_running_loop()
        return lambda: loop.time() * rate

    def _observe(self, sim: SimReplica, incarnation: int, applied: Applied) -> None:
        replica = sim.replica if sim.incarnation == incarnation else None
        term = replica.term if replica is not None else None
        self.applied[f"{sim.name}#{incarnation}"].append(applied)
        if term is not None and term.epoch == applied.epoch:
            leaders = self.leaders.setdefault(applied.epoch, [])
            if sim.name not in leaders:
                leaders.append(sim.name)

    async def _expire_crashed(self, label: str, store: MemoryMetadataStore) -> None:
        try:
            await anyio.sleep(self.session_timeout_ms / 1000)
            store.expire_session()
            self.trace.record(label, "session of the crashed incarnation expired")
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()

    # --- metadata sessions --------------------------------------------------------------------

    def store_of(self, host: str) -> MemoryMetadataStore | None:
        """The open metadata session of a replica or client host."""
        replica = self.replicas.get(host)
        if replica is not None:
            return replica.store
        return self.client_stores.get(host)

    def cut_off(self, host: str) -> bool:
        """Partition `host` from the metadata service; False if it has no connected session."""
        store = self.store_of(host)
        if store is None or store.session_state is not SessionState.CONNECTED:
            return False
        store.suspend()
        number = next(self._cut_numbers)
        self._cuts[host] = (store, number)
        assert self._task_group is not None
        self._task_group.start_soon(self._expire_if_still_cut, host, store, number)
        return True

    def reconnect(self, host: str) -> None:
        """End `host`'s cut from the metadata service (if its session is still the same)."""
        cut = self._cuts.pop(host, None)
        if cut is None:
            return
        store = cut[0]
        if store is self.store_of(host) and store.session_state is SessionState.SUSPENDED:
            store.resume()

    @property
    def cut_hosts(self) -> list[str]:
        return list(self._cuts)

    def expire(self, host: str, *, unnoticed_ms: float = 0) -> bool:
        """Expire `host`'s session now; False if it has none.

        With `unnoticed_ms`, `host` is cut off from the metadata service and
        hears nothing of it (its ZooKeeper client stalled, its process paused)
        for that long: then it reconnects and hears the whole story at once.
        """
        store = self.store_of(host)
        if store is None:
            return False
        if unnoticed_ms > 0:
            if store.session_state is not SessionState.CONNECTED:
                return False
            store.hold_session_events()
            store.suspend()
            assert self._task_group is not None
            self._task_group.start_soon(self._notice_after, host, store, unnoticed_ms)
        store.expire_session()
        return True

    async def _notice_after(self, host: str, store: MemoryMetadataStore, delay_ms: float) -> None:
        await anyio.sleep(delay_ms / 1000)
        if store is self.store_of(host) and store.session_state is SessionState.SUSPENDED:
            store.resume()
        store.release_session_events()

    async def _expire_if_still_cut(
        self, host: str, store: MemoryMetadataStore, number: int
    ) -> None:
        await anyio.sleep(self.session_timeout_ms / 1000)
        if self._cuts.get(host) == (store, number):
            store.expire_session()
            self.world.stats["session-expired-while-cut"] += 1
            self.trace.record(host, "session expired while cut off")

    # --- stalls -------------------------------------------------------------------------------

    @property
    def stalls(self) -> list[Stall]:
        return list(self._stalls)

    @property
    def stalled_hosts(self) -> list[str]:
        return [host for stall in self._stalls for host in stall.hosts]

    def stall(self, hosts: Sequence[str], length_ms: float) -> Stall:
        """SIGSTOP `hosts` together for `length_ms` (see the module docstring)."""
        assert hosts
        assert length_ms > 0
        assert not set(hosts) & set(self.stalled_hosts), "a host is stalled already"
        suspended: dict[str, MemoryMetadataStore] = {}
        for host in hosts:
            self.world.network.stall(host)
            store = self._session_of(host)
            if store is not None and store.session_state is SessionState.CONNECTED:
                store.hold_session_events()
                store.suspend()
                suspended[host] = store
        stall = Stall(tuple(hosts), length_ms, suspended)
        self._stalls.append(stall)
        assert self._task_group is not None
        self._task_group.start_soon(self._run_stall, stall)
        return stall

    def resume(self, stall: Stall) -> None:
        """SIGCONT: end `stall` now (nothing if it ended already)."""
        if stall not in self._stalls:
            return
        self._stalls.remove(stall)
        for host in stall.hosts:
            self.world.network.resume(host)
            store = stall.suspended.get(host)
            if store is None:
                continue
            if store is self._session_of(host) and store.session_state is SessionState.SUSPENDED:
                store.resume()
            store.release_session_events()
        self.trace.record("world", f"{list(stall.hosts)} resumed")

    async def _run_stall(self, stall: Stall) -> None:
        """Expire the sessions the stall outlasts, when it does; then end it."""
        ends = [(self._session_timeout_ms(host), host) for host in stall.suspended]
        waited_ms = 0.0
        for timeout_ms, host in sorted(ends):
            if timeout_ms >= stall.length_ms:
                break
            await anyio.sleep((timeout_ms - waited_ms) / 1000)
            waited_ms = timeout_ms
            if stall not in self._stalls:
                return
            store = stall.suspended[host]
            if store is self._session_of(host):
                store.expire_session()
                self.world.stats["session-expired-while-stalled"] += 1
                self.trace.record(host, "session expired while stalled")
        await anyio.sleep((stall.length_ms - waited_ms) / 1000)
        self.resume(stall)

    def _session_of(self, host: str) -> MemoryMetadataStore | None:
        """The open metadata session of a bookie, replica or client host."""
        bookie = self.world.bookies.get(host)
        if bookie is not None:
            return bookie.store
        return self.store_of(host)

    def _session_timeout_ms(self, host: str) -> int:
        if host in self.world.bookies:
            return self.world.config.bookie_session_timeout_ms
        return self.session_timeout_ms

    # --- clients ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def client(self, name: str) -> AsyncIterator[Client]:
        """An rsm client on host `name` with its own metadata session, for the block."""
        assert name not in self.client_stores
        assert name not in self.replicas
        store = self.world.metadata.client()
        self.client_stores[name] = store
        try:
            async with (
                store,
                connect(
                    APP,
                    store=store,
                    connector=self.world.network.connector(name),
                    rng=self.world.derive_rng(),
                    config=self.client_config,
                ) as client,
            ):
                yield client
        finally:
            self._cuts.pop(name, None)
            del self.client_stores[name]

    # --- the final log ------------------------------------------------------------------------

    async def read_log(self) -> FinalLog:
        """Read and replay the whole log (see the module docstring); retried while the
        bookies or the metadata service are still coming back."""
        for _attempt in range(READ_LOG_ATTEMPTS_MAX):
            try:
                return await self._read_log_once()
            except Exception as error:
                if not is_transient(error):
                    raise
                self.trace.record("checker", f"reading the log failed: {error!r}")
                await anyio.sleep(READ_LOG_RETRY_S)
        return await self._read_log_once()

    async def _read_log_once(self) -> FinalLog:
        async with self.world.client("checker", self.ledger_config) as ledgers:
            store = self.world.clients["checker"]
            log, _version = await LogStore(store, AppLayout.of(APP)).read()
            reader = SegmentReader(ledgers, self.replica_config.ledger_password)
            canonical: list[Applied] = []
            applier = _CountingApplier(self.machine(canonical.append, None)(), self.replica_config)
            open_segment = log.open_segment
            recovered = None
            if open_segment is not None:
                recovered = await reader.open(open_segment, recovery=True)
            await replay_log(log, reader, applier, recovered)
            markers: dict[int, str] = {}
            for segment in log.segments:
                if segment.epoch in markers:
                    continue
                handle = recovered if segment is open_segment else None
                marker = await _marker(reader, segment, handle)
                if marker is not None:
                    markers[segment.epoch] = marker
            return FinalLog(
                log,
                tuple(canonical),
                markers,
                applier.command_items,
                applier.sessions_expired,
                applier.overloaded,
                applier.applied_index,
                applier.machine.state_hash(),
            )


async def _marker(reader: SegmentReader, segment: Segment, handle: ReadHandle | None) -> str | None:
    """The replica id of the leader-start marker that opens `segment`, if it has one."""
    if handle is None:
        handle = await reader.open(segment, recovery=False)
    if handle.last_add_confirmed < 0:
        return None
    [(_entry_id, batch)] = await reader.read(segment, handle, 0, 0)
    if batch.items and isinstance(batch.items[0], LeaderStart):
        return batch.items[0].replica_id
    return None
