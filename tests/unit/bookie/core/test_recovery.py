"""Open with recovery (bookie/core/recovery.py): BookKeeper's recovery scenarios as scripts.

Each scenario seeds in-memory bookies with what an old writer left behind, runs
a `Recovery` against them through `client_fakes.Cluster`, and checks where the
ledger was closed.  Unless a test delivers requests one by one, every request
is answered in the order it was sent.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.core.metadata import LedgerMetadata, LedgerState, close, replace_bookies
from bookie.core.quorum import Quorum
from bookie.core.recovery import Recovery, RecoveryPhase
from bookie.core.writer import Writer
from bookie.errors import (
    LedgerFenced,
    NotEnoughBookies,
    RecoveryFailed,
    UnauthorizedLedgerAccess,
    UnexpectedMetadataChange,
)
from bookie.wire.messages import ADD_FLAG_RECOVERY, ReadResponse
from tests.unit.bookie.core.client_fakes import (
    DIGEST,
    EOK,
    EUA,
    LEDGER_ID,
    Cluster,
    ledger_length,
    make_metadata,
    packet_for,
)

CLOSED = LedgerState.CLOSED
IN_RECOVERY = LedgerState.IN_RECOVERY


def seed(cluster: Cluster, holders: Mapping[int, Sequence[str]], lacs: Mapping[int, int]) -> None:
    """Put entry e on the bookies `holders[e]`, framed with the writer's LAC `lacs[e]`."""
    for entry_id, bookie_ids in holders.items():
        for bookie_id in bookie_ids:
            cluster.bookies[bookie_id].seed(entry_id, packet_for(entry_id, lacs[entry_id]))


def written_in_order(count: int) -> dict[int, int]:
    """Header LACs of entries 0..count-1 written one after the other: each carries e - 1."""
    return {entry_id: entry_id - 1 for entry_id in range(count)}


def recover(cluster: Cluster, name: str = "r", **options: int) -> Recovery:
    recovery = cluster.start_recovery(name, **options)
    cluster.deliver_all()
    return recovery


def assert_closed_at(cluster: Cluster, last_entry_id: int, name: str = "r") -> LedgerMetadata:
    log = cluster.logs[name]
    assert log.aborted is None, log.aborted
    assert log.finished is not None
    metadata = cluster.cell.metadata
    assert log.finished == metadata
    assert (metadata.state, metadata.last_entry_id) == (CLOSED, last_entry_id)
    assert metadata.length == ledger_length(last_entry_id)
    return metadata


def assert_replicated(cluster: Cluster, last_entry_id: int) -> None:
    """Every entry up to the end is on Qa bookies that the metadata names for it."""
    metadata = cluster.cell.metadata
    quorum = metadata.quorum
    for entry_id in range(last_entry_id + 1):
        ensemble = metadata.ensemble_at(entry_id)
        holders = [
            ensemble[i]
            for i in quorum.write_set(entry_id)
            if entry_id in cluster.bookies[ensemble[i]].entries
        ]
        assert len(holders) >= metadata.ack_quorum, (entry_id, holders)


# --- the BookKeeper scenarios -----------------------------------------------------------------


def test_empty_ledger_closes_at_minus_one() -> None:
    cluster = Cluster(make_metadata())
    recover(cluster)
    metadata = assert_closed_at(cluster, -1)
    assert metadata.length == 0
    assert all(bookie.fenced for bookie in cluster.bookies.values())


def test_all_entries_present_recovers_them_all() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(5), ("b1", "b2", "b3")), written_in_order(5))
    recovery = recover(cluster)
    assert recovery.start_lac == 3, "the last entry carries LAC 3"
    assert_closed_at(cluster, 4)


def test_entries_held_by_a_minority_are_recovered_when_found_first() -> None:
    # Entries 3 and 4 reached only b1: the old writer never got Qa acks for
    # them, so closing after them is as legal as closing before them.
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(3), ("b1", "b2", "b3")), written_in_order(3))
    seed(cluster, {3: ("b1",), 4: ("b1",)}, {3: 2, 4: 2})
    cluster.start_recovery("r")
    cluster.deliver(entry_id=-1)
    cluster.deliver(op="read", bookie_id="b1")
    cluster.deliver_all()
    assert_closed_at(cluster, 4)
    assert_replicated(cluster, 4)


def test_entry_held_by_a_minority_is_absent_when_qw_minus_qa_plus_one_deny_it_first() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(3), ("b1", "b2", "b3")), written_in_order(3))
    seed(cluster, {3: ("b1",)}, {3: 2})
    recovery = cluster.start_recovery("r")
    cluster.deliver(entry_id=-1)
    assert recovery.start_lac == 2, "entry 3's header says entry 2 was confirmed"
    cluster.deliver(bookie_id="b2", entry_id=3)
    cluster.deliver(bookie_id="b3", entry_id=3)
    cluster.deliver_all()
    assert_closed_at(cluster, 2)


def test_one_bookie_down_recovery_still_decides_under_coverage() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(4), ("b1", "b2", "b3")), written_in_order(4))
    cluster.bookies["b3"].down = True
    recover(cluster)
    assert_closed_at(cluster, 3)


def test_too_many_bookies_down_recovery_fails_and_the_ledger_stays_in_recovery() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(4), ("b1", "b2", "b3")), written_in_order(4))
    cluster.bookies["b2"].down = True
    cluster.bookies["b3"].down = True
    recovery = recover(cluster)
    assert isinstance(cluster.logs["r"].aborted, RecoveryFailed)
    assert recovery.phase is RecoveryPhase.ABORTED
    assert cluster.cell.metadata.state is IN_RECOVERY


def test_slow_bookie_is_not_waited_for() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(4), ("b1", "b2", "b3")), written_in_order(4))
    recovery = cluster.start_recovery("r")
    for _ in range(100):
        if not cluster.deliver_all_but("b3"):
            break
    assert recovery.phase is RecoveryPhase.FINISHED
    assert_closed_at(cluster, 3)
    assert cluster.pending("r", bookie_id="b3"), "b3 never answered"


def test_bookie_denying_an_entry_others_hold_does_not_make_it_absent() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(2), ("b1", "b2", "b3")), written_in_order(2))
    seed(cluster, {2: ("b1", "b2")}, {2: 1})
    recovery = cluster.start_recovery("r")
    cluster.deliver(entry_id=-1)
    cluster.deliver(bookie_id="b3", entry_id=2)
    cluster.deliver_all()
    assert recovery.start_lac == 1
    assert_closed_at(cluster, 2)
    assert 2 in cluster.bookies["b3"].entries, "re-added to the whole write set"


def test_entry_whose_readers_all_fail_fails_recovery() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(2), ("b1", "b2", "b3")), written_in_order(2))
    cluster.start_recovery("r")
    cluster.deliver(entry_id=-1)
    cluster.deliver(entry_id=1)
    cluster.deliver(bookie_id="b1", entry_id=2)
    cluster.time_out(bookie_id="b2", entry_id=2)
    assert cluster.logs["r"].aborted is None, "one denial, one error: b3 may still decide"
    cluster.time_out(bookie_id="b3", entry_id=2)
    assert isinstance(cluster.logs["r"].aborted, RecoveryFailed)
    assert cluster.cell.metadata.state is IN_RECOVERY


def test_wrong_master_key_aborts_recovery() -> None:
    cluster = Cluster(make_metadata())
    recovery = cluster.start_recovery("r")
    recovery.on_read_response("b1", -1, ReadResponse(0, EUA, "bad key"))
    cluster.pump("r")
    assert isinstance(cluster.logs["r"].aborted, UnauthorizedLedgerAccess)
    assert recovery.phase is RecoveryPhase.ABORTED


def test_corrupt_fence_answers_do_not_count_towards_coverage() -> None:
    cluster = Cluster(make_metadata())
    recovery = cluster.start_recovery("r")
    corrupt = bytearray(packet_for(0, -1))
    corrupt[-1] ^= 0xFF
    for bookie_id in ("b1", "b2"):
        recovery.on_read_response(
            bookie_id, -1, ReadResponse(0, EOK, None, LEDGER_ID, 0, bytes(corrupt), -1)
        )
    recovery.on_read_response("b3", -1, ReadResponse(0, EOK, None, LEDGER_ID, 0, None, -1))
    cluster.pump("r")
    assert isinstance(cluster.logs["r"].aborted, RecoveryFailed)


def test_already_closed_ledger_needs_no_bookie() -> None:
    metadata = close(make_metadata(), 4, ledger_length(4))
    cluster = Cluster(metadata)
    recovery = cluster.start_recovery("r")
    assert recovery.phase is RecoveryPhase.FINISHED
    assert cluster.logs["r"].finished == metadata
    assert cluster.in_flight == []


def test_recovery_reads_fence_and_re_adds_carry_the_recovery_flag() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, {0: ("b1",)}, {0: -1})
    recovery = cluster.start_recovery("r", read_batch_max=2)
    assert all(r.fence for r in cluster.pending("r")), "LAC reads fence"
    cluster.deliver(entry_id=-1)
    assert {(r.entry_id, r.fence) for r in cluster.pending("r")} == {(0, True), (1, True)}
    cluster.deliver(op="read")
    adds = cluster.pending("r", op="add")
    assert {r.bookie_id for r in adds} == {"b1", "b2", "b3"}
    assert all(r.flags == ADD_FLAG_RECOVERY for r in adds)
    assert recovery.phase is RecoveryPhase.RECOVERING


def test_recovery_reads_at_most_a_batch_ahead_of_confirmed_re_adds() -> None:
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(10), ("b1", "b2", "b3")), dict.fromkeys(range(10), -1))
    cluster.start_recovery("r", read_batch_max=3)
    cluster.deliver(entry_id=-1)
    assert sorted({r.entry_id for r in cluster.pending("r", op="read")}) == [0, 1, 2]
    cluster.deliver(op="read")
    assert cluster.pending("r", op="read") == [], "3 found, none of their re-adds confirmed"
    cluster.deliver(op="add", entry_id=0)
    assert sorted({r.entry_id for r in cluster.pending("r", op="read")}) == [3]
    cluster.deliver_all()
    assert_closed_at(cluster, 9)


def test_start_point_is_never_before_the_last_segment() -> None:
    # LedgerRecovery2Test#testRecoveryWhenSecondEnsembleReturnsLacMinusOne: E=Qw=Qa=2,
    # entry 1 failed on b2 so a segment [b1, b3] starts at 1; b3 then fails
    # everything, and the LAC answers say -1.
    metadata = replace_bookies(make_metadata(("b1", "b2"), 2, 2), 1, {1: "b3"})
    cluster = Cluster(metadata, spare_bookies=("b4",))
    seed(cluster, {0: ("b1", "b2"), 1: ("b1",)}, {0: -1, 1: -1})
    seed(cluster, {1: ("b3",)}, {1: 0})
    cluster.bookies["b3"].down = True
    recovery = recover(cluster)
    assert recovery.start_lac == 0, "max(LAC -1, first entry of the last segment - 1)"
    metadata = assert_closed_at(cluster, 1)
    assert metadata.ensembles == ((0, ("b1", "b2")), (1, ("b1", "b4")))


def test_length_of_an_end_no_fence_answer_carried_is_read_from_a_replica() -> None:
    # The last segment [b4, b2, b5] starts at 3 and holds nothing: the end is
    # entry 2, of the segment before, and no fence answer carried it.
    metadata = replace_bookies(make_metadata(("b1", "b2", "b3"), 2, 2), 3, {0: "b4", 2: "b5"})
    cluster = Cluster(metadata)
    seed(cluster, {0: ("b1", "b2"), 1: ("b2", "b3"), 2: ("b3", "b1")}, written_in_order(3))
    recovery = cluster.start_recovery("r")
    cluster.deliver(entry_id=-1)
    assert recovery.start_lac == 2
    cluster.deliver(entry_id=3)
    assert recovery.phase is RecoveryPhase.MEASURING
    assert {(r.bookie_id, r.fence) for r in cluster.pending("r", entry_id=2)} == {
        ("b3", False),
        ("b1", False),
    }
    assert cluster.cell.metadata.state is IN_RECOVERY
    cluster.deliver_all()
    assert_closed_at(cluster, 2)


def test_bookie_failing_re_adds_is_replaced_and_the_close_records_it() -> None:
    # LedgerRecovery2Test#testRecoveryBookieFailedAtStart, with Qa = Qw so
    # that one failed bookie leaves the re-add unable to reach Qa.
    metadata = make_metadata(("b1", "b2", "b3"), 3, 3)
    cluster = Cluster(metadata, spare_bookies=("b4",))
    seed(cluster, {0: ("b1",)}, {0: -1})
    cluster.bookies["b2"].down = True
    recover(cluster)
    metadata = assert_closed_at(cluster, 0)
    assert metadata.ensembles == ((0, ("b1", "b4", "b3")),)
    assert_replicated(cluster, 0)


def test_replacement_during_recovery_starts_at_the_recovered_lac_plus_one() -> None:
    # LedgerRecovery2Test#testRecoveryOneBookieFailsDuring: b2 fails only on entry 1.
    metadata = make_metadata(("b1", "b2", "b3"), 3, 3)
    cluster = Cluster(metadata, spare_bookies=("b4",))
    seed(cluster, {0: ("b1",), 1: ("b3",)}, {0: -1, 1: -1})
    cluster.start_recovery("r")
    cluster.deliver(entry_id=-1)
    # With Qa = Qw one denial proves absence: the holders answer first.
    cluster.deliver(op="read", bookie_id="b3", entry_id=1)
    cluster.deliver(op="read", bookie_id="b1", entry_id=0)
    cluster.deliver(op="read")
    cluster.deliver(op="add", entry_id=0)
    cluster.time_out(op="add", bookie_id="b2", entry_id=1)
    cluster.deliver_all()
    metadata = assert_closed_at(cluster, 1)
    assert metadata.ensembles == ((0, ("b1", "b2", "b3")), (1, ("b1", "b4", "b3")))
    assert_replicated(cluster, 1)


def test_no_replacement_bookie_fails_recovery() -> None:
    # LedgerRecovery2Test#testCanReadLacButCantWrite.
    metadata = make_metadata(("b1", "b2", "b3"), 3, 3)
    cluster = Cluster(metadata)
    seed(cluster, {0: ("b1",)}, {0: -1})
    recovery = cluster.start_recovery("r")
    cluster.deliver(op="read")
    cluster.deliver(op="read")
    cluster.time_out(op="add")
    assert isinstance(cluster.logs["r"].aborted, NotEnoughBookies)
    assert recovery.phase is RecoveryPhase.ABORTED
    assert cluster.cell.metadata.state is IN_RECOVERY


def test_ledger_closed_by_another_recoverer_is_adopted() -> None:
    # LedgerRecovery2Test#testMetadataClosedDuringRecovery and
    # ParallelLedgerRecoveryTest: concurrent recoverers converge through the CAS.
    cluster = Cluster(make_metadata())
    seed(cluster, dict.fromkeys(range(3), ("b1", "b2", "b3")), written_in_order(3))
    first = cluster.start_recovery("r1")
    second = cluster.start_recovery("r2")
    cluster.deliver_all()
    assert first.phase is second.phase is RecoveryPhase.FINISHED
    assert cluster.logs["r1"].finished == cluster.logs["r2"].finished == cluster.cell.metadata
    assert cluster.cell.metadata.last_entry_id == 2


def test_ensembles_changed_by_another_client_during_recovery_fail_the_close() -> None:
    # LedgerRecovery2Test#testNewEnsembleAddedDuringRecovery.
    metadata = make_metadata(("b1", "b2", "b3"), 3, 3)
    cluster = Cluster(metadata, spare_bookies=("b4", "b5"))
    seed(cluster, {0: ("b1",)}, {0: -1})
    cluster.start_recovery("r")
    cluster.deliver(op="read")
    cluster.deliver(op="read")
    cluster.cell.metadata = replace_bookies(cluster.cell.metadata, 1, {2: "b5"})
    cluster.time_out(op="add", bookie_id="b3")
    cluster.deliver_all()
    assert isinstance(cluster.logs["r"].aborted, UnexpectedMetadataChange)


def test_first_writer_cannot_commit_after_second_writer_closes() -> None:
    """LedgerRecovery2Test#testFirstWriterCannotCommitWriteAfter2ndWriterCloses, step by step.

    The TLA+ counterexample (BookKeeper issue #2614): with fencing on the LAC
    reads only, w1 could get e2 acknowledged after w2 closed the ledger at e1.
    Fencing on recovery reads closes the hole.  E=3, Qw=3, Qa=2.
    """
    metadata = make_metadata()
    cluster = Cluster(metadata)
    w1 = cluster.add_writer("w1", Writer(metadata, DIGEST))
    cluster.append("w1", 2)
    cluster.deliver_all()
    assert w1.last_add_confirmed == 1
    cluster.append("w1")  # e2, carrying LAC 1, to b1, b2, b3: held in the network.

    # Step 1. w2 starts recovery.
    w2 = cluster.start_recovery("w2")
    assert cluster.cell.metadata.state is IN_RECOVERY
    # Step 2. w2's fencing LAC read reaches b1.
    cluster.deliver_one("w2", bookie_id="b1", entry_id=-1)
    assert cluster.bookies["b1"].fenced
    # Step 3. w1's add of e2 reaches b3, not fenced yet.
    cluster.deliver_one("w1", bookie_id="b3", entry_id=2)
    assert 2 in cluster.bookies["b3"].entries
    # Step 4. w2's fencing LAC read does not reach b2 (it fails).
    cluster.time_out("w2", bookie_id="b2", entry_id=-1)
    assert not cluster.bookies["b2"].fenced
    # Step 5. w2's fencing LAC read reaches b3: its last entry e2 says LAC 1.
    cluster.deliver_one("w2", bookie_id="b3", entry_id=-1)
    assert w2.start_lac == 1
    # Step 6. w2's (fencing) read of e2 reaches b1: no such entry.
    cluster.deliver_one("w2", bookie_id="b1", entry_id=2)
    # Step 7. w2's fencing read of e2 reaches b2, fencing it: no such entry.
    cluster.deliver_one("w2", bookie_id="b2", entry_id=2)
    assert cluster.bookies["b2"].fenced
    # Step 8. w2 closes the ledger at e1: Qw - Qa + 1 = 2 bookies denied e2.
    assert w2.phase is RecoveryPhase.FINISHED
    assert_closed_at(cluster, 1, name="w2")
    # Step 9. w1's add of e2 reaches b2, fenced by the recovery read of step 7.
    cluster.deliver_one("w1", bookie_id="b2", entry_id=2)
    # Step 10. w1's e2 fails to reach the ack quorum: LedgerFenced.
    assert isinstance(cluster.logs["w1"].failed[2], LedgerFenced)
    assert cluster.logs["w1"].confirmed == [0, 1]
    assert w1.last_add_confirmed == 1
    # No divergence between w1, w2 and the metadata.
    assert cluster.cell.metadata.ensembles == metadata.ensembles
    assert cluster.cell.metadata.last_entry_id == w1.last_add_confirmed
    assert cluster.pending("w2", bookie_id="b3", entry_id=2), "b3's copy of e2 never mattered"


# --- the safety property ----------------------------------------------------------------------


@st.composite
def left_behind(draw: st.DrawFn) -> tuple[Quorum, int, dict[int, list[int]], dict[int, int]]:
    """What a crashed writer may leave: holders of each entry (ensemble indices), header LACs.

    Entries before the acknowledged prefix `acked` are on at least Qa members of
    their write set; later ones on any members.  Header LACs never decrease,
    stay below their own entry and never pass the acknowledged prefix.
    """
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    quorum = Quorum(e, qw, qa)
    written = draw(st.integers(0, 6))
    acked = draw(st.integers(0, written))
    holders: dict[int, list[int]] = {}
    lacs: dict[int, int] = {}
    lac = -1
    for entry_id in range(written):
        members = list(quorum.write_set(entry_id))
        least = qa if entry_id < acked else 0
        holders[entry_id] = draw(
            st.lists(st.sampled_from(members), min_size=least, max_size=qw, unique=True)
        )
        lac = draw(st.integers(lac, min(entry_id, acked) - 1)) if min(entry_id, acked) else lac
        lacs[entry_id] = lac
    return quorum, acked, holders, lacs


@settings(max_examples=300, deadline=None)
@given(left_behind(), st.data(), st.randoms(use_true_random=False))
def test_recovery_never_closes_below_an_acknowledged_entry(
    case: tuple[Quorum, int, dict[int, list[int]], dict[int, int]],
    data: st.DataObject,
    rng: random.Random,
) -> None:
    quorum, acked, holders, lacs = case
    bookies = tuple(f"b{i}" for i in range(quorum.ensemble_size))
    cluster = Cluster(
        make_metadata(bookies, quorum.write_quorum, quorum.ack_quorum), spare_bookies=("s1", "s2")
    )
    seed(cluster, {e: [bookies[i] for i in members] for e, members in holders.items()}, lacs)
    down = data.draw(st.sets(st.sampled_from(bookies), max_size=quorum.ensemble_size))
    for bookie_id in down:
        cluster.bookies[bookie_id].down = True
    cluster.start_recovery("r", read_batch_max=data.draw(st.integers(1, 8)))
    cluster.deliver_all(rng)
    log = cluster.logs["r"]
    if log.aborted is not None:
        assert down, "with every bookie up, recovery always decides"
        assert isinstance(log.aborted, (RecoveryFailed, NotEnoughBookies))
        assert cluster.cell.metadata.state is IN_RECOVERY
        return
    metadata = cluster.cell.metadata
    assert isinstance(log.finished, LedgerMetadata)
    assert metadata.state is CLOSED
    assert metadata.last_entry_id >= acked - 1, "an acknowledged entry was cut off"
    assert metadata.last_entry_id <= len(holders) - 1
    assert metadata.length == ledger_length(metadata.last_entry_id)
    assert_replicated(cluster, metadata.last_entry_id)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([(3, 3, 2), (3, 2, 2), (4, 3, 2), (4, 2, 1), (5, 3, 3), (2, 2, 2)]),
    st.integers(1, 8),
    st.floats(0.0, 0.2),
    st.randoms(use_true_random=False),
)
def test_a_live_writer_and_a_recovery_agree_on_every_acknowledged_entry(
    config: tuple[int, int, int], entries: int, loss: float, rng: random.Random
) -> None:
    """Reference §3d invariants 1 and 3: whatever the interleaving of the old
    writer's adds with the recovery's fences, reads and re-adds, and whichever
    requests or answers get lost, every entry the writer saw confirmed is
    inside the closed ledger and held by Qa bookies the metadata names, and
    the writer sees nothing confirmed past the close."""
    e, qw, qa = config
    bookies = tuple(f"b{i}" for i in range(e))
    metadata = make_metadata(bookies, qw, qa)
    cluster = Cluster(metadata, spare_bookies=("s1", "s2"))
    writer = cluster.add_writer("w", Writer(metadata, DIGEST))
    recovery_starts_at = rng.randrange(entries * (qw + 1) + 1)
    for step in range(100_000):
        if "r" not in cluster.recoveries and (step >= recovery_starts_at or not cluster.in_flight):
            cluster.start_recovery("r", read_batch_max=4)
        elif writer.last_add_pushed + 1 < entries and writer.capacity and rng.random() < 0.4:
            cluster.append("w")
        elif cluster.in_flight:
            request = cluster.take(rng.randrange(len(cluster.in_flight)))
            chance = rng.random()
            if chance < loss / 2:
                cluster.time_out_request(request)
            elif chance < loss:
                cluster.lose_reply(request)
            else:
                cluster.deliver_request(request)
        else:
            break
    else:
        raise AssertionError("never went quiet")
    confirmed = cluster.logs["w"].confirmed
    assert confirmed == list(range(len(confirmed)))
    assert writer.last_add_confirmed == len(confirmed) - 1
    assert_replicated(cluster, writer.last_add_confirmed)
    log = cluster.logs["r"]
    if log.aborted is not None:
        assert loss > 0, "without losses recovery always decides"
        assert isinstance(log.aborted, (RecoveryFailed, NotEnoughBookies))
        return
    closed = cluster.cell.metadata
    assert closed.state is CLOSED
    assert writer.last_add_confirmed <= closed.last_entry_id, "an acknowledged entry was lost"
    assert closed.length == ledger_length(closed.last_entry_id)
    assert_replicated(cluster, closed.last_entry_id)
