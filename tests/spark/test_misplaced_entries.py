"""An entry whose batch does not go on from the one before it (a gap, an overlap) or lies
outside its segment's indexes is never read as if it were in place: `rsm-log` fails naming
it (with `mode=PERMISSIVE` it is a `_corrupt` row), and so does `rsm spark snapshot`."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from bookie.client.ledger_client import LedgerClient
from bookie.meta.zk import ZkMetadataStore
from rsm.core.layout import AppLayout
from rsm.core.log_format import encode_batch, encode_command, encode_leader_start, encode_log
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.tools import cli

from .history import KnownCluster
from .kv_log import PASSWORD

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

FIRST_INDEXES = {
    "gap": ([1, 2, 5, 3], 3),  # entry 2 starts at 5; the previous ended at 2
    "overlap": ([1, 2, 2, 3], 3),  # entry 2 starts at 2 again
    "past-the-segment": ([1, 2, 3, 4], 3),  # entry 3 holds index 4, the segment ends at 3
}
"""Each entry's first index (one item each), and the segment's last index."""
MISPLACED = {
    "gap": (2, "it starts at index 5; the previous entry ended at 2"),
    "overlap": (2, "it starts at index 2; the previous entry ended at 2"),
    "past-the-segment": (3, "it holds indexes 4 .. 4, outside its segment's 1 .. 3"),
}


def _write_log(portal: BlockingPortal, known: KnownCluster, kind: str, tag: str) -> tuple[str, int]:
    """An application whose one CLOSED segment holds entries at `FIRST_INDEXES[kind]`; its
    name and the segment's ledger."""
    app = f"misplaced-{kind}-{tag}-{os.getpid()}"
    firsts, last_index = FIRST_INDEXES[kind]

    async def write() -> int:
        async with (
            ZkMetadataStore.connect(known.zk) as store,
            LedgerClient.open(store, root=known.ledger_root) as ledgers,
        ):
            handle = await ledgers.create_ledger(3, 3, 2, password=PASSWORD)
            for entry_id, first_index in enumerate(firsts):
                item = (
                    encode_leader_start("replica-1")
                    if entry_id == 0
                    else encode_command("set", [b"k%d" % entry_id, b"v"])
                )
                await handle.append(
                    encode_batch(
                        epoch=1,
                        first_index=first_index,
                        timestamp_ms=entry_id,
                        seed=0,
                        items=[item],
                    )
                )
            await handle.close()
            segment = Segment(handle.ledger_id, 1, 1, SegmentState.CLOSED, last_index)
            await store.create(
                AppLayout.of(app).log, encode_log(Log(1, (segment,))), make_parents=True
            )
            return handle.ledger_id

    return app, portal.call(write)


def _tag(request: Any) -> str:
    return hashlib.sha256(request.node.name.encode()).hexdigest()[:10]


def _read(spark: SparkSession, known: KnownCluster, app: str, **options: str) -> Any:
    return (
        spark.read.format("rsm-log")
        .option("zk", known.zk)
        .option("ledgerRoot", known.ledger_root)
        .option("app", app)
        .options(**options)
        .load()
    )


@pytest.mark.parametrize("max_entries", ["1000", "1"])  # one partition; one per entry
@pytest.mark.parametrize("kind", sorted(FIRST_INDEXES))
def test_a_misplaced_entry_fails_the_read_naming_it(
    spark: SparkSession,
    known: KnownCluster,
    portal: BlockingPortal,
    request: Any,
    *,
    kind: str,
    max_entries: str,
) -> None:
    app, ledger_id = _write_log(portal, known, kind, _tag(request))
    entry_id, why = MISPLACED[kind]
    message = rf"ledger {ledger_id} entry {entry_id} \(on bookies [^)]+\) is unreadable: {why}"
    if kind == "gap" and max_entries == "1":
        # Entry 3 is read by a task of its own, which may fail first: it does not go on
        # from entry 2 either.
        also = "entry 3 \\(on bookies [^)]+\\) is unreadable: it starts at index 3; the "
        message = rf"{message}|ledger {ledger_id} {also}previous entry ended at 5"
    with pytest.raises(PySparkException, match=message):
        _read(spark, known, app, maxEntriesPerPartition=max_entries).collect()


def test_a_misplaced_entry_is_a_corrupt_row_when_permissive(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, request: Any
) -> None:
    app, ledger_id = _write_log(portal, known, "gap", _tag(request))
    rows = (
        _read(spark, known, app, mode="PERMISSIVE")
        .orderBy("entry_id")
        .select("index", "entry_id", "_corrupt")
        .collect()
    )
    assert [(row["index"], row["entry_id"]) for row in rows] == [(1, 0), (2, 1), (None, 2), (3, 3)]
    corrupt = rows[2]["_corrupt"]
    assert corrupt.startswith(f"ledger {ledger_id} entry 2 (on bookies ")
    assert corrupt.endswith("is unreadable: it starts at index 5; the previous entry ended at 2")
    assert [row["_corrupt"] for row in rows if row["entry_id"] != 2] == [None, None, None]


def test_the_bulk_snapshot_of_a_log_with_an_overlap_fails_naming_the_entry(
    known: KnownCluster,
    portal: BlockingPortal,
    request: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # An overlap rather than a gap: only entry 2 is out of place whatever the tasks.
    app, ledger_id = _write_log(portal, known, "overlap", _tag(request))
    command = [
        *("spark", "snapshot", "--zk", known.zk, "--ledger-root", known.ledger_root),
        *("--app", app, "--machine", "kvstore.state_machine:KVStore", "--master", "local[2]"),
    ]

    assert cli.main(command) == 1

    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: EntryUnreadable: ledger {ledger_id} entry 2 (on bookies ")
    assert error.endswith("is unreadable: it starts at index 2; the previous entry ended at 2")
