"""Placement rules: random but seeded ensembles, rack-aware spreading, replacements."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.core.placement import choose_ensemble, choose_replacements, ledger_sizes
from bookie.core.quorum import Quorum
from bookie.errors import NotEnoughBookies


def bookies(count: int, racks: int = 0) -> dict[str, str | None]:
    """`count` bookies, spread round robin over `racks` racks (0: no rack information)."""
    return {f"b{i:02d}": (f"rack{i % racks}" if racks else None) for i in range(count)}


@st.composite
def ensemble_configs(draw: st.DrawFn) -> tuple[int, int]:
    e = draw(st.integers(1, 8))
    return e, draw(st.integers(1, e))


@given(ensemble_configs(), st.integers(0, 12), st.integers(0, 4), st.integers(0, 2**32))
def test_rule1_ensemble_is_e_distinct_available_not_excluded_bookies(
    config: tuple[int, int], extra: int, racks: int, seed: int
) -> None:
    e, qw = config
    available = bookies(e + extra + 2, racks)
    excluded = {"b00", "b01"}
    ensemble = choose_ensemble(
        available, ensemble_size=e, write_quorum=qw, rng=random.Random(seed), excluded=excluded
    )
    assert len(ensemble) == e
    assert len(set(ensemble)) == e
    assert set(ensemble) <= set(available) - excluded


def test_rule1_too_few_bookies_raise_not_enough_bookies() -> None:
    with pytest.raises(NotEnoughBookies):
        choose_ensemble(bookies(3), ensemble_size=4, write_quorum=2, rng=random.Random(1))
    with pytest.raises(NotEnoughBookies):
        choose_ensemble(
            bookies(4), ensemble_size=4, write_quorum=2, rng=random.Random(1), excluded={"b00"}
        )


@given(st.integers(0, 2**32))
def test_placement_depends_only_on_the_seed_not_on_listing_order(seed: int) -> None:
    available = bookies(12, racks=3)
    reversed_listing = dict(reversed(list(available.items())))
    first = choose_ensemble(available, ensemble_size=5, write_quorum=3, rng=random.Random(seed))
    second = choose_ensemble(
        reversed_listing, ensemble_size=5, write_quorum=3, rng=random.Random(seed)
    )
    assert first == second


def test_without_racks_every_bookie_gets_chosen_sometimes() -> None:
    available = bookies(10)
    rng = random.Random(7)
    seen: set[str] = set()
    for _ in range(200):
        seen.update(choose_ensemble(available, ensemble_size=3, write_quorum=2, rng=rng))
    assert seen == set(available)


@given(ensemble_configs(), st.integers(0, 2**32))
def test_rule2_write_sets_span_qw_racks_when_racks_suffice(
    config: tuple[int, int], seed: int
) -> None:
    e, qw = config
    racks = 2 * qw - 1
    available = bookies(racks * e, racks)
    ensemble = choose_ensemble(available, ensemble_size=e, write_quorum=qw, rng=random.Random(seed))
    quorum = Quorum(e, qw, 1)
    for write_set in quorum.write_sets:
        assert len({available[ensemble[i]] for i in write_set}) == qw


@given(st.integers(1, 8), st.integers(1, 6), st.integers(0, 2**32))
def test_rule2_single_write_set_spans_as_many_racks_as_exist(e: int, racks: int, seed: int) -> None:
    available = bookies(racks * e, racks)
    ensemble = choose_ensemble(available, ensemble_size=e, write_quorum=e, rng=random.Random(seed))
    assert len({available[b] for b in ensemble}) == min(e, racks)


@given(ensemble_configs(), st.integers(0, 4), st.integers(0, 2**32), st.data())
def test_rule3_replacement_is_outside_the_ensemble_and_not_excluded(
    config: tuple[int, int], racks: int, seed: int, data: st.DataObject
) -> None:
    e, qw = config
    available = bookies(2 * e + 3, racks)
    rng = random.Random(seed)
    ensemble = choose_ensemble(available, ensemble_size=e, write_quorum=qw, rng=rng)
    failed = data.draw(st.sets(st.integers(0, e - 1), min_size=1))
    bad = sorted(set(available) - set(ensemble))[0]
    chosen = choose_replacements(
        available, ensemble, failed, write_quorum=qw, rng=rng, excluded={bad}
    )
    assert set(chosen) == failed
    assert len(set(chosen.values())) == len(failed)
    assert not set(chosen.values()) & (set(ensemble) | {bad})
    assert set(chosen.values()) <= set(available)


def test_rule3_replacement_avoids_the_racks_of_its_write_set_neighbours() -> None:
    # E=4, Qw=2: position 1 shares write sets with positions 0 and 2.
    available = {"a0": "A", "b0": "B", "c0": "C", "d0": "D", "a1": "A", "c1": "C", "e1": "E"}
    ensemble = ("a0", "b0", "c0", "d0")
    for seed in range(50):
        chosen = choose_replacements(
            available, ensemble, [1], write_quorum=2, rng=random.Random(seed)
        )
        assert available[chosen[1]] not in {"A", "C"}, chosen


def test_rule3_no_candidate_left_raises_not_enough_bookies() -> None:
    available = bookies(4)
    ensemble = ("b00", "b01", "b02")
    with pytest.raises(NotEnoughBookies):
        choose_replacements(
            available, ensemble, [0], write_quorum=2, rng=random.Random(1), excluded={"b03"}
        )
    with pytest.raises(NotEnoughBookies):
        choose_replacements(available, ensemble, [0, 1], write_quorum=2, rng=random.Random(1))


@st.composite
def quorum_configs(draw: st.DrawFn) -> tuple[int, int, int]:
    e = draw(st.integers(1, 8))
    qw = draw(st.integers(1, e))
    return e, qw, draw(st.integers(1, qw))


@given(quorum_configs(), st.integers(0, 12))
def test_rule4_a_ledger_is_sized_to_the_bookies_there_are_never_below_qa(
    config: tuple[int, int, int], usable: int
) -> None:
    e, qw, qa = config
    if usable < qa:
        with pytest.raises(NotEnoughBookies, match="ack quorum"):
            ledger_sizes(usable, ensemble_size=e, write_quorum=qw, ack_quorum=qa)
        return
    sizes = ledger_sizes(usable, ensemble_size=e, write_quorum=qw, ack_quorum=qa)
    if usable >= e:
        assert sizes == (e, qw), "enough bookies: exactly what was asked"
        return
    e_degraded, qw_degraded = sizes
    assert e_degraded == usable < e
    assert qw_degraded == min(qw, usable)
    # Still a legal ledger with the ack quorum kept, so every acknowledged entry has Qa copies.
    Quorum(e_degraded, qw_degraded, qa)
    assert e_degraded >= qw_degraded >= qa


def test_rule4_one_lost_bookie_of_three_gives_a_two_bookie_ledger() -> None:
    assert ledger_sizes(2, ensemble_size=3, write_quorum=3, ack_quorum=2) == (2, 2)
    with pytest.raises(NotEnoughBookies):
        ledger_sizes(1, ensemble_size=3, write_quorum=3, ack_quorum=2)
