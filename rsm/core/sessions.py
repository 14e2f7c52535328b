"""The session table: exactly-once application of client commands.

Pure, and part of the replicated state: every replica builds the same table
by applying the same log, and it goes into snapshots (`to_plain` /
`from_plain`).  Everything here is decided by logged data only (the batch
timestamps and the commands' session fields), never by a local clock.

A client numbers its commands `seq = 1, 2, ...` and sends with each one
`ack_seq`: it has the answers of every seq <= ack_seq.  Per client the table
keeps the time of last activity, a `floor_seq` (every seq at or below it was
acknowledged by the client or forgotten by the table) and the recorded
outcome of each applied seq above the floor.

Rules, applied to each logged command `(client_id, seq, ack_seq)` in log order
(`begin`, then `record` after applying):

* Unknown client and ack_seq == 0: a new session.  Unknown client and
  ack_seq > 0: the client had answers from a session we dropped, so its
  session expired; answer `SessionExpired` and apply nothing (a retry might
  otherwise apply a command twice).
* The floor rises to ack_seq; results at or below it are dropped.
* seq has a recorded outcome: a duplicate; answer that outcome, apply nothing.
* seq <= floor without a recorded outcome: `StaleRequest`, apply nothing.
* Otherwise apply, and record the outcome.

Bounds, all deterministic:

* A session idle longer than `ttl_ms` (by logged time) is dropped when the
  next batch applies (`expire`), in O(sessions dropped): sessions are kept in
  order of last activity, which logged time (never decreasing along the log)
  preserves.
* At most `sessions_max` sessions: a new one evicts the least recently
  active, if that one has been idle for `evict_idle_ms`; otherwise the new
  session is refused (`Overloaded`, nothing applied, the client retries).
  Evicting a recent session would be unsafe: a client whose first commands
  are still retried (nothing acknowledged, `ack_seq` 0) would look like a new
  session, and a retry of a command already applied would be applied again.
  So `evict_idle_ms` must exceed how long a client retries one command.
* At most `results_max` outcomes per session: past it the lowest seq's outcome
  is dropped and the floor rises to it.  Clients keep fewer commands
  outstanding than that (limits relation), so no retry can hit a forgotten seq.

Invariants: every kept outcome's seq is above its session's floor; sessions
are ordered by non-decreasing `last_active_ms`; no more sessions or outcomes
than the bounds.  The same inputs give the same table, byte for byte.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

from bookie.errors import preview
from rsm import limits
from rsm.errors import (
    MalformedValue,
    Overloaded,
    RsmStatus,
    SessionExpired,
    StaleRequest,
    StatusError,
    error_for_status,
)

PLAIN_VERSION = 1
"""Version of the plain (snapshot) form of the table."""


class Outcome(NamedTuple):
    """The answer to one command: a value, or a deterministic error.

    This is what a replica answers and what the session table keeps; two
    replicas that applied the same log hold equal outcomes.  A NamedTuple
    rather than a dataclass because one is built per command on every
    replica, and a tuple is built in one C call.
    """

    status: RsmStatus = RsmStatus.OK
    value: Any = None
    """The command's result when `status` is OK (a CBOR-encodable value), else None."""
    message: str = ""
    detail: str | None = None

    @classmethod
    def failure(cls, error: StatusError) -> Outcome:
        return cls(error.status, None, error.message, error.detail)

    @property
    def ok(self) -> bool:
        return self.status == RsmStatus.OK

    @property
    def error(self) -> StatusError | None:
        """The error this outcome stands for (a new exception object), or None when OK."""
        if self.ok:
            return None
        return error_for_status(self.status, self.message, self.detail)

    def unwrap(self) -> Any:
        """The value; raises the error when the outcome is one."""
        error = self.error
        if error is not None:
            raise error
        return self.value

    def to_plain(self) -> list[Any]:
        """`[0, value]` when OK, `[status, message, detail]` otherwise."""
        if self.ok:
            return [int(RsmStatus.OK), self.value]
        return [int(self.status), self.message, self.detail]

    @classmethod
    def from_plain(cls, plain: Any) -> Outcome:
        if type(plain) is list and len(plain) == 2 and type(plain[0]) is int and plain[0] == 0:
            return cls(RsmStatus.OK, plain[1])
        if (
            type(plain) is list
            and len(plain) == 3
            and type(plain[0]) is int
            and plain[0] in _ERROR_STATUSES
            and type(plain[1]) is str
            and (plain[2] is None or type(plain[2]) is str)
        ):
            return cls(RsmStatus(plain[0]), None, plain[1], plain[2])
        raise MalformedValue(
            f"outcome {preview(plain)} is not [0, value] or [status, message, detail]"
        )


_ERROR_STATUSES = frozenset(int(status) for status in RsmStatus if status is not RsmStatus.OK)


class _Session:
    """One client's entry; mutable, owned by the table.

    `results` maps seq -> outcome; `seqs` is a min-heap of the same seqs, so
    raising the floor drops the lowest outcomes in O(dropped * log kept)
    instead of looking at every kept one (seqs may be applied out of order,
    so the dict's order is not the seqs' order).
    """

    __slots__ = ("last_active_ms", "floor_seq", "results", "seqs")

    def __init__(self, last_active_ms: int, floor_seq: int) -> None:
        self.last_active_ms = last_active_ms
        self.floor_seq = floor_seq
        self.results: dict[int, Outcome] = {}
        self.seqs: list[int] = []

    def keep(self, seq: int, outcome: Outcome) -> None:
        """Record the outcome of `seq` (above the floor, not yet kept)."""
        self.results[seq] = outcome
        heapq.heappush(self.seqs, seq)

    def raise_floor(self, floor_seq: int) -> None:
        """Forget every outcome at or below `floor_seq`."""
        if floor_seq <= self.floor_seq:
            return
        self.floor_seq = floor_seq
        seqs = self.seqs
        results = self.results
        while seqs and seqs[0] <= floor_seq:
            del results[heapq.heappop(seqs)]
        assert len(seqs) == len(results)


class SessionTable:
    """Per-client dedup state, kept in order of last activity (least recent first).

    `ttl_ms`, `sessions_max`, `evict_idle_ms` and `results_max` decide what
    replicas apply, so they must be equal on every replica of an application.
    """

    __slots__ = (
        "_sessions",
        "_clock_ms",
        "ttl_ms",
        "sessions_max",
        "evict_idle_ms",
        "results_max",
    )

    def __init__(
        self,
        *,
        ttl_ms: int = limits.session_ttl_ms_default,
        sessions_max: int = limits.sessions_max_default,
        evict_idle_ms: int = limits.session_evict_idle_ms_default,
        results_max: int = limits.session_results_max_default,
    ) -> None:
        assert ttl_ms > 0
        assert sessions_max > 0
        assert evict_idle_ms > 0
        assert results_max > 0
        self._sessions: OrderedDict[bytes, _Session] = OrderedDict()
        self._clock_ms = 0
        self.ttl_ms = ttl_ms
        self.sessions_max = sessions_max
        self.evict_idle_ms = evict_idle_ms
        self.results_max = results_max

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._sessions

    @property
    def clock_ms(self) -> int:
        """The latest logged time the table has seen."""
        return self._clock_ms

    def _advance(self, now_ms: int) -> int:
        # Logged time never decreases along a correct log; holding it still
        # when it would keeps the activity order (and so expiry) well defined.
        self._clock_ms = max(self._clock_ms, now_ms)
        return self._clock_ms

    def expire(self, now_ms: int) -> int:
        """Drop sessions idle longer than the TTL at logged time `now_ms`; how many were dropped."""
        now_ms = self._advance(now_ms)
        sessions = self._sessions
        deadline_ms = now_ms - self.ttl_ms
        dropped = 0
        while sessions:
            client_id = next(iter(sessions))
            if sessions[client_id].last_active_ms >= deadline_ms:
                break
            del sessions[client_id]
            dropped += 1
        return dropped

    def begin(self, client_id: bytes, seq: int, ack_seq: int, now_ms: int) -> Outcome | None:
        """Check a logged command before applying it.

        None means "apply it, then `record` its outcome"; an outcome means
        "answer this and apply nothing" (a duplicate's recorded outcome, or a
        StaleRequest / SessionExpired error).
        """
        assert 0 <= ack_seq < seq
        # `_advance`, inline: this runs for every command on every replica.
        if now_ms > self._clock_ms:
            self._clock_ms = now_ms
        else:
            now_ms = self._clock_ms
        sessions = self._sessions
        session = sessions.get(client_id)
        if session is None:
            if ack_seq > 0:
                return Outcome.failure(
                    SessionExpired(
                        f"no session for this client (it acknowledged seq {ack_seq}): it expired "
                        "or was evicted; start a new session"
                    )
                )
            if len(sessions) >= self.sessions_max:
                refusal = self._make_room(now_ms)
                if refusal is not None:
                    return refusal
            session = sessions[client_id] = _Session(now_ms, 0)
        else:
            session.last_active_ms = now_ms
            sessions.move_to_end(client_id)
        if ack_seq > session.floor_seq:
            session.raise_floor(ack_seq)
        recorded = session.results.get(seq)
        if recorded is not None:
            return recorded
        if seq <= session.floor_seq:
            return Outcome.failure(
                StaleRequest(
                    f"seq {seq} is at or below {session.floor_seq}, whose answers the client "
                    "acknowledged or the session no longer keeps"
                )
            )
        return None

    def _make_room(self, now_ms: int) -> Outcome | None:
        """Evict the least recently active session for a new one, or refuse the new one."""
        sessions = self._sessions
        least_recent = next(iter(sessions.values()))
        idle_ms = now_ms - least_recent.last_active_ms
        if idle_ms < self.evict_idle_ms:
            return Outcome.failure(
                Overloaded(
                    f"{len(sessions)} sessions, the least recently active idle for only "
                    f"{idle_ms} ms (< {self.evict_idle_ms}): no room for a new session; "
                    "retry later"
                )
            )
        sessions.popitem(last=False)
        return None

    def record(self, client_id: bytes, seq: int, outcome: Outcome) -> None:
        """Keep the outcome of `seq`, which `begin` just said to apply."""
        session = self._sessions[client_id]
        assert seq > session.floor_seq
        results = session.results
        assert seq not in results
        # `session.keep`, inline: this runs for every command on every replica.
        results[seq] = outcome
        heapq.heappush(session.seqs, seq)
        if len(results) > self.results_max:
            session.raise_floor(session.seqs[0])
        assert len(session.results) <= self.results_max

    def recorded(self, client_id: bytes, seq: int) -> Outcome | None:
        """The outcome kept for `(client_id, seq)`, if any; changes nothing.

        Lets a leader answer a retry of an applied command without logging it again.
        """
        session = self._sessions.get(client_id)
        return None if session is None else session.results.get(seq)

    # --- snapshots ----------------------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        """The table as plain CBOR-encodable values, activity order included.

        `{"v": 1, "clock_ms": uint, "sessions": [[client_id, last_active_ms,
        floor_seq, [[seq, outcome], ...]], ...]}`, least recently active first.
        """
        return {
            "v": PLAIN_VERSION,
            "clock_ms": self._clock_ms,
            "sessions": list(self.plain_sessions()),
        }

    def plain_sessions(self) -> Iterator[list[Any]]:
        """The sessions of `to_plain`, one at a time (a snapshot streams them)."""
        for client_id, session in self._sessions.items():
            yield [
                client_id,
                session.last_active_ms,
                session.floor_seq,
                [[seq, outcome.to_plain()] for seq, outcome in session.results.items()],
            ]

    @classmethod
    def from_plain(
        cls,
        plain: Any,
        *,
        ttl_ms: int = limits.session_ttl_ms_default,
        sessions_max: int = limits.sessions_max_default,
        evict_idle_ms: int = limits.session_evict_idle_ms_default,
        results_max: int = limits.session_results_max_default,
    ) -> SessionTable:
        """The table `to_plain` described; `MalformedValue` when the structure is off."""
        table = cls(
            ttl_ms=ttl_ms,
            sessions_max=sessions_max,
            evict_idle_ms=evict_idle_ms,
            results_max=results_max,
        )
        if (
            type(plain) is not dict
            or plain.keys() != {"v", "clock_ms", "sessions"}
            or plain["v"] != PLAIN_VERSION
            or not _natural(plain["clock_ms"])
            or type(plain["sessions"]) is not list
        ):
            raise MalformedValue("session table is not {v: 1, clock_ms, sessions}")
        table._clock_ms = plain["clock_ms"]
        previous_active_ms = 0
        for raw in plain["sessions"]:
            client_id, session = _session_from_plain(raw, table._clock_ms, results_max)
            if session.last_active_ms < previous_active_ms or client_id in table._sessions:
                raise MalformedValue("session table is not in activity order, or repeats a client")
            previous_active_ms = session.last_active_ms
            table._sessions[client_id] = session
        if len(table._sessions) > sessions_max:
            raise MalformedValue(f"session table has more than {sessions_max} sessions")
        return table


def _natural(v: Any) -> bool:
    return type(v) is int and v >= 0


def _session_from_plain(raw: Any, clock_ms: int, results_max: int) -> tuple[bytes, _Session]:
    if (
        type(raw) is not list
        or len(raw) != 4
        or type(raw[0]) is not bytes
        or not _natural(raw[1])
        or raw[1] > clock_ms
        or not _natural(raw[2])
        or type(raw[3]) is not list
    ):
        raise MalformedValue(
            f"session {preview(raw)} is not [client_id, last_active_ms, floor, results]"
        )
    client_id, last_active_ms, floor_seq, raw_results = raw
    session = _Session(last_active_ms, floor_seq)
    for entry in raw_results:
        if type(entry) is not list or len(entry) != 2 or not _natural(entry[0]):
            raise MalformedValue(f"session result {preview(entry)} is not [seq, outcome]")
        seq = entry[0]
        if seq <= floor_seq or seq in session.results:
            raise MalformedValue(f"session result seq {seq} is at or below the floor, or repeated")
        session.keep(seq, Outcome.from_plain(entry[1]))
    if len(session.results) > results_max:
        raise MalformedValue(f"session keeps more than {results_max} results")
    return client_id, session
