"""`tune_for_throughput`: start-up objects leave the collector's reach and collections get rarer,
while reference cycles are still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from bookie import limits
from bookie.gc_tuning import tune_for_throughput


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_tuning_freezes_start_up_objects_and_raises_thresholds(restored_gc: None) -> None:
    tune_for_throughput()
    assert gc.get_freeze_count() > 0
    ratio = limits.gc_older_collection_ratio
    assert gc.get_threshold() == (limits.gc_young_collection_allocations, ratio, ratio)


def test_cycles_are_still_collected_without_an_explicit_collect(restored_gc: None) -> None:
    tune_for_throughput()
    first, second = Node(), Node()
    first.other, second.other = second, first
    probe = weakref.ref(first)
    del first, second
    assert probe() is not None, "a cycle outlives its last reference until a collection"
    allocated = [[] for _ in range(2 * limits.gc_young_collection_allocations)]
    assert probe() is None, "the young collection the allocations triggered freed the cycle"
    assert len(allocated) == 2 * limits.gc_young_collection_allocations
