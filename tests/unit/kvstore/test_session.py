"""A connection's exactly-once session: seqs, ack_seq and renewal; and how outcomes read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kvstore.dispatch import failure_reply
from kvstore.session import Session

from rsm.core.sessions import Outcome
from rsm.errors import (
    CommandFailed,
    NotLeader,
    OutcomeUnknown,
    Overloaded,
    SessionExpired,
    StaleRequest,
    StatusError,
    Timeout,
    Unavailable,
)


def test_ack_seq_is_below_the_oldest_open_seq() -> None:
    session = Session(b"c" * 16)
    first, second, third = session.begin(), session.begin(), session.begin()
    assert (first, second, third) == (1, 2, 3)
    assert session.ack_seq() == 0
    session.end(b"c" * 16, second)
    assert session.ack_seq() == 0, "seq 1 is still open"
    session.end(b"c" * 16, first)
    assert session.ack_seq() == 2
    assert session.open_count == 1
    session.end(b"c" * 16, third)
    assert session.ack_seq() == 3
    assert session.open_count == 0


def test_renew_starts_over_and_ignores_the_old_sessions_seqs() -> None:
    session = Session(b"old")
    stale = session.begin()
    session.renew(b"new")
    assert session.client_id == b"new"
    assert session.begin() == 1
    session.end(b"old", stale)
    assert session.ack_seq() == 0


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


@pytest.mark.parametrize(
    ("error", "reply"),
    [
        (CommandFailed("ERR syntax error", "RedisError"), "ERR syntax error"),
        (CommandFailed("boom", "ValueError"), "ERR ValueError: boom"),
        (NotLeader("no leader"), "TRYAGAIN the command was not applied (no leader); retry it"),
        (Unavailable("down"), "TRYAGAIN the command was not applied (down); retry it"),
        (Overloaded("full"), "TRYAGAIN the command was not applied (full); retry it"),
        (SessionExpired("old"), "TRYAGAIN the command was not applied (old); retry it"),
        (OutcomeUnknown("lost"), "TIMEOUT the command may or may not have been applied (lost)"),
        (Timeout("slow"), "TIMEOUT the command may or may not have been applied (slow)"),
        (StaleRequest("seq 3"), "ERR seq 3"),
    ],
)
def test_failures_become_redis_errors_that_say_whether_to_retry(
    error: StatusError, reply: str
) -> None:
    assert failure_reply(Outcome.failure(error)).message.startswith(reply)
