"""Re-replication planning: which entries a position holds, which segments need repair,
where copies come from, the metadata change that ends a repair."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.core.auditor import lacking_entries
from bookie.core.metadata import LedgerMetadata, LedgerState, check_invariants
from bookie.core.placement import choose_replacements
from bookie.core.quorum import Quorum
from bookie.core.rereplication import (
    CopyThrottle,
    RetrySchedule,
    SegmentRepair,
    copy_sources,
    lacking_in_segment,
    left_to_writer,
    plan_repairs,
    position_entries,
    repaired_segment_transform,
    segment_ranges,
)
from bookie.errors import NotEnoughBookies, UnexpectedMetadataChange
from bookie.wire.packet import DigestType

POOL = tuple(f"b{i}" for i in range(10))


def closed(
    ensembles: tuple[tuple[int, tuple[str, ...]], ...], last_entry_id: int, qw: int = 2
) -> LedgerMetadata:
    e = len(ensembles[0][1])
    metadata = LedgerMetadata(
        ledger_id=9,
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=min(2, qw),
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ensembles=ensembles,
        state=LedgerState.CLOSED,
        last_entry_id=last_entry_id,
        length=max(0, last_entry_id + 1) * 10,
    )
    check_invariants(metadata)
    return metadata


@st.composite
def ledgers(draw: st.DrawFn) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    starts = sorted(set(draw(st.lists(st.integers(1, 40), max_size=3))))
    ensembles = tuple((first, tuple(draw(st.permutations(POOL))[:e])) for first in [0, *starts])
    last_entry_id = draw(st.integers(ensembles[-1][0] - 1, ensembles[-1][0] + 20))
    metadata = closed(ensembles, last_entry_id, qw)
    state = draw(st.sampled_from(LedgerState))
    if state is LedgerState.CLOSED:
        return metadata
    return replace(metadata, state=state, last_entry_id=-1, length=0)


def test_position_entries_follow_the_write_sets() -> None:
    quorum = Quorum(3, 2, 2)
    # Entry e is on positions e mod 3 and (e + 1) mod 3.
    assert list(position_entries(quorum, 0, 8, 0)) == [0, 2, 3, 5, 6, 8]
    assert list(position_entries(quorum, 0, 8, 1)) == [0, 1, 3, 4, 6, 7]
    assert list(position_entries(quorum, 4, 6, 2)) == [4, 5]
    assert list(position_entries(quorum, 5, 4, 0)) == [], "an empty segment holds nothing"


@given(ledgers(), st.data())
def test_every_position_holds_exactly_the_entries_whose_write_set_names_it(
    metadata: LedgerMetadata, data: st.DataObject
) -> None:
    quorum = metadata.quorum
    for first, last, _ in segment_ranges(metadata):
        if metadata.is_closed:
            assert last <= metadata.last_entry_id, "never past the ledger's end"
        else:
            assert last < metadata.ensembles[-1][0], "never into the writer's segment"
        held = {
            p: set(position_entries(quorum, first, last, p)) for p in range(quorum.ensemble_size)
        }
        for entry_id in range(first, last + 1):
            assert {p for p, entries in held.items() if entry_id in entries} == set(
                quorum.write_set(entry_id)
            )


def test_lacking_in_segment_names_what_a_member_should_hold_and_does_not_list() -> None:
    quorum = Quorum(3, 2, 2)
    segment = (0, 8, ("b0", "b1", "b2"))
    # b0 holds entries 0, 2, 3, 5, 6, 8; it lists 0..3 and 6.
    assert list(lacking_in_segment(quorum, segment, "b0", [[0, 3], [6, 6]])) == [5, 8]
    assert list(lacking_in_segment(quorum, segment, "b0", [])) == [0, 2, 3, 5, 6, 8]
    assert list(lacking_in_segment(quorum, segment, "b0", [[0, 8]])) == []
    assert list(lacking_in_segment(quorum, segment, "b9", [])) == [], "not a member"


@st.composite
def listings(draw: st.DrawFn) -> list[list[int]]:
    """Inclusive ranges, ascending and apart, as LIST_ENTRIES gives them."""
    bounds = sorted(set(draw(st.lists(st.integers(0, 70), max_size=8))))
    pairs = list(zip(bounds[::2], bounds[1::2], strict=False))
    return [[first, last] for first, last in pairs]


@given(ledgers(), st.sampled_from(POOL), listings())
def test_lacking_in_segment_agrees_with_the_auditors_count(
    metadata: LedgerMetadata, bookie_id: str, held: list[list[int]]
) -> None:
    lacking = [
        entry_id
        for segment in segment_ranges(metadata)
        for entry_id in lacking_in_segment(metadata.quorum, segment, bookie_id, held)
    ]
    assert len(lacking) == lacking_entries(metadata, bookie_id, held)
    assert not any(first <= entry_id <= last for entry_id in lacking for first, last in held)


def test_plan_names_the_segments_and_positions_of_the_missing_bookies() -> None:
    metadata = closed(((0, ("a", "b", "c")), (5, ("a", "d", "c")), (9, ("e", "d", "b"))), 12)
    assert plan_repairs(metadata, {"b", "x"}) == [
        SegmentRepair(0, 4, ("a", "b", "c"), (1,)),
        SegmentRepair(9, 12, ("e", "d", "b"), (2,)),
    ]
    assert plan_repairs(metadata, {"a", "c"}) == [
        SegmentRepair(0, 4, ("a", "b", "c"), (0, 2)),
        SegmentRepair(5, 8, ("a", "d", "c"), (0, 2)),
    ]
    assert plan_repairs(metadata, {"x"}) == []


def test_a_last_segment_past_the_end_is_planned_empty() -> None:
    metadata = closed(((0, ("a", "b", "c")), (5, ("a", "d", "c"))), 4)
    assert plan_repairs(metadata, {"d"}) == [SegmentRepair(5, 4, ("a", "d", "c"), (1,))]


@pytest.mark.parametrize("state", [LedgerState.OPEN, LedgerState.IN_RECOVERY])
def test_only_the_sealed_segments_of_an_unclosed_ledger_are_planned(state: LedgerState) -> None:
    metadata = replace(
        closed(((0, ("a", "b", "c")), (5, ("a", "d", "c"))), 9),
        state=state,
        last_entry_id=-1,
        length=0,
    )
    assert segment_ranges(metadata) == [(0, 4, ("a", "b", "c"))]
    assert plan_repairs(metadata, {"a"}) == [SegmentRepair(0, 4, ("a", "b", "c"), (0,))]
    assert left_to_writer(metadata, {"a"})
    assert plan_repairs(metadata, {"d"}) == []
    assert left_to_writer(metadata, {"d"})
    assert plan_repairs(metadata, {"b"}) == [SegmentRepair(0, 4, ("a", "b", "c"), (1,))]
    assert not left_to_writer(metadata, {"b"})
    assert not left_to_writer(closed(metadata.ensembles, 9), {"d"})
    repaired = repaired_segment_transform(metadata, 0, ("a", "b", "c"), {1: "e"})
    assert repaired is not None
    assert repaired.ensembles == ((0, ("a", "e", "c")), (5, ("a", "d", "c")))
    assert repaired.state is state
    with pytest.raises(UnexpectedMetadataChange):
        repaired_segment_transform(metadata, 5, ("a", "d", "c"), {1: "e"})


@given(ledgers(), st.sets(st.sampled_from(POOL), min_size=1), st.integers(0, 2**32))
def test_a_repair_never_puts_two_copies_of_an_entry_on_one_bookie(
    metadata: LedgerMetadata, missing: set[str], seed: int
) -> None:
    quorum = metadata.quorum
    available = {bookie_id: None for bookie_id in POOL if bookie_id not in missing}
    repaired = metadata
    for repair in plan_repairs(metadata, missing):
        unusable = set(missing)
        try:
            replacements = choose_replacements(
                available,
                repair.ensemble,
                repair.positions,
                write_quorum=quorum.write_quorum,
                rng=random.Random(seed),
                excluded=missing,
            )
        except NotEnoughBookies:
            continue  # too few spare bookies: the segment stays as it is
        for position in repair.positions:
            for entry_id in position_entries(
                quorum, repair.first_entry_id, repair.last_entry_id, position
            ):
                sources = copy_sources(quorum, repair.ensemble, entry_id, unusable)
                assert replacements[position] not in sources
                assert not unusable & set(sources)
        result = repaired_segment_transform(
            repaired, repair.first_entry_id, repair.ensemble, replacements
        )
        assert result is not None
        repaired = result
    for first, last, ensemble in segment_ranges(repaired):
        for entry_id in range(first, last + 1):
            holders = [ensemble[index] for index in quorum.write_set(entry_id)]
            assert len(set(holders)) == len(holders)
    assert repaired.last_entry_id == metadata.last_entry_id
    assert [first for first, _ in repaired.ensembles] == [first for first, _ in metadata.ensembles]


def test_the_repair_changes_one_segment_and_is_idempotent() -> None:
    metadata = closed(((0, ("a", "b", "c")), (5, ("a", "b", "d"))), 9)
    result = repaired_segment_transform(metadata, 5, ("a", "b", "d"), {1: "e"})
    assert result is not None
    assert result.ensembles == ((0, ("a", "b", "c")), (5, ("a", "e", "d")))
    assert result.last_entry_id == 9
    assert repaired_segment_transform(result, 5, ("a", "b", "d"), {1: "e"}) is None
    with pytest.raises(UnexpectedMetadataChange):
        repaired_segment_transform(result, 5, ("a", "b", "d"), {1: "f"})
    with pytest.raises(UnexpectedMetadataChange):
        repaired_segment_transform(metadata, 3, ("a", "b", "d"), {1: "e"})


def test_copy_sources_skip_the_unusable_members() -> None:
    quorum = Quorum(4, 3, 2)
    assert copy_sources(quorum, ("a", "b", "c", "d"), 3, {"a"}) == ["d", "b"]
    assert copy_sources(quorum, ("a", "b", "c", "d"), 3, {"a", "b", "d"}) == []


def test_failed_ledgers_back_off_doubling_up_to_the_bound() -> None:
    schedule = RetrySchedule(delay_ms_min=100, delay_ms_max=300)
    assert schedule.ready([1, 2], 0) == [1, 2]
    assert schedule.failed(1, 0) == 100
    assert schedule.ready([1, 2], 99) == [2]
    assert schedule.ready([1, 2], 100) == [1, 2]
    assert schedule.failed(1, 100) == 200
    assert schedule.failed(1, 300) == 300
    assert schedule.failed(1, 600) == 300
    assert schedule.ready([1], 899) == []
    schedule.succeeded(1)
    assert schedule.ready([1], 899) == [1]
    schedule.failed(2, 0)
    assert schedule.ready([3], 0) == [3], "ledger 2's mark is gone"
    assert schedule.failed(2, 0) == 100, "forgotten with its mark"


def test_the_throttle_spaces_copies_by_the_tighter_bound() -> None:
    throttle = CopyThrottle(entries_per_s=100, bytes_per_s=100_000)
    assert throttle.reserve(0, 100) == 0
    assert throttle.reserve(0, 100) == 10, "100 entries/s: 10 ms apart"
    assert throttle.reserve(0, 5_000) == 20
    assert throttle.reserve(0, 100) == 70, "5,000 bytes at 100,000 bytes/s take 50 ms"
    assert throttle.reserve(1_000, 100) == 0, "no credit builds up while idle"
    assert throttle.reserve(1_000, 100) == 10


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10_000)), max_size=50))
def test_the_throttle_never_exceeds_its_rates(copies: list[tuple[int, int]]) -> None:
    throttle = CopyThrottle(entries_per_s=200, bytes_per_s=1_000_000)
    now_ms = 0
    starts: list[tuple[int, int]] = []
    for advance_ms, size in copies:
        now_ms += advance_ms
        starts.append((now_ms + throttle.reserve(now_ms, size), size))
    for (start, size), (next_start, _) in itertools.pairwise(starts):
        assert next_start - start >= max(5, size / 1_000) - 1


def test_an_unbounded_throttle_never_waits() -> None:
    throttle = CopyThrottle(entries_per_s=0, bytes_per_s=0)
    assert [throttle.reserve(0, 1 << 20) for _ in range(3)] == [0, 0, 0]
