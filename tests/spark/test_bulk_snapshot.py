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
from .kv_log import KvLogWriter, blind_commands, interleaved, kv_commands, kv_writer

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


def _snapshot_command(known: KnownCluster, writer: KvLogWriter) -> list[str]:
    """`rsm spark snapshot` of the writer's application, on `local[2]`."""
    return [
        *("spark", "snapshot", "--zk", known.zk, "--ledger-root", known.ledger_root),
        *("--app", writer.app, "--machine", "kvstore.state_machine:KVStore"),
        *("--master", "local[2]"),
    ]


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
    # Keys only blind commands name (reduced to runs) and keys others name (kept and applied),
    # some named together; two tasks, each holding retries to skip, so each passes again.
    portal.call(writer.segment, interleaved(kv_commands(700, seed=1), blind_commands(500, 5), 8))
    portal.call(writer.segment, interleaved(kv_commands(300, seed=2), blind_commands(200, 6), 9))
    last = writer.index - 1

    report = bulk_snapshot(spark, known.zk, writer.app, KVStore, ledger_root=known.ledger_root)

    assert report.index == last
    assert (report.tasks, report.rerun_tasks) == (2, 2)
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
    for kind in (replayed.machine.values, replayed.machine.tombstones):
        assert {b"b", b"k"} <= {key[:1] for key in kind}
    assert {b"\xffodd", b'{"hex":"ff6f6464"}'} <= {
        *replayed.machine.values,
        *replayed.machine.tombstones,
    }

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


def test_ttls_are_reduced_to_the_expiries_replay_reaches(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, writer: KvLogWriter
) -> None:
    commands = interleaved(kv_commands(400, seed=15, ttl=True), blind_commands(300, 16), 15)
    portal.call(writer.segment, commands)
    portal.call(writer.segment, kv_commands(200, seed=17, ttl=True))
    last = writer.index - 1

    report = bulk_snapshot(spark, known.zk, writer.app, KVStore, ledger_root=known.ledger_root)

    replayed = _replay(portal, known, writer.app, last, from_snapshot=False)
    assert report.state_hash == replayed.state_hash().hex()
    loaded = _replay(portal, known, writer.app, last, from_snapshot=True)
    assert loaded.from_snapshot is not None
    assert loaded.from_snapshot.index == last
    assert _state(loaded) == _state(replayed)
    assert report.rerun_tasks >= report.tasks  # every task passed again, keeping the TTL keys
    machine = replayed.machine
    assert isinstance(machine, KVStore)
    assert machine.expire_at_ms  # keys expiring after the snapshot's index
    assert any(at is not None for _index, at in machine.tombstones.values())  # and before


def test_a_command_the_reducer_cannot_reduce_fails_the_snapshot_naming_it(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    writer: KvLogWriter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    portal.call(writer.segment, kv_commands(60, seed=4, extra=("rename", [b"k1", b"k2"])))

    assert cli.main(_snapshot_command(known, writer)) == 2

    error = capsys.readouterr().err.strip()
    assert error.startswith("error: NotReducible: index "), error
    assert "RENAME" in error
    assert "\n" not in error


def test_a_class_without_a_reducer_is_bad_input(
    known: KnownCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    words = ["--zk", known.zk, "--app", known.apps["known"]]
    machine = ["--machine", "rsm.testing.workload:SimStore"]
    assert cli.main(["spark", "snapshot", *words, *machine]) == 2
    assert "declares no Spark reducer" in capsys.readouterr().err


def test_a_truncated_log_is_reduced_on_top_of_the_snapshot_it_goes_on_from(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, writer: KvLogWriter
) -> None:
    portal.call(writer.segment, interleaved(kv_commands(300, seed=7), blind_commands(300, 8), 7))
    first = bulk_snapshot(spark, known.zk, writer.app, KVStore, ledger_root=known.ledger_root)
    portal.call(writer.segment, interleaved(kv_commands(300, seed=9), blind_commands(300, 10), 9))
    assert portal.call(writer.truncate_first_segment) == first.index + 1
    last = writer.index - 1
    replayed = _replay(portal, known, writer.app, last, from_snapshot=True)
    assert replayed.from_snapshot is not None
    assert replayed.from_snapshot.index == first.index

    report = bulk_snapshot(spark, known.zk, writer.app, KVStore, ledger_root=known.ledger_root)

    assert (report.from_snapshot, report.index) == (first.index, last)
    assert report.state_hash == replayed.state_hash().hex()
    loaded = _replay(portal, known, writer.app, last, from_snapshot=True)
    assert loaded.from_snapshot is not None
    assert loaded.from_snapshot.index == last
    assert _state(loaded) == _state(replayed)


def test_a_truncated_log_no_snapshot_covers_is_refused_naming_the_missing_range(
    known: KnownCluster,
    portal: BlockingPortal,
    writer: KvLogWriter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    portal.call(writer.segment, kv_commands(20, seed=11))
    portal.call(writer.segment, kv_commands(20, seed=12))
    first_index = portal.call(writer.truncate_first_segment)

    assert cli.main(_snapshot_command(known, writer)) == 1  # not bad input: the log's state

    assert capsys.readouterr().err.strip() == (
        f"error: Truncated: indexes [1, {first_index}) of {writer.app!r} were truncated away "
        "and no registered snapshot covers them: a bulk snapshot reduces the log from index 1 "
        "or from a snapshot the log goes on from"
    )
