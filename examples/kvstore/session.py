"""One Redis connection's exactly-once session with the framework: client id, seqs, ack_seq.

Pure.  Every connection that writes is one framework session (see
`rsm/core/sessions.py`): a random `client_id` (drawn by the server) and a
`seq` per write command, 1, 2, ...  Every attempt of a write, on whichever
leader and after whichever failover, carries the same `(client_id, seq)`,
so the session table applies it once and answers a retry with the first
outcome.  With each attempt goes `ack_seq`, the highest seq below which the
connection has every outcome (delivered to its client, or given up on), so
the replicas may forget those outcomes.

A connection owes at most `limits.connection_replies_max` replies, and every
seq from the oldest unanswered one on belongs to a reply it still owes, so
`next seq - oldest unanswered seq` stays below that bound: fewer than the
outcomes a session keeps (`rsm.limits.session_results_max_default`).  A
retry therefore always finds its first outcome.

`renew` starts a new session (a new client id, seqs from 1) when the old one
expired (idle past the framework's session TTL): commands refused with
`SessionExpired` were not applied, so they go again under the new one.

Invariants: seqs are handed out once each, increasing; `ack_seq() < seq`
for every seq still open; an ended seq never reopens.
"""

from __future__ import annotations

import heapq


class Session:
    """The session of one connection (see the module docstring)."""

    __slots__ = ("client_id", "_next_seq", "_open", "_ended")

    def __init__(self, client_id: bytes) -> None:
        assert client_id
        self.client_id = client_id
        self._next_seq = 1
        self._open: list[int] = []
        """Seqs handed out and not known ended, as a heap (the oldest first)."""
        self._ended: set[int] = set()
        """Ended seqs still in `_open` behind an older open one."""

    def begin(self) -> int:
        """A new seq for a write command."""
        seq = self._next_seq
        self._next_seq += 1
        heapq.heappush(self._open, seq)
        return seq

    def end(self, client_id: bytes, seq: int) -> None:
        """The outcome of `seq` was delivered (or given up on).  A seq of an older session
        (before `renew`) is ignored."""
        if client_id != self.client_id:
            return
        assert 1 <= seq < self._next_seq
        self._ended.add(seq)
        self._trim()

    def ack_seq(self) -> int:
        """The highest seq at or below which every outcome was delivered."""
        return (self._open[0] if self._open else self._next_seq) - 1

    @property
    def open_count(self) -> int:
        """Seqs from the oldest open one to the newest handed out (what the bound limits)."""
        return self._next_seq - 1 - self.ack_seq()

    def renew(self, client_id: bytes) -> None:
        """Start a new session: `client_id`, seqs from 1 (see the module docstring)."""
        assert client_id != self.client_id
        self.client_id = client_id
        self._next_seq = 1
        self._open = []
        self._ended = set()

    def _trim(self) -> None:
        opened = self._open
        ended = self._ended
        while opened and opened[0] in ended:
            ended.discard(heapq.heappop(opened))
