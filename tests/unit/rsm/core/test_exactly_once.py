"""The client's exactly-once logic: sessions (seqs, ack_seq, window, renewal), the decision
after every attempt's status in every state of a command, and the backoff."""

from __future__ import annotations

import itertools
import random
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.core.exactly_once import (
    MAYBE_LOGGED,
    RETRYABLE,
    Backoff,
    Command,
    Decision,
    RetryPolicy,
    Session,
    new_client_id,
)
from rsm.errors import RsmStatus

POLICY = RetryPolicy(deadline_ms=1_000, backoff_ms_initial=10, backoff_ms_max=80)
HERE = "10.0.0.1:1"
THERE = "10.0.0.2:1"

# --- sessions ---------------------------------------------------------------------------------


def test_ack_seq_is_below_the_oldest_open_seq() -> None:
    session = Session(b"c" * 16)
    first, second, third = session.begin(), session.begin(), session.begin()
    assert (first, second, third) == (1, 2, 3)
    assert session.ack_seq() == 0
    assert not session.end(b"c" * 16, second)
    assert session.ack_seq() == 0, "seq 1 is still open"
    assert session.end(b"c" * 16, first)
    assert session.ack_seq() == 2
    assert session.open_count == 1
    assert session.end(b"c" * 16, third)
    assert session.ack_seq() == 3
    assert session.open_count == 0


def test_renew_starts_over_and_ignores_the_old_sessions_seqs() -> None:
    session = Session(b"old")
    stale = session.begin()
    session.renew(b"new")
    assert session.client_id == b"new"
    assert session.begin() == 1
    assert not session.end(b"old", stale)
    assert session.ack_seq() == 0


def test_a_session_renews_once_for_all_the_commands_that_learn_it_expired() -> None:
    rng = random.Random(3)
    session = Session(new_client_id(rng))
    old = session.client_id
    assert len(old) == 16
    assert session.renew_after(old, rng)
    new = session.client_id
    assert new != old
    assert not session.renew_after(old, rng), "another command of the old session"
    assert session.client_id == new


def test_the_window_counts_from_the_oldest_open_seq() -> None:
    session = Session(b"w")
    seqs = [session.begin() for _ in range(3)]
    assert session.has_room(4)
    assert not session.has_room(3)
    session.end(b"w", seqs[2])
    assert not session.has_room(3), "seq 1 still holds the window"
    session.end(b"w", seqs[0])
    assert session.has_room(3)


@given(st.permutations(range(1, 41)), st.integers(1, 40))
def test_ack_seq_never_passes_an_unanswered_seq(order: list[int], answered: int) -> None:
    session = Session(b"x")
    for _ in order:
        session.begin()
    done = set(order[:answered])
    for seq in order[:answered]:
        session.end(b"x", seq)
    ack = session.ack_seq()
    assert all(seq in done for seq in range(1, ack + 1))
    assert ack == len(order) or ack + 1 not in done
    assert session.open_count == len(order) - ack


# --- decisions: every status in every state ---------------------------------------------------

ALL_STATUSES = list(RsmStatus)


def command_in(
    state: str, *, session: Session | None = None, now_ms: float = 0.0, **flags: bool
) -> Command:
    """A command in `state`: fresh, maybe_logged, or redirected (its redirects spent)."""
    policy = RetryPolicy(
        deadline_ms=1_000, backoff_ms_initial=10, backoff_ms_max=80, redirects_max=2
    )
    command = Command(policy, now_ms, session, **flags)
    if state == "maybe_logged":
        command.maybe_logged = True
    elif state == "redirected":
        command.redirects = 2
    return command


class Case(NamedTuple):
    status: RsmStatus
    state: str
    session: bool
    idempotent: bool
    pinned: bool
    answered: bool
    hint: str | None
    late: bool


CASES = [
    Case(status, state, *kind, answered, hint, late)
    for status, state, kind, answered, hint, late in itertools.product(
        ALL_STATUSES,
        ["fresh", "maybe_logged", "redirected"],
        [(True, True, False), (False, True, False), (False, False, False), (False, True, True)],
        [True, False],
        [None, HERE, THERE],
        [False, True],
    )
]
"""Every status, in every state of a command, for every kind of request, as an answer or
as the client's own verdict, with every kind of hint, before and at the deadline."""


def expected(case: Case) -> Decision:
    """The table of the module docstring, written out once more."""
    status = case.status
    if status == RsmStatus.OK:
        return Decision.DELIVER
    if status == RsmStatus.SESSION_EXPIRED and case.session:
        return Decision.RENEW
    if status not in RETRYABLE or (case.pinned and case.answered):
        return Decision.DELIVER
    maybe = case.state == "maybe_logged" or status in MAYBE_LOGGED
    if status == RsmStatus.NOT_LEADER:
        if case.hint is not None and case.hint != HERE and case.state != "redirected":
            return Decision.REDIRECT
    elif not case.idempotent:
        return Decision.DELIVER
    if case.late:
        return Decision.MAYBE_APPLIED if maybe else Decision.NOT_APPLIED
    return Decision.WAIT


@pytest.mark.parametrize("case", CASES)
def test_every_status_in_every_state(case: Case) -> None:
    command = command_in(
        case.state,
        session=Session(b"s") if case.session else None,
        idempotent=case.idempotent,
        pinned=case.pinned,
    )
    was_logged = command.maybe_logged
    decision = command.decide(
        case.status,
        1_000.0 if case.late else 999.0,
        leader_address=case.hint,
        sent_to=HERE,
        answered=case.answered,
    )
    assert decision is expected(case)
    if was_logged or (case.status in MAYBE_LOGGED and decision is not Decision.DELIVER):
        assert command.maybe_logged, "once maybe logged, always"
    if decision is Decision.WAIT:
        assert command.redirects == 0, "a wait gives the redirects back"


def test_redirects_are_bounded_per_wait() -> None:
    command = command_in("fresh")
    decisions = [
        command.decide(RsmStatus.NOT_LEADER, 0.0, leader_address=THERE, sent_to=HERE)
        for _ in range(4)
    ]
    assert decisions == [Decision.REDIRECT, Decision.REDIRECT, Decision.WAIT, Decision.REDIRECT]


def test_without_a_redirect_bound_a_command_follows_every_hint() -> None:
    command = Command(POLICY, 0.0)
    for _ in range(50):
        assert command.decide(RsmStatus.NOT_LEADER, 0.0, leader_address=THERE) is Decision.REDIRECT


def test_start_attempt_gives_up_at_the_deadline_and_past_the_attempts() -> None:
    policy = RetryPolicy(deadline_ms=100, backoff_ms_initial=1, backoff_ms_max=1, attempts_max=2)
    command = Command(policy, 50.0)
    assert command.start_attempt(50.0) is Decision.SEND
    assert command.start_attempt(149.0) is Decision.SEND
    assert command.start_attempt(149.0) is Decision.NOT_APPLIED, "a third attempt"
    late = Command(policy, 0.0)
    late.decide(RsmStatus.OUTCOME_UNKNOWN, 0.0)
    assert late.start_attempt(100.0) is Decision.MAYBE_APPLIED


def test_a_command_moves_to_a_renewed_session_under_a_new_seq() -> None:
    session = Session(b"old")
    session.begin()
    command = Command(POLICY, 0.0, session)
    assert (command.client_id, command.seq) == (b"old", 2)
    assert command.follow(session) is Decision.SEND
    assert command.decide(RsmStatus.SESSION_EXPIRED, 0.0) is Decision.RENEW
    session.renew(b"new")
    assert command.needs_new_seq(session)
    assert command.follow(session) is Decision.SEND
    assert (command.client_id, command.seq) == (b"new", 1)
    assert not command.needs_new_seq(session)


@pytest.mark.parametrize("status", sorted(MAYBE_LOGGED))
def test_a_command_that_may_be_logged_never_moves(status: RsmStatus) -> None:
    session = Session(b"old")
    command = Command(POLICY, 0.0, session)
    assert command.decide(status, 0.0) is Decision.WAIT
    assert command.decide(RsmStatus.SESSION_EXPIRED, 0.0) is Decision.RENEW
    session.renew(b"new")
    assert not command.needs_new_seq(session)
    assert command.follow(session) is Decision.MAYBE_APPLIED
    assert (command.client_id, command.seq) == (b"old", 1)


def test_a_request_without_a_session_delivers_session_expired() -> None:
    assert Command(POLICY, 0.0).decide(RsmStatus.SESSION_EXPIRED, 0.0) is Decision.DELIVER


# --- invariants over random runs ----------------------------------------------------------------

STEPS = st.lists(
    st.tuples(
        st.sampled_from(ALL_STATUSES),
        st.sampled_from([None, HERE, THERE]),
        st.booleans(),
        st.integers(0, 300),
    ),
    max_size=60,
)


@given(STEPS, st.integers(0, 2**32))
def test_a_session_command_keeps_its_seq_unless_it_moves_safely(
    steps: list[tuple[RsmStatus, str | None, bool, int]], seed: int
) -> None:
    """Whatever the replicas answer: seqs are handed out once and in order, ack_seq stays
    below every open seq, and a command that may have been logged keeps its (client id, seq)
    or gives up MAYBE_APPLIED."""
    rng = random.Random(seed)
    session = Session(new_client_id(rng))
    policy = RetryPolicy(
        deadline_ms=5_000, backoff_ms_initial=10, backoff_ms_max=80, redirects_max=3
    )
    handed: list[tuple[bytes, int]] = []
    now_ms = 0.0
    command = Command(policy, now_ms, session)
    assert command.client_id is not None
    handed.append((command.client_id, command.seq))
    for status, hint, answered, elapsed_ms in steps:
        now_ms += elapsed_ms
        before = (command.client_id, command.seq, command.maybe_logged)
        decision = command.start_attempt(now_ms)
        if decision is Decision.SEND:
            decision = command.follow(session)
            if (command.client_id, command.seq) != before[:2]:
                assert not before[2], "a command that may be logged never moves"
                handed.append((command.client_id, command.seq))  # type: ignore[arg-type]
        if decision is not Decision.SEND:
            assert decision in (Decision.NOT_APPLIED, Decision.MAYBE_APPLIED)
            assert (decision is Decision.MAYBE_APPLIED) == command.maybe_logged
            break
        assert session.ack_seq() < command.seq
        decision = command.decide(status, now_ms, leader_address=hint, answered=answered)
        if decision is Decision.RENEW:
            assert command.client_id is not None
            session.renew_after(command.client_id, rng)
        elif decision in (Decision.DELIVER, Decision.NOT_APPLIED, Decision.MAYBE_APPLIED):
            if decision is not Decision.DELIVER:
                assert (decision is Decision.MAYBE_APPLIED) == command.maybe_logged
            break
        if decision is Decision.WAIT:
            assert command.redirects == 0
    assert len(set(handed)) == len(handed), "a (client id, seq) is handed out once"
    for _, group in itertools.groupby(handed, key=lambda pair: pair[0]):
        seqs = [seq for _, seq in group]
        assert seqs == sorted(seqs)


@given(st.lists(st.booleans(), max_size=100), st.integers(0, 2**32))
def test_seqs_increase_and_ack_seq_stays_below_every_open_one(ends: list[bool], seed: int) -> None:
    rng = random.Random(seed)
    session = Session(b"h")
    opened: list[int] = []
    last = 0
    for begin in ends:
        if begin or not opened:
            seq = session.begin()
            assert seq == last + 1
            last = seq
            opened.append(seq)
        else:
            session.end(b"h", opened.pop(rng.randrange(len(opened))))
        assert all(session.ack_seq() < seq for seq in opened)
        assert session.open_count == (last - min(opened) + 1 if opened else 0)


# --- backoff ----------------------------------------------------------------------------------


def test_backoff_doubles_to_its_maximum_with_jitter_and_resets() -> None:
    rng = random.Random(7)
    backoff = Backoff(POLICY)
    waits = [backoff.next_wait_ms(rng) for _ in range(6)]
    for wait_ms, base_ms in zip(waits, [10, 20, 40, 80, 80, 80], strict=True):
        assert base_ms / 2 <= wait_ms <= base_ms
    backoff.reset()
    assert 5 <= backoff.next_wait_ms(rng) <= 10


def test_backoff_draws_one_number_per_wait() -> None:
    drawn = random.Random(1)
    backoff = Backoff(POLICY)
    backoff.next_wait_ms(drawn)
    same = random.Random(1)
    same.random()
    assert drawn.random() == same.random()
