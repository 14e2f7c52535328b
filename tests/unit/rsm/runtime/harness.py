"""Replicas of the test Counter over in-process bookies, for the runtime tests.

`replica_cluster` starts bookies (`tests.unit.bookie.client.cluster`, real
`BookieServer`s on loopback over `MemoryLedgerStorage`) and hands out a
`Replicas` to start, stop and kill replicas of one or more applications.
Each replica has its own metadata session and ledger client and listens on a
free loopback port, as a replica process would.

`kill` cancels a replica's scope: no graceful close, its ledger stays OPEN,
its session ends (ephemeral nodes vanish at once), like `kill -9` followed by
ZooKeeper noticing.  `stop` leaves the `async with Replica` block normally:
the graceful stop.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.abc

from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.clock import system_wall_clock_ms
from bookie.meta.api import MetadataStore
from bookie.meta.memory import MemoryMetadataStore
from rsm.client import Client, connect
from rsm.client import ClientConfig as RsmClientConfig
from rsm.config import ReplicaConfig
from rsm.core.roles import Role
from rsm.core.state_machine import StateMachine
from rsm.runtime.replica import Replica
from tests.unit.bookie.client.cluster import WAIT_S, LocalCluster, fast_config, memory_cluster
from tests.unit.rsm.core.counter import Counter

APP = "counter"

T = TypeVar("T")


def ledger_config() -> ClientConfig:
    """Ledger-client knobs for replicas: short timeouts, and an explicit LAC soon after the
    last entry so followers see it without waiting for the next write."""
    return fast_config(explicit_lac_interval_ms=20, long_poll_timeout_ms=1_000)


def replica_config(**overrides: int) -> ReplicaConfig:
    """Replica knobs for tests: transient errors are retried after 20 ms, not 200."""
    values: dict[str, int] = {"retry_delay_ms": 20, "transfer_wait_ms_max": 5_000}
    values.update(overrides)
    return ReplicaConfig(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Spec:
    """What `Replicas.start` was asked to run."""

    name: str
    app: str
    machine: type[StateMachine]
    config: ReplicaConfig
    seed: int
    wall_clock_ms: Callable[[], int]
    on_role: Callable[[Role], None] | None
    store_view: Callable[[MetadataStore], MetadataStore] | None
    """What the replica sees of its metadata session, if not the session itself."""
    options: dict[str, Any]
    """Further `Replica` arguments (TLS, client tokens)."""


@dataclass(eq=False)
class Running:
    """A replica the harness runs, and how to stop it."""

    replica: Replica
    store: MetadataStore
    scope: anyio.CancelScope
    stop: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)


class Replicas:
    """Starts and stops replicas on one bookie cluster."""

    def __init__(self, cluster: LocalCluster, task_group: anyio.abc.TaskGroup) -> None:
        self.cluster = cluster
        self._task_group = task_group
        self.running: dict[str, Running] = {}
        self._seeds = iter(range(1, 1_000_000))

    async def start(
        self,
        name: str,
        *,
        app: str = APP,
        machine: type[StateMachine] = Counter,
        config: ReplicaConfig | None = None,
        wall_clock_ms: Callable[[], int] = system_wall_clock_ms,
        on_role: Callable[[Role], None] | None = None,
        store_view: Callable[[MetadataStore], MetadataStore] | None = None,
        **options: Any,
    ) -> Replica:
        """Start replica `name` of `app`; return it once it runs (not necessarily caught up).
        `store_view` wraps its metadata session for the replica (its ledger client keeps
        the session itself); `options` are further `Replica` arguments."""
        spec = _Spec(
            name,
            app,
            machine,
            config or replica_config(),
            next(self._seeds),
            wall_clock_ms,
            on_role,
            store_view,
            options,
        )
        return await self._task_group.start(self._run, spec)  # type: ignore[no-any-return]

    async def _run(self, spec: _Spec, *, task_status: anyio.abc.TaskStatus[Replica]) -> None:
        with anyio.CancelScope() as scope:
            async with (
                self.cluster.store_factory() as store,
                LedgerClient.open(
                    store,
                    root=self.cluster.root,
                    rng=random.Random(spec.seed),
                    config=ledger_config(),
                ) as ledgers,
                Replica(
                    spec.machine,
                    app=spec.app,
                    store=store if spec.store_view is None else spec.store_view(store),
                    ledgers=ledgers,
                    replica_id=spec.name,
                    config=spec.config,
                    rng=random.Random(spec.seed),
                    wall_clock_ms=spec.wall_clock_ms,
                    on_role=spec.on_role,
                    **spec.options,
                ) as replica,
            ):
                running = Running(replica, store, scope)
                self.running[spec.name] = running
                task_status.started(replica)
                await running.stop.wait()
        running = self.running.pop(spec.name)
        running.done.set()

    def replica(self, name: str) -> Replica:
        return self.running[name].replica

    def memory_store(self, name: str) -> MemoryMetadataStore:
        """The in-memory metadata session of replica `name` (for its test hooks)."""
        store = self.running[name].store
        assert isinstance(store, MemoryMetadataStore)
        return store

    async def kill(self, name: str) -> None:
        """Stop abruptly: no graceful close, the session ends."""
        running = self.running[name]
        running.scope.cancel()
        with anyio.fail_after(WAIT_S):
            await running.done.wait()

    async def stop(self, name: str) -> None:
        """Stop gracefully."""
        running = self.running[name]
        running.stop.set()
        with anyio.fail_after(WAIT_S):
            await running.done.wait()

    async def wait_leader(self, app: str = APP, *, exclude: str | None = None) -> Replica:
        """The replica of `app` that serves as leader, once there is one (not `exclude`)."""

        def leader() -> Replica | None:
            for name, running in self.running.items():
                replica = running.replica
                if name != exclude and replica.app == app and replica.is_leader:
                    return replica
            return None

        return await wait_until(leader)

    @asynccontextmanager
    async def client(self, app: str = APP, **options: int) -> AsyncIterator[Client]:
        """An rsm client of `app` with its own metadata session."""
        async with (
            self.cluster.store_factory() as store,
            connect(
                app,
                store=store,
                rng=random.Random(next(self._seeds)),
                config=RsmClientConfig(**options),
            ) as client,
        ):
            yield client


async def wait_until(probe: Callable[[], T | None], timeout_s: float = WAIT_S) -> T:
    """Let the event loop run until `probe()` returns something; fail after `timeout_s`.

    It polls every millisecond: a condition to wait for, never a fixed delay
    that hopes something has happened meanwhile."""
    with anyio.fail_after(timeout_s):
        while True:
            value = probe()
            if value is not None and value is not False:
                return value
            await anyio.sleep(0.001)


@asynccontextmanager
async def replica_cluster(bookies: int = 3) -> AsyncIterator[Replicas]:
    """Bookies in memory on loopback, and a `Replicas` to run replicas on them."""
    async with memory_cluster(bookies) as cluster, anyio.create_task_group() as task_group:
        yield Replicas(cluster, task_group)
        task_group.cancel_scope.cancel()
