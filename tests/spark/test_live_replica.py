"""`rsm-log` beside a live leader: what a real replica logged, read while it goes on leading."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal
from pyspark.sql import SparkSession

from bookie.client.ledger_client import LedgerClient
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk import ZkMetadataStore
from rsm import StateMachine, command
from rsm.config import ReplicaConfig
from rsm.runtime.replica import Replica
from tests.unit.bookie.server.support import wait_for

from .history import KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

PUTS = 240
CONCURRENCY = 4
WAIT_S = 60.0


class Registers(StateMachine):
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    @command
    def put(self, key: str, value: str) -> None:
        self.values[key] = value


@contextlib.asynccontextmanager
async def leading(zookeeper: LocalZooKeeper, ledger_root: str, app: str) -> AsyncIterator[Replica]:
    config = ReplicaConfig(
        segment_entries_max=25,
        snapshot_every_commands=0,
        snapshot_every_log_bytes=0,
        snapshot_every_ms=0,
        retry_delay_ms=50,
    )
    async with (
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
        LedgerClient.open(store, root=ledger_root) as ledgers,
        Replica(
            Registers, app=app, store=store, ledgers=ledgers, replica_id="r1", config=config
        ) as replica,
    ):
        await wait_for(lambda: replica.is_leader, WAIT_S)
        yield replica


async def put_all(replica: Replica, first: int, count: int) -> None:
    async def worker(offset: int) -> None:
        for number in range(first + offset, first + count, CONCURRENCY):
            await replica.call("put", f"k{number % 17}", f"v{number}")

    async with anyio.create_task_group() as group:
        for offset in range(CONCURRENCY):
            group.start_soon(worker, offset)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"


def test_a_live_leaders_log_reads_whole_and_the_leader_goes_on(
    spark: SparkSession,
    known: KnownCluster,
    zookeeper: LocalZooKeeper,
    portal: BlockingPortal,
) -> None:
    app = f"live-{os.getpid()}"
    with portal.wrap_async_context_manager(leading(zookeeper, known.ledger_root, app)) as leader:
        portal.call(put_all, leader, 0, PUTS)
        frame = (
            spark.read.format("rsm-log")
            .options(zk=known.zk, ledgerRoot=known.ledger_root, app=app)
            .load()
            .select("index", "epoch", "ledger_id", "command", "arguments")
        )
        rows: list[Any] = []

        def read_all() -> bool:
            # The open segment is read to its LAC, which the leader publishes when idle.
            rows[:] = sorted(frame.collect())
            return len(rows) == leader.applied_index

        wait_until(read_all)
        assert [row["index"] for row in rows] == list(range(1, PUTS + 2))
        assert rows[0].command is None
        assert json.loads(rows[0].arguments) == {"leader_start": "r1"}
        assert {row.epoch for row in rows} == {1}
        assert len({row.ledger_id for row in rows}) > 1, "rollovers: several segments"
        puts = sorted(json.loads(row.arguments)["args"][1] for row in rows[1:])
        assert puts == sorted(f"v{number}" for number in range(PUTS))
        assert {row.command for row in rows[1:]} == {"put"}
        # Nothing was fenced: the leader still leads and logs.
        portal.call(put_all, leader, PUTS, CONCURRENCY)
        assert leader.is_leader
        assert leader.applied_index == PUTS + 1 + CONCURRENCY
