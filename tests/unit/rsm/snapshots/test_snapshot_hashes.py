"""State hashes: the same schedule on every replica, logged once, compared, divergence named."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rsm.core.log_format import StateHash
from rsm.core.state_hashes import Divergence, StateHashes


@given(
    st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=25),
)
def test_one_label_per_batch_that_holds_a_multiple(sizes: list[int], every: int) -> None:
    hashes = StateHashes(every)
    first = 1
    labels: list[int] = []
    for size in sizes:
        last = first + size - 1
        label = hashes.due(first, last)
        holds = any(index % every == 0 for index in range(first, last + 1))
        assert (label is not None) == holds
        if label is not None:
            assert label == last
            labels.append(label)
        first = last + 1
    assert len(labels) == len({index // every for index in labels})


def test_off_means_never() -> None:
    assert StateHashes(0).due(1, 10**6) is None


def test_the_leader_logs_each_recorded_hash_once() -> None:
    hashes = StateHashes(10)
    assert hashes.unlogged() is None
    hashes.record(10, b"a")
    assert hashes.unlogged() == StateHash(10, b"a")
    hashes.logged(10)
    assert hashes.unlogged() is None
    hashes.record(21, b"b")
    hashes.record(30, b"c")
    assert hashes.unlogged() == StateHash(30, b"c")


def test_checks_count_and_name_the_divergent_index() -> None:
    hashes = StateHashes(10, kept_max=2)
    hashes.record(10, b"a")
    hashes.record(20, b"b")
    hashes.record(30, b"c")
    assert hashes.check(StateHash(20, b"b")) is None
    assert hashes.check(StateHash(10, b"a")) is None  # forgotten: unverified
    assert hashes.check(StateHash(30, b"X")) == Divergence(30, b"X", b"c")
    status = hashes.status()
    assert (status["verified"], status["unverified"], status["divergences"]) == (1, 1, 1)
    assert status["diverged_at"] == 30
    assert status["newest_index"] == 30
    # What the log carried counts as logged: a new leader does not log it again.
    assert hashes.unlogged() is None
