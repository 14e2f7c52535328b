"""How the framework's outcomes read to a Redis client: TRYAGAIN, TIMEOUT or the error."""

from __future__ import annotations

import pytest
from kvstore.connection.dispatch import failure_reply

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
