"""The write handle's rules (bookie/core/writer.py), each test named after the rule it checks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import limits
from bookie.core.metadata import LedgerState, replace_bookies
from bookie.core.quorum import Quorum
from bookie.core.writer import (
    AddsConfirmed,
    ChangeEnsemble,
    CloseLedger,
    SendAdd,
    SendExplicitLac,
    Writer,
    WriterState,
)
from bookie.errors import (
    LedgerClosed,
    LedgerFenced,
    LocalProtocolError,
    NotEnoughBookies,
    TooManyEnsembleChanges,
)
from bookie.wire.packet import HEADER
from tests.unit.bookie.core.client_fakes import (
    DIGEST,
    EFENCED,
    EIO,
    EOK,
    EUA,
    LEDGER_ID,
    Cluster,
    FakeBookie,
    ledger_length,
    make_metadata,
    payload_of,
)


def new_writer(
    bookies: tuple[str, ...] = ("b1", "b2", "b3"), write_quorum: int = 3, ack_quorum: int = 2
) -> Writer:
    return Writer(make_metadata(bookies, write_quorum, ack_quorum), DIGEST)


def cluster_with_writer(
    bookies: tuple[str, ...] = ("b1", "b2", "b3"),
    write_quorum: int = 3,
    ack_quorum: int = 2,
    spare: tuple[str, ...] = ("b4", "b5"),
    **options: int,
) -> tuple[Cluster, Writer]:
    metadata = make_metadata(bookies, write_quorum, ack_quorum)
    cluster = Cluster(metadata, spare)
    writer = cluster.add_writer("w", Writer(metadata, DIGEST, **options))
    return cluster, writer


def sends(effects: Sequence[object]) -> list[SendAdd]:
    return [effect for effect in effects if isinstance(effect, SendAdd)]


# --- rule 1 and 7: framing and sending --------------------------------------------------------


def test_rule1_an_entry_goes_to_its_write_set_in_one_send() -> None:
    writer = new_writer(("b1", "b2", "b3", "b4"), write_quorum=2, ack_quorum=2)
    for entry_id in range(5):
        assert writer.append(payload_of(entry_id)) == entry_id
    adds = sends(writer.take_effects())
    assert [add.entry_id for add in adds] == [0, 1, 2, 3, 4]
    assert [add.bookie_ids for add in adds] == [
        ("b1", "b2"),
        ("b2", "b3"),
        ("b3", "b4"),
        ("b4", "b1"),
        ("b1", "b2"),
    ]
    assert all(add.flags == 0 for add in adds)


def test_rule7_packets_carry_the_lac_and_the_running_length() -> None:
    cluster, _writer = cluster_with_writer()
    cluster.append("w", 2)
    cluster.deliver_all()
    cluster.append("w")
    packets = {r.packet for r in cluster.pending("w")}
    assert len(packets) == 1, "one packet for the whole write set"
    (packet,) = packets
    assert packet is not None
    lac, length, payload = DIGEST.verify_entry(packet, LEDGER_ID, 2)
    assert (lac, length, payload) == (1, ledger_length(2), payload_of(2))
    assert HEADER.unpack_from(packet)[:2] == (LEDGER_ID, 2)


def test_rule7_a_payload_over_the_limit_is_refused() -> None:
    writer = new_writer()
    with pytest.raises(LocalProtocolError):
        writer.append(bytes(limits.entry_payload_bytes_max + 1))
    assert writer.last_add_pushed == -1


# --- rule 2: ordered confirmation -------------------------------------------------------------


@st.composite
def acks_in_any_order(draw: st.DrawFn) -> tuple[Quorum, int, list[tuple[int, int]]]:
    e = draw(st.integers(1, 4))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    entries = draw(st.integers(1, 5))
    quorum = Quorum(e, qw, qa)
    acks = [(entry, index) for entry in range(entries) for index in quorum.write_set(entry)]
    return quorum, entries, draw(st.permutations(acks))


@given(acks_in_any_order())
def test_rule2_confirmations_are_in_entry_order_under_any_ack_order(
    case: tuple[Quorum, int, list[tuple[int, int]]],
) -> None:
    quorum, entries, acks = case
    bookies = tuple(f"b{i}" for i in range(quorum.ensemble_size))
    writer = new_writer(bookies, quorum.write_quorum, quorum.ack_quorum)
    for entry_id in range(entries):
        writer.append(payload_of(entry_id))
    writer.take_effects()
    acked: dict[int, int] = {}
    confirmed: list[int] = []
    for entry_id, index in acks:
        lac_before = writer.last_add_confirmed
        writer.on_add_response(bookies[index], entry_id, EOK)
        acked[entry_id] = acked.get(entry_id, 0) + 1
        for effect in writer.take_effects():
            assert isinstance(effect, AddsConfirmed)
            assert effect.first_entry_id == len(confirmed)
            confirmed.extend(range(effect.first_entry_id, effect.last_entry_id + 1))
        # The LAC is the end of the longest prefix of entries with Qa acks.
        prefix = 0
        while prefix < entries and acked.get(prefix, 0) >= quorum.ack_quorum:
            prefix += 1
        assert writer.last_add_confirmed == prefix - 1
        assert confirmed == list(range(prefix))
        assert lac_before <= writer.last_add_confirmed <= writer.last_add_pushed
    assert confirmed == list(range(entries))
    assert writer.length == ledger_length(entries - 1)


def test_rule2_a_duplicate_or_stray_ack_counts_once() -> None:
    writer = new_writer()
    writer.append(payload_of(0))
    writer.take_effects()
    writer.on_add_response("b1", 0, EOK)
    writer.on_add_response("b1", 0, EOK)
    writer.on_add_response("b9", 0, EOK)
    writer.on_add_response("b1", 5, EOK)
    assert writer.last_add_confirmed == -1
    writer.on_add_response("b2", 0, EOK)
    assert writer.last_add_confirmed == 0


# --- rule 3: fatal answers --------------------------------------------------------------------


@pytest.mark.parametrize("status", [EFENCED, EUA])
def test_rule3_efenced_or_eua_fails_every_pending_add_with_ledger_fenced(status: int) -> None:
    cluster, writer = cluster_with_writer()
    cluster.append("w", 4)
    cluster.deliver(entry_id=0)
    assert cluster.logs["w"].confirmed == [0]
    writer.on_add_response("b2", 2, status)
    cluster.pump("w")
    failed = cluster.logs["w"].failed
    assert sorted(failed) == [1, 2, 3]
    assert all(isinstance(error, LedgerFenced) for error in failed.values())
    assert writer.state is WriterState.FENCED
    with pytest.raises(LedgerFenced):
        writer.append(b"more")
    with pytest.raises(LedgerFenced):
        writer.close()
    cluster.deliver_all()
    assert cluster.logs["w"].confirmed == [0], "late acks change nothing"


def test_rule3_a_fenced_bookie_stops_the_writer() -> None:
    cluster, writer = cluster_with_writer()
    cluster.append("w", 2)
    cluster.deliver_all()
    cluster.bookies["b3"].fenced = True
    cluster.append("w")
    cluster.deliver_all()
    assert writer.state is WriterState.FENCED
    assert list(cluster.logs["w"].failed) == [2]


# --- rules 4 and 5: ensemble changes ----------------------------------------------------------


def test_rule4_an_add_that_cannot_reach_qa_changes_the_ensemble_from_lac_plus_one() -> None:
    writer = new_writer(write_quorum=3, ack_quorum=3)
    writer.append(payload_of(0))
    writer.take_effects()
    for bookie in ("b1", "b2", "b3"):
        writer.on_add_response(bookie, 0, EOK)
    writer.append(payload_of(1))
    writer.take_effects()
    writer.on_add_response("b2", 1, EIO)
    (change,) = writer.take_effects()
    assert change == ChangeEnsemble(1, ("b1", "b2", "b3"), {1: "b2"})


def test_rule5_change_resends_exactly_the_pending_entries_to_the_replacement() -> None:
    cluster, _writer = cluster_with_writer(("b1", "b2", "b3", "b4"), 2, 2, spare=("b5",))
    cluster.append("w", 6)
    cluster.deliver(entry_id=0)
    cluster.deliver(entry_id=1)
    # Entries 2..5 pending; b3 (index 2) holds write sets of entries 1, 2 (and 5).
    cluster.deliver(bookie_id="b2", entry_id=2)
    cluster.time_out(bookie_id="b3", entry_id=2)
    assert cluster.cell.metadata.ensembles[-1] == (2, ("b1", "b2", "b5", "b4"))
    resent = [r.entry_id for r in cluster.pending("w", bookie_id="b5")]
    pending_on_index_2 = [e for e in range(2, 6) if 2 in Quorum(4, 2, 2).write_set(e)]
    assert resent == pending_on_index_2 == [2, 5]
    cluster.deliver_all()
    assert cluster.logs["w"].confirmed == list(range(6))
    assert all(cluster.bookies["b5"].entries.get(e) for e in (2, 5))


def test_rule5_confirmations_are_held_back_while_the_ensemble_changes() -> None:
    writer = new_writer()
    writer.append(payload_of(0))
    writer.append(payload_of(1))
    writer.take_effects()
    writer.on_add_response("b3", 0, EIO)
    writer.on_add_response("b1", 0, EOK)
    writer.on_add_response("b2", 0, EOK)
    assert writer.take_effects() == [
        AddsConfirmed(0, 0),
        ChangeEnsemble(1, ("b1", "b2", "b3"), {2: "b3"}),
    ]
    writer.on_add_response("b1", 1, EOK)
    writer.on_add_response("b2", 1, EOK)
    assert writer.last_add_confirmed == 0, "held back: the new segment starts at LAC + 1"
    assert writer.take_effects() == []


def test_rule5_new_adds_skip_the_failed_bookie_during_the_change() -> None:
    writer = new_writer(write_quorum=3, ack_quorum=3)
    writer.append(payload_of(0))
    writer.take_effects()
    writer.on_add_response("b2", 0, EIO)
    assert writer.take_effects() == [ChangeEnsemble(0, ("b1", "b2", "b3"), {1: "b2"})]
    writer.append(payload_of(1))
    writer.append(payload_of(2))
    adds = sends(writer.take_effects())
    assert [add.bookie_ids for add in adds] == [("b3", "b1"), ("b3", "b1")]


def test_rule5_replaced_bookies_acks_no_longer_count() -> None:
    writer = new_writer(write_quorum=3, ack_quorum=3)
    writer.append(payload_of(0))
    writer.append(payload_of(1))
    writer.take_effects()
    writer.on_add_response("b2", 1, EOK)
    writer.on_add_response("b2", 0, EIO)
    writer.take_effects()
    writer.on_ensemble_changed(replace_bookies(make_metadata(), 0, {1: "b4"}))
    resent = writer.take_effects()
    assert [(a.entry_id, a.bookie_ids) for a in sends(resent)] == [(0, ("b4",)), (1, ("b4",))]
    writer.on_add_response("b1", 1, EOK)
    writer.on_add_response("b3", 1, EOK)
    writer.on_add_response("b1", 0, EOK)
    writer.on_add_response("b3", 0, EOK)
    assert writer.last_add_confirmed == -1, "b2's ack of entry 1 was for a replaced bookie"
    writer.on_add_response("b4", 0, EOK)
    writer.on_add_response("b4", 1, EOK)
    assert writer.last_add_confirmed == 1


def test_rule4_delayed_change_an_error_after_qa_does_not_fail_the_add() -> None:
    cluster, _writer = cluster_with_writer()
    cluster.append("w", 2)
    cluster.deliver(bookie_id="b1")
    cluster.deliver(bookie_id="b2")
    assert cluster.logs["w"].confirmed == [0, 1]
    # b3's answer to entry 0 comes after the quorum: an error now only
    # replaces b3 for the entries that follow.
    cluster.time_out(bookie_id="b3", entry_id=0)
    assert cluster.logs["w"].failed == {}
    assert cluster.cell.metadata.ensembles[-1][0] == 2
    assert "b3" not in cluster.cell.metadata.ensembles[-1][1]
    assert cluster.cell.metadata.ensembles[0] == (0, ("b1", "b2", "b3"))
    cluster.append("w", 2)
    cluster.deliver_all()
    assert cluster.logs["w"].confirmed == [0, 1, 2, 3]
    assert not any(r.bookie_id == "b3" and r.entry_id >= 2 for r in cluster.in_flight)


def test_rule4_delayed_change_waits_while_the_add_can_still_reach_qa() -> None:
    writer = new_writer()
    writer.append(payload_of(0))
    writer.take_effects()
    writer.on_add_response("b3", 0, EIO)
    assert writer.take_effects() == [], "b1 and b2 may still give entry 0 its quorum"
    writer.append(payload_of(1))
    (add,) = writer.take_effects()
    assert isinstance(add, SendAdd)
    assert add.bookie_ids == ("b2", "b1"), "the failed bookie gets no new adds"
    writer.on_add_response("b1", 0, EOK)
    writer.on_add_response("b2", 0, EOK)
    assert writer.take_effects() == [
        AddsConfirmed(0, 0),
        ChangeEnsemble(1, ("b1", "b2", "b3"), {2: "b3"}),
    ]


def test_rule4_delayed_change_waits_for_the_confirmation_of_an_add_with_its_quorum() -> None:
    writer = new_writer()
    writer.append(payload_of(0))
    writer.append(payload_of(1))
    writer.take_effects()
    writer.on_add_response("b1", 1, EOK)
    writer.on_add_response("b2", 1, EOK)
    writer.on_add_response("b3", 1, EIO)
    assert writer.take_effects() == [], "entry 1 has its quorum and waits for entry 0"
    writer.on_add_response("b1", 0, EOK)
    writer.on_add_response("b3", 0, EOK)
    assert writer.take_effects() == [
        AddsConfirmed(0, 1),
        ChangeEnsemble(2, ("b1", "b2", "b3"), {2: "b3"}),
    ]


# --- rule 6: failed changes -------------------------------------------------------------------


def test_rule6_a_change_refused_because_recovery_started_fences_the_writer() -> None:
    cluster, writer = cluster_with_writer()
    cluster.append("w", 3)
    cluster.deliver(entry_id=0)
    cluster.start_recovery("r")
    cluster.time_out("w", bookie_id="b1", entry_id=1)
    assert cluster.logs["w"].failed == {}, "entry 1 can still reach Qa on b2 and b3"
    cluster.time_out("w", bookie_id="b2", entry_id=1)
    failed = cluster.logs["w"].failed
    assert sorted(failed) == [1, 2]
    assert all(isinstance(error, LedgerFenced) for error in failed.values())
    assert writer.state is WriterState.FENCED


def defer_a_change(cluster: Cluster, writer: Writer) -> None:
    """Entries 0 and 1; b1 times out on entry 1, which b2 and b3 confirm; no spare."""
    cluster.append("w", 2)
    cluster.deliver(entry_id=0)
    cluster.time_out(bookie_id="b1", entry_id=1)
    cluster.deliver_all_but("b1")
    assert writer.change_deferred


def test_rule6_no_replacement_defers_the_change_while_the_bookies_left_reach_qa() -> None:
    cluster, writer = cluster_with_writer(spare=(), explicit_lac_interval_ms=0)
    cluster.append("w", 3)
    cluster.deliver(entry_id=0)
    cluster.time_out(bookie_id="b1", entry_id=1)
    # b2 and b3 are Qa = 2: entries 1 and 2 are confirmed without b1, then the
    # (delayed) change finds no bookie to replace b1 with.
    cluster.deliver_all_but("b1")
    assert writer.state is WriterState.WRITABLE
    assert writer.change_deferred
    assert cluster.logs["w"].failed == {}
    assert cluster.logs["w"].confirmed == [0, 1, 2]
    assert cluster.cell.metadata.ensembles == ((0, ("b1", "b2", "b3")),)
    # New entries skip b1 and are confirmed by the two others.
    cluster.append("w", 2)
    assert {r.bookie_id for r in cluster.pending("w", op="add")} - {"b1"} == {"b2", "b3"}
    assert not cluster.pending("w", bookie_id="b1", entry_id=3)
    cluster.deliver_all_but("b1")
    assert cluster.logs["w"].confirmed == [0, 1, 2, 3, 4]
    assert cluster.bookies["b2"].entries.keys() >= {3, 4}


def test_rule6_a_deferred_change_is_asked_for_again_and_takes_a_bookie_that_joined() -> None:
    cluster, writer = cluster_with_writer(
        spare=(), explicit_lac_interval_ms=0, change_retry_interval_ms=500
    )
    defer_a_change(cluster, writer)
    cluster.append("w")
    assert writer.next_tick_ms == 0, "the retry is scheduled at the next tick"
    writer.tick(1_000)
    assert writer.next_tick_ms == 1_500
    writer.tick(1_499)
    assert writer.take_effects() == []
    # Still no bookie: asked again, deferred again.
    writer.tick(1_500)
    cluster.pump("w")
    assert writer.change_deferred
    assert writer.state is WriterState.WRITABLE
    cluster.bookies["b4"] = FakeBookie("b4")
    cluster.available["b4"] = None
    writer.tick(2_000)
    writer.tick(2_500)
    cluster.pump("w")
    assert not writer.change_deferred
    assert cluster.cell.metadata.ensembles[-1] == (2, ("b4", "b2", "b3"))
    # Entry 2, still pending, went to the newcomer too.
    assert cluster.pending("w", bookie_id="b4", entry_id=2)
    cluster.deliver_all()
    assert cluster.logs["w"].confirmed == [0, 1, 2]
    assert writer.next_tick_ms is None


def test_rule6_a_second_failure_while_deferred_breaks_the_writer() -> None:
    cluster, writer = cluster_with_writer(spare=())
    defer_a_change(cluster, writer)
    cluster.append("w")
    cluster.time_out(bookie_id="b2", entry_id=2)
    assert isinstance(cluster.logs["w"].failed[2], NotEnoughBookies)
    assert writer.state is WriterState.BROKEN


def test_rule6_no_deferral_when_a_write_set_is_left_below_qa() -> None:
    # Qw = Qa = 2 of E = 3: every write set holding b1 loses its quorum.
    cluster, writer = cluster_with_writer(write_quorum=2, ack_quorum=2, spare=())
    cluster.append("w", 2)
    cluster.deliver(entry_id=0)
    cluster.time_out(bookie_id="b2", entry_id=1)
    assert not writer.change_deferred
    assert writer.state is WriterState.BROKEN
    assert isinstance(cluster.logs["w"].failed[1], NotEnoughBookies)


def test_rule6_no_replacement_bookie_breaks_the_writer_which_can_still_close() -> None:
    cluster, writer = cluster_with_writer(spare=())
    cluster.append("w", 2)
    cluster.deliver(entry_id=0)
    cluster.time_out(bookie_id="b1", entry_id=1)
    cluster.time_out(bookie_id="b2", entry_id=1)
    assert isinstance(cluster.logs["w"].failed[1], NotEnoughBookies)
    assert writer.state is WriterState.BROKEN
    with pytest.raises(NotEnoughBookies):
        writer.append(b"x")
    writer.close()
    cluster.pump("w")
    assert cluster.cell.metadata.state is LedgerState.CLOSED
    assert cluster.cell.metadata.last_entry_id == 0
    assert writer.state is WriterState.CLOSED


def test_rule6_too_many_ensemble_changes_stop_the_writer() -> None:
    cluster, writer = cluster_with_writer(
        write_quorum=3, ack_quorum=3, spare=("b4", "b5", "b6"), ensemble_changes_max=2
    )
    for round_number in range(3):
        cluster.append("w")
        victim = writer.ensemble[0]
        cluster.time_out(bookie_id=victim, entry_id=round_number)
        cluster.deliver_all()
    assert isinstance(cluster.logs["w"].failed[2], TooManyEnsembleChanges)
    assert cluster.logs["w"].confirmed == [0, 1]


# --- rule 7: the window -----------------------------------------------------------------------


def test_rule7_at_most_outstanding_adds_max_adds_are_pending() -> None:
    cluster, writer = cluster_with_writer(outstanding_adds_max=3)
    assert writer.capacity == 3
    cluster.append("w", 3)
    assert writer.capacity == 0
    with pytest.raises(AssertionError):
        writer.append(b"one too many")
    cluster.deliver(entry_id=1)
    assert writer.capacity == 0, "entry 1 is acked but not confirmed: entry 0 is not"
    cluster.deliver(entry_id=0)
    assert writer.capacity == 2
    cluster.append("w", 2)
    assert writer.capacity == 0


# --- rule 8: explicit LAC ---------------------------------------------------------------------


def test_rule8_an_idle_writer_publishes_its_lac_once_per_interval() -> None:
    cluster, writer = cluster_with_writer(explicit_lac_interval_ms=100)
    cluster.append("w", 2)
    cluster.deliver_all()
    assert writer.last_add_confirmed == 1
    writer.tick(1_000)
    effects = writer.take_effects()
    assert len(effects) == 1
    explicit = effects[0]
    assert isinstance(explicit, SendExplicitLac)
    assert explicit.lac == 1
    assert explicit.bookie_ids == ("b1", "b2", "b3")
    assert DIGEST.verify_lac(explicit.packet, LEDGER_ID) == 1
    assert writer.next_tick_ms == 1_100
    writer.tick(1_050)
    writer.tick(1_100)
    assert writer.take_effects() == [], "nothing newer to publish"


def test_rule8_no_explicit_lac_while_adds_carry_it() -> None:
    cluster, writer = cluster_with_writer(explicit_lac_interval_ms=100)
    cluster.append("w")
    cluster.deliver_all()
    cluster.append("w")
    writer.tick(0)
    assert writer.take_effects() == [], "entry 1's header already carries LAC 0"


def test_rule8_interval_zero_turns_explicit_lac_off() -> None:
    cluster, writer = cluster_with_writer(explicit_lac_interval_ms=0)
    cluster.append("w")
    cluster.deliver_all()
    writer.tick(10_000)
    assert writer.take_effects() == []
    assert writer.next_tick_ms is None


# --- rule 9: close ----------------------------------------------------------------------------


def test_rule9_close_waits_for_pending_adds_then_closes_at_the_lac() -> None:
    cluster, writer = cluster_with_writer()
    cluster.append("w", 3)
    writer.close()
    assert writer.take_effects() == []
    with pytest.raises(LedgerClosed):
        writer.append(b"late")
    cluster.deliver_all()
    metadata = cluster.cell.metadata
    assert (metadata.state, metadata.last_entry_id) == (LedgerState.CLOSED, 2)
    assert metadata.length == ledger_length(2)
    assert writer.state is WriterState.CLOSED
    with pytest.raises(LedgerClosed):
        writer.close()


def test_rule9_closing_an_empty_ledger() -> None:
    writer = new_writer()
    writer.close()
    assert writer.take_effects() == [CloseLedger(-1, 0)]


def test_rule9_close_fails_when_fenced_while_draining() -> None:
    cluster, writer = cluster_with_writer()
    cluster.append("w", 2)
    writer.close()
    writer.on_add_response("b1", 0, EFENCED)
    cluster.pump("w")
    assert len(cluster.logs["w"].close_failures) == 1
    assert isinstance(cluster.logs["w"].close_failures[0], LedgerFenced)
    assert writer.state is WriterState.FENCED
    assert cluster.cell.metadata.state is LedgerState.OPEN


def test_rule9_close_cas_refused_by_recovery_fences_the_writer() -> None:
    cluster, writer = cluster_with_writer()
    cluster.append("w")
    cluster.deliver_all()
    cluster.start_recovery("r")
    writer.close()
    cluster.pump("w")
    assert writer.state is WriterState.FENCED
    assert cluster.cell.metadata.state is LedgerState.IN_RECOVERY, "the recovery owns the end"
