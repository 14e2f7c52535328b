"""The time a leader stamps on its batches and gives its reads: its wall clock, kept from
leaping ahead within a term.

Logged time is what sessions expire by (rsm/core/sessions.py) and what an
application reads as "now".  It comes from the leader's wall clock, which an
NTP step can move forward by minutes at once: the session table would then
drop the sessions of clients still retrying, and a retry of a session's first
command (ack_seq 0) would look like a new session and be applied a second
time.  So within a term, logged time advances at most
`limits.logged_time_rate_max` times as fast as the leader's steady clock has
since its previous reading (and never backwards: the batcher keeps it from
that, rsm/core/batching.py): a forward step is taken in gradually, and since a
client's deadline times that rate stays below the session TTL and the idle
time before an eviction, a client gives up on a command before its session
can go.  The term's first reading is the wall clock as it is: how long ago the
previous leader logged its last entry is not known, so a new leader whose
clock is ahead of the old one's by more than the TTL still moves logged time
at once (docs/guarantees.md).

Pure: readings in, a time out.
"""

from __future__ import annotations

from rsm import limits


class LoggedTime:
    """One term's logged time; see the module docstring."""

    __slots__ = ("_last_ms", "_last_s", "_ms_per_s")

    def __init__(self, rate_max: float = limits.logged_time_rate_max) -> None:
        assert rate_max >= 1
        self._ms_per_s = 1000 * rate_max
        self._last_ms: int | None = None
        self._last_s = 0.0

    def now_ms(self, wall_ms: int, steady_s: float) -> int:
        """Logged time now, given the wall clock (ms) and the steady clock (s)."""
        last_ms = self._last_ms
        if last_ms is not None:
            if wall_ms <= last_ms:
                wall_ms = last_ms
            else:
                ceiling_ms = last_ms + int(self._ms_per_s * (steady_s - self._last_s))
                if wall_ms > ceiling_ms:
                    wall_ms = ceiling_ms if ceiling_ms > last_ms else last_ms
        self._last_ms = wall_ms
        self._last_s = steady_s
        return wall_ms
