"""`mode=PERMISSIVE`: an unreadable entry is a row naming it in `_corrupt`, not a failed read."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from bookie.address import parse_address
from bookie.client.bookie_conn import BookieConnection
from bookie.client.ledger_client import LedgerClient
from bookie.meta.zk import ZkMetadataStore
from bookie.wire.packet import Digest, master_key

from .history import PASSWORD, KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

UNREADABLE = r"^ledger {ledger} entry {entry} \(on bookies [^)]+\) is unreadable: "


def _read(spark: SparkSession, source: str, options: dict[str, str], **more: str) -> DataFrame:
    return spark.read.format(source).options(**options, **more).load()


@pytest.mark.parametrize("arrow", ["true", "false"])
def test_a_log_entry_that_is_no_batch_is_a_row_naming_it(
    spark: SparkSession, known: KnownCluster, arrow: str
) -> None:
    options = known.options("corrupt")
    with pytest.raises(PySparkException, match="is unreadable"):
        _read(spark, "rsm-log", options, arrow=arrow).collect()  # FAILFAST, the default

    frame = _read(spark, "rsm-log", options, mode="PERMISSIVE", arrow=arrow)

    assert frame.columns[-1] == "_corrupt"
    marker, corrupt = sorted(frame.collect(), key=lambda row: row.entry_id)
    assert (marker["index"], marker.command, marker["_corrupt"]) == (1, None, None)
    assert (corrupt.ledger_id, corrupt.entry_id) == (marker.ledger_id, 1)
    assert (corrupt["index"], corrupt.leader_time, corrupt.payload_bytes) == (None, None, None)
    pattern = UNREADABLE.format(ledger=corrupt.ledger_id, entry=1)
    assert re.match(pattern, corrupt["_corrupt"])
    assert all(bookie in corrupt["_corrupt"] for bookie in known.bookie_ids)


@pytest.fixture
def mismatched(known: KnownCluster, portal: BlockingPortal) -> Iterator[int]:
    """A CLOSED ledger of 3 entries whose entry 1 fails its digest on every bookie (deleted
    after the test: a read of every ledger would fail on it)."""

    async def write(ledgers: LedgerClient) -> int:
        handle = await ledgers.create_ledger(3, 3, 2, password=PASSWORD)
        for number in range(3):
            await handle.append(b"entry %d of %d" % (number, os.getpid()))
        await handle.close()
        metadata = await ledgers.ledger_metadata(handle.ledger_id)
        packet = bytearray(
            Digest(metadata.digest_type, PASSWORD).build_entry(
                handle.ledger_id, 1, 0, metadata.length, b"entry 1"
            )
        )
        packet[-1] ^= 0x01  # the digest no longer matches the payload
        for bookie in metadata.ensemble_at(1):
            address = parse_address(ledgers.bookie_address(bookie) or bookie)
            async with BookieConnection.connect(address.host, address.port) as connection:
                await connection.add(
                    handle.ledger_id, 1, master_key(PASSWORD), bytes(packet), recovery=True
                )
        return handle.ledger_id

    with (
        portal.wrap_async_context_manager(ZkMetadataStore.connect(known.zk)) as store,
        portal.wrap_async_context_manager(
            LedgerClient.open(store, root=known.ledger_root)
        ) as ledgers,
    ):
        ledger_id = portal.call(write, ledgers)
        try:
            yield ledger_id
        finally:
            portal.call(ledgers.delete_ledger, ledger_id)


def test_a_ledger_entry_failing_its_digest_everywhere_says_so(
    spark: SparkSession, known: KnownCluster, mismatched: int
) -> None:
    options: dict[str, Any] = {
        "zk": known.zk,
        "ledgerRoot": known.ledger_root,
        "ledgers": str(mismatched),
    }
    with pytest.raises(PySparkException, match=f"ledger {mismatched} entry 1 .*DigestMismatch"):
        _read(spark, "ledger", options).collect()

    rows = sorted(
        _read(spark, "ledger", options, mode="permissive").collect(), key=lambda row: row.entry_id
    )

    assert [(row.entry_id, row.digest) for row in rows] == [
        (0, "verified"),
        (1, "mismatch"),
        (2, "verified"),
    ]
    assert (rows[1].payload, rows[1].payload_bytes) == (None, None)
    assert "DigestMismatch" in rows[1]["_corrupt"]
    assert [row["_corrupt"] for row in (rows[0], rows[2])] == [None, None]
    assert bytes(rows[2].payload) == b"entry 2 of %d" % os.getpid()


def test_a_mode_that_does_not_exist_is_named(spark: SparkSession, known: KnownCluster) -> None:
    with pytest.raises(PySparkException, match="option mode='lenient' is not one of"):
        _read(spark, "rsm-log", known.options("known"), mode="lenient").collect()
