"""A client's side of exactly-once: its session, and what to do after each attempt of a request.

Pure.  Both clients of the framework drive it: `rsm.client.Client` (one
session per client) and the key-value store's router (`kvstore.runtime.router`, one
session per Redis connection).

`Session`: a client id (`new_client_id`, random) and seqs 1, 2, ... for its
commands; `ack_seq` is the highest seq at or below which every seq ended
(answered, or given up on), sent with each attempt so the replicas may forget
those results.  A client keeps at most a window of seqs open, counted from
the oldest one not ended (`has_room`): fewer than the results a session
keeps, so a retry always finds its first outcome.  When the replicas dropped
the session (`SessionExpired`) it is renewed: a new client id, seqs from 1.

`Command`: one request across its attempts, with its seq if it is a command
of a session.  After each attempt the shell reports the status it ended with
(`decide`); a lost connection or an attempt's timeout is reported as the
status the client makes of it (`OUTCOME_UNKNOWN` if the request was sent,
`UNAVAILABLE` if not, `TIMEOUT`; `NOT_LEADER` without a hint when no leader is
known).  The decision:

    status                                   decision
    OK, or not retryable                     DELIVER the answer
    SESSION_EXPIRED (a session's command)    RENEW the session, send again at once
    any refusal of a `pinned` request        DELIVER (it went to a replica of the caller's choice)
    NOT_LEADER naming another replica        REDIRECT there at once (`redirects_max` per wait)
    NOT_LEADER otherwise                     WAIT a backoff, send again
    UNAVAILABLE, OVERLOADED, OUTCOME_UNKNOWN,
    TIMEOUT                                  WAIT; DELIVER if the request is not idempotent
    WAIT past the deadline                   NOT_APPLIED, or MAYBE_APPLIED once an attempt
                                             may have been logged (OUTCOME_UNKNOWN, TIMEOUT)

Before each attempt, `start_attempt` gives up past the deadline or
`attempts_max`, and `follow` moves a command whose session was renewed to
the new one under a new seq.  `Backoff` draws the waits: doubling from the
initial one to the maximum, each with jitter from the shell's `Random`.

Invariants: a session hands out each seq once, in increasing order, and
`ack_seq() < seq` for every open seq; a command keeps its (client id, seq)
across its attempts, and moves to a renewed session only if none of its
attempts may have been logged (else it gives up MAYBE_APPLIED: only the
dropped session could have told a retry from a first attempt).
"""

from __future__ import annotations

import enum
import heapq
import random
from dataclasses import dataclass
from typing import Final

from rsm import limits
from rsm.errors import RsmStatus

RETRYABLE: Final = frozenset(
    {
        RsmStatus.NOT_LEADER,
        RsmStatus.OUTCOME_UNKNOWN,
        RsmStatus.UNAVAILABLE,
        RsmStatus.OVERLOADED,
        RsmStatus.TIMEOUT,
    }
)
"""Statuses after which the same request may go again (`rsm.errors`: `retryable`)."""
MAYBE_LOGGED: Final = frozenset({RsmStatus.OUTCOME_UNKNOWN, RsmStatus.TIMEOUT})
"""Statuses after which the attempt may be in the log."""


def new_client_id(rng: random.Random) -> bytes:
    """A fresh random client id."""
    return rng.randbytes(limits.client_id_bytes)


class Session:
    """One exactly-once session (see the module docstring)."""

    __slots__ = ("client_id", "_next_seq", "_open", "_ended")

    def __init__(self, client_id: bytes) -> None:
        assert 0 < len(client_id) <= limits.client_id_bytes_max
        self.client_id = client_id
        self._next_seq = 1
        self._open: list[int] = []
        """Seqs handed out and not known ended, as a heap (the oldest first)."""
        self._ended: set[int] = set()
        """Ended seqs still in `_open` behind an older open one."""

    def begin(self) -> int:
        """A new seq for a command."""
        seq = self._next_seq
        self._next_seq += 1
        heapq.heappush(self._open, seq)
        return seq

    def end(self, client_id: bytes, seq: int) -> bool:
        """The outcome of `seq` was delivered (or given up on); whether `ack_seq` moved.

        A seq of an older session (before `renew`) is ignored."""
        if client_id != self.client_id:
            return False
        assert 1 <= seq < self._next_seq
        opened = self._open
        ended = self._ended
        ended.add(seq)
        if not opened or opened[0] != seq:
            return False
        while opened and opened[0] in ended:
            ended.discard(heapq.heappop(opened))
        return True

    def ack_seq(self) -> int:
        """The highest seq at or below which every seq ended."""
        return (self._open[0] if self._open else self._next_seq) - 1

    @property
    def open_count(self) -> int:
        """Seqs from the oldest open one to the newest handed out (what the window bounds)."""
        return self._next_seq - 1 - self.ack_seq()

    def has_room(self, window_max: int) -> bool:
        """Whether one more seq keeps at most `window_max` open."""
        return self.open_count < window_max

    def renew(self, client_id: bytes) -> None:
        """Start over under `client_id`, seqs from 1 (the replicas dropped the session)."""
        assert client_id != self.client_id
        self.client_id = client_id
        self._next_seq = 1
        self._open = []
        self._ended = set()

    def renew_after(self, client_id: bytes, rng: random.Random) -> bool:
        """`SessionExpired` for a command of session `client_id`: renew, unless that was done
        already (another command of it learnt first); whether it renewed."""
        if client_id != self.client_id:
            return False
        self.renew(new_client_id(rng))
        return True


class Decision(enum.Enum):
    """What the shell does next with a request (see the module docstring)."""

    SEND = "send"
    DELIVER = "deliver"
    REDIRECT = "redirect"
    WAIT = "wait"
    RENEW = "renew"
    NOT_APPLIED = "not applied"
    MAYBE_APPLIED = "maybe applied"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long and how often one request is tried."""

    deadline_ms: int
    backoff_ms_initial: int
    backoff_ms_max: int
    attempts_max: int | None = None
    """Attempts counted by `start_attempt` (None: as many as the deadline allows)."""
    redirects_max: int | None = None
    """Redirects followed at once before a wait (None: as many as the attempts allow)."""

    def __post_init__(self) -> None:
        assert self.deadline_ms > 0
        assert 0 < self.backoff_ms_initial <= self.backoff_ms_max
        assert self.attempts_max is None or self.attempts_max > 0
        assert self.redirects_max is None or self.redirects_max >= 0


class Backoff:
    """The waits between attempts: doubling up to the maximum, each jittered to 50-100%."""

    __slots__ = ("_initial_ms", "_max_ms", "_next_ms")

    def __init__(self, policy: RetryPolicy) -> None:
        self._initial_ms = self._next_ms = policy.backoff_ms_initial
        self._max_ms = policy.backoff_ms_max

    def next_wait_ms(self, rng: random.Random) -> float:
        wait_ms = self._next_ms * (0.5 + rng.random() / 2)
        self._next_ms = min(self._next_ms * 2, self._max_ms)
        return wait_ms

    def reset(self) -> None:
        """An answer came: the next wait starts from the initial one."""
        self._next_ms = self._initial_ms


class Command:
    """One request across its attempts (see the module docstring).

    `session` given: a command of that session, with a seq from it (the
    caller made sure it has room).  `idempotent` False: a request that must
    not run twice (a leadership transfer) is retried only where it was
    surely refused.  `pinned`: sent to a replica the caller chose, whose
    refusals are delivered.
    """

    __slots__ = (
        "policy",
        "client_id",
        "seq",
        "deadline_ms",
        "idempotent",
        "pinned",
        "attempts",
        "redirects",
        "maybe_logged",
    )

    def __init__(
        self,
        policy: RetryPolicy,
        now_ms: float,
        session: Session | None = None,
        *,
        idempotent: bool = True,
        pinned: bool = False,
    ) -> None:
        self.policy = policy
        self.client_id = session.client_id if session is not None else None
        self.seq = session.begin() if session is not None else 0
        self.deadline_ms = now_ms + policy.deadline_ms
        self.idempotent = idempotent
        self.pinned = pinned
        self.attempts = 0
        self.redirects = 0
        """Redirects followed since the last wait."""
        self.maybe_logged = False
        """An attempt may be in the log: a retry is safe only under the same (client id, seq)."""

    def start_attempt(self, now_ms: float) -> Decision:
        """SEND, or give up: past the deadline, or past `attempts_max`."""
        self.attempts += 1
        attempts_max = self.policy.attempts_max
        if now_ms >= self.deadline_ms or (
            attempts_max is not None and self.attempts > attempts_max
        ):
            return self.give_up()
        return Decision.SEND

    def needs_new_seq(self, session: Session) -> bool:
        """Whether `follow` would take a seq of `session` (the shell may wait for room first)."""
        return (
            self.client_id is not None
            and self.client_id != session.client_id
            and not self.maybe_logged
        )

    def follow(self, session: Session) -> Decision:
        """Before an attempt of a session's command: SEND under the current session (moving
        to it under a new seq if its own was renewed), or MAYBE_APPLIED if it cannot move."""
        if self.client_id is None or self.client_id == session.client_id:
            return Decision.SEND
        if self.maybe_logged:
            return Decision.MAYBE_APPLIED
        self.client_id = session.client_id
        self.seq = session.begin()
        return Decision.SEND

    def decide(
        self,
        status: RsmStatus,
        now_ms: float,
        *,
        leader_address: str | None = None,
        sent_to: str | None = None,
        answered: bool = True,
    ) -> Decision:
        """What follows an attempt that ended with `status` (see the module docstring).

        `leader_address`: a NOT_LEADER's hint; `sent_to`: where the attempt
        went; `answered`: the status came from a replica (not from the
        client, for a lost connection, a timeout or no leader known).
        """
        if status == RsmStatus.OK:
            return Decision.DELIVER
        if status == RsmStatus.SESSION_EXPIRED and self.client_id is not None:
            return Decision.RENEW
        if status not in RETRYABLE or (self.pinned and answered):
            return Decision.DELIVER
        if status in MAYBE_LOGGED:
            self.maybe_logged = True
        if status == RsmStatus.NOT_LEADER:
            redirects_max = self.policy.redirects_max
            if (
                leader_address is not None
                and leader_address != sent_to
                and (redirects_max is None or self.redirects < redirects_max)
            ):
                self.redirects += 1
                return Decision.REDIRECT
        elif not self.idempotent:
            return Decision.DELIVER
        if now_ms >= self.deadline_ms:
            return self.give_up()
        self.redirects = 0
        return Decision.WAIT

    def give_up(self) -> Decision:
        """NOT_APPLIED, or MAYBE_APPLIED if an attempt may have been logged."""
        return Decision.MAYBE_APPLIED if self.maybe_logged else Decision.NOT_APPLIED
