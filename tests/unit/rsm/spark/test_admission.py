"""Admission control of the streaming reader: how far each micro-batch reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rsm.spark.admission import Admission, batch_end


def test_a_minimum_holds_the_batch_back_until_the_delay_passed() -> None:
    admission = Admission(min_commands=10, max_delay_ms=1000)
    assert batch_end(5, 9, admission, waited_ms=999, everything=False) == 5
    assert batch_end(5, 9, admission, waited_ms=1000, everything=False) == 9
    assert batch_end(5, 15, admission, waited_ms=0, everything=False) == 15


def test_asked_for_everything_the_minimum_does_not_apply_but_the_maximum_does() -> None:
    admission = Admission(max_commands=3, min_commands=10, max_delay_ms=None)
    assert batch_end(5, 9, admission, waited_ms=0, everything=True) == 8
    assert batch_end(5, 9, admission, waited_ms=10**9, everything=False) == 5


@given(
    first=st.integers(1, 100),
    extra=st.integers(-5, 100),
    maximum=st.none() | st.integers(1, 50),
    minimum=st.none() | st.integers(1, 50),
    delay=st.none() | st.integers(0, 100),
    waited=st.integers(0, 200),
    everything=st.booleans(),
)
def test_a_batch_is_empty_or_within_the_readable_and_the_maximum(
    *,
    first: int,
    extra: int,
    maximum: int | None,
    minimum: int | None,
    delay: int | None,
    waited: int,
    everything: bool,
) -> None:
    readable = first + extra
    admission = Admission(max_commands=maximum, min_commands=minimum, max_delay_ms=delay)
    end = batch_end(first, readable, admission, waited_ms=waited, everything=everything)
    assert first <= end <= max(first, readable)
    if maximum is not None:
        assert end - first <= maximum
    held = minimum is not None and not everything and readable - first < minimum
    if held and (delay is None or waited < delay):
        assert end == first
    elif readable > first:
        assert end > first
