"""Entry-id range helpers agree with plain sets."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from bookie.storage.ranges import merge_ranges, ranges_of

id_sets = st.sets(st.integers(0, 200), max_size=60)


def expand(ranges: list[tuple[int, int]]) -> set[int]:
    return {entry_id for first, last in ranges for entry_id in range(first, last + 1)}


def assert_canonical(ranges: list[tuple[int, int]]) -> None:
    for first, last in ranges:
        assert first <= last
    for (_, last), (first, _) in itertools.pairwise(ranges):
        assert first > last + 1


@given(id_sets)
def test_ranges_cover_exactly_the_ids(ids: set[int]) -> None:
    ranges = ranges_of(ids)
    assert expand(ranges) == ids
    assert_canonical(ranges)


@given(id_sets, id_sets)
def test_merged_ranges_cover_the_union(left: set[int], right: set[int]) -> None:
    merged = merge_ranges(ranges_of(left), ranges_of(right))
    assert expand(merged) == left | right
    assert_canonical(merged)


def test_examples() -> None:
    assert ranges_of([3, 1, 2, 7, 5, 5]) == [(1, 3), (5, 5), (7, 7)]
    assert merge_ranges([(0, 2)], [(3, 4), (9, 9)]) == [(0, 4), (9, 9)]
