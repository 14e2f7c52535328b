"""`rsm spark export --since-last` never loses what an earlier export holds: after the log was
truncated behind a snapshot (the exported indexes it no longer has stay), and when a run
fails (the export and its record stay as they were)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from rsm import limits
from rsm.core.layout import AppLayout
from rsm.core.log_format import encode_log
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.spark import jobs
from rsm.spark.jobs import STATE_FILE

from .frames import parquet_rows
from .history import KnownCluster
from .kv_log import PASSWORD, KvLogWriter, kv_commands, kv_writer

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]


@pytest.fixture
def writer(known: KnownCluster, portal: BlockingPortal, request: Any) -> Iterator[KvLogWriter]:
    """A writer of a new application's log on the Spark tests' cluster."""
    test = hashlib.sha256(request.node.name.encode()).hexdigest()[:12]  # one per parameter
    app = f"export-{test}-{os.getpid()}"
    with kv_writer(known.zk, known.ledger_root, portal, app) as writer:
        yield writer


def _export(
    spark: SparkSession, known: KnownCluster, writer: KvLogWriter, path: Path, **kwargs: Any
) -> jobs.ExportReport:
    return jobs.export(
        spark, known.zk, writer.app, str(path), ledger_root=known.ledger_root, **kwargs
    )


def _files(path: Path) -> dict[str, bytes]:
    """Every file under `path` (Spark's checksums left out), by relative name, with its bytes."""
    return {
        str(file.relative_to(path)): file.read_bytes()
        for file in sorted(path.rglob("*"))
        if file.is_file() and not file.name.endswith(".crc")
    }


@pytest.mark.parametrize(
    ("block_commands", "options"),
    [
        (limits.spark_export_block_commands_default, {}),  # the block starts at index 1
        (10, {}),  # the block holding the next index starts below the log's first index
        (10, {"onDataLoss": "snapshot"}),
    ],
)
def test_an_incremental_export_after_truncation_keeps_every_exported_index(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    writer: KvLogWriter,
    tmp_path: Path,
    *,
    block_commands: int,
    options: dict[str, str],
) -> None:
    path, whole = tmp_path / "export", tmp_path / "whole"
    portal.call(writer.segment, kv_commands(30, seed=1))
    first = _export(spark, known, writer, path, since_last=True, block_commands=block_commands)
    assert first.next_index == writer.index
    assert (first.next_index - 1) % 10 != 0  # the block is partly exported
    portal.call(writer.segment, kv_commands(20, seed=2))
    _export(spark, known, writer, whole, block_commands=block_commands)  # what the log held
    assert portal.call(writer.truncate_first_segment) == first.next_index

    report = _export(spark, known, writer, path, since_last=True, **options)

    assert report.next_index == writer.index
    expected = parquet_rows(spark, whole)
    assert [row[0] for row in expected] == list(range(1, writer.index))
    assert parquet_rows(spark, path) == expected
    # Rerunning it changes nothing.
    again = _export(spark, known, writer, path, since_last=True, **options)
    assert again.next_index == writer.index
    assert parquet_rows(spark, path) == expected


@pytest.mark.parametrize("since_last", [True, False], ids=["incremental", "full"])
def test_a_failed_export_leaves_the_export_and_its_record(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    writer: KvLogWriter,
    tmp_path: Path,
    *,
    since_last: bool,
) -> None:
    path = tmp_path / "export"
    portal.call(writer.segment, kv_commands(30, seed=3))
    _export(spark, known, writer, path, since_last=True)
    if not since_last:  # a full export over it, written beside it and swapped in
        portal.call(writer.segment, kv_commands(5, seed=4))
        report = _export(spark, known, writer, path, since_last=False)
        assert (report.first_index, report.next_index) == (1, writer.index)
        assert sorted(child.name for child in tmp_path.iterdir()) == ["export"]
    before, rows = _files(path), parquet_rows(spark, path)
    assert STATE_FILE in before
    assert len(rows) == writer.index - 1

    portal.call(_append_unreadable_segment, writer)
    with pytest.raises(PySparkException, match=r"entry 0 \(on bookies [^)]+\) is unreadable"):
        _export(spark, known, writer, path, since_last=since_last)

    assert _files(path) == before
    assert parquet_rows(spark, path) == rows


async def _append_unreadable_segment(writer: KvLogWriter) -> None:
    """A new CLOSED segment whose one entry is not a batch, published in the log znode."""
    handle = await writer.ledgers.create_ledger(3, 3, 2, password=PASSWORD)
    await handle.append(b"\xa1not a batch")
    await handle.close()
    epoch = writer.log.epoch + 1
    index = writer.index
    writer.segments.append(Segment(handle.ledger_id, epoch, index, SegmentState.CLOSED, index))
    layout = AppLayout.of(writer.app)
    versioned = await writer.store.get(layout.log)
    await writer.store.set(
        layout.log, encode_log(Log(epoch, tuple(writer.segments))), versioned.version
    )


class _Killed(BaseException):
    """A kill -9 as the code after it sees it: nothing more runs (no handler catches it)."""


@pytest.mark.parametrize("point", ["rename-0", "rename-1", "rename-2", "rename-3", "record"])
def test_an_incremental_export_killed_among_its_moves_is_finished_by_the_next(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    writer: KvLogWriter,
    tmp_path: Path,
    *,
    monkeypatch: pytest.MonkeyPatch,
    point: str,
) -> None:
    path, whole = tmp_path / "export", tmp_path / "whole"
    portal.call(writer.segment, kv_commands(25, seed=5))
    first = _export(spark, known, writer, path, since_last=True, block_commands=10)
    # The next run rewrites block 21 (set aside, then replaced) and adds 31 and 41: four
    # renames, then the record.
    portal.call(writer.segment, kv_commands(20, seed=6))
    if point == "record":
        monkeypatch.setattr(jobs, "_drop_set_aside", _die)
    else:
        monkeypatch.setattr(jobs.os, "rename", _dying_rename(int(point.removeprefix("rename-"))))
    with pytest.raises(_Killed):
        _export(spark, known, writer, path, since_last=True)
    monkeypatch.undo()
    recorded = json.loads((path / STATE_FILE).read_text())["next_index"]
    assert recorded == (writer.index if point == "record" else first.next_index)

    report = _export(spark, known, writer, path, since_last=True)

    assert report.next_index == writer.index
    _export(spark, known, writer, whole, block_commands=10)
    assert parquet_rows(spark, path) == parquet_rows(spark, whole)
    assert sorted(child.name for child in tmp_path.iterdir()) == ["export", "whole"]
    assert not [child.name for child in path.iterdir() if child.name.startswith(".index_from")]


def _die(*_: object) -> None:
    raise _Killed


def _dying_rename(renames: int) -> Any:
    """`os.rename` that dies at its call number `renames` (counted from 0)."""
    real, done = os.rename, [0]

    def rename(source: Any, target: Any) -> None:
        if done[0] == renames:
            raise _Killed
        done[0] += 1
        real(source, target)

    return rename
