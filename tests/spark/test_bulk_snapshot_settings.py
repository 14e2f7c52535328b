"""`rsm spark snapshot` reduces with the settings of the class it is given (a `KVStore`
subclass whose defaults are the replicas' settings), and a rerun that finds nothing logged
after the snapshot a truncated log goes on from says so and succeeds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from kvstore.state_machine import KVStore
from pyspark.sql import SparkSession

from rsm.config import ReplicaConfig
from rsm.core.state_machine import StateMachine
from rsm.spark.bulk_snapshot import bulk_snapshot
from rsm.tools import cli
from rsm.tools.replay import Replay, replay_to
from rsm.tools.source import ClusterSource

from .history import KnownCluster
from .kv_log import Command, KvLogWriter, kv_commands, kv_writer

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

CONFIG = ReplicaConfig()


class SmallValuesKV(KVStore):
    """A store whose replicas run with `--value-bytes-max 100`."""

    def __init__(self) -> None:
        super().__init__(value_bytes_max=100)


@pytest.fixture
def writer(known: KnownCluster, portal: BlockingPortal, request: Any) -> Iterator[KvLogWriter]:
    app = f"kv-settings-{request.node.name[5:40]}-{os.getpid()}"
    with kv_writer(known.zk, known.ledger_root, portal, app) as writer:
        yield writer


def _replay(
    portal: BlockingPortal,
    known: KnownCluster,
    app: str,
    machine_class: type[StateMachine],
    *,
    from_snapshot: bool = False,
) -> Replay:
    async def run() -> Replay:
        async with ClusterSource.connect(known.zk, app, ledger_root=known.ledger_root) as source:
            return await replay_to(
                source, machine_class, CONFIG, to_index=None, from_snapshot=from_snapshot
            )

    return portal.call(run)


def test_the_reducer_takes_the_bounds_of_the_class_it_reduces_for(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, writer: KvLogWriter
) -> None:
    big, small = b"x" * 200, b"y" * 80
    commands: list[Command] = [
        ("set", [b"big", big]),  # refused by SmallValuesKV's replicas
        ("set", [b"small", small]),
        ("mset", [b"m1", small, b"m2", big]),  # refused whole
        ("set", [b"kept", big, b"GET"]),
        ("append", [b"small", small]),  # past 100 bytes: refused
    ]
    portal.call(writer.segment, [*commands, *kv_commands(40, seed=21)])
    replayed = _replay(portal, known, writer.app, SmallValuesKV)
    machine = replayed.machine
    assert isinstance(machine, SmallValuesKV)
    assert {b"big", b"m1", b"m2", b"kept"}.isdisjoint(machine.values)
    assert machine.values[b"small"] == small
    unbounded = _replay(portal, known, writer.app, KVStore)
    assert unbounded.state_hash() != replayed.state_hash()

    report = bulk_snapshot(
        spark, known.zk, writer.app, SmallValuesKV, ledger_root=known.ledger_root
    )

    assert report.state_hash == replayed.state_hash().hex()
    loaded = _replay(portal, known, writer.app, SmallValuesKV, from_snapshot=True)
    assert loaded.from_snapshot is not None
    assert loaded.from_snapshot.index == report.index
    restored = loaded.machine
    assert isinstance(restored, SmallValuesKV)
    assert restored.value_bytes_max == 100
    assert list(restored.values.items()) == list(machine.values.items())


def test_a_rerun_with_nothing_new_after_the_snapshot_of_a_truncated_log_succeeds(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    writer: KvLogWriter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    portal.call(writer.segment, kv_commands(30, seed=22))
    portal.call(writer.segment, kv_commands(30, seed=23))
    first = bulk_snapshot(spark, known.zk, writer.app, KVStore, ledger_root=known.ledger_root)
    assert first.index == writer.index - 1
    portal.call(writer.truncate_first_segment)
    command = [
        *("spark", "snapshot", "--zk", known.zk, "--ledger-root", known.ledger_root),
        *("--app", writer.app, "--machine", "kvstore.state_machine:KVStore"),
        *("--master", "local[2]"),
    ]

    assert cli.main(command) == 0

    out = capsys.readouterr().out.strip()
    assert out == (
        f"nothing logged after the snapshot of {writer.app} at index {first.index} (ledger "
        f"{first.ledger_id}, state hash {first.state_hash}): it is the state at the log's "
        "readable end; no snapshot written"
    )
