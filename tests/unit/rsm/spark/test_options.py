"""rsm.spark.options: the sources' options become values, or errors that name the option."""

from __future__ import annotations

import pytest

from rsm.errors import InvalidConfig
from rsm.spark.options import ledger_options, log_options
from rsm.spark.planning import Interval

BASE = {"zk": "127.0.0.1:2181", "app": "kv"}


def test_defaults_read_the_whole_log_in_arrow() -> None:
    options = log_options(BASE)
    assert options.app == "kv"
    assert options.cluster.ledger_root == "/ledgers"
    assert options.bounds.index == Interval(None, None)
    assert options.bounds.time_ms == Interval(None, None)
    assert options.split.arrow
    assert options.split.min_partitions == 1


def test_keys_are_compared_without_case_and_ranges_are_half_open() -> None:
    options = log_options(
        {
            **BASE,
            "STARTINGINDEX": "5",
            "endingIndex": "9",
            "startingTimestamp": "100",
            "endingtimestamp": "200",
            "arrow": "false",
            "minPartitions": "4",
        }
    )
    assert options.bounds.index == Interval(5, 9)
    assert options.bounds.time_ms == Interval(100, 200)
    assert not options.split.arrow
    assert options.split.min_partitions == 4


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"zk": ""}, "option zk is required"),
        ({"app": "a/b"}, "application name"),
        ({"startingIndex": "latest"}, "neither an index nor earliest"),
        ({"endingIndex": "0"}, "indexes start at 1"),
        ({"minPartitions": "many"}, "not an integer"),
        ({"arrow": "maybe"}, "not true or false"),
        ({"startingTimestamp": "-1"}, "below 0"),
        ({"onDataLoss": "skip"}, "not one of fail, snapshot"),
    ],
)
def test_bad_log_options_are_named(extra: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        log_options({**BASE, **extra})


def test_ledger_ids_are_a_sorted_set() -> None:
    assert ledger_options({"zk": "z:1", "ledgers": "9, 3,9"}).ledger_ids == (3, 9)
    assert ledger_options({"zk": "z:1"}).ledger_ids is None
    with pytest.raises(InvalidConfig, match="comma-separated"):
        ledger_options({"zk": "z:1", "ledgers": "3,x"})


def test_mode_is_failfast_unless_permissive_in_any_case() -> None:
    assert not log_options(BASE).split.permissive
    assert not log_options({**BASE, "mode": "FAILFAST"}).split.permissive
    assert log_options({**BASE, "MODE": "Permissive"}).split.permissive
    assert ledger_options({"zk": BASE["zk"], "mode": "PERMISSIVE"}).split.permissive
    with pytest.raises(InvalidConfig, match="option mode='dropmalformed' is not one of"):
        log_options({**BASE, "mode": "DROPMALFORMED"})


def test_the_trigger_delay_is_a_duration_with_a_unit() -> None:
    assert log_options(BASE).max_trigger_delay_ms == 15 * 60_000
    assert log_options({**BASE, "maxTriggerDelay": "250"}).max_trigger_delay_ms == 250
    assert log_options({**BASE, "maxTriggerDelay": "2s"}).max_trigger_delay_ms == 2000
    assert log_options({**BASE, "maxTriggerDelay": "3 M"}).max_trigger_delay_ms == 180_000
    assert log_options({**BASE, "minCommandsPerTrigger": "7"}).min_commands_per_trigger == 7
    with pytest.raises(InvalidConfig, match="maxtriggerdelay='soon' is not a duration"):
        log_options({**BASE, "maxTriggerDelay": "soon"})
