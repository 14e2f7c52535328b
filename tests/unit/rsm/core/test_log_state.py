"""The log of segments: every legal transition keeps I1/I4/continuity, illegal ones are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm import limits
from rsm.core import log_state
from rsm.core.log_state import Log, Segment, SegmentState, violation
from rsm.errors import IllegalLogTransition, Truncated
from tests.unit.rsm.core.strategies import logs

CLOSED = SegmentState.CLOSED
OPEN = SegmentState.OPEN


def fresh_ledger(log: Log) -> int:
    return max((s.ledger_id for s in log.segments), default=0) + 1


@given(logs(), st.integers(0, 30))
def test_takeover_closes_at_the_recovered_end_and_raises_the_epoch(log: Log, extra: int) -> None:
    current = log.open_segment
    recovered = None if current is None else current.first_index - 1 + extra
    after = log_state.takeover(log, new_ledger_id=fresh_ledger(log), recovered_last_index=recovered)
    assert violation(after) is None
    new = after.open_segment
    assert new is not None
    assert new.epoch == log.epoch + 1 == after.epoch
    assert all(s.epoch < new.epoch for s in after.segments[:-1])
    end = log.end_index if current is None else recovered
    assert new.first_index == end + 1  # type: ignore[operator]
    assert after.segments[: len(log.segments) - 1] == log.segments[: len(log.segments) - 1]
    if current is not None:
        assert after.segments[-2] == Segment(
            current.ledger_id,
            current.epoch,
            current.first_index,
            CLOSED,
            end,  # type: ignore[arg-type]
        )


@given(logs(), st.integers(0, 30), st.booleans())
def test_rollover_and_close_keep_the_epoch(log: Log, entries: int, roll: bool) -> None:
    current = log.open_segment
    if current is None:
        with pytest.raises(IllegalLogTransition, match="no segment is OPEN"):
            log_state.close(log, epoch=1, ledger_id=1, last_index=0)
        return
    last_index = current.first_index - 1 + entries
    if roll:
        after = log_state.rollover(
            log,
            epoch=current.epoch,
            ledger_id=current.ledger_id,
            last_index=last_index,
            new_ledger_id=fresh_ledger(log),
        )
        assert after.open_segment is not None
        assert after.open_segment.epoch == current.epoch
        assert after.open_segment.first_index == last_index + 1
    else:
        after = log_state.close(
            log, epoch=current.epoch, ledger_id=current.ledger_id, last_index=last_index
        )
        assert after.open_segment is None
        assert after.end_index == last_index
    assert after.epoch == log.epoch
    assert violation(after) is None


@given(logs(), st.data())
def test_only_the_leader_of_the_open_segment_may_roll_or_close_it(
    log: Log, data: st.DataObject
) -> None:
    current = log.open_segment
    if current is None:
        return
    epoch = data.draw(st.integers(1, log.epoch + 2))
    ledger_id = data.draw(st.sampled_from([current.ledger_id, fresh_ledger(log)]))
    if (epoch, ledger_id) == (current.epoch, current.ledger_id):
        return
    with pytest.raises(IllegalLogTransition, match="its own"):
        log_state.close(log, epoch=epoch, ledger_id=ledger_id, last_index=current.first_index)
    with pytest.raises(IllegalLogTransition, match="its own"):
        log_state.rollover(
            log,
            epoch=epoch,
            ledger_id=ledger_id,
            last_index=current.first_index,
            new_ledger_id=fresh_ledger(log),
        )


def opened() -> Log:
    log = log_state.takeover(Log(), new_ledger_id=10)
    return log_state.rollover(log, epoch=1, ledger_id=10, last_index=5, new_ledger_id=11)


def test_illegal_transitions_are_refused() -> None:
    log = opened()
    with pytest.raises(IllegalLogTransition, match="recovered end"):
        log_state.takeover(log, new_ledger_id=12)
    with pytest.raises(IllegalLogTransition, match="before"):
        log_state.takeover(log, new_ledger_id=12, recovered_last_index=4)
    with pytest.raises(IllegalLogTransition, match="already"):
        log_state.takeover(log, new_ledger_id=10, recovered_last_index=5)
    with pytest.raises(IllegalLogTransition, match="before"):
        log_state.rollover(log, epoch=1, ledger_id=11, last_index=4, new_ledger_id=12)
    with pytest.raises(IllegalLogTransition, match="already"):
        log_state.rollover(log, epoch=1, ledger_id=11, last_index=9, new_ledger_id=11)
    closed = log_state.close(log, epoch=1, ledger_id=11, last_index=9)
    with pytest.raises(IllegalLogTransition, match="differs"):
        log_state.takeover(closed, new_ledger_id=12, recovered_last_index=8)
    after = log_state.takeover(closed, new_ledger_id=12, recovered_last_index=9)
    assert after.open_segment == Segment(12, 2, 10, OPEN, -1)
    with pytest.raises(IllegalLogTransition, match="out of range"):
        log_state.takeover(closed, new_ledger_id=-1)


def test_the_segment_bound_is_enforced() -> None:
    count = limits.log_segments_max - 1
    full = Log(
        1,
        (
            *(Segment(n, 1, 1, CLOSED, 0) for n in range(count)),
            Segment(count, 1, 1, OPEN, -1),
        ),
    )
    assert violation(full) is None
    with pytest.raises(IllegalLogTransition, match="truncate"):
        log_state.rollover(full, epoch=1, ledger_id=count, last_index=0, new_ledger_id=count + 1)


@given(logs())
def test_segment_for_finds_the_segment_that_holds_each_index(log: Log) -> None:
    end = log.end_index
    highest = (end if end is not None else log.segments[-1].first_index) + 3
    for index in range(1, highest + 1):
        holders = [s for s in log.segments if s.holds(index)]
        assert len(holders) <= 1
        assert log.segment_for(index) == (holders[0] if holders else None)
    if log.open_segment is not None:
        assert log.segment_for(10**12) == log.open_segment


def test_indexes_below_the_truncation_point_are_truncated() -> None:
    log = Log(3, (Segment(20, 2, 100, CLOSED, 149), Segment(21, 3, 150, OPEN, -1)))
    assert violation(log) is None
    assert log.first_index == 100
    assert log.segment_for(100) == log.segments[0]
    with pytest.raises(Truncated, match="99"):
        log.segment_for(99)


def test_empty_segments_are_skipped() -> None:
    log = Log(
        2,
        (
            Segment(1, 1, 1, CLOSED, 4),
            Segment(2, 1, 5, CLOSED, 4),
            Segment(3, 2, 5, CLOSED, 9),
        ),
    )
    assert violation(log) is None
    assert log.segment_for(5) == log.segments[2]
    assert log.segment_for(4) == log.segments[0]
    assert log.segment_for(10) is None


@given(logs(), st.integers(1, 400))
def test_segments_wholly_below_are_a_prefix_never_the_last(log: Log, index: int) -> None:
    below = log.segments_wholly_below(index)
    assert below == log.segments[: len(below)]
    assert len(below) < max(len(log.segments), 1)
    assert all(s.last_index < index for s in below)
    following = log.segments[len(below)] if len(below) < len(log.segments) - 1 else None
    if following is not None:
        assert following.last_index >= index
