"""Quorum rules, checked exhaustively for every (E, Qw, Qa) with E <= 6 against
brute-force definitions written from the meaning of each rule, not its formula:
"some Qa members could have acked it" is enumerated as the Qa-subsets of a write set."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from bookie import limits
from bookie.core.quorum import (
    Quorum,
    changed_indices,
    check_quorum,
    ensemble_indices,
    index_mask,
)
from bookie.errors import InvalidLedgerConfig


def all_configs() -> Iterator[tuple[int, int, int]]:
    for e in range(1, 7):
        for qw in range(1, e + 1):
            for qa in range(1, qw + 1):
                yield e, qw, qa


CONFIGS = list(all_configs())


def brute_write_set(entry_id: int, e: int, qw: int) -> set[int]:
    """Round robin: entry e starts at position e mod E and takes the next Qw positions."""
    members: set[int] = set()
    position = entry_id % e
    while len(members) < qw:
        members.add(position)
        position = (position + 1) % e
    return members


def ack_quorums(write_set: set[int], qa: int) -> list[set[int]]:
    """Every group of bookies whose acks would have completed an add on this write set."""
    return [set(group) for group in itertools.combinations(sorted(write_set), qa)]


def bits(mask: int) -> set[int]:
    return {i for i in range(mask.bit_length()) if mask >> i & 1}


@pytest.mark.parametrize(("e", "qw", "qa"), CONFIGS)
def test_rule1_write_set_is_qw_consecutive_positions_round_robin(e: int, qw: int, qa: int) -> None:
    quorum = Quorum(e, qw, qa)
    for entry_id in range(3 * e):
        assert set(quorum.write_set(entry_id)) == brute_write_set(entry_id, e, qw)
        assert quorum.write_set(entry_id)[0] == entry_id % e, "readers try the first member first"
        assert bits(quorum.write_mask(entry_id)) == brute_write_set(entry_id, e, qw)
    assert len({quorum.write_set(entry_id) for entry_id in range(3 * e)}) == e


@pytest.mark.parametrize(("e", "qw", "qa"), CONFIGS)
def test_rule2_add_completes_at_qa_acks_and_fails_when_no_ack_quorum_remains(
    e: int, qw: int, qa: int
) -> None:
    quorum = Quorum(e, qw, qa)
    write_set = brute_write_set(0, e, qw)
    for size in range(qw + 1):
        for failed in itertools.combinations(sorted(write_set), size):
            # Failed: no group of Qa members avoids the failed ones.
            cannot_complete = all(group & set(failed) for group in ack_quorums(write_set, qa))
            assert quorum.ack_failed(len(failed)) == cannot_complete
        assert quorum.ack_complete(size) == (size >= qa)


@pytest.mark.parametrize(("e", "qw", "qa"), CONFIGS)
def test_rule3_coverage_means_every_possible_ack_quorum_met_an_answer(
    e: int, qw: int, qa: int
) -> None:
    quorum = Quorum(e, qw, qa)
    write_sets = [brute_write_set(start, e, qw) for start in range(e)]
    for valid_mask in range(1 << e):
        answered = bits(valid_mask)
        every_quorum_seen = all(
            group & answered for write_set in write_sets for group in ack_quorums(write_set, qa)
        )
        assert quorum.covered(valid_mask) == every_quorum_seen, bin(valid_mask)


@pytest.mark.parametrize(("e", "qw", "qa"), CONFIGS)
def test_rule3_coverage_equals_fewer_than_qa_unknown_in_every_write_set(
    e: int, qw: int, qa: int
) -> None:
    quorum = Quorum(e, qw, qa)
    for valid_mask in range(1 << e):
        unknown = set(range(e)) - bits(valid_mask)
        expected = all(len(brute_write_set(k, e, qw) & unknown) < qa for k in range(e))
        assert quorum.covered(valid_mask) == expected


@pytest.mark.parametrize(("e", "qw", "qa"), CONFIGS)
def test_rule4_absent_means_no_ack_quorum_can_hold_the_entry(e: int, qw: int, qa: int) -> None:
    quorum = Quorum(e, qw, qa)
    for entry_id in range(e):
        write_set = brute_write_set(entry_id, e, qw)
        for size in range(qw + 1):
            for said_no in itertools.combinations(sorted(write_set), size):
                never_acked = all(group & set(said_no) for group in ack_quorums(write_set, qa))
                assert quorum.absent(len(said_no)) == never_acked


@pytest.mark.parametrize(("e", "qw", "qa"), CONFIGS)
def test_rule5_writer_confirmed_means_no_fencing_could_have_completed(
    e: int, qw: int, qa: int
) -> None:
    # Brute force: the answers prove no recovery finished fencing exactly when
    # even fencing every bookie that did not answer "not fenced" would leave
    # some write set without Qw - Qa + 1 fenced members.
    quorum = Quorum(e, qw, qa)
    write_sets = [brute_write_set(start, e, qw) for start in range(e)]
    for not_fenced_mask in range(1 << e):
        could_be_fenced = set(range(e)) - bits(not_fenced_mask)
        fencing_possible = all(
            len(write_set & could_be_fenced) >= qw - qa + 1 for write_set in write_sets
        )
        assert quorum.writer_confirmed(not_fenced_mask) == (not fencing_possible)


def test_full_coverage_and_empty_coverage() -> None:
    for e, qw, qa in CONFIGS:
        quorum = Quorum(e, qw, qa)
        assert quorum.covered((1 << e) - 1), "everybody answered"
        assert not quorum.covered(0), "nobody answered"


@pytest.mark.parametrize(
    ("e", "qw", "qa"),
    [(0, 0, 0), (3, 4, 2), (3, 2, 3), (3, 3, 0), (limits.ensemble_size_max + 1, 3, 2)],
)
def test_invalid_sizes_are_refused(e: int, qw: int, qa: int) -> None:
    with pytest.raises(InvalidLedgerConfig):
        check_quorum(e, qw, qa)
    with pytest.raises(InvalidLedgerConfig):
        Quorum(e, qw, qa)


def test_bookie_ids_map_to_ensemble_indices_and_back() -> None:
    ensemble = ("b1", "b2", "b3", "b4")
    indices = ensemble_indices(ensemble)
    assert indices == {"b1": 0, "b2": 1, "b3": 2, "b4": 3}
    assert all(ensemble[index] == bookie for bookie, index in indices.items())
    assert index_mask([0, 2]) == 0b101
    assert index_mask({3: "b9"}) == 0b1000
    assert changed_indices(ensemble, ("b1", "b9", "b3", "b8")) == {1: "b9", 3: "b8"}
    assert changed_indices(ensemble, ensemble) == {}
