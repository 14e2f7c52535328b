"""The bookie's request rules, one named test per rule, against the real
`MemoryLedgerStorage` (a tiny driver below plays the shell: it applies the
mutations, runs the queries and collects the answers)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.core.bookie_handler import (
    BookieHandler,
    BookieIdentity,
    Effect,
    Fence,
    ListEntries,
    Parked,
    ReadEntry,
    ReadLastEntry,
    Reply,
    ReplyWhenSynced,
    ReportBookieInfo,
    SetMasterKey,
    StoreEntry,
    StoreExplicitLac,
)
from bookie.core.tokens import TokenTable
from bookie.errors import Status
from bookie.storage.memory import MemoryLedgerStorage
from bookie.wire.messages import (
    ADD_FLAG_RECOVERY,
    ENTRY_ID_LAST,
    LAC_NONE,
    READ_FLAG_FENCE,
    AddRequest,
    AddResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    IdentifyRequest,
    IdentifyResponse,
    LedgerStateRequest,
    LedgerStateResponse,
    ListEntriesRequest,
    ListEntriesResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)
from bookie.wire.packet import Digest, DigestType, master_key

KEY = master_key(b"secret")
OTHER_KEY = master_key(b"guess")
DIGEST = Digest(DigestType.CRC32C, b"secret")
LEDGER = 7


def packet(entry_id: int, lac: int, ledger_id: int = LEDGER) -> bytes:
    return DIGEST.build_entry(ledger_id, entry_id, lac, 10 * (entry_id + 1), b"x" * 10)


def add(
    entry_id: int,
    lac: int | None = None,
    *,
    key: bytes = KEY,
    recovery: bool = False,
    ledger_id: int = LEDGER,
    request_id: int = 1,
) -> AddRequest:
    lac = entry_id - 1 if lac is None else lac
    flags = ADD_FLAG_RECOVERY if recovery else 0
    return AddRequest(request_id, ledger_id, entry_id, key, flags, packet(entry_id, lac, ledger_id))


def read(
    entry_id: int,
    *,
    fence: bool = False,
    key: bytes | None = None,
    previous_lac: int | None = None,
    timeout_ms: int | None = None,
    ledger_id: int = LEDGER,
    request_id: int = 2,
) -> ReadRequest:
    flags = READ_FLAG_FENCE if fence else 0
    return ReadRequest(request_id, ledger_id, entry_id, flags, key, previous_lac, timeout_ms)


@dataclass(frozen=True)
class Answer:
    connection_id: int
    response: Response
    after_sync: bool
    """True when the shell may only send it once storage synced."""


class Bookie:
    """The handler plus a minimal shell over a real MemoryLedgerStorage."""

    def __init__(
        self,
        storage: MemoryLedgerStorage | None = None,
        *,
        read_only: bool = False,
        identity: BookieIdentity | None = None,
        long_poll_waiters_max: int = 10,
        tombstones_max: int = 10,
        tokens: TokenTable | None = None,
    ) -> None:
        self.storage = storage or MemoryLedgerStorage()
        self.handler = BookieHandler(
            self.storage.recovered_ledgers(),
            self.storage.fenced_tombstones(),
            read_only=read_only,
            identity=identity,
            long_poll_waiters_max=long_poll_waiters_max,
            tombstones_max=tombstones_max,
            tokens=tokens,
        )
        self.parked_deadlines: list[int] = []

    def send(self, request: Request, now_ms: int = 0, connection_id: int = 1) -> list[Answer]:
        return self.carry_out(self.handler.handle(request, now_ms, connection_id))

    def one(self, request: Request, now_ms: int = 0, connection_id: int = 1) -> Answer:
        answers = self.send(request, now_ms, connection_id)
        assert len(answers) == 1, answers
        return answers[0]

    def carry_out(self, effects: list[Effect]) -> list[Answer]:
        storage = self.storage
        handler = self.handler
        answers: list[Answer] = []
        response: Response
        for effect in effects:
            if isinstance(effect, SetMasterKey):
                storage.set_master_key(effect.ledger_id, effect.master_key)
            elif isinstance(effect, StoreEntry):
                storage.add_entry(effect.ledger_id, effect.entry_id, effect.packet)
            elif isinstance(effect, Fence):
                storage.fence(effect.ledger_id)
            elif isinstance(effect, StoreExplicitLac):
                storage.set_explicit_lac(effect.ledger_id, effect.lac, effect.packet)
            elif isinstance(effect, Reply):
                answers.append(Answer(effect.connection_id, effect.response, False))
            elif isinstance(effect, ReplyWhenSynced):
                answers.append(Answer(effect.connection_id, effect.response, True))
            elif isinstance(effect, ReadEntry):
                entry_id = effect.entry_id
                if entry_id == ENTRY_ID_LAST:
                    entry_id = storage.last_entry_id(effect.ledger_id)
                found = storage.read_entry(effect.ledger_id, entry_id) if entry_id >= 0 else None
                response = handler.entry_reply(effect, entry_id, found)
                answers.append(Answer(effect.connection_id, response, effect.wait_for_sync))
            elif isinstance(effect, ReadLastEntry):
                last = storage.last_entry_id(effect.ledger_id)
                found = storage.read_entry(effect.ledger_id, last) if last >= 0 else None
                response = handler.read_lac_reply(effect, found)
                answers.append(Answer(effect.connection_id, response, False))
            elif isinstance(effect, ListEntries):
                response = handler.list_entries_reply(
                    effect, storage.entry_ranges(effect.ledger_id)
                )
                answers.append(Answer(effect.connection_id, response, False))
            elif isinstance(effect, ReportBookieInfo):
                response = handler.bookie_info_reply(effect, 100, 1000)
                answers.append(Answer(effect.connection_id, response, False))
            else:
                assert isinstance(effect, Parked)
                self.parked_deadlines.append(effect.deadline_ms)
        return answers

    def restart(self) -> Bookie:
        """A new bookie from what a power cut now would leave of the storage."""
        return Bookie(self.storage.crash())


def status_of(answer: Answer) -> int:
    return answer.response.status


# --- ADD --------------------------------------------------------------------------------------


def test_first_add_creates_the_ledger_with_its_master_key_and_replies_after_sync() -> None:
    bookie = Bookie()
    effects = bookie.handler.handle(add(0), 0, 1)
    assert effects[0] == SetMasterKey(LEDGER, KEY)
    assert effects[1] == StoreEntry(LEDGER, 0, packet(0, -1))
    assert effects[2] == ReplyWhenSynced(1, AddResponse(1, Status.EOK, None, LEDGER, 0))
    bookie.carry_out(effects)
    assert bookie.storage.read_entry(LEDGER, 0) == packet(0, -1)


def test_later_adds_do_not_set_the_master_key_again() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    effects = bookie.handler.handle(add(1), 0, 1)
    assert not any(isinstance(effect, SetMasterKey) for effect in effects)


def test_add_with_another_master_key_is_eua_and_stores_nothing() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    answer = bookie.one(add(1, key=OTHER_KEY))
    assert (status_of(answer), answer.after_sync) == (Status.EUA, False)
    assert bookie.storage.read_entry(LEDGER, 1) is None


def test_entry_lac_advances_the_ledger_lac_and_never_moves_it_back() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(add(5, lac=4))
    assert bookie.handler.lac(LEDGER) == 4
    bookie.send(add(3, lac=2))
    assert bookie.handler.lac(LEDGER) == 4


def test_unknown_add_flags_are_ebadreq() -> None:
    request = add(0)._replace(flags=0x80)
    assert status_of(Bookie().one(request)) == Status.EBADREQ


# --- fencing ----------------------------------------------------------------------------------


def test_basic_fence_refuses_later_normal_adds() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    effects = bookie.handler.handle(read(ENTRY_ID_LAST, fence=True, key=KEY), 0, 1)
    assert effects == [Fence(LEDGER), ReadEntry(1, 2, LEDGER, ENTRY_ID_LAST, True)]
    (answer,) = bookie.carry_out(effects)
    assert answer.after_sync, "a fencing read answers only once the fence is durable"
    assert answer.response == ReadResponse(2, Status.EOK, None, LEDGER, 0, packet(0, -1), -1)
    assert status_of(bookie.one(add(1))) == Status.EFENCED
    assert bookie.storage.read_entry(LEDGER, 1) is None


def test_recovery_add_on_a_fenced_ledger_is_accepted() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, fence=True, key=KEY))
    answer = bookie.one(add(1, recovery=True))
    assert (status_of(answer), answer.after_sync) == (Status.EOK, True)
    assert bookie.storage.read_entry(LEDGER, 1) == packet(1, 0)


def test_fencing_read_with_a_wrong_key_is_eua_and_does_not_fence() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    assert status_of(bookie.one(read(0, fence=True, key=OTHER_KEY))) == Status.EUA
    assert not bookie.handler.is_fenced(LEDGER)
    assert status_of(bookie.one(add(1))) == Status.EOK


def test_fencing_read_without_a_key_is_ebadreq() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    assert status_of(bookie.one(read(0, fence=True))) == Status.EBADREQ
    assert not bookie.handler.is_fenced(LEDGER)


def test_fencing_read_of_an_unknown_ledger_creates_it_fenced() -> None:
    bookie = Bookie()
    effects = bookie.handler.handle(read(ENTRY_ID_LAST, fence=True, key=KEY), 0, 1)
    assert effects[:2] == [SetMasterKey(LEDGER, KEY), Fence(LEDGER)]
    (answer,) = bookie.carry_out(effects)
    assert answer.after_sync
    assert answer.response == ReadResponse(
        2, Status.ENOENTRY, "no such entry", LEDGER, ENTRY_ID_LAST, None, LAC_NONE
    )
    assert status_of(bookie.one(add(0))) == Status.EFENCED


def test_fencing_an_already_fenced_ledger_still_waits_for_the_sync() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, fence=True, key=KEY))
    effects = bookie.handler.handle(read(0, fence=True, key=KEY), 0, 1)
    assert effects == [ReadEntry(1, 2, LEDGER, 0, True)]


def test_fenced_then_deleted_ledger_refuses_a_late_add_and_is_not_recreated() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, fence=True, key=KEY))
    bookie.storage.delete_ledger(LEDGER)
    assert bookie.handler.ledger_deleted(LEDGER) == []
    assert status_of(bookie.one(add(1))) == Status.EFENCED
    assert status_of(bookie.one(add(1, recovery=True))) == Status.EFENCED
    assert not bookie.handler.is_known(LEDGER)
    assert LEDGER not in bookie.storage.ledger_ids()


def test_ledger_state_answers_from_memory_at_once_fenced_or_not() -> None:
    bookie = Bookie()
    assert bookie.one(LedgerStateRequest(5, LEDGER)) == Answer(
        1, LedgerStateResponse(5, Status.ENOLEDGER, "no such ledger", LEDGER), False
    )
    bookie.send(add(0))
    bookie.send(add(1))
    assert bookie.one(LedgerStateRequest(6, LEDGER)) == Answer(
        1, LedgerStateResponse(6, Status.EOK, None, LEDGER, False, 0), False
    )
    # The flag is visible as soon as the fence is processed, before its sync:
    # a recoverer is told only after the sync, so this answer is never late.
    bookie.handler.handle(read(ENTRY_ID_LAST, fence=True, key=KEY), 0, 1)
    answer = bookie.one(LedgerStateRequest(7, LEDGER))
    assert answer.response == LedgerStateResponse(7, Status.EOK, None, LEDGER, True, 0)
    assert not answer.after_sync


def test_identify_states_the_bookie_id_and_the_cluster_instance_id_at_once() -> None:
    bookie = Bookie(identity=BookieIdentity("127.0.0.1:3183", "cluster-a"))
    assert bookie.one(IdentifyRequest(9)) == Answer(
        1, IdentifyResponse(9, Status.EOK, None, "127.0.0.1:3183", "cluster-a"), False
    )
    assert Bookie().one(IdentifyRequest(10)).response == IdentifyResponse(10, Status.EOK, None)


def test_ledger_state_of_a_fenced_then_deleted_ledger_says_fenced() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, fence=True, key=KEY))
    bookie.storage.delete_ledger(LEDGER)
    bookie.handler.ledger_deleted(LEDGER)
    assert bookie.one(LedgerStateRequest(8, LEDGER)).response.fenced is True


def test_tombstones_recovered_from_storage_refuse_late_adds() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, fence=True, key=KEY))
    bookie.storage.delete_ledger(LEDGER)
    bookie.storage.sync()
    restarted = bookie.restart()
    assert status_of(restarted.one(add(1))) == Status.EFENCED
    assert status_of(restarted.one(read(0, fence=True, key=KEY))) == Status.ENOLEDGER


def test_deleting_an_unfenced_ledger_leaves_no_tombstone() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.storage.delete_ledger(LEDGER)
    bookie.handler.ledger_deleted(LEDGER)
    assert status_of(bookie.one(add(0))) == Status.EOK


def test_tombstones_are_bounded_oldest_forgotten_first() -> None:
    bookie = Bookie(tombstones_max=2)
    for ledger_id in (1, 2, 3):
        bookie.send(read(0, fence=True, key=KEY, ledger_id=ledger_id))
        bookie.storage.delete_ledger(ledger_id)
        bookie.handler.ledger_deleted(ledger_id)
    assert [bookie.handler.is_fenced(ledger_id) for ledger_id in (1, 2, 3)] == [False, True, True]


def test_fence_survives_restart_once_synced() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, fence=True, key=KEY))
    bookie.storage.sync()
    restarted = bookie.restart()
    assert restarted.handler.is_fenced(LEDGER)
    assert status_of(restarted.one(add(1))) == Status.EFENCED
    assert status_of(restarted.one(add(1, recovery=True))) == Status.EOK


def test_unsynced_fence_is_lost_by_a_crash_which_is_why_its_read_waits() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.storage.sync()
    (answer,) = bookie.send(read(0, fence=True, key=KEY))
    assert answer.after_sync
    restarted = bookie.restart()
    assert not restarted.handler.is_fenced(LEDGER)


# --- READ -------------------------------------------------------------------------------------


def test_read_of_an_unknown_ledger_is_enoledger() -> None:
    answer = Bookie().one(read(0))
    assert answer.response == ReadResponse(
        2, Status.ENOLEDGER, "no such ledger", LEDGER, 0, None, LAC_NONE
    )


def test_read_of_a_missing_entry_is_enoentry_with_the_lac() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(add(1))
    answer = bookie.one(read(5))
    assert answer.response == ReadResponse(2, Status.ENOENTRY, "no such entry", LEDGER, 5, None, 0)


def test_read_returns_the_stored_packet_and_the_lac_at_once() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(add(1))
    answer = bookie.one(read(0))
    assert not answer.after_sync
    assert answer.response == ReadResponse(2, Status.EOK, None, LEDGER, 0, packet(0, -1), 0)


def test_read_of_entry_minus_one_returns_the_last_entry_with_its_id() -> None:
    bookie = Bookie()
    for entry_id in range(3):
        bookie.send(add(entry_id))
    answer = bookie.one(read(ENTRY_ID_LAST))
    assert answer.response == ReadResponse(2, Status.EOK, None, LEDGER, 2, packet(2, 1), 1)


def test_read_ignores_a_master_key_without_the_fence_flag() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    assert status_of(bookie.one(read(0, key=OTHER_KEY))) == Status.EOK


def test_unknown_read_flags_are_ebadreq() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    assert status_of(bookie.one(read(0)._replace(flags=0x4))) == Status.EBADREQ


# --- long poll --------------------------------------------------------------------------------


def test_long_poll_answers_at_once_when_the_lac_already_passed() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(add(1))
    answer = bookie.one(read(0, previous_lac=-1, timeout_ms=1000))
    assert answer.response == ReadResponse(2, Status.EOK, None, LEDGER, 0, packet(0, -1), 0)


def test_long_poll_parks_and_an_add_that_passes_the_lac_wakes_it() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(add(1))
    assert bookie.send(read(1, previous_lac=0, timeout_ms=1000), now_ms=50, connection_id=9) == []
    assert bookie.parked_deadlines == [1050]
    assert bookie.handler.parked_reads == 1
    assert bookie.handler.next_deadline_ms() == 1050
    answers = bookie.send(add(2, lac=1), connection_id=1)
    woken = [answer for answer in answers if answer.connection_id == 9]
    assert woken == [
        Answer(9, ReadResponse(2, Status.EOK, None, LEDGER, 1, packet(1, 0), 1), False)
    ]
    assert bookie.handler.parked_reads == 0
    assert bookie.handler.next_deadline_ms() is None


def test_long_poll_is_not_woken_by_an_add_that_does_not_pass_previous_lac() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(1, previous_lac=3, timeout_ms=1000))
    assert len(bookie.send(add(3, lac=2))) == 1
    assert bookie.handler.parked_reads == 1


def test_long_poll_is_woken_by_an_explicit_lac() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, previous_lac=-1, timeout_ms=1000), connection_id=4)
    lac_packet = DIGEST.build_lac(LEDGER, 0)
    answers = bookie.send(WriteLacRequest(3, LEDGER, KEY, 0, lac_packet))
    assert [answer.connection_id for answer in answers] == [1, 4]
    assert answers[1].response.status == Status.EOK


def test_long_poll_timeout_answers_eok_without_packet_and_the_current_lac() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(add(1))
    bookie.send(read(1, previous_lac=0, timeout_ms=100), now_ms=1000, connection_id=3)
    assert bookie.handler.expire(1099) == []
    effects = bookie.handler.expire(1100)
    assert effects == [Reply(3, ReadResponse(2, Status.EOK, None, LEDGER, 1, None, 0))]
    assert bookie.handler.parked_reads == 0
    assert bookie.handler.expire(5000) == []


def test_long_poll_with_zero_timeout_answers_at_once_as_timed_out() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    answer = bookie.one(read(1, previous_lac=-1, timeout_ms=0))
    assert answer.response == ReadResponse(2, Status.EOK, None, LEDGER, 1, None, -1)


def test_parked_long_polls_are_bounded() -> None:
    bookie = Bookie(long_poll_waiters_max=2)
    bookie.send(add(0))
    bookie.send(read(1, previous_lac=0, timeout_ms=100))
    bookie.send(read(1, previous_lac=0, timeout_ms=100))
    answer = bookie.one(read(1, previous_lac=0, timeout_ms=100))
    assert status_of(answer) == Status.ETOOMANYREQUESTS
    assert bookie.handler.parked_reads == 2


def test_long_poll_of_an_unknown_ledger_is_enoledger() -> None:
    assert status_of(Bookie().one(read(0, previous_lac=-1, timeout_ms=10))) == Status.ENOLEDGER


@pytest.mark.parametrize(
    "request_",
    [
        read(0, previous_lac=-1),
        read(0, timeout_ms=10),
        read(0, fence=True, key=KEY, previous_lac=-1, timeout_ms=10),
    ],
)
def test_malformed_long_polls_are_ebadreq(request_: ReadRequest) -> None:
    bookie = Bookie()
    bookie.send(add(0))
    assert status_of(bookie.one(request_)) == Status.EBADREQ


def test_dropping_a_connection_forgets_its_parked_reads() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(1, previous_lac=0, timeout_ms=100), connection_id=1)
    bookie.send(read(1, previous_lac=0, timeout_ms=100), connection_id=2)
    bookie.handler.drop_connection(1)
    assert bookie.handler.parked_reads == 1
    answers = bookie.send(add(2, lac=1))
    assert [answer.connection_id for answer in answers] == [1, 2]
    assert isinstance(answers[1].response, ReadResponse)


def test_deleting_a_ledger_answers_its_parked_reads_enoledger() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(1, previous_lac=0, timeout_ms=100), connection_id=5)
    bookie.storage.delete_ledger(LEDGER)
    (effect,) = bookie.handler.ledger_deleted(LEDGER)
    assert isinstance(effect, Reply)
    assert (effect.connection_id, effect.response.status) == (5, Status.ENOLEDGER)
    assert bookie.handler.next_deadline_ms() is None


# --- read-only --------------------------------------------------------------------------------


def test_read_only_bookie_refuses_normal_adds() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.handler.read_only = True
    assert status_of(bookie.one(add(1))) == Status.EREADONLY
    assert status_of(bookie.one(add(0, ledger_id=99))) == Status.EREADONLY
    assert 99 not in bookie.storage.ledger_ids()


def test_read_only_bookie_accepts_recovery_adds_fences_and_reads() -> None:
    bookie = Bookie(read_only=True)
    assert status_of(bookie.one(add(0, recovery=True))) == Status.EOK
    assert status_of(bookie.one(read(0, fence=True, key=KEY))) == Status.EOK
    assert status_of(bookie.one(read(0))) == Status.EOK


def test_read_only_bookie_refuses_explicit_lacs() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.handler.read_only = True
    answer = bookie.one(WriteLacRequest(3, LEDGER, KEY, 0, DIGEST.build_lac(LEDGER, 0)))
    assert status_of(answer) == Status.EREADONLY


# --- READ_LAC, WRITE_LAC, GET_BOOKIE_INFO, LIST_ENTRIES ---------------------------------------


def test_read_lac_of_an_unknown_ledger_is_enoledger() -> None:
    assert status_of(Bookie().one(ReadLacRequest(3, LEDGER))) == Status.ENOLEDGER


def test_read_lac_returns_the_last_entry_and_no_explicit_lac_when_none_was_written() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(add(1))
    answer = bookie.one(ReadLacRequest(3, LEDGER))
    assert answer.response == ReadLacResponse(3, Status.EOK, None, LEDGER, None, packet(1, 0))


def test_write_lac_stores_the_packet_replies_after_sync_and_advances_the_lac() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    lac_packet = DIGEST.build_lac(LEDGER, 0)
    effects = bookie.handler.handle(WriteLacRequest(3, LEDGER, KEY, 0, lac_packet), 0, 1)
    assert effects == [
        StoreExplicitLac(LEDGER, 0, lac_packet),
        ReplyWhenSynced(1, WriteLacResponse(3, Status.EOK, None, LEDGER)),
    ]
    bookie.carry_out(effects)
    assert bookie.handler.lac(LEDGER) == 0
    answer = bookie.one(ReadLacRequest(4, LEDGER))
    assert isinstance(answer.response, ReadLacResponse)
    assert answer.response.lac_packet == lac_packet


def test_explicit_lac_survives_restart_once_synced() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    lac_packet = DIGEST.build_lac(LEDGER, 0)
    bookie.send(WriteLacRequest(3, LEDGER, KEY, 0, lac_packet))
    bookie.storage.sync()
    restarted = bookie.restart()
    assert restarted.handler.lac(LEDGER) == 0
    answer = restarted.one(ReadLacRequest(4, LEDGER))
    assert isinstance(answer.response, ReadLacResponse)
    assert answer.response.lac_packet == lac_packet


def test_write_lac_checks_the_key_and_the_ledger() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    lac_packet = DIGEST.build_lac(LEDGER, 0)
    wrong_key = WriteLacRequest(3, LEDGER, OTHER_KEY, 0, lac_packet)
    unknown = WriteLacRequest(3, LEDGER + 1, KEY, 0, lac_packet)
    assert status_of(bookie.one(wrong_key)) == Status.EUA
    assert status_of(bookie.one(unknown)) == Status.ENOLEDGER


def test_bookie_info_carries_disk_numbers_and_the_read_only_flag() -> None:
    bookie = Bookie(read_only=True)
    answer = bookie.one(GetBookieInfoRequest(3))
    assert answer.response == GetBookieInfoResponse(3, Status.EOK, None, 100, 1000, True)


def test_list_entries_returns_ranges_or_enoledger() -> None:
    bookie = Bookie()
    for entry_id in (0, 1, 2, 5, 6):
        bookie.send(add(entry_id))
    answer = bookie.one(ListEntriesRequest(3, LEDGER))
    assert answer.response == ListEntriesResponse(3, Status.EOK, None, LEDGER, [[0, 2], [5, 6]])
    assert status_of(bookie.one(ListEntriesRequest(3, LEDGER + 1))) == Status.ENOLEDGER


# --- storage failure and refusal --------------------------------------------------------------


def test_after_storage_failure_mutations_get_eio_and_plain_reads_go_on() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.handler.storage_failed()
    assert status_of(bookie.one(add(1))) == Status.EIO
    assert status_of(bookie.one(add(0, ledger_id=99))) == Status.EIO
    assert status_of(bookie.one(read(0, fence=True, key=KEY))) == Status.EIO
    assert status_of(bookie.one(read(0, fence=True, key=KEY, ledger_id=99))) == Status.EIO
    lac_packet = DIGEST.build_lac(LEDGER, 0)
    assert status_of(bookie.one(WriteLacRequest(3, LEDGER, KEY, 0, lac_packet))) == Status.EIO
    assert status_of(bookie.one(read(0))) == Status.EOK


def test_error_reply_keeps_the_request_id_and_op() -> None:
    bookie = Bookie()
    effects = bookie.handler.handle(add(0, request_id=42), 0, 1)
    deferred = effects[-1]
    assert isinstance(deferred, ReplyWhenSynced)
    error = bookie.handler.error_reply(deferred, Status.EIO, "disk gone")
    assert error == AddResponse(42, Status.EIO, "disk gone", LEDGER, 0)


def test_refused_master_key_forgets_the_new_ledger() -> None:
    bookie = Bookie()
    effects = bookie.handler.handle(add(0), 0, 1)
    replacement = bookie.handler.not_applied(effects, 0, Status.ETOOMANYREQUESTS, "busy")
    assert replacement == [
        Reply(1, AddResponse(1, Status.ETOOMANYREQUESTS, "busy", LEDGER, 0)),
    ]
    assert not bookie.handler.is_known(LEDGER)


def test_refused_fence_is_undone_so_the_next_fencing_read_fences_again() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    effects = bookie.handler.handle(read(0, fence=True, key=KEY), 0, 1)
    assert effects[0] == Fence(LEDGER)
    bookie.handler.not_applied(effects, 0, Status.ETOOMANYREQUESTS, "busy")
    assert not bookie.handler.is_fenced(LEDGER)
    assert bookie.handler.handle(read(0, fence=True, key=KEY), 0, 1)[0] == Fence(LEDGER)


def test_refused_entry_still_wakes_long_polls_with_its_lac() -> None:
    bookie = Bookie()
    bookie.send(add(0))
    bookie.send(read(0, previous_lac=-1, timeout_ms=100), connection_id=8)
    effects = bookie.handler.handle(add(1), 0, 1)
    replacement = bookie.handler.not_applied(effects, 0, Status.ETOOMANYREQUESTS, "busy")
    assert [type(effect) for effect in replacement] == [Reply, ReadEntry]
    assert bookie.handler.lac(LEDGER) == 0


# --- properties -------------------------------------------------------------------------------


operations = st.lists(
    st.tuples(
        st.sampled_from(["add", "recovery add", "fence", "poll", "tick", "drop"]),
        st.integers(-1, 6),
        st.integers(0, 3),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(operations)
def test_lac_never_decreases_fences_hold_and_every_poll_is_answered_once(
    ops: list[tuple[str, int, int]],
) -> None:
    bookie = Bookie(long_poll_waiters_max=3)
    now_ms = 0
    request_ids = iter(range(1, 10_000))
    polls: dict[tuple[int, int], int] = {}
    """(connection, request id) -> times answered, for parked polls still owned."""
    fenced = False
    lac = LAC_NONE
    for op, number, small in ops:
        request_id = next(request_ids)
        connection_id = 1 + request_id % 3
        if op in ("add", "recovery add"):
            recovery = op == "recovery add"
            entry_id = max(number, 0)
            lac_sent = max(entry_id - 1 - small, -1)
            request = add(entry_id, lac=lac_sent, recovery=recovery, request_id=request_id)
            answers = bookie.send(request, now_ms, connection_id)
            own = [a for a in answers if a.response.request_id == request_id]
            assert len(own) == 1
            if fenced and not recovery:
                assert own[0].response.status == Status.EFENCED
        elif op == "fence":
            answers = bookie.send(read(max(number, 0), fence=True, key=KEY, request_id=request_id))
            fenced = True
        elif op == "poll":
            timeout_ms = 5 + 20 * small
            poll = read(
                number + 1, previous_lac=number, timeout_ms=timeout_ms, request_id=request_id
            )
            answers = bookie.send(poll, now_ms, connection_id)
            if not answers:
                polls[(connection_id, request_id)] = 0
        elif op == "tick":
            now_ms += 10 * (number + 1)
            answers = bookie.carry_out(bookie.handler.expire(now_ms))
        else:
            dropped = 1 + small % 3
            bookie.handler.drop_connection(dropped)
            polls = {key: count for key, count in polls.items() if key[0] != dropped}
            answers = []
        for answer in answers:
            key = (answer.connection_id, answer.response.request_id)
            if key in polls:
                polls[key] += 1
        assert all(count <= 1 for count in polls.values())
        assert bookie.handler.lac(LEDGER) >= lac
        lac = bookie.handler.lac(LEDGER)
        assert bookie.handler.is_fenced(LEDGER) == (fenced and bookie.handler.is_known(LEDGER))
        assert bookie.handler.parked_reads == sum(1 for count in polls.values() if count == 0)
        assert bookie.handler.parked_reads <= 3
    answers = bookie.carry_out(bookie.handler.expire(now_ms + 1_000))
    for answer in answers:
        polls[(answer.connection_id, answer.response.request_id)] += 1
    assert all(count == 1 for count in polls.values())


def test_woken_long_polls_do_not_pile_up_in_the_deadline_heap() -> None:
    bookie = Bookie(long_poll_waiters_max=10)
    bookie.send(add(0))
    for entry_id in range(1, 1_000):
        bookie.send(read(entry_id, previous_lac=entry_id - 1, timeout_ms=60_000))
        bookie.send(add(entry_id + 1, lac=entry_id))
        assert bookie.handler.parked_reads == 0
    assert len(bookie.handler._deadlines) <= 64
