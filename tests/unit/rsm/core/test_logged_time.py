"""A leader's logged time (rsm/core/logged_time.py): its wall clock, except that within a term
it advances at most `logged_time_rate_max` times as fast as the steady clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rsm import limits
from rsm.core.logged_time import LoggedTime

RATE = limits.logged_time_rate_max


def test_the_first_reading_is_the_wall_clock_and_a_steady_one_follows_it() -> None:
    time = LoggedTime()
    assert time.now_ms(1_000_000, 50.0) == 1_000_000, "a new leader's clock, as it is"
    assert time.now_ms(1_000_250, 50.25) == 1_000_250
    assert time.now_ms(1_001_250, 51.25) == 1_001_250


def test_a_forward_step_is_taken_in_at_the_rate_and_a_backward_one_holds_time_still() -> None:
    time = LoggedTime()
    time.now_ms(1_000_000, 0.0)
    step_ms = 11 * 60_000  # past the session TTL
    assert time.now_ms(1_001_000 + step_ms, 1.0) == 1_000_000 + RATE * 1_000
    assert time.now_ms(1_002_000 + step_ms, 2.0) == 1_000_000 + 2 * RATE * 1_000
    assert time.now_ms(500_000, 3.0) == 1_000_000 + 2 * RATE * 1_000, "never backwards"
    assert time.now_ms(1_000_000 + 3 * RATE * 1_000, 4.0) == 1_000_000 + 3 * RATE * 1_000


@given(
    st.lists(
        st.tuples(st.integers(-(10**9), 10**9), st.floats(0, 100, allow_nan=False)),
        min_size=1,
        max_size=30,
    )
)
def test_time_never_goes_back_nor_outruns_the_steady_clock_times_the_rate(
    readings: list[tuple[int, float]],
) -> None:
    time = LoggedTime()
    steady_s = 0.0
    first_wall_ms, _ = readings[0]
    previous = time.now_ms(first_wall_ms, steady_s)
    for wall_ms, elapsed_s in readings[1:]:
        steady_s += elapsed_s
        now = time.now_ms(first_wall_ms + wall_ms, steady_s)
        assert now >= previous
        assert now - previous <= RATE * 1000 * elapsed_s + 1
        assert now == previous or now <= first_wall_ms + wall_ms
        previous = now
