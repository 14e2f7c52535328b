"""`tune_for_throughput`: start-up objects leave the collector's reach, collections get rarer
while reference cycles are still collected, and the GIL switch interval is shortened."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from bookie import limits
from bookie.runtime_tuning import tune_for_throughput


@pytest.fixture
def restored_runtime() -> Iterator[None]:
    thresholds = gc.get_threshold()
    switch_interval_s = sys.getswitchinterval()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    sys.setswitchinterval(switch_interval_s)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_tuning_freezes_start_up_objects_and_raises_thresholds(restored_runtime: None) -> None:
    tune_for_throughput()
    assert gc.get_freeze_count() > 0
    ratio = limits.gc_older_collection_ratio
    assert gc.get_threshold() == (limits.gc_young_collection_allocations, ratio, ratio)


def test_tuning_shortens_the_gil_switch_interval(restored_runtime: None) -> None:
    tune_for_throughput()
    assert sys.getswitchinterval() == pytest.approx(limits.gil_switch_interval_us / 1_000_000)


def test_cycles_are_still_collected_without_an_explicit_collect(restored_runtime: None) -> None:
    tune_for_throughput()
    first, second = Node(), Node()
    first.other, second.other = second, first
    probe = weakref.ref(first)
    del first, second
    assert probe() is not None, "a cycle outlives its last reference until a collection"
    allocated = [[] for _ in range(2 * limits.gc_young_collection_allocations)]
    assert probe() is None, "the young collection the allocations triggered freed the cycle"
    assert len(allocated) == 2 * limits.gc_young_collection_allocations
