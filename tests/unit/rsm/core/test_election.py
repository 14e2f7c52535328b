"""The leader-elect function: lowest candidacy, unless a fresh handoff names a present candidate."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.core.election import candidate_sequence, candidates, leader_elect, may_stand
from rsm.core.log_format import CandidateInfo, Handoff


def child(sequence: int) -> str:
    return f"n-{sequence:010d}"


CHILDREN = {
    child(7): CandidateInfo("r7", "h7:1"),
    child(3): CandidateInfo("r3", "h3:1"),
    child(5): CandidateInfo("r5", "h5:1"),
    "lock-junk": CandidateInfo("rx", "hx:1"),
}


@pytest.mark.parametrize(
    ("name", "sequence"),
    [
        ("n-0000000012", 12),
        ("n-0", 0),
        ("n-", None),
        ("x-0001", None),
        ("n-12a", None),
        ("n-١٢", None),
    ],
)
def test_candidacy_names(name: str, sequence: int | None) -> None:
    assert candidate_sequence(name) == sequence


def test_the_lowest_sequence_leads_without_a_handoff() -> None:
    elect = leader_elect(CHILDREN, None, log_epoch=4)
    assert elect is not None
    assert (elect.replica_id, elect.sequence, elect.name) == ("r3", 3, child(3))
    assert [c.replica_id for c in candidates(CHILDREN)] == ["r3", "r5", "r7"]


def test_a_fresh_handoff_target_leads_when_it_is_a_candidate() -> None:
    elect = leader_elect(CHILDREN, Handoff("r7", 4), log_epoch=4)
    assert elect is not None
    assert elect.replica_id == "r7"


def test_a_stale_handoff_is_ignored() -> None:
    elect = leader_elect(CHILDREN, Handoff("r7", 3), log_epoch=4)
    assert elect is not None
    assert elect.replica_id == "r3"


def test_a_handoff_target_that_is_not_a_candidate_is_ignored() -> None:
    elect = leader_elect(CHILDREN, Handoff("r9", 4), log_epoch=4)
    assert elect is not None
    assert elect.replica_id == "r3"


def test_a_target_with_two_candidacies_leads_with_its_lowest() -> None:
    children = {**CHILDREN, child(1): CandidateInfo("r7", "h7:2")}
    elect = leader_elect(children, Handoff("r7", 4), log_epoch=4)
    assert elect is not None
    assert (elect.replica_id, elect.sequence) == ("r7", 1)


def test_no_candidates_no_leader() -> None:
    assert leader_elect({}, Handoff("r1", 1), log_epoch=1) is None
    assert leader_elect({"junk": CandidateInfo("r", "a")}, None, log_epoch=1) is None


@given(
    st.dictionaries(
        st.integers(0, 10**9).map(child),
        st.builds(CandidateInfo, st.sampled_from(["a", "b", "c", "d"]), st.just("h:1")),
        min_size=1,
        max_size=8,
    ),
    st.none() | st.builds(Handoff, st.sampled_from(["a", "b", "z"]), st.integers(1, 3)),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
)
def test_every_replica_computes_the_same_leader_from_any_listing_order(
    children: dict[str, CandidateInfo], handoff: Handoff | None, log_epoch: int, rng: random.Random
) -> None:
    listing = list(children.items())
    rng.shuffle(listing)
    elect = leader_elect(dict(listing), handoff, log_epoch)
    assert elect == leader_elect(children, handoff, log_epoch)
    assert elect is not None
    assert children[elect.name].replica_id == elect.replica_id
    fresh_target_present = (
        handoff is not None
        and handoff.epoch == log_epoch
        and any(info.replica_id == handoff.target for info in children.values())
    )
    if fresh_target_present:
        assert handoff is not None
        assert elect.replica_id == handoff.target
    else:
        assert elect.sequence == min(candidate_sequence(name) or 0 for name in children)


def test_only_caught_up_replicas_may_stand() -> None:
    assert may_stand(applied_index=100, log_end_index=100)
    assert may_stand(applied_index=0, log_end_index=1000, lag_entries_max=1000)
    assert not may_stand(applied_index=0, log_end_index=1001, lag_entries_max=1000)
