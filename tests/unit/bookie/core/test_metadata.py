"""Ledger metadata transitions and the compare-and-set loop decisions built on them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.core.metadata import (
    LedgerMetadata,
    LedgerState,
    check_invariants,
    close,
    mark_in_recovery_transform,
    new_ledger,
    recovery_close_transform,
    replace_bookies,
    start_recovery,
    writer_close_transform,
    writer_ensemble_change_transform,
)
from bookie.errors import InvalidLedgerConfig, LedgerClosed, LedgerFenced, UnexpectedMetadataChange
from bookie.wire.packet import DigestType
from tests.unit.bookie.core.client_fakes import make_metadata

OPEN = LedgerState.OPEN
IN_RECOVERY = LedgerState.IN_RECOVERY
CLOSED = LedgerState.CLOSED


def in_state(state: LedgerState) -> LedgerMetadata:
    metadata = make_metadata()
    if state is OPEN:
        return metadata
    if state is IN_RECOVERY:
        return start_recovery(metadata)
    return close(metadata, 4, 50)


# --- creation ---------------------------------------------------------------------------------


def test_a_new_ledger_is_open_with_one_segment_at_entry_zero() -> None:
    metadata = make_metadata(("b1", "b2", "b3", "b4"), write_quorum=3, ack_quorum=2)
    assert metadata.state is OPEN
    assert metadata.ensembles == ((0, ("b1", "b2", "b3", "b4")),)
    assert (metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum) == (4, 3, 2)
    assert (metadata.last_entry_id, metadata.length) == (-1, 0)
    assert metadata.quorum.write_set(5) == (1, 2, 3)


@pytest.mark.parametrize(
    ("ensemble", "write_quorum", "ack_quorum"),
    [(("b1", "b2"), 3, 2), (("b1", "b2", "b3"), 2, 3), (("b1", "b1", "b2"), 2, 2), ((), 1, 1)],
)
def test_a_new_ledger_refuses_bad_quorums_and_duplicate_bookies(
    ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int
) -> None:
    with pytest.raises(InvalidLedgerConfig):
        new_ledger(
            1,
            ensemble,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            digest_type=DigestType.CRC32C,
            password_hash=bytes(32),
            ctime_ms=0,
        )


# --- the transition table ---------------------------------------------------------------------


def test_start_recovery_moves_open_to_in_recovery_and_keeps_in_recovery() -> None:
    assert start_recovery(in_state(OPEN)).state is IN_RECOVERY
    recovering = in_state(IN_RECOVERY)
    assert start_recovery(recovering) == recovering


@pytest.mark.parametrize("state", [OPEN, IN_RECOVERY])
def test_close_moves_open_and_in_recovery_to_closed_with_end_and_length(
    state: LedgerState,
) -> None:
    closed = close(in_state(state), 9, 123)
    assert (closed.state, closed.last_entry_id, closed.length) == (CLOSED, 9, 123)


@pytest.mark.parametrize("state", [OPEN, IN_RECOVERY])
def test_replace_bookies_is_legal_while_open_and_in_recovery(state: LedgerState) -> None:
    changed = replace_bookies(in_state(state), 5, {1: "b9"})
    assert changed.state is state
    assert changed.ensembles == ((0, ("b1", "b2", "b3")), (5, ("b1", "b9", "b3")))


def test_every_transition_of_a_closed_ledger_raises_ledger_closed() -> None:
    closed = in_state(CLOSED)
    with pytest.raises(LedgerClosed):
        start_recovery(closed)
    with pytest.raises(LedgerClosed):
        close(closed, 4, 50)
    with pytest.raises(LedgerClosed):
        replace_bookies(closed, 5, {0: "b9"})


def test_replace_bookies_adds_a_segment_at_lac_plus_one() -> None:
    metadata = replace_bookies(make_metadata(), 10, {0: "b4"})
    metadata = replace_bookies(metadata, 20, {2: "b5"})
    assert metadata.ensembles == (
        (0, ("b1", "b2", "b3")),
        (10, ("b4", "b2", "b3")),
        (20, ("b4", "b2", "b5")),
    )
    assert metadata.ensemble_at(9) == ("b1", "b2", "b3")
    assert metadata.ensemble_at(10) == ("b4", "b2", "b3")
    assert metadata.ensemble_at(1000) == ("b4", "b2", "b5")


def test_replace_bookies_rewrites_the_last_segment_when_it_starts_there() -> None:
    metadata = replace_bookies(make_metadata(), 0, {1: "b4"})
    assert metadata.ensembles == ((0, ("b1", "b4", "b3")),)
    metadata = replace_bookies(replace_bookies(metadata, 7, {0: "b5"}), 7, {2: "b6"})
    assert metadata.ensembles == ((0, ("b1", "b4", "b3")), (7, ("b5", "b4", "b6")))


# --- every sequence of transitions ------------------------------------------------------------

operations = st.lists(
    st.tuples(
        st.sampled_from(["start_recovery", "close", "replace"]),
        st.integers(0, 5),
        st.integers(0, 500),
    ),
    max_size=12,
)


@given(operations)
def test_any_sequence_follows_the_table_and_keeps_every_invariant(
    ops: list[tuple[str, int, int]],
) -> None:
    metadata = make_metadata()
    spare = iter(f"s{i}" for i in range(100))
    for name, offset, number in ops:
        before = metadata
        last_first = before.ensembles[-1][0]
        try:
            if name == "start_recovery":
                metadata = start_recovery(before)
            elif name == "close":
                # Ends are drawn relative to the last segment, as writers and
                # recoveries only close at or after its first entry - 1.
                last_entry_id = last_first - 1 + offset
                metadata = close(before, last_entry_id, 0 if last_entry_id == -1 else number)
            else:
                metadata = replace_bookies(before, last_first + offset, {number % 3: next(spare)})
        except LedgerClosed:
            assert before.state is CLOSED, "only a closed ledger refuses a transition"
            continue
        assert before.state is not CLOSED
        check_invariants(metadata)
        # The state never goes back: OPEN -> IN_RECOVERY -> CLOSED, or OPEN -> CLOSED.
        assert metadata.state >= before.state
        # Segments only grow at the end: confirmed entries keep their ensemble.
        for first_entry_id, _ in before.ensembles[:-1]:
            assert metadata.ensemble_at(first_entry_id) == before.ensemble_at(first_entry_id)
        assert metadata.ensembles[: len(before.ensembles) - 1] == before.ensembles[:-1]


# --- compare-and-set decisions ----------------------------------------------------------------


def test_marking_in_recovery_writes_only_an_open_record() -> None:
    marked = mark_in_recovery_transform(in_state(OPEN))
    assert marked is not None
    assert marked.state is IN_RECOVERY
    assert mark_in_recovery_transform(in_state(IN_RECOVERY)) is None, "join the recovery"
    assert mark_in_recovery_transform(in_state(CLOSED)) is None, "nothing to recover"


def test_writer_close_closes_an_open_record() -> None:
    closed = writer_close_transform(in_state(OPEN), 4, 50)
    assert closed is not None
    assert (closed.state, closed.last_entry_id, closed.length) == (CLOSED, 4, 50)


def test_writer_close_of_a_record_in_recovery_is_fenced() -> None:
    with pytest.raises(LedgerFenced):
        writer_close_transform(in_state(IN_RECOVERY), 4, 50)


def test_writer_close_finding_its_own_close_is_done() -> None:
    assert writer_close_transform(in_state(CLOSED), 4, 50) is None


@pytest.mark.parametrize(("last_entry_id", "length"), [(5, 60), (3, 40), (4, 51)])
def test_writer_close_finding_another_end_fails(last_entry_id: int, length: int) -> None:
    with pytest.raises(LedgerClosed):
        writer_close_transform(in_state(CLOSED), last_entry_id, length)


def test_writer_ensemble_change_replaces_in_an_open_record() -> None:
    ensemble = ("b1", "b2", "b3")
    changed = writer_ensemble_change_transform(in_state(OPEN), ensemble, 3, {1: "b4"})
    assert changed is not None
    assert changed.ensembles[-1] == (3, ("b1", "b4", "b3"))


def test_writer_ensemble_change_finding_its_own_change_is_done() -> None:
    ensemble = ("b1", "b2", "b3")
    done = replace_bookies(in_state(OPEN), 3, {1: "b4"})
    assert writer_ensemble_change_transform(done, ensemble, 3, {1: "b4"}) is None


def test_writer_ensemble_change_keeps_changes_to_earlier_segments() -> None:
    # Re-replication may swap a bookie of a closed segment of an open ledger.
    metadata = replace_bookies(in_state(OPEN), 10, {0: "b4"})
    metadata = replace(metadata, ensembles=((0, ("b7", "b2", "b3")), metadata.ensembles[1]))
    changed = writer_ensemble_change_transform(metadata, ("b4", "b2", "b3"), 20, {2: "b5"})
    assert changed is not None
    assert changed.ensembles == (
        (0, ("b7", "b2", "b3")),
        (10, ("b4", "b2", "b3")),
        (20, ("b4", "b2", "b5")),
    )


def test_writer_ensemble_change_finding_another_last_segment_fails() -> None:
    other = replace_bookies(in_state(OPEN), 3, {2: "b9"})
    with pytest.raises(UnexpectedMetadataChange):
        writer_ensemble_change_transform(other, ("b1", "b2", "b3"), 3, {1: "b4"})


@pytest.mark.parametrize("state", [IN_RECOVERY, CLOSED])
def test_writer_ensemble_change_of_a_record_taken_by_recovery_is_fenced(
    state: LedgerState,
) -> None:
    with pytest.raises(LedgerFenced):
        writer_ensemble_change_transform(in_state(state), ("b1", "b2", "b3"), 3, {1: "b4"})


def test_recovery_close_without_replacements_closes() -> None:
    recovering = in_state(IN_RECOVERY)
    closed = recovery_close_transform(recovering, recovering.ensembles, recovering.ensembles, 4, 50)
    assert closed is not None
    assert (closed.state, closed.last_entry_id, closed.length) == (CLOSED, 4, 50)


def test_recovery_close_writes_the_segments_recovery_added() -> None:
    recovering = in_state(IN_RECOVERY)
    recovered = replace_bookies(recovering, 3, {0: "b4"})
    closed = recovery_close_transform(recovering, recovering.ensembles, recovered.ensembles, 4, 50)
    assert closed is not None
    assert closed.ensembles == recovered.ensembles
    assert closed.state is CLOSED


def test_recovery_close_fails_when_someone_else_changed_the_ensembles() -> None:
    recovering = in_state(IN_RECOVERY)
    recovered = replace_bookies(recovering, 3, {0: "b4"})
    meanwhile = replace_bookies(recovering, 1, {1: "b5"})
    with pytest.raises(UnexpectedMetadataChange):
        recovery_close_transform(meanwhile, recovering.ensembles, recovered.ensembles, 4, 50)


def test_recovery_close_adopts_a_concurrent_recoverers_close() -> None:
    recovering = in_state(IN_RECOVERY)
    other = close(recovering, 2, 30)
    assert recovery_close_transform(other, recovering.ensembles, recovering.ensembles, 4, 50) is (
        None
    )


def test_recovery_close_of_an_open_record_fails() -> None:
    recovering = in_state(IN_RECOVERY)
    with pytest.raises(UnexpectedMetadataChange):
        recovery_close_transform(in_state(OPEN), recovering.ensembles, recovering.ensembles, 4, 50)
