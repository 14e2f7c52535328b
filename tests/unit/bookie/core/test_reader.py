"""Reading rules (bookie/core/reader.py): replica fallback, speculative reads, LAC, tailing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.core.metadata import close, replace_bookies
from bookie.core.reader import (
    EntriesRead,
    LacAdvanced,
    LacKnown,
    LacRead,
    LacReadFailed,
    LongPollTail,
    RangeRead,
    ReadFailed,
    SendRead,
    SendReadLac,
    TailEnded,
    replicas_of,
)
from bookie.errors import (
    BookieUnavailable,
    DigestMismatch,
    EntryNotAvailable,
    NoSuchEntry,
    ReadBeyondLastAddConfirmed,
)
from bookie.wire.messages import ReadLacResponse, ReadResponse
from tests.unit.bookie.core.client_fakes import (
    DIGEST,
    EIO,
    ENOENTRY,
    ENOLEDGER,
    EOK,
    LEDGER_ID,
    make_metadata,
    packet_for,
    payload_of,
)

SPECULATIVE_MS = 100


def found(entry_id: int, header_lac: int = -1, bookie_lac: int | None = -1) -> ReadResponse:
    return ReadResponse(
        0, EOK, None, LEDGER_ID, entry_id, packet_for(entry_id, header_lac), bookie_lac
    )


def corrupt(entry_id: int) -> ReadResponse:
    packet = bytearray(packet_for(entry_id, -1))
    packet[-1] ^= 0xFF
    return ReadResponse(0, EOK, None, LEDGER_ID, entry_id, bytes(packet), -1)


def status(code: int, entry_id: int, bookie_lac: int | None = -1) -> ReadResponse:
    return ReadResponse(0, code, "no", LEDGER_ID, entry_id, None, bookie_lac)


def range_read(first: int, last: int, lac: int = 100, **options: bool) -> RangeRead:
    read = RangeRead(
        make_metadata(),
        DIGEST,
        first,
        last,
        last_add_confirmed=lac,
        speculative_read_timeout_ms=SPECULATIVE_MS,
        **options,
    )
    read.start(0)
    return read


# --- RangeRead --------------------------------------------------------------------------------


def test_rule1_reads_stop_at_the_last_add_confirmed() -> None:
    with pytest.raises(ReadBeyondLastAddConfirmed):
        range_read(3, 6, lac=5)
    read = range_read(3, 6, lac=5, allow_unconfirmed=True)
    assert len(read.take_effects()) == 4


def test_rule1_reads_never_pass_the_end_of_a_closed_ledger() -> None:
    metadata = close(make_metadata(), 4, 100)
    with pytest.raises(ReadBeyondLastAddConfirmed):
        RangeRead(metadata, DIGEST, 3, 5, last_add_confirmed=4, allow_unconfirmed=True)


def test_rule2_first_replica_first_in_write_set_order() -> None:
    read = range_read(0, 2)
    assert read.take_effects() == [SendRead("b1", 0), SendRead("b2", 1), SendRead("b3", 2)]


@pytest.mark.parametrize(
    "failure", [status(EIO, 1), status(ENOENTRY, 1), status(ENOLEDGER, 1), corrupt(1)]
)
def test_rule2_next_replica_on_error_absence_or_digest_mismatch(failure: ReadResponse) -> None:
    read = range_read(1, 1)
    assert read.take_effects() == [SendRead("b2", 1)]
    read.on_read_response("b2", 1, failure, 10)
    assert read.take_effects() == [SendRead("b3", 1)]
    read.on_read_response("b3", 1, found(1), 20)
    assert read.take_effects() == [EntriesRead(1, (payload_of(1),))]
    assert read.finished


def test_rule2_timeout_counts_as_an_error() -> None:
    read = range_read(1, 1)
    read.take_effects()
    read.on_read_timeout("b2", 1, 10)
    assert read.take_effects() == [SendRead("b3", 1)]


def test_rule2_speculative_read_asks_the_next_replica_and_first_valid_wins() -> None:
    read = range_read(0, 0)
    read.take_effects()
    assert read.next_tick_ms == SPECULATIVE_MS
    read.tick(SPECULATIVE_MS - 1)
    assert read.take_effects() == []
    read.tick(SPECULATIVE_MS)
    assert read.take_effects() == [SendRead("b2", 0)]
    assert read.next_tick_ms == 2 * SPECULATIVE_MS
    read.on_read_response("b2", 0, found(0), SPECULATIVE_MS + 5)
    read.on_read_response("b1", 0, found(0), SPECULATIVE_MS + 6)
    assert read.take_effects() == [EntriesRead(0, (payload_of(0),))]
    assert read.next_tick_ms is None


def test_rule2_a_failed_replica_with_a_speculative_read_outstanding_moves_on() -> None:
    read = range_read(0, 0)
    read.take_effects()
    read.tick(SPECULATIVE_MS)
    read.take_effects()
    read.on_read_response("b1", 0, status(EIO, 0), SPECULATIVE_MS + 1)
    assert read.take_effects() == [SendRead("b3", 0)]
    read.on_read_response("b3", 0, status(EIO, 0), SPECULATIVE_MS + 2)
    assert read.take_effects() == [], "b2 may still answer"
    read.on_read_response("b2", 0, found(0), SPECULATIVE_MS + 3)
    assert read.take_effects() == [EntriesRead(0, (payload_of(0),))]


@pytest.mark.parametrize(
    ("answers", "error"),
    [
        ([status(ENOENTRY, 0), status(ENOLEDGER, 0), status(ENOENTRY, 0)], NoSuchEntry),
        ([corrupt(0), corrupt(0), status(ENOENTRY, 0)], DigestMismatch),
        ([status(ENOENTRY, 0), status(EIO, 0), corrupt(0)], EntryNotAvailable),
    ],
)
def test_rule3_entry_fails_when_every_replica_answered_without_a_valid_copy(
    answers: list[ReadResponse], error: type[Exception]
) -> None:
    read = range_read(0, 1)
    read.take_effects()
    for bookie, answer in zip(("b1", "b2", "b3"), answers, strict=True):
        read.on_read_response(bookie, 0, answer, 0)
    effects = read.take_effects()
    assert isinstance(effects[-1], ReadFailed)
    assert effects[-1].entry_id == 0
    assert isinstance(effects[-1].error, error)
    assert read.finished
    read.on_read_response("b2", 1, found(1), 0)
    assert read.take_effects() == [], "nothing after a failure"


def test_rule3_an_entry_no_replica_could_be_reached_for_says_why() -> None:
    read = range_read(0, 1)
    read.take_effects()
    read.on_unreachable("b1", 0, "TLS: the peer's certificate was refused", 0)
    read.on_unreachable("b2", 0, "refused", 0)
    assert not read.finished
    read.on_read_timeout("b3", 0, 0)
    (failed,) = read.take_effects()[-1:]
    assert isinstance(failed, ReadFailed)
    assert isinstance(failed.error, EntryNotAvailable), "one replica only timed out"
    read = range_read(0, 1)
    read.take_effects()
    for bookie in ("b1", "b2", "b3"):
        read.on_unreachable(bookie, 0, f"TLS refused by {bookie}", 0)
    (failed,) = read.take_effects()[-1:]
    assert isinstance(failed, ReadFailed)
    assert isinstance(failed.error, BookieUnavailable)
    assert str(failed.error).endswith("could be reached: b1: TLS refused by b1")


@given(st.permutations(range(6)))
def test_rule4_payloads_are_delivered_in_entry_order(order: list[int]) -> None:
    read = range_read(10, 15)
    sends = {
        effect.entry_id: effect.bookie_id
        for effect in read.take_effects()
        if isinstance(effect, SendRead)
    }
    assert len(sends) == 6
    delivered: list[bytes] = []
    next_entry = 10
    for offset in order:
        entry_id = 10 + offset
        read.on_read_response(sends[entry_id], entry_id, found(entry_id), 0)
        for effect in read.take_effects():
            assert isinstance(effect, EntriesRead)
            assert effect.first_entry_id == next_entry
            next_entry += len(effect.payloads)
            delivered.extend(effect.payloads)
    assert delivered == [payload_of(e) for e in range(10, 16)]
    assert read.finished


def test_rule4_every_answer_raises_the_lac_which_never_decreases() -> None:
    read = range_read(0, 2, lac=2)
    read.take_effects()
    read.on_read_response("b1", 0, found(0, header_lac=-1, bookie_lac=5), 0)
    assert read.last_add_confirmed == 5
    read.on_read_response("b2", 1, found(1, header_lac=0, bookie_lac=3), 0)
    assert read.last_add_confirmed == 5
    read.on_read_response("b3", 2, found(2, header_lac=1, bookie_lac=None), 0)
    assert read.last_add_confirmed == 5
    read2 = range_read(0, 0, lac=-1, allow_unconfirmed=True)
    read2.take_effects()
    read2.on_read_response("b1", 0, status(ENOENTRY, 0, bookie_lac=7), 0)
    assert read2.last_add_confirmed == 7


def test_answers_from_bookies_not_asked_are_ignored() -> None:
    read = range_read(0, 0)
    read.take_effects()
    read.on_read_response("b2", 0, found(0), 0)
    read.on_read_response("b9", 0, found(0), 0)
    assert read.take_effects() == []
    assert not read.finished


def test_a_read_after_an_ensemble_change_asks_the_new_segment() -> None:
    metadata = replace_bookies(make_metadata(), 5, {0: "b4"})
    read = RangeRead(metadata, DIGEST, 4, 6, last_add_confirmed=6)
    read.start(0)
    assert read.take_effects() == [SendRead("b2", 4), SendRead("b3", 5), SendRead("b4", 6)]


# --- LacRead ----------------------------------------------------------------------------------


def lac_answer(
    explicit: int | None = None, last_entry: tuple[int, int] | None = None
) -> ReadLacResponse:
    lac_packet = None if explicit is None else DIGEST.build_lac(LEDGER_ID, explicit)
    entry_packet = None if last_entry is None else packet_for(*last_entry)
    return ReadLacResponse(0, EOK, None, LEDGER_ID, lac_packet, entry_packet)


def test_rule5_lac_read_asks_every_bookie_of_the_last_ensemble_without_fencing() -> None:
    read = LacRead(replace_bookies(make_metadata(), 3, {1: "b4"}), DIGEST)
    read.start()
    assert read.take_effects() == [SendReadLac("b1"), SendReadLac("b4"), SendReadLac("b3")]


def test_rule5_lac_read_completes_on_coverage_with_the_highest_lac() -> None:
    read = LacRead(make_metadata(), DIGEST)
    read.start()
    read.take_effects()
    read.on_read_lac_response("b1", lac_answer(explicit=4, last_entry=(6, 3)))
    assert read.take_effects() == [], "one answer does not cover E=3, Qw=3, Qa=2"
    read.on_read_lac_response("b2", lac_answer(last_entry=(7, 5)))
    assert read.take_effects() == [LacKnown(5)]
    read.on_read_lac_response("b3", lac_answer(explicit=9))
    assert read.take_effects() == [], "finished: later answers change nothing"


def test_rule5_a_bookie_without_the_ledger_is_a_valid_answer() -> None:
    read = LacRead(make_metadata(), DIGEST)
    read.start()
    read.take_effects()
    read.on_read_lac_response("b1", ReadLacResponse(0, ENOLEDGER, "no"))
    read.on_read_lac_response("b3", lac_answer())
    assert read.take_effects() == [LacKnown(-1)]


def test_rule5_corrupt_and_failed_answers_do_not_count() -> None:
    read = LacRead(make_metadata(), DIGEST)
    read.start()
    read.take_effects()
    bad = bytearray(DIGEST.build_lac(LEDGER_ID, 8))
    bad[-1] ^= 1
    read.on_read_lac_response("b1", ReadLacResponse(0, EOK, None, LEDGER_ID, bytes(bad), None))
    read.on_read_lac_response("b2", ReadLacResponse(0, EIO, "disk"))
    assert read.take_effects() == []
    read.on_read_lac_timeout("b3")
    (failed,) = read.take_effects()
    assert isinstance(failed, LacReadFailed)
    assert isinstance(failed.error, BookieUnavailable)


def test_rule5_a_failed_lac_read_names_the_first_bookie_it_could_not_reach() -> None:
    read = LacRead(make_metadata(), DIGEST)
    read.start()
    read.take_effects()
    read.on_read_lac_timeout("b1")
    read.on_read_lac_unreachable("b2", "TLS: the peer's certificate was refused")
    read.on_read_lac_unreachable("b3", "refused")
    (failed,) = read.take_effects()
    assert isinstance(failed, LacReadFailed)
    assert str(failed.error).endswith(
        "0 of 3; unreachable: b2: TLS: the peer's certificate was refused"
    )


def test_rule5_try_read_completes_on_the_first_valid_answer() -> None:
    read = LacRead(make_metadata(), DIGEST, first_answer=True)
    read.start()
    read.take_effects()
    read.on_read_lac_response("b1", ReadLacResponse(0, EIO, "disk"))
    assert read.take_effects() == []
    read.on_read_lac_response("b2", lac_answer(explicit=3))
    assert read.take_effects() == [LacKnown(3)]


# --- LongPollTail -----------------------------------------------------------------------------


def tail(lac: int = 4, metadata_bookies: tuple[str, ...] = ("b1", "b2", "b3")) -> LongPollTail:
    t = LongPollTail(
        make_metadata(metadata_bookies), DIGEST, lac, poll_timeout_ms=1_000, retry_delay_ms=50
    )
    t.start()
    return t


def poll(bookie: str, lac: int) -> SendRead:
    return SendRead(bookie, lac + 1, previous_lac=lac, timeout_ms=1_000)


def test_rule6_polls_the_first_member_of_the_next_entrys_write_set() -> None:
    t = tail(lac=4)
    assert t.take_effects() == [poll("b3", 4)]


def test_rule7_a_confirmed_entry_in_the_answer_advances_and_polls_the_next() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_read_response("b3", 5, found(5, header_lac=4, bookie_lac=5), 0)
    assert t.take_effects() == [LacAdvanced(5, 5, payload_of(5)), poll("b3", 5)], (
        "the bookie that answered holds entry 6 too: it is asked again"
    )
    assert t.last_add_confirmed == 5


def test_rule7_an_answer_lac_past_the_carried_entry_advances_further() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_read_response("b3", 5, found(5, header_lac=4, bookie_lac=8), 0)
    assert t.take_effects() == [LacAdvanced(8, 5, payload_of(5)), poll("b3", 8)]


def test_rule7_an_unconfirmed_entry_is_not_delivered() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_read_response("b3", 5, found(5, header_lac=4, bookie_lac=4), 0)
    assert t.take_effects() == [poll("b1", 4)], "no progress: ask the next member"


def test_rule7_no_entry_but_a_higher_lac_advances_without_payload() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_read_response("b3", 5, status(ENOENTRY, 5, bookie_lac=6), 0)
    assert t.take_effects() == [LacAdvanced(6), poll("b3", 6)]


def timed_out(entry_id: int, bookie_lac: int) -> ReadResponse:
    return ReadResponse(0, EOK, None, LEDGER_ID, entry_id, None, bookie_lac)


def test_rule7_poll_timeout_without_progress_moves_on_without_counting_a_failure() -> None:
    t = tail(lac=4)
    t.take_effects()
    for bookie, after in (("b3", "b1"), ("b1", "b2"), ("b2", "b3"), ("b3", "b1")):
        t.on_read_response(bookie, 5, timed_out(5, 4), 0)
        assert t.take_effects() == [poll(after, 4)]
    assert t.next_tick_ms is None, "healthy bookies with nothing new: no retry wait"


def test_rule7_a_bookie_that_misses_entries_for_good_does_not_stall_the_tail() -> None:
    # b3 was left behind (the writer went on without it): it never sees the LAC move.
    t = tail(lac=4)
    t.take_effects()
    t.on_read_response("b3", 5, timed_out(5, 4), 0)
    assert t.take_effects() == [poll("b1", 4)]
    t.on_read_response("b1", 5, found(5, header_lac=4, bookie_lac=7), 0)
    assert replicas_of(make_metadata(), 8)[0] == "b3"
    assert t.take_effects() == [LacAdvanced(7, 5, payload_of(5)), poll("b1", 7)], (
        "entry 8's write set starts with b3, but b1 answered last: b1 is asked"
    )


def test_rule6_a_bookie_outside_the_next_write_set_is_not_asked_for_it() -> None:
    t = tail(lac=4)
    t.take_effects()
    replaced = replace_bookies(make_metadata(), 5, {2: "b4"})  # b3 -> b4 from entry 5 on
    t.on_metadata(replaced)
    t.on_read_response("b3", 5, found(5, header_lac=4, bookie_lac=5), 0)
    assert "b3" not in replicas_of(replaced, 6)
    assert t.take_effects() == [
        LacAdvanced(5, 5, payload_of(5)),
        poll(replicas_of(replaced, 6)[0], 5),
    ]


def test_rule7_errors_move_to_the_next_member_then_wait_after_a_whole_round() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_read_response("b3", 5, status(EIO, 5), 100)
    assert t.take_effects() == [poll("b1", 4)]
    t.on_read_response("b1", 5, corrupt(5), 110)
    assert t.take_effects() == [poll("b2", 4)]
    t.on_read_response("b2", 5, status(ENOLEDGER, 5), 120)
    assert t.take_effects() == [], "a whole write set failed: wait"
    assert t.next_tick_ms == 170
    t.tick(169)
    assert t.take_effects() == []
    t.tick(170)
    assert t.take_effects() == [poll("b3", 4)]
    assert t.next_tick_ms is None


def test_rule7_a_timed_out_poll_counts_as_a_miss() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_read_timeout("b3", 5, 0)
    assert t.take_effects() == [poll("b1", 4)]


def test_rule7_stale_answers_are_ignored() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_read_response("b1", 5, found(5, 4, 9), 0)
    t.on_read_response("b3", 7, found(7, 6, 9), 0)
    assert t.take_effects() == []
    assert t.last_add_confirmed == 4


def test_rule8_a_closed_ledger_ends_the_tail_at_its_last_entry() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_metadata(close(make_metadata(), 9, 500))
    assert t.take_effects() == [LacAdvanced(9), TailEnded(9)]
    assert t.ended
    t.on_read_response("b3", 5, found(5, 4, 5), 0)
    assert t.take_effects() == []


def test_rule8_a_ledger_already_closed_ends_at_start() -> None:
    t = LongPollTail(close(make_metadata(), 4, 100), DIGEST, 4)
    t.start()
    assert t.take_effects() == [TailEnded(4)]


def test_a_new_segment_moves_the_poll_to_its_members() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_metadata(replace_bookies(make_metadata(), 5, {2: "b4"}))
    t.on_read_response("b3", 5, status(EIO, 5), 0)
    assert t.take_effects() == [poll("b1", 4)]
    t.on_read_response("b1", 5, status(EIO, 5), 0)
    assert t.take_effects() == [poll("b2", 4)]
    t.on_read_response("b2", 5, status(EIO, 5), 0)
    t.tick(50)
    assert t.take_effects() == [poll("b4", 4)], "entry 5 now lives on b4, b1, b2"


def test_rule9_a_new_segment_proves_the_entries_before_it_confirmed() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_metadata(replace_bookies(make_metadata(), 8, {2: "b4"}))
    assert t.take_effects() == [LacAdvanced(7), poll("b4", 7)], (
        "the old ensemble never learns a later LAC: poll entry 8 on the new one"
    )
    assert t.last_add_confirmed == 7
    t.on_read_response("b3", 5, found(5, 4, 5), 0)
    assert t.take_effects() == [], "the answer to the abandoned poll is stale"


def test_rule9_a_tail_starting_below_the_last_segment_starts_at_it() -> None:
    metadata = replace_bookies(make_metadata(), 8, {2: "b4"})
    t = LongPollTail(metadata, DIGEST, 4, poll_timeout_ms=1_000, retry_delay_ms=50)
    t.start()
    assert t.take_effects() == [LacAdvanced(7), poll("b4", 7)]


def test_rule9_a_segment_at_lac_plus_one_changes_nothing_but_the_members() -> None:
    t = tail(lac=4)
    t.take_effects()
    t.on_metadata(replace_bookies(make_metadata(), 5, {2: "b4"}))
    assert t.take_effects() == []
    assert t.last_add_confirmed == 4
