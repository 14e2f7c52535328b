"""Helpers for the snapshot tests that run replicas over in-process bookies.

`snapshot_config` gives fast policy and truncation knobs; `AppView` reads an
application's log and snapshots znode and lists ledgers through its own metadata
session and ledger client, as an operator's tool would; `gated_replica` runs a
replica whose bookie connections can be held (`Gate`), so that it falls behind
the log while it still runs.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from bookie.client.connections import tcp_connector
from bookie.client.ledger_client import LedgerClient
from bookie.meta.api import MetadataStore
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_state import Log
from rsm.core.snapshot_manifest import SnapshotsValue
from rsm.core.state_machine import StateMachine, command, query
from rsm.runtime.log import LogStore
from rsm.runtime.replica import Replica
from rsm.snapshots.store import SnapshotStore
from tests.unit.bookie.server.support import eventually
from tests.unit.rsm.runtime.harness import APP, Replicas, ledger_config, replica_config


def snapshot_config(**overrides: Any) -> ReplicaConfig:
    """Small segments, no automatic snapshots, truncation at once, checks every 20 ms."""
    values: dict[str, Any] = {
        "segment_entries_max": 5,
        "snapshot_every_commands": 0,
        "snapshot_every_log_bytes": 0,
        "snapshot_every_ms": 0,
        "snapshot_check_interval_ms": 20,
        "retention_ms": 0,
        "state_hash_every_commands": 10,
    }
    values.update(overrides)
    return replica_config(**values)


class Bulk(StateMachine):
    """A state that grows by whole runs of values, to make snapshots of some size."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.total = 0

    @command
    def fill(self, first: int, count: int, size: int) -> int:
        for key in range(first, first + count):
            self.values[key.to_bytes(8, "big")] = bytes([key % 251]) * size
        self.total += count
        return len(self.values)

    @command
    def add(self, amount: int = 1) -> int:
        self.total += amount
        return self.total

    @query
    def count(self) -> int:
        return len(self.values)


@dataclass
class AppView:
    """An application's metadata and ledgers, seen from outside its replicas."""

    store: MetadataStore
    ledgers: LedgerClient
    layout: AppLayout

    async def log(self) -> Log:
        log, _version = await LogStore(self.store, self.layout).read()
        return log

    def snapshot_store(self) -> SnapshotStore:
        return SnapshotStore(self.store, self.ledgers, self.layout, ReplicaConfig())

    async def snapshots(self) -> SnapshotsValue:
        value, _version = await self.snapshot_store().read()
        return value

    async def ledger_ids(self) -> set[int]:
        return set(await self.ledgers.list_ledgers())

    async def wait_truncated_past(self, index: int, timeout_s: float = 10.0) -> None:
        """Until the log no longer holds `index` (truncated behind a snapshot)."""

        async def truncated() -> bool:
            return (await self.log()).first_index > index

        await eventually(truncated, poll_s=0.005, timeout_s=timeout_s)


@asynccontextmanager
async def app_view(replicas: Replicas, app: str = APP) -> AsyncIterator[AppView]:
    async with replicas.cluster.store_factory() as store, replicas.cluster.client() as ledgers:
        yield AppView(store, ledgers, AppLayout.of(app))


class Gate:
    """Holds every byte from and to the bookies while closed."""

    def __init__(self) -> None:
        self._open = anyio.Event()
        self._open.set()

    def close(self) -> None:
        if self._open.is_set():
            self._open = anyio.Event()

    def open(self) -> None:
        self._open.set()

    async def wait(self) -> None:
        await self._open.wait()


class GatedStream(anyio.abc.ByteStream):
    def __init__(self, inner: anyio.abc.ByteStream, gate: Gate) -> None:
        self._inner = inner
        self._gate = gate

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._inner.receive(max_bytes)
        await self._gate.wait()
        return data

    async def send(self, item: bytes) -> None:
        await self._gate.wait()
        await self._inner.send(item)

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def aclose(self) -> None:
        await self._inner.aclose()

    @property
    def extra_attributes(self) -> Any:
        return self._inner.extra_attributes


@asynccontextmanager
async def gated_replica(
    replicas: Replicas,
    name: str,
    gate: Gate,
    machine: type[StateMachine],
    config: ReplicaConfig,
) -> AsyncIterator[Replica]:
    """Replica `name` whose bookie connections pass through `gate`."""

    async def connector(address: str) -> anyio.abc.ByteStream:
        await gate.wait()
        return GatedStream(await tcp_connector(address), gate)

    async with (
        replicas.cluster.store_factory() as store,
        LedgerClient.open(
            store,
            root=replicas.cluster.root,
            rng=random.Random(99),
            config=ledger_config(),
            connector=connector,
        ) as ledgers,
        Replica(
            machine, app=APP, store=store, ledgers=ledgers, replica_id=name, config=config
        ) as replica,
    ):
        yield replica
