"""rsm.spark.planning: partitions cover every entry once and respect both knobs; pushed-down
comparisons become exactly the rows they select."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.errors import InvalidConfig
from rsm.spark.planning import (
    OPERATORS,
    Bounds,
    Interval,
    Span,
    Term,
    bounds_from_terms,
    split,
)

spans_strategy = st.lists(
    st.builds(
        Span,
        ledger_id=st.integers(0, 10**6),
        epoch=st.integers(1, 5),
        first_entry=st.integers(0, 50),
        last_entry=st.integers(-1, 400),
    ),
    max_size=6,
    unique_by=lambda span: span.ledger_id,
)


@given(spans_strategy, st.integers(1, 64), st.integers(1, 500))
def test_split_covers_each_span_exactly_once_in_order(
    spans: list[Span], min_partitions: int, max_entries: int
) -> None:
    pieces = split(spans, min_partitions=min_partitions, max_entries_per_partition=max_entries)
    covered = [
        (piece.ledger_id, entry)
        for piece in pieces
        for entry in range(piece.first_entry, piece.last_entry + 1)
    ]
    wanted = [
        (span.ledger_id, entry)
        for span in spans
        for entry in range(span.first_entry, span.last_entry + 1)
    ]
    assert covered == wanted
    total = sum(span.entries for span in spans)
    assert all(1 <= piece.entries <= max_entries for piece in pieces)
    assert len(pieces) >= min(min_partitions, total)
    epochs = {span.ledger_id: span.epoch for span in spans}
    assert all(piece.epoch == epochs[piece.ledger_id] for piece in pieces)
    # Decided by the input alone: a retried plan is the same plan.
    assert pieces == split(
        spans, min_partitions=min_partitions, max_entries_per_partition=max_entries
    )


@given(spans_strategy, st.integers(1, 64), st.integers(1, 500))
def test_split_pieces_of_one_ledger_differ_by_at_most_one_entry(
    spans: list[Span], min_partitions: int, max_entries: int
) -> None:
    pieces = split(spans, min_partitions=min_partitions, max_entries_per_partition=max_entries)
    for span in spans:
        sizes = [piece.entries for piece in pieces if piece.ledger_id == span.ledger_id]
        if sizes:
            assert max(sizes) - min(sizes) <= 1


def test_split_examples() -> None:
    long = Span(7, 1, 0, 99)
    assert split([long], min_partitions=1, max_entries_per_partition=1000) == [long]
    assert [
        (piece.first_entry, piece.last_entry)
        for piece in split([long], min_partitions=1, max_entries_per_partition=30)
    ] == [(0, 24), (25, 49), (50, 74), (75, 99)]
    # minPartitions is shared in proportion to entries, rounded up: 100/133 of 4 is 3.01.
    short = Span(8, 1, 0, 32)
    pieces = split([long, short], min_partitions=4, max_entries_per_partition=1000)
    assert [piece.ledger_id for piece in pieces] == [7, 7, 7, 7, 8]
    assert split([Span(7, 1, 5, 4)], min_partitions=3, max_entries_per_partition=10) == []
    assert [
        piece.entries
        for piece in split([Span(1, 1, 0, 1)], min_partitions=9, max_entries_per_partition=10)
    ] == [1, 1]


@pytest.mark.parametrize(("min_partitions", "max_entries"), [(0, 1), (1, 0), (-1, 5)])
def test_split_refuses_knobs_below_one(min_partitions: int, max_entries: int) -> None:
    with pytest.raises(InvalidConfig, match="must be at least 1"):
        split([], min_partitions=min_partitions, max_entries_per_partition=max_entries)


def _compare(value: int, op: str, literal: int) -> bool:
    return {
        "=": value == literal,
        ">": value > literal,
        ">=": value >= literal,
        "<": value < literal,
        "<=": value <= literal,
    }[op]


terms_strategy = st.lists(
    st.builds(
        Term,
        column=st.sampled_from(["index", "epoch", "ledger_id", "leader_time", "command"]),
        op=st.sampled_from(OPERATORS),
        value=st.integers(-3_000, 3_000),
    ),
    max_size=4,
)


@given(
    terms_strategy,
    st.integers(-5, 5),
    st.integers(-5, 5),
    st.integers(-5, 5),
    st.integers(-4, 4),
)
def test_bounds_keep_exactly_the_rows_the_terms_they_take_select(
    terms: list[Term], index: int, epoch: int, ledger_id: int, time_ms: int
) -> None:
    bounds, taken = bounds_from_terms(terms)
    assert [terms[position].column for position in taken] == [
        term.column for term in terms if term.column != "command"
    ]
    values = {"index": index, "epoch": epoch, "ledger_id": ledger_id, "leader_time": time_ms * 1000}
    # Rows carry milliseconds, a time term compares microseconds: check values off the ms grid.
    selected = all(_compare(values[terms[p].column], terms[p].op, terms[p].value) for p in taken)
    assert bounds.admits(index, epoch, ledger_id, time_ms) == selected
    if selected:
        assert not bounds.is_empty


def test_time_terms_round_microseconds_to_the_milliseconds_rows_carry() -> None:
    bounds, _ = bounds_from_terms(
        [Term("leader_time", ">", 1_500), Term("leader_time", "<=", 4_999)]
    )
    assert bounds.time_ms == Interval(2, 5)
    bounds, _ = bounds_from_terms([Term("leader_time", "=", 2_500)])
    assert bounds.is_empty
    bounds, _ = bounds_from_terms([Term("leader_time", "=", 3_000)])
    assert bounds.time_ms == Interval(3, 4)


def test_none_terms_are_left_to_spark() -> None:
    bounds, taken = bounds_from_terms([None, Term("epoch", ">=", 2), None])
    assert taken == [1]
    assert bounds == Bounds(epoch=Interval(2, None))


@given(
    st.integers(-5, 5) | st.none(),
    st.integers(-5, 5) | st.none(),
    st.integers(-5, 5),
    st.integers(-5, 5),
)
def test_interval_overlaps_agrees_with_holds(
    start: int | None, end: int | None, first: int, last: int
) -> None:
    interval = Interval(start, end)
    assert interval.overlaps(first, last) == any(
        interval.holds(value) for value in range(first, last + 1)
    )
