"""The linearizability checker: known histories, histories linearizable by
construction, corruptions checked against brute force, per-key decomposition,
the step budget and the failure explanation."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.errors import HistoryError
from rsm.testing import (
    Candidate,
    Counter,
    Keyed,
    KvModel,
    Register,
    Verdict,
    check,
    check_per_key,
    kv_key,
)
from rsm.testing.history import History, Operation, Outcome, Value
from rsm.testing.models import KV_ERROR, DeterministicModel
from tests.unit.rsm.testing.histories import (
    Draw,
    brute_force_linearizable,
    build_history,
    corrupt_read,
    draw_counter,
    draw_register,
    history,
    kv_drawer,
    op,
    random_plans,
    seeds,
)

OK, FAIL, INFO = Outcome.OK, Outcome.FAIL, Outcome.INFO


def verdict_register(operations: History) -> Verdict:
    return check(operations, Register(0)).verdict


# --- registers -----------------------------------------------------------------------------------


def test_a_read_after_a_completed_write_sees_it() -> None:
    assert verdict_register(
        history(op(0, "a", "write", 1, None, 1, 2), op(1, "b", "read", None, 1, 3, 4))
    ) is (Verdict.LINEARIZABLE)


def test_a_stale_read_after_a_completed_write_is_caught() -> None:
    result = check(
        history(op(0, "a", "write", 1, None, 1, 2), op(1, "b", "read", None, 0, 3, 4)),
        Register(0),
    )
    assert result.verdict is Verdict.NOT_LINEARIZABLE
    assert not result.linearizable
    (violation,) = result.violations
    assert violation.stuck.id == 1
    assert violation.state == 1


@pytest.mark.parametrize("seen", [0, 1])
def test_a_read_concurrent_with_a_write_may_see_either_value(seen: int) -> None:
    assert verdict_register(
        history(op(0, "a", "write", 1, None, 1, 4), op(1, "b", "read", None, seen, 2, 3))
    ) is (Verdict.LINEARIZABLE)


def test_once_a_read_saw_the_new_value_a_later_read_cannot_see_the_old() -> None:
    # Both reads overlap the write, but they do not overlap each other.
    assert verdict_register(
        history(
            op(0, "a", "write", 1, None, 1, 10),
            op(1, "b", "read", None, 1, 2, 3),
            op(2, "c", "read", None, 0, 4, 5),
        )
    ) is (Verdict.NOT_LINEARIZABLE)


def test_a_value_nobody_wrote_is_caught() -> None:
    assert verdict_register(history(op(0, "a", "read", None, 7, 1, 2))) is Verdict.NOT_LINEARIZABLE


def test_two_concurrent_cas_from_the_same_value_cannot_both_win() -> None:
    assert verdict_register(
        history(
            op(0, "a", "cas", (0, 1), True, 1, 4),
            op(1, "b", "cas", (0, 2), True, 2, 3),
        )
    ) is (Verdict.NOT_LINEARIZABLE)


def test_cas_that_fails_although_the_value_matched_is_caught() -> None:
    assert verdict_register(history(op(0, "a", "cas", (0, 1), False, 1, 2))) is (
        Verdict.NOT_LINEARIZABLE
    )


def test_cas_that_wins_although_the_value_differed_is_caught() -> None:
    assert verdict_register(
        history(op(0, "a", "write", 5, None, 1, 2), op(1, "a", "cas", (0, 1), True, 3, 4))
    ) is (Verdict.NOT_LINEARIZABLE)


def test_concurrent_cas_where_one_loses_is_linearizable() -> None:
    assert verdict_register(
        history(
            op(0, "a", "cas", (0, 1), False, 1, 4),
            op(1, "b", "cas", (0, 2), True, 2, 3),
            op(2, "b", "read", None, 2, 5, 6),
        )
    ) is (Verdict.LINEARIZABLE)


# --- indeterminate and failed operations ---------------------------------------------------------


@pytest.mark.parametrize("seen", [0, 1])
def test_a_timed_out_write_may_have_happened_or_not(seen: int) -> None:
    assert verdict_register(
        history(op(0, "a", "write", 1, None, 1, 2, INFO), op(1, "b", "read", None, seen, 3, 4))
    ) is (Verdict.LINEARIZABLE)


def test_a_timed_out_write_may_take_effect_long_after_its_client_gave_up() -> None:
    assert verdict_register(
        history(
            op(0, "a", "write", 1, None, 1, 2, INFO),
            op(1, "b", "read", None, 0, 3, 4),
            op(2, "b", "read", None, 1, 5, 6),
        )
    ) is (Verdict.LINEARIZABLE)


def test_a_pending_write_never_completed_may_take_effect() -> None:
    assert verdict_register(
        history(op(0, "a", "write", 1, None, 1, None, INFO), op(1, "b", "read", None, 1, 3, 4))
    ) is (Verdict.LINEARIZABLE)


def test_an_indeterminate_write_cannot_take_effect_before_its_invocation() -> None:
    assert verdict_register(
        history(op(0, "b", "read", None, 1, 1, 2), op(1, "a", "write", 1, None, 3, 4, INFO))
    ) is (Verdict.NOT_LINEARIZABLE)


def test_an_indeterminate_write_takes_effect_at_most_once() -> None:
    assert verdict_register(
        history(
            op(0, "a", "write", 1, None, 1, 2, INFO),
            op(1, "b", "read", None, 1, 3, 4),
            op(2, "c", "write", 2, None, 5, 6),
            op(3, "b", "read", None, 1, 7, 8),
        )
    ) is (Verdict.NOT_LINEARIZABLE)


def test_a_failed_write_did_not_happen() -> None:
    assert verdict_register(
        history(op(0, "a", "write", 1, None, 1, 2, FAIL), op(1, "b", "read", None, 1, 3, 4))
    ) is (Verdict.NOT_LINEARIZABLE)
    assert verdict_register(
        history(op(0, "a", "write", 1, None, 1, 2, FAIL), op(1, "b", "read", None, 0, 3, 4))
    ) is (Verdict.LINEARIZABLE)


def test_indeterminate_reads_are_dropped_and_cannot_spoil_anything() -> None:
    result = check(
        history(op(0, "a", "read", None, None, 1, 2, INFO), op(1, "b", "read", None, 0, 3, 4)),
        Register(0),
    )
    assert (result.verdict, result.operations) == (Verdict.LINEARIZABLE, 1)


def test_a_history_without_ok_operations_is_linearizable() -> None:
    assert verdict_register(history(op(0, "a", "write", 1, None, 1, 2, INFO))) is (
        Verdict.LINEARIZABLE
    )
    assert verdict_register(()) is Verdict.LINEARIZABLE


# --- counters ------------------------------------------------------------------------------------


def verdict_counter(operations: History) -> Verdict:
    return check(operations, Counter()).verdict


def test_concurrent_increments_see_distinct_values_in_either_order() -> None:
    for first, second in [(1, 2), (2, 1)]:
        assert verdict_counter(
            history(op(0, "a", "add", 1, first, 1, 4), op(1, "b", "add", 1, second, 2, 3))
        ) is (Verdict.LINEARIZABLE)


def test_a_lost_update_is_caught() -> None:
    assert verdict_counter(
        history(
            op(0, "a", "add", 1, 1, 1, 4),
            op(1, "b", "add", 1, 1, 2, 3),
            op(2, "b", "read", None, 1, 5, 6),
        )
    ) is (Verdict.NOT_LINEARIZABLE)


def test_a_duplicated_increment_is_caught() -> None:
    assert verdict_counter(
        history(op(0, "a", "add", 1, 1, 1, 2), op(1, "b", "read", None, 2, 3, 4))
    ) is (Verdict.NOT_LINEARIZABLE)


def test_a_retried_indeterminate_increment_counts_at_most_once() -> None:
    base = [op(0, "a", "add", 1, 1, 1, 2), op(1, "a", "add", 1, None, 3, 4, INFO)]
    assert verdict_counter(history(*base, op(2, "b", "read", None, 2, 5, 6))) is (
        Verdict.LINEARIZABLE
    )
    assert verdict_counter(history(*base, op(2, "b", "read", None, 1, 5, 6))) is (
        Verdict.LINEARIZABLE
    )
    assert verdict_counter(history(*base, op(2, "b", "read", None, 3, 5, 6))) is (
        Verdict.NOT_LINEARIZABLE
    )


# --- the key-value store -------------------------------------------------------------------------


def verdict_kv(*operations: Operation) -> Verdict:
    return check_per_key(history(*operations), KvModel(), kv_key).verdict


def test_kv_stale_get_after_set_is_caught() -> None:
    assert verdict_kv(
        op(0, "a", "set", ("k", "v"), "OK", 1, 2), op(1, "b", "get", ("k",), None, 3, 4)
    ) is (Verdict.NOT_LINEARIZABLE)


def test_kv_concurrent_incr_cannot_return_the_same_value() -> None:
    assert verdict_kv(op(0, "a", "incr", ("k",), 1, 1, 4), op(1, "b", "incr", ("k",), 1, 2, 3)) is (
        Verdict.NOT_LINEARIZABLE
    )
    assert verdict_kv(op(0, "a", "incr", ("k",), 2, 1, 4), op(1, "b", "incr", ("k",), 1, 2, 3)) is (
        Verdict.LINEARIZABLE
    )


def test_kv_only_one_concurrent_del_removes_the_key() -> None:
    created = op(0, "a", "set", ("k", "v"), "OK", 1, 2)
    assert verdict_kv(
        created, op(1, "a", "del", ("k",), 1, 3, 6), op(2, "b", "del", ("k",), 1, 4, 5)
    ) is (Verdict.NOT_LINEARIZABLE)
    assert verdict_kv(
        created, op(1, "a", "del", ("k",), 0, 3, 6), op(2, "b", "del", ("k",), 1, 4, 5)
    ) is (Verdict.LINEARIZABLE)


def test_kv_exists_after_a_completed_del_is_caught() -> None:
    assert verdict_kv(
        op(0, "a", "set", ("k", "v"), "OK", 1, 2),
        op(1, "a", "del", ("k",), 1, 3, 4),
        op(2, "b", "exists", ("k",), 1, 5, 6),
    ) is (Verdict.NOT_LINEARIZABLE)


def test_kv_concurrent_appends_answer_distinct_lengths() -> None:
    assert verdict_kv(
        op(0, "a", "append", ("k", "x"), 2, 1, 4),
        op(1, "b", "append", ("k", "y"), 1, 2, 3),
        op(2, "b", "get", ("k",), "yx", 5, 6),
    ) is (Verdict.LINEARIZABLE)
    assert verdict_kv(
        op(0, "a", "append", ("k", "x"), 1, 1, 4), op(1, "b", "append", ("k", "y"), 1, 2, 3)
    ) is (Verdict.NOT_LINEARIZABLE)


def test_kv_cas_creating_a_key_wins_once() -> None:
    assert verdict_kv(
        op(0, "a", "cas", ("k", None, "1"), True, 1, 4),
        op(1, "b", "cas", ("k", None, "2"), True, 2, 3),
    ) is (Verdict.NOT_LINEARIZABLE)


def test_kv_incr_of_a_non_integer_answers_an_error() -> None:
    created = op(0, "a", "set", ("k", "abc"), "OK", 1, 2)
    assert verdict_kv(created, op(1, "b", "incr", ("k",), KV_ERROR, 3, 4)) is (Verdict.LINEARIZABLE)
    assert verdict_kv(created, op(1, "b", "incr", ("k",), 1, 3, 4)) is Verdict.NOT_LINEARIZABLE


def test_per_key_names_each_key_that_fails_and_only_those() -> None:
    result = check_per_key(
        history(
            op(0, "a", "set", ("good", "1"), "OK", 1, 2),
            op(1, "b", "get", ("good",), "1", 3, 4),
            op(2, "a", "set", ("bad", "1"), "OK", 5, 6),
            op(3, "b", "get", ("bad",), None, 7, 8),
        ),
        KvModel(),
        kv_key,
    )
    assert result.verdict is Verdict.NOT_LINEARIZABLE
    assert [violation.key for violation in result.violations] == ["bad"]
    assert result.operations == 4
    assert "for key 'bad'" in result.explain()


def test_an_operation_the_model_does_not_know_is_an_error() -> None:
    with pytest.raises(HistoryError, match="frobnicate"):
        check(history(op(0, "a", "frobnicate", None, None, 1, 2)), Register())


def test_a_malformed_history_is_refused_before_checking() -> None:
    with pytest.raises(HistoryError, match="twice"):
        check(
            history(op(0, "a", "read", None, 0, 1, 2), op(0, "b", "read", None, 0, 3, 4)),
            Register(0),
        )


# --- the explanation -----------------------------------------------------------------------------


def test_the_explanation_shows_the_prefix_the_stuck_operation_and_the_candidates() -> None:
    result = check(
        history(
            op(0, "a", "write", 1, None, 1, 2),
            op(1, "b", "write", 2, None, 3, 10),
            op(2, "a", "read", None, 1, 4, 5),
            op(3, "c", "read", None, 3, 6, 7),
            op(4, "a", "write", 3, None, 8, 9, INFO),
        ),
        Register(0),
    )
    (violation,) = result.violations
    # The deepest the search got: both writes and the first read placed, in that order.
    assert [operation.id for operation in violation.prefix] == [0, 2, 1]
    assert (violation.state, violation.stuck.id) == (2, 3)
    assert [(c.operation.id, c.legal, c.expected) for c in violation.candidates] == [(3, False, 2)]
    text = result.explain()
    assert "Longest linearizable prefix found: 3 operations" in text
    assert "the model state after it is 2" in text
    assert "#3 c read() -> 3 [6, 7] had to take effect before it completed" in text
    assert "#3 c read() -> 3 [6, 7]: the model answers 2 here" in text


def test_candidates_that_fit_say_so() -> None:
    ok_write = op(1, "b", "write", 2, None, 3, 10)
    info_write = op(4, "a", "write", 3, None, 8, 9, INFO)
    assert (
        Candidate(ok_write, True, None)
        .describe()
        .endswith("fits here, but no order after it works")
    )
    assert Candidate(info_write, True, None).describe() == (
        "#4 a write(3) -> ? (info) [8, 9]: may take effect here, but no order after it works"
    )


def test_the_explanation_shows_only_the_most_recent_part_of_a_long_prefix() -> None:
    writes = [op(index, "a", "write", index, None, 2 * index, 2 * index + 1) for index in range(40)]
    result = check(history(*writes, op(40, "b", "read", None, 3, 100, 101)), Register(0))
    text = result.explain()
    assert "Longest linearizable prefix found: 40 operations" in text
    assert "#39 a write(39)" in text
    assert "#0 a write(0)" not in text


# --- the budget ----------------------------------------------------------------------------------


def test_the_budget_turns_a_long_search_into_unknown_not_a_guess() -> None:
    operations = build_history(Register(0), random_plans(random.Random(7), 200, 8, draw_register))
    result = check(operations, Register(0), nodes_max=50)
    assert result.verdict is Verdict.UNKNOWN
    assert not result.linearizable
    assert result.nodes == 50
    assert "raise nodes_max" in result.explain()
    assert check(operations, Register(0)).verdict is Verdict.LINEARIZABLE


def test_the_per_key_budget_is_shared_and_names_the_undecided_keys() -> None:
    plans = random_plans(random.Random(3), 300, 6, kv_drawer(["a", "b", "c"]))
    operations = build_history(Keyed(KvModel()), plans)
    full = check_per_key(operations, KvModel(), kv_key)
    assert full.verdict is Verdict.LINEARIZABLE
    limited = check_per_key(operations, KvModel(), kv_key, nodes_max=full.nodes // 2)
    assert limited.verdict is Verdict.UNKNOWN
    assert limited.nodes <= full.nodes // 2
    assert 1 <= len(limited.unknown_keys) <= 3
    assert "could be decided" in limited.explain()


# --- properties ----------------------------------------------------------------------------------

# name -> (a fresh model, what clients call, a read output no history of it can explain)
MODELS: dict[str, tuple[Callable[[], DeterministicModel[Any]], Draw, Value]] = {
    "register": (lambda: Register(0), draw_register, 99),
    "counter": (Counter, draw_counter, -1),
    "kv": (KvModel, kv_drawer(["k"]), "never"),
}


@settings(max_examples=60, deadline=None)
@given(
    seed=seeds,
    name=st.sampled_from(sorted(MODELS)),
    operations=st.integers(1, 60),
    processes=st.integers(1, 6),
)
def test_histories_linearizable_by_construction_pass(
    seed: int, name: str, operations: int, processes: int
) -> None:
    make, draw, _ = MODELS[name]
    rng = random.Random(seed)
    plans = random_plans(rng, operations, processes, draw, info_ratio=0.15, fail_ratio=0.1)
    result = check(build_history(make(), plans), make())
    assert result.verdict is Verdict.LINEARIZABLE, result.explain()


@settings(max_examples=60, deadline=None)
@given(
    seed=seeds,
    name=st.sampled_from(sorted(MODELS)),
    operations=st.integers(1, 60),
    processes=st.integers(1, 6),
)
def test_a_read_of_a_value_never_current_is_caught(
    seed: int, name: str, operations: int, processes: int
) -> None:
    make, draw, never = MODELS[name]
    rng = random.Random(seed)
    plans = random_plans(rng, operations, processes, draw, info_ratio=0.15, fail_ratio=0.1)
    original = build_history(make(), plans)
    corrupted = corrupt_read(original, rng, never)
    result = check(corrupted, make())
    if corrupted == original:
        assert result.verdict is Verdict.LINEARIZABLE
    else:
        assert result.verdict is Verdict.NOT_LINEARIZABLE
        assert result.violations[0].candidates


@settings(max_examples=200, deadline=None)
@given(
    seed=seeds,
    name=st.sampled_from(sorted(MODELS)),
    operations=st.integers(1, 7),
    processes=st.integers(1, 4),
)
def test_the_checker_agrees_with_brute_force_on_small_corrupted_histories(
    seed: int, name: str, operations: int, processes: int
) -> None:
    make, draw, _ = MODELS[name]
    rng = random.Random(seed)
    plans = random_plans(
        rng, operations, processes, draw, info_ratio=0.2, fail_ratio=0.1, duration_max=6
    )
    corrupted = corrupt_read(build_history(make(), plans), rng)
    expected = brute_force_linearizable(corrupted, make())
    result = check(corrupted, make())
    assert result.linearizable is expected, result.explain()
    assert result.verdict is not Verdict.UNKNOWN


@settings(max_examples=150, deadline=None)
@given(seed=seeds, operations=st.integers(1, 7), processes=st.integers(1, 4))
def test_per_key_checking_equals_whole_history_checking(
    seed: int, operations: int, processes: int
) -> None:
    rng = random.Random(seed)
    plans = random_plans(
        rng, operations, processes, kv_drawer(["a", "b"]), info_ratio=0.2, fail_ratio=0.1
    )
    built = build_history(Keyed(KvModel()), plans)
    if rng.random() < 0.5:
        built = corrupt_read(built, rng)
    per_key = check_per_key(built, KvModel(), kv_key)
    whole = check(built, Keyed(KvModel()))
    assert per_key.verdict is whole.verdict
    assert whole.linearizable is brute_force_linearizable(built, Keyed(KvModel()))


# --- scale -------------------------------------------------------------------------------------

SCALE_NODES_MAX = 300_000


@pytest.mark.parametrize("name", sorted(MODELS))
def test_five_thousand_operations_of_ten_clients_are_decided_well_within_the_budget(
    name: str,
) -> None:
    make, draw, _ = MODELS[name]
    rng = random.Random(20240601)
    plans = random_plans(rng, 5_000, 10, draw, info_ratio=0.005, fail_ratio=0.01)
    operations = build_history(make(), plans)
    # A few times n * c model steps, a small fraction of the default budget.
    result = check(operations, make(), nodes_max=SCALE_NODES_MAX)
    assert result.verdict is Verdict.LINEARIZABLE, result.explain()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_corrupted_read_in_five_thousand_operations_is_proven_within_the_budget(
    name: str,
) -> None:
    make, draw, never = MODELS[name]
    rng = random.Random(20240602)
    plans = random_plans(rng, 5_000, 10, draw, fail_ratio=0.01)
    corrupted = corrupt_read(build_history(make(), plans), rng, never)
    # Proving a violation means ruling out every order before it: a few hundred
    # model steps per operation ahead of it, with ten clients and few values.
    result = check(corrupted, make(), nodes_max=1_000_000)
    assert result.verdict is Verdict.NOT_LINEARIZABLE
    (violation,) = result.violations
    assert violation.stuck.output == never
