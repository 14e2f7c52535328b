"""`rsm spark snapshot`: the key-value store's state computed in Spark, against replay."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from kvstore.state_machine import KVStore
from pyspark.sql import SparkSession

from rsm.config import ReplicaConfig
from rsm.core.commands import answer_query
from rsm.spark.bulk_snapshot import REPLICA_ID, bulk_snapshot
from rsm.tools import cli
from rsm.tools.replay import Replay, replay_to
from rsm.tools.source import ClusterSource

from .history import KnownCluster
from .kv_log import KvLogWriter, kv_commands, kv_writer

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

CONFIG = ReplicaConfig()


@pytest.fixture
def writer(known: KnownCluster, portal: BlockingPortal, request: Any) -> Iterator[KvLogWriter]:
    """A writer of a new application's log on the Spark tests' cluster."""

    app = f"kv-{request.node.name[:40]}-{os.getpid()}"
    with kv_writer(known.zk, known.ledger_root, portal, app) as writer:
        yield writer


def _replay(
    portal: BlockingPortal, known: KnownCluster, app: str, to_index: int | None, from_snapshot: bool
) -> Replay:
    async def run() -> Replay:
        async with ClusterSource.connect(known.zk, app, ledger_root=known.ledger_root) as source:
            return await replay_to(
                source, KVStore, CONFIG, to_index=to_index, from_snapshot=from_snapshot
            )

    return portal.call(run)


def _state(replay: Replay) -> tuple[Any, ...]:
    """The replayed state in full, dict orders included, and the session table."""
    machine = replay.machine
    assert isinstance(machine, KVStore)
    return (
        list(machine.values.items()),
        list(machine.versions.items()),
        list(machine.tombstones.items()),
        machine.tombstones_forgotten_index,
        machine.expire_at_ms,
        replay.applier.sessions.to_plain(),
    )


def test_the_bulk_snapshot_is_the_state_replay_reaches_and_replicas_go_on_from_it(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, writer: KvLogWriter
) -> None:
    portal.call(writer.segment, kv_commands(1500, seed=1))
    portal.call(writer.segment, kv_commands(500, seed=2))
    last = writer.index - 1

    report = bulk_snapshot(spark, known.zk, writer.app, KVStore, ledger_root=known.ledger_root)

    assert report.index == last
    replayed = _replay(portal, known, writer.app, last, from_snapshot=False)
    assert report.state_hash == replayed.state_hash().hex()
    loaded = _replay(portal, known, writer.app, last, from_snapshot=True)
    assert loaded.from_snapshot is not None
    assert (loaded.from_snapshot.index, loaded.from_snapshot.replica_id) == (last, REPLICA_ID)
    assert _state(loaded) == _state(replayed)
    # The log exercised what matters: retries skipped, kept outcomes, deletions, values.
    assert report.skipped > 0
    assert replayed.applier.sessions.to_plain()["sessions"]
    assert isinstance(replayed.machine, KVStore)
    assert replayed.machine.tombstones
    assert replayed.machine.values

    # A replica starting now loads the bulk snapshot and applies only the log after it.
    portal.call(writer.segment, kv_commands(300, seed=3))
    resumed = _replay(portal, known, writer.app, None, from_snapshot=True)
    assert resumed.from_snapshot is not None
    assert resumed.from_snapshot.replica_id == REPLICA_ID
    full = _replay(portal, known, writer.app, None, from_snapshot=False)
    assert resumed.state_hash() == full.state_hash()
    assert _state(resumed) == _state(full)
    position = resumed.position
    keys = [f"k{number}".encode() for number in range(24)]
    answers = [answer_query(resumed.machine, "get", [key], applied=position) for key in keys]
    expected = [answer_query(full.machine, "get", [key], applied=position) for key in keys]
    assert answers == expected
    assert any(answer.value is not None for answer in answers)


def test_a_command_the_reducer_cannot_reduce_fails_the_snapshot_naming_it(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    writer: KvLogWriter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    portal.call(writer.segment, kv_commands(60, seed=4, extra=("expire", [b"k1", b"10"])))
    words = ["--zk", known.zk, "--ledger-root", known.ledger_root, "--app", writer.app]
    machine = ["--machine", "kvstore.state_machine:KVStore", "--master", "local[2]"]

    assert cli.main(["spark", "snapshot", *words, *machine]) == 2

    error = capsys.readouterr().err.strip()
    assert error.startswith("error: NotReducible: index "), error
    assert "EXPIRE" in error
    assert "\n" not in error


def test_a_class_without_a_reducer_is_bad_input(
    known: KnownCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    words = ["--zk", known.zk, "--app", known.apps["known"]]
    machine = ["--machine", "rsm.testing.workload:SimStore"]
    assert cli.main(["spark", "snapshot", *words, *machine]) == 2
    assert "declares no Spark reducer" in capsys.readouterr().err
