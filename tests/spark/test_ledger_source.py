"""`spark.read.format("ledger")`: raw entries of chosen ledgers, as the bookies hold them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from .history import KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]


def test_chosen_ledgers_give_every_readable_entry_with_its_bookies(
    spark: SparkSession, known: KnownCluster
) -> None:
    expected = known.expected["known"]
    ids = ",".join(str(ledger_id) for ledger_id in expected.ledgers)
    frame = (
        spark.read.format("ledger")
        .option("zk", known.zk)
        .option("ledgerRoot", known.ledger_root)
        .option("ledgers", ids)
        .option("maxEntriesPerPartition", "8")
        .load()
    )
    # 30, 20 and 11 readable entries (the open ledger up to its LAC), 8 at most per partition.
    assert frame.rdd.getNumPartitions() == 4 + 3 + 2
    rows = sorted(frame.collect(), key=lambda row: (row.ledger_id, row.entry_id))
    assert {(row.ledger_id, row.entry_id): bytes(row.payload) for row in rows} == expected.payloads
    assert len(rows) == len(expected.payloads)
    assert all(row.payload_bytes == len(row.payload) for row in rows)
    assert {row.digest for row in rows} == {"verified"}
    assert {tuple(sorted(row.bookies)) for row in rows} == {tuple(known.bookie_ids)}


def test_every_ledger_is_read_without_a_list(spark: SparkSession, known: KnownCluster) -> None:
    frame = (
        spark.read.format("ledger")
        .option("zk", known.zk)
        .option("ledgerRoot", known.ledger_root)
        .load()
    )
    seen = {row.ledger_id for row in frame.select("ledger_id").distinct().collect()}
    assert set(known.expected["known"].ledgers) <= seen


def test_an_unknown_ledger_is_named(spark: SparkSession, known: KnownCluster) -> None:
    with pytest.raises(PySparkException, match="there is no ledger 987654321"):
        (
            spark.read.format("ledger")
            .option("zk", known.zk)
            .option("ledgerRoot", known.ledger_root)
            .option("ledgers", "987654321")
            .load()
            .collect()
        )


def test_tls_options_read_through_the_bookies_tls_listeners(
    spark: SparkSession, known: KnownCluster
) -> None:
    expected = known.expected["known"]
    ids = ",".join(str(ledger_id) for ledger_id in expected.ledgers)

    def read(ca_file: Path) -> list[Any]:
        return (
            spark.read.format("ledger")
            .option("zk", known.zk)
            .option("ledgerRoot", known.ledger_root)
            .option("ledgers", ids)
            .option("tlsCaFile", str(ca_file))
            .load()
            .collect()
        )

    rows = read(known.certs.ca)
    assert {(row.ledger_id, row.entry_id): bytes(row.payload) for row in rows} == expected.payloads
    # A CA that did not sign the bookies' certificates: a plain read would not notice it.
    with pytest.raises(PySparkException, match="TLS: the peer's certificate was refused"):
        read(known.certs.rogue_ca)
