"""Recording histories from concurrent clients, validating them, and saving them as JSON lines."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.errors import HistoryError, NotLeader, OutcomeUnknown
from rsm.testing import (
    HistoryRecorder,
    Operation,
    Outcome,
    Register,
    Verdict,
    check,
    history_from_jsonl,
    history_to_jsonl,
    validate_history,
)
from rsm.testing.history import Value
from tests.unit.rsm.testing.histories import op


class FakeClock:
    """Returns the times it is given, one per reading."""

    def __init__(self, *times: float) -> None:
        self._times = iter(times)

    def __call__(self) -> float:
        return next(self._times)


# --- recording -----------------------------------------------------------------------------------


def test_the_recorder_stamps_invocations_and_completions_in_order() -> None:
    recorder = HistoryRecorder(FakeClock(1.0, 2.0, 3.0, 4.0))
    with recorder.invoke("c1", "write", 5) as first:
        with recorder.invoke("c2", "read") as second:
            second.ok(0)
        first.ok()
    assert recorder.history() == (
        Operation(0, "c1", "write", 5, Outcome.OK, None, 1.0, 0, 4.0, 3),
        Operation(1, "c2", "read", None, Outcome.OK, 0, 2.0, 1, 3.0, 2),
    )
    assert len(recorder) == 2


def test_fail_and_info_record_no_output() -> None:
    recorder = HistoryRecorder(itertools.count().__next__)
    with recorder.invoke(1, "write", 1) as call:
        call.fail()
    with recorder.invoke(1, "write", 2) as call:
        call.info()
    outcomes = [(item.outcome, item.output) for item in recorder.history()]
    assert outcomes == [(Outcome.FAIL, None), (Outcome.INFO, None)]


def test_an_exception_records_info_and_propagates_by_default() -> None:
    recorder = HistoryRecorder(itertools.count().__next__)
    with pytest.raises(OutcomeUnknown), recorder.invoke("c", "write", 1):
        raise OutcomeUnknown()
    (recorded,) = recorder.history()
    assert recorded.outcome is Outcome.INFO
    assert recorded.complete_time is not None


def test_errors_that_guarantee_nothing_happened_record_fail_and_may_be_suppressed() -> None:
    recorder = HistoryRecorder(
        itertools.count().__next__, fail_on=(NotLeader,), suppress=(NotLeader, OutcomeUnknown)
    )
    with recorder.invoke("c", "write", 1):
        raise NotLeader()
    with recorder.invoke("c", "write", 2):
        raise OutcomeUnknown()
    with pytest.raises(ValueError, match="bug"), recorder.invoke("c", "write", 3):
        raise ValueError("bug in the test")
    outcomes = [item.outcome for item in recorder.history()]
    assert outcomes == [Outcome.FAIL, Outcome.INFO, Outcome.INFO]


def test_an_outcome_recorded_before_an_exception_stands() -> None:
    recorder = HistoryRecorder(itertools.count().__next__)

    def answer_then_fail() -> None:
        with recorder.invoke("c", "read") as call:
            call.ok(7)
            raise KeyError("after the answer")

    with pytest.raises(KeyError):
        answer_then_fail()
    assert recorder.history()[0].output == 7


@pytest.mark.anyio
async def test_a_cancelled_call_is_indeterminate() -> None:
    recorder = HistoryRecorder(anyio.current_time)
    with anyio.CancelScope() as scope, recorder.invoke("c", "write", 1):
        scope.cancel()
        await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert recorder.history()[0].outcome is Outcome.INFO


def test_calls_still_in_flight_are_indeterminate_without_a_completion() -> None:
    recorder = HistoryRecorder(itertools.count().__next__)
    call = recorder.invoke("c", "write", 1)
    with recorder.invoke("d", "read") as other:
        other.ok(None)
    pending, done = recorder.history()
    assert (pending.outcome, pending.complete_time, pending.complete_seq) == (
        Outcome.INFO,
        None,
        None,
    )
    assert done.outcome is Outcome.OK
    call.ok()
    assert recorder.history()[0].outcome is Outcome.OK


def test_leaving_a_call_without_an_outcome_or_giving_two_is_a_test_bug() -> None:
    recorder = HistoryRecorder(itertools.count().__next__)
    with pytest.raises(AssertionError, match="ended without"), recorder.invoke("c", "read"):
        pass
    with recorder.invoke("c", "read") as call:
        call.ok(1)
        with pytest.raises(AssertionError, match="already has an outcome"):
            call.info()


def test_a_clock_that_steps_back_cannot_reorder_events() -> None:
    recorder = HistoryRecorder(FakeClock(5.0, 3.0))
    with recorder.invoke("c", "read") as call:
        call.ok(None)
    (recorded,) = recorder.history()
    assert (recorded.invoke_time, recorded.complete_time) == (5.0, 5.0)
    assert (recorded.invoke_seq, recorded.complete_seq) == (0, 1)


def test_the_recorder_is_bounded() -> None:
    recorder = HistoryRecorder(itertools.count().__next__, operations_max=2)
    for value in range(2):
        with recorder.invoke("c", "write", value) as call:
            call.ok()
    with pytest.raises(HistoryError, match="full"):
        recorder.invoke("c", "write", 3)


def test_inputs_and_outputs_are_frozen_json_shaped_values() -> None:
    recorder = HistoryRecorder(itertools.count().__next__)
    with recorder.invoke("c", "cas", [1, [2, 3]]) as call:
        call.ok([True])
    (recorded,) = recorder.history()
    assert (recorded.input, recorded.output) == ((1, (2, 3)), (True,))
    for bad in (b"bytes", {"a": 1}, float("nan"), float("inf")):
        with pytest.raises(HistoryError):
            recorder.invoke("c", "write", bad)


@pytest.mark.anyio
async def test_concurrent_clients_on_the_real_clock_give_a_checkable_history() -> None:
    recorder = HistoryRecorder(anyio.current_time)
    register = 0
    written = anyio.Event()
    read_done = anyio.Event()

    async def writer() -> None:
        nonlocal register
        with recorder.invoke("writer", "write", 1) as call:
            register = 1
            written.set()
            # The write's completion is only seen after the read finished: they overlap.
            await read_done.wait()
            call.ok()

    async def reader() -> None:
        await written.wait()
        with recorder.invoke("reader", "read") as call:
            call.ok(register)
        read_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(writer)
        group.start_soon(reader)
    history = recorder.history()
    assert check(history, Register(0)).verdict is Verdict.LINEARIZABLE
    stale = tuple(replace(item, output=0) if item.kind == "read" else item for item in history)
    # The read overlaps the write, so the old value is allowed too...
    assert check(stale, Register(0)).verdict is Verdict.LINEARIZABLE
    with recorder.invoke("reader", "read") as call:
        call.ok(0)
    # ...but not after the write completed.
    assert check(recorder.history(), Register(0)).verdict is Verdict.NOT_LINEARIZABLE


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        ((op(0, "a", "read", None, 0, 1, 2), op(0, "b", "read", None, 0, 3, 4)), "twice"),
        ((op(0, "a", "read", None, 0, 2, 1),), "completed before it was invoked"),
        ((op(0, "a", "read", None, 0, 1, None),), "needs a completion"),
        ((op(0, "a", "read", None, 0, 1, 2), op(1, "b", "read", None, 0, 2, 3)), "same time"),
        ((replace(op(0, "a", "read", None, None, 1, 2, Outcome.INFO), output=5),), "output"),
        ((replace(op(0, "a", "read", None, 0, 1, 2), complete_seq=None),), "come together"),
    ],
)
def test_malformed_histories_are_refused(operations: tuple[Operation, ...], message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        validate_history(operations)


def test_equal_times_are_ordered_by_sequence_number() -> None:
    validate_history(
        (
            Operation(0, "a", "write", 1, Outcome.OK, None, 1.0, 0, 1.0, 1),
            Operation(1, "b", "read", None, Outcome.OK, 1, 1.0, 2, 1.0, 3),
        )
    )


# --- JSON lines ----------------------------------------------------------------------------------

values: st.SearchStrategy[Value] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3).map(tuple),
    max_leaves=8,
)


@st.composite
def histories(draw: st.DrawFn) -> tuple[Operation, ...]:
    operations = []
    for index in range(draw(st.integers(0, 8))):
        outcome = draw(st.sampled_from(Outcome))
        completed = outcome is not Outcome.INFO or draw(st.booleans())
        start = draw(st.floats(0, 1e6, allow_nan=False))
        operations.append(
            Operation(
                id=index,
                process=draw(st.integers(0, 3) | st.sampled_from(["c1", "c2"])),
                kind=draw(st.sampled_from(["read", "write", "cas"])),
                input=draw(values),
                outcome=outcome,
                output=draw(values) if outcome is Outcome.OK else None,
                invoke_time=start,
                invoke_seq=2 * index,
                complete_time=start + 1 if completed else None,
                complete_seq=2 * index + 1 if completed else None,
            )
        )
    return tuple(operations)


@settings(max_examples=100)
@given(histories())
def test_json_lines_round_trip(history: tuple[Operation, ...]) -> None:
    text = history_to_jsonl(history)
    assert text.count("\n") == len(history)
    assert history_from_jsonl(text) == history


def test_the_json_line_format_is_as_documented() -> None:
    text = history_to_jsonl((op(0, "c1", "cas", (1, 2), True, 1, 2),))
    assert json.loads(text) == {
        "id": 0,
        "process": "c1",
        "kind": "cas",
        "input": [1, 2],
        "outcome": "ok",
        "output": True,
        "invoke_time": 1,
        "invoke_seq": 1,
        "complete_time": 2,
        "complete_seq": 2,
    }
    assert history_from_jsonl("\n" + text + "\n\n") == (op(0, "c1", "cas", (1, 2), True, 1, 2),)


GOOD_LINE = history_to_jsonl((op(0, "c1", "write", 1, None, 1, 2),)).strip()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 2"),
        ("[1, 2]", "expected an object"),
        (GOOD_LINE.replace('"kind"', '"op"'), "expected an object"),
        (GOOD_LINE.replace('"outcome":"ok"', '"outcome":"maybe"'), "line 2"),
        (GOOD_LINE.replace('"id":0', '"id":1.5'), "id 1.5 is not an integer"),
        (GOOD_LINE.replace('"id":0', '"id":true'), "id True is not an integer"),
        (GOOD_LINE.replace('"process":"c1"', '"process":[1]'), "process"),
        (GOOD_LINE.replace('"kind":"write"', '"kind":3'), "kind 3"),
        (GOOD_LINE.replace('"invoke_time":1', '"invoke_time":"1"'), "invoke_time"),
        (GOOD_LINE.replace('"invoke_time":1', '"invoke_time":NaN'), "invoke_time"),
        (GOOD_LINE.replace('"input":1', '"input":{"a":1}'), "cannot be recorded"),
    ],
)
def test_malformed_lines_are_refused_naming_the_line(line: str, message: str) -> None:
    text = history_to_jsonl((op(1, "c0", "read", None, 0, 5, 6),)) + line + "\n"
    with pytest.raises(HistoryError, match=message):
        history_from_jsonl(text)


def test_decoded_histories_are_validated() -> None:
    line = history_to_jsonl((op(0, "c1", "write", 1, None, 1, 2),))
    with pytest.raises(HistoryError, match="twice"):
        history_from_jsonl(line + line)
