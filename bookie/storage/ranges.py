"""Entry-id sets as ascending inclusive ranges, the shape LIST_ENTRIES answers with.

Pure.  Invariant of every result: ranges are sorted, each has first <= last,
and consecutive ranges neither overlap nor touch (a gap of at least one id).
"""

from __future__ import annotations

from collections.abc import Iterable


def ranges_of(entry_ids: Iterable[int]) -> list[tuple[int, int]]:
    """The ranges covering exactly the given ids (any order, duplicates allowed)."""
    ranges: list[tuple[int, int]] = []
    first = last = -2
    for entry_id in sorted(set(entry_ids)):
        if entry_id == last + 1:
            last = entry_id
            continue
        if last >= first >= 0:
            ranges.append((first, last))
        first = last = entry_id
    if last >= first >= 0:
        ranges.append((first, last))
    return ranges


def merge_ranges(
    left: list[tuple[int, int]], right: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The ranges covering the union of two range lists."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(left + right):
        assert first <= last
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged
