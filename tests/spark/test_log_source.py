"""`spark.read.format("rsm-log")` on real bookies: exact rows, ranges at their edges, partitions,
pushdown, Arrow and tuples, and errors that name what is wrong."""

from __future__ import annotations

from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

import rsm.spark
from rsm.spark.sessions import PUSHDOWN_SETTING

from .frames import rows_of
from .history import T0_MS, KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]


def _log(
    spark: SparkSession, known: KnownCluster, role: str = "known", **options: Any
) -> DataFrame:
    reader = spark.read.format("rsm-log").options(**known.options(role))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_a_full_read_gives_every_readable_command_exactly_once(
    spark: SparkSession, known: KnownCluster
) -> None:
    expected = known.expected["known"].rows
    assert rows_of(_log(spark, known)) == expected
    # Dense indexes from 1 to the open segment's LAC, and its unconfirmed entry left out.
    assert [row[0] for row in expected] == list(range(1, len(expected) + 1))
    open_ledger = known.expected["known"].ledgers[-1]
    assert max(row[3] for row in expected if row[2] == open_ledger) == 10


def test_tuples_give_the_same_rows_as_arrow(spark: SparkSession, known: KnownCluster) -> None:
    assert rows_of(_log(spark, known, arrow="false")) == known.expected["known"].rows


@pytest.mark.parametrize(
    ("start", "end"),
    [(1, 2), (2, 3), (1, 57), (57, 58), (56, 59), (30, 100), (100, 101), (5, 5), (6, 5)],
)
def test_an_index_range_is_half_open(
    spark: SparkSession, known: KnownCluster, start: int, end: int
) -> None:
    frame = _log(spark, known, startingIndex=start, endingIndex=end)
    assert rows_of(frame) == known.expected["known"].between(start, end)


def test_earliest_and_latest_are_the_whole_log(spark: SparkSession, known: KnownCluster) -> None:
    frame = _log(spark, known, startingIndex="earliest", endingIndex="latest")
    assert len(rows_of(frame)) == len(known.expected["known"].rows)


def test_a_time_range_is_half_open(spark: SparkSession, known: KnownCluster) -> None:
    start, end = T0_MS + 10_000, T0_MS + 40_000
    frame = _log(spark, known, startingTimestamp=start, endingTimestamp=end)
    expected = [row for row in known.expected["known"].rows if start <= row[5] < end]
    assert {row[5] for row in expected} == {T0_MS + 1000 * k for k in range(10, 40)}
    assert rows_of(frame) == expected


def test_min_partitions_and_max_entries_split_long_ledgers(
    spark: SparkSession, known: KnownCluster
) -> None:
    assert _log(spark, known).rdd.getNumPartitions() == 3
    split = _log(spark, known, maxEntriesPerPartition=7)
    # 30, 20 and 11 readable entries: 5 + 3 + 2 pieces.
    assert split.rdd.getNumPartitions() == 10
    assert rows_of(split) == known.expected["known"].rows
    assert _log(spark, known, minPartitions=12).rdd.getNumPartitions() >= 12


def test_pushed_down_filters_skip_partitions_androws_of(
    spark: SparkSession, known: KnownCluster
) -> None:
    expected = known.expected["known"].rows
    ledgers = known.expected["known"].ledgers
    frame = _log(spark, known, maxEntriesPerPartition=10)
    assert frame.rdd.getNumPartitions() == 3 + 2 + 2
    by_epoch = frame.where("epoch = 2")
    assert by_epoch.rdd.getNumPartitions() == 2
    assert rows_of(by_epoch) == [row for row in expected if row[1] == 2]
    by_ledger = frame.where(f"ledger_id = {ledgers[1]}")
    assert by_ledger.rdd.getNumPartitions() == 2
    assert rows_of(by_ledger) == [row for row in expected if row[2] == ledgers[1]]
    by_index = frame.where("index >= 20 and index < 25")
    assert by_index.rdd.getNumPartitions() == 1
    assert rows_of(by_index) == known.expected["known"].between(20, 25)


def test_a_time_filter_is_pushed_down(spark: SparkSession, known: KnownCluster) -> None:
    frame = _log(spark, known, maxEntriesPerPartition=10).where(
        f"leader_time >= timestamp_millis({T0_MS + 50_000})"
    )
    assert frame.rdd.getNumPartitions() == 2
    assert rows_of(frame) == [
        row for row in known.expected["known"].rows if row[5] >= T0_MS + 50_000
    ]


def test_reading_never_fences_the_open_ledger(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal
) -> None:
    before = rows_of(_log(spark, known, "tail"))
    assert before == known.expected["tail"].rows
    portal.call(known.writers["tail"].append, 1)  # fails if a read had fenced the ledger
    after = rows_of(_log(spark, known, "tail"))
    assert after == known.expected["tail"].rows
    assert len(after) > len(before)


def test_a_truncated_range_names_what_is_missing(spark: SparkSession, known: KnownCluster) -> None:
    message = (
        r"indexes \[3, 50\) of 'truncated-\d+-\d+' were truncated away;"
        r" the snapshot at index 49"
    )
    with pytest.raises(PySparkException, match=message):
        _log(spark, known, "truncated", startingIndex=3).collect()
    expected = known.expected["truncated"].rows
    assert rows_of(_log(spark, known, "truncated")) == expected
    covered = _log(spark, known, "truncated", startingIndex=3, onDataLoss="snapshot")
    assert rows_of(covered) == expected


def test_a_corrupt_entry_fails_the_read_naming_ledger_entry_and_bookies(
    spark: SparkSession, known: KnownCluster
) -> None:
    unreadable = r"ledger \d+ entry 1 \(on bookies [^)]+\) is unreadable"
    with pytest.raises(PySparkException, match=unreadable) as error:
        _log(spark, known, "corrupt").collect()
    assert all(bookie in str(error.value) for bookie in known.bookie_ids)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingIndex": "first"}, "startingindex"),
        ({"startingIndex": "0"}, "indexes start at 1"),
        ({"maxEntriesPerPartition": "0"}, "below 1"),
        ({"app": "no-such-app"}, "there is no application 'no-such-app'"),
    ],
)
def test_bad_options_are_named(
    spark: SparkSession, known: KnownCluster, options: dict[str, str], message: str
) -> None:
    with pytest.raises(PySparkException, match=message):
        _log(spark, known, **options).collect()


def test_without_pushdown_the_same_filters_select_the_samerows_of(
    spark: SparkSession, known: KnownCluster
) -> None:
    expected = [row for row in known.expected["known"].rows if row[1] == 2]
    spark.conf.set(PUSHDOWN_SETTING, "false")
    try:
        rsm.spark.register(spark)
        frame = _log(spark, known, maxEntriesPerPartition=10).where("epoch = 2")
        assert frame.rdd.getNumPartitions() == 7
        assert rows_of(frame) == expected
    finally:
        spark.conf.set(PUSHDOWN_SETTING, "true")
        rsm.spark.register(spark)
    assert (
        _log(spark, known, maxEntriesPerPartition=10).where("epoch = 2").rdd.getNumPartitions() == 2
    )
