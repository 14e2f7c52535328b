"""What changed in the cluster between two looks at it: the events of the status page.

A `ClusterLook` is what a replica's admin server sees at one moment: the
leader (`(replica_id, epoch)`, or None while no leader znode names one), each
bookie member of the cluster with its state (`BookieState`), and the index at
which this replica's state first differed from the leader's (None while it
never did).  `events_between(before, after)` lists, in this order, a leader
change (another replica or another epoch, or no leader any more), each
bookie whose state changed (sorted by id; a bookie seen for the first time
counts from `up`, so a new bookie that is up is no event), and a divergence
newly seen.  The first look (`before` None) yields only its leader and a
divergence already there.

`EventLog` keeps the newest `capacity` events (the replica's admin server
uses `limits.admin_events_max`), oldest first, each with the wall-clock time
(ms) of the look that saw it.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


class BookieState(enum.Enum):
    UP = "up"
    """Registered writable, and answered."""
    READ_ONLY = "read_only"
    """Registered read-only, and answered."""
    DOWN = "down"
    """A member (it has a cookie) not registered, or registered and not answering."""


class EventKind(enum.Enum):
    LEADER = "leader"
    BOOKIE_DOWN = "bookie_down"
    BOOKIE_UP = "bookie_up"
    BOOKIE_READ_ONLY = "bookie_read_only"
    DIVERGED = "diverged"


@dataclass(frozen=True, slots=True)
class ClusterLook:
    leader: tuple[str, int] | None
    bookies: Mapping[str, BookieState] = field(default_factory=dict)
    diverged_at: int | None = None


@dataclass(frozen=True, slots=True)
class Event:
    time_ms: int
    kind: EventKind
    message: str

    def plain(self) -> dict[str, Any]:
        return {"time_ms": self.time_ms, "kind": self.kind.value, "message": self.message}


_BOOKIE_KINDS = {
    BookieState.UP: EventKind.BOOKIE_UP,
    BookieState.READ_ONLY: EventKind.BOOKIE_READ_ONLY,
    BookieState.DOWN: EventKind.BOOKIE_DOWN,
}


def _leader_message(leader: tuple[str, int] | None) -> str:
    if leader is None:
        return "no leader"
    replica_id, epoch = leader
    return f"leader {replica_id} (epoch {epoch})"


def events_between(
    before: ClusterLook | None, after: ClusterLook
) -> Iterator[tuple[EventKind, str]]:
    """The changes from `before` to `after` as (kind, message); see the module docstring."""
    changed = before.leader != after.leader if before is not None else after.leader is not None
    if changed:
        yield EventKind.LEADER, _leader_message(after.leader)
    if before is not None:
        for bookie_id in sorted(after.bookies):
            state = after.bookies[bookie_id]
            if state is not before.bookies.get(bookie_id, BookieState.UP):
                yield _BOOKIE_KINDS[state], f"bookie {bookie_id} {state.value.replace('_', '-')}"
    if after.diverged_at is not None and (before is None or before.diverged_at is None):
        yield EventKind.DIVERGED, f"state diverged from the leader's at index {after.diverged_at}"


class EventLog:
    """The newest `capacity` events, oldest first."""

    def __init__(self, capacity: int) -> None:
        assert capacity > 0
        self._events: deque[Event] = deque(maxlen=capacity)
        self._last: ClusterLook | None = None

    def look(self, look: ClusterLook, time_ms: int) -> None:
        """Record what changed since the previous look."""
        for kind, message in events_between(self._last, look):
            self._events.append(Event(time_ms, kind, message))
        self._last = look

    @property
    def last(self) -> ClusterLook | None:
        return self._last

    def events(self) -> list[Event]:
        return list(self._events)
