"""When a read may be answered: linearizable read rounds and read-your-writes waits.

Pure.  Waiters are opaque tickets of the shell (`T`); these structures only
decide when each one may be released.

Linearizable reads (leader only), `LinearizableReads`: a read that arrives is
*unattached*.  The next *confirmation round* the leader starts after that
takes every unattached read with it (`start_round`).  A round asks the bookies
of the leader's ledger whether it is fenced (`WriteHandle.confirm_writer`);
when Qa bookies of one write set say it is not, the round's reads are released
(`confirmed`) and answered from local state.  Why this is enough: a successor
fences our ledger before it can get anything acknowledged, and fencing needs
Qw - Qa + 1 members of every write set, so at the earliest of those "not
fenced" answers no successor could have acknowledged anything, and our state
held every command acknowledged before the read arrived (docs/ledgers.md,
"Confirming the writer").  One round serves every read that arrived before it
started, however many, and costs a round trip with no entry appended and no
fsync.  A round that cannot confirm (too few answers, an ensemble change)
hands its reads back (`round_failed`) to the next round.

Read leases (leader only), `ReadLease`: a round that confirms the writer
also proves that no successor can get anything acknowledged before the
round's start plus the *successor's wait* (`successor_wait_ms`): a new leader
that had to fence an OPEN segment waits that long after its fencing finished
before it acknowledges anything (rsm/runtime/takeover.py).  So for `read_lease_ms`
after a confirmed round *started*, by this leader's clock, a read may be
answered at once from the applied state, with no round: every command
acknowledged before it arrived, by anyone, is in that state.  The wait covers
clocks whose rates differ by up to `limits.lease_clock_rate_error`
(docs/guarantees.md, "Read leases").  A round is started ahead of time once a
lease is half used while reads keep coming, so a busy leader never waits for
one.  A lease of 0 ms turns this off: every read waits for a round.

Read-your-writes (any replica), `IndexWaiters`: a read carries the index
token its writer got back and waits until the replica has applied that index.

Invariants: a read is released only by a round started after it arrived (it
is attached only by a `start_round` that follows its `add`), or answered
under a lease whose round started at most `read_lease_ms` before it (by the
clock the lease was given); a lease never moves back; at most one round
is in flight; reads are released in arrival order; neither structure holds
more waiters than its bound (`add` raises `Overloaded` instead); an index
waiter is released only once `applied_index` reaches its index.
"""

from __future__ import annotations

import heapq
import math
from typing import Final, Generic, TypeVar

from rsm import limits
from rsm.errors import Overloaded

T = TypeVar("T")


class LinearizableReads(Generic[T]):
    """Reads waiting for a confirmation round started after their arrival."""

    __slots__ = ("_unattached", "_round", "_count", "_waiters_max", "_last_round")

    def __init__(self, waiters_max: int = limits.linearizable_read_waiters_max) -> None:
        assert waiters_max >= 1
        self._unattached: list[T] = []
        self._round: tuple[int, list[T]] | None = None
        """The round in flight: its sequence number and the reads it carries."""
        self._count = 0
        self._waiters_max = waiters_max
        self._last_round = -1

    def __len__(self) -> int:
        return self._count

    @property
    def needs_round(self) -> bool:
        """Some read waits and no round is in flight: start one."""
        return bool(self._unattached) and self._round is None

    def add(self, read: T) -> None:
        """A read arrived; `Overloaded` when the bound is reached."""
        if self._count >= self._waiters_max:
            raise Overloaded(f"{self._count} linearizable reads are waiting")
        self._unattached.append(read)
        self._count += 1

    def start_round(self, sequence: int) -> None:
        """Round `sequence` starts now and carries every read waiting for one."""
        assert self._round is None, "one round at a time"
        assert sequence > self._last_round, "rounds are numbered in order"
        self._last_round = sequence
        self._round = (sequence, self._unattached)
        self._unattached = []

    def confirmed(self, sequence: int) -> list[T]:
        """Round `sequence` confirmed the writer: its reads, oldest first, may be answered."""
        assert self._round is not None
        assert self._round[0] == sequence
        released = self._round[1]
        self._round = None
        self._count -= len(released)
        assert self._count >= 0
        return released

    def round_failed(self, sequence: int) -> None:
        """Round `sequence` could not confirm: its reads wait for the next round, first."""
        assert self._round is not None
        assert self._round[0] == sequence
        self._unattached = self._round[1] + self._unattached
        self._round = None

    def abandon(self) -> list[T]:
        """Every waiting read, none left afterwards: to answer NotLeader on step-down, or
        Unavailable between rounds when they keep failing."""
        reads = list(self._round[1]) if self._round is not None else []
        reads.extend(self._unattached)
        self._round = None
        self._unattached = []
        self._count = 0
        return reads


def successor_wait_ms(read_lease_ms: int) -> int:
    """How long a successor that fenced an OPEN segment waits before it acknowledges anything.

    A lease of L ms by the old leader's clock lasts at most L / (1 - e) real
    ms; the successor's clock measures at least W / (1 + e) real ms in W of
    its own; so W = L * (1 + e) / (1 - e), rounded up (e is
    `limits.lease_clock_rate_error`).
    """
    assert read_lease_ms >= 0
    error = limits.lease_clock_rate_error
    return math.ceil(read_lease_ms * (1 + error) / (1 - error))


LEASE_NOT_HELD: Final = 0
LEASE_HELD: Final = 1
LEASE_HELD_RENEW: Final = 2


class ReadLease:
    """Until when a leader may answer linearizable reads without a round (clock in seconds)."""

    __slots__ = ("_duration_s", "_until_s", "_renew_from_s")

    def __init__(self, read_lease_ms: int) -> None:
        assert read_lease_ms >= 0
        self._duration_s = read_lease_ms / 1000
        self._until_s = -math.inf
        self._renew_from_s = -math.inf

    def holds(self, now_s: float) -> bool:
        """Whether a read arriving at `now_s` may be answered at once."""
        return now_s < self._until_s

    def check(self, now_s: float) -> int:
        """For a read arriving at `now_s`: `LEASE_NOT_HELD` (it waits for a round),
        `LEASE_HELD`, or `LEASE_HELD_RENEW` (held, and half used: start a round now, ahead
        of the lease's end)."""
        if now_s >= self._until_s:
            return LEASE_NOT_HELD
        return LEASE_HELD_RENEW if now_s >= self._renew_from_s else LEASE_HELD

    def confirmed(self, round_started_s: float) -> None:
        """A round that started at `round_started_s` confirmed the writer."""
        if self._duration_s == 0:
            return
        until_s = round_started_s + self._duration_s
        if until_s > self._until_s:
            self._until_s = until_s
            self._renew_from_s = round_started_s + self._duration_s / 2

    def revoke(self) -> None:
        """The term ends: no read is answered under this lease any more."""
        self._until_s = -math.inf
        self._renew_from_s = -math.inf


class IndexWaiters(Generic[T]):
    """Reads waiting until the replica has applied a given index (read-your-writes)."""

    __slots__ = ("_applied_index", "_heap", "_live", "_next_ticket", "_waiters_max")

    def __init__(self, applied_index: int, waiters_max: int = limits.index_waiters_max) -> None:
        assert applied_index >= 0
        assert waiters_max >= 1
        self._applied_index = applied_index
        self._heap: list[tuple[int, int]] = []
        self._live: dict[int, T] = {}
        self._next_ticket = 0
        self._waiters_max = waiters_max

    def __len__(self) -> int:
        return len(self._live)

    @property
    def applied_index(self) -> int:
        return self._applied_index

    def add(self, index: int, waiter: T) -> int:
        """Wait for `index` (above `applied_index`; check first); a ticket for `cancel`."""
        assert index > self._applied_index, "an applied index needs no wait"
        if len(self._live) >= self._waiters_max:
            raise Overloaded(f"{len(self._live)} reads wait for indexes to be applied")
        ticket = self._next_ticket
        self._next_ticket += 1
        self._live[ticket] = waiter
        heapq.heappush(self._heap, (index, ticket))
        return ticket

    def cancel(self, ticket: int) -> None:
        """Forget a waiter that gave up (its deadline passed); unknown tickets are ignored."""
        self._live.pop(ticket, None)
        # Cancelled entries stay in the heap until popped; rebuild it when they
        # dominate, so a replica that lags for long does not grow without bound.
        if len(self._heap) > 2 * len(self._live) + 64:
            live = self._live
            self._heap = [entry for entry in self._heap if entry[1] in live]
            heapq.heapify(self._heap)

    def applied(self, index: int) -> list[T]:
        """The replica has applied up to `index`: the waiters now satisfied, lowest index first."""
        assert index >= self._applied_index
        self._applied_index = index
        heap = self._heap
        live = self._live
        released: list[T] = []
        while heap and heap[0][0] <= index:
            _, ticket = heapq.heappop(heap)
            if ticket in live:
                released.append(live.pop(ticket))
        return released
