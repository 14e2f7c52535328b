"""When a read may be answered: linearizable read barriers and read-your-writes waits.

Pure.  Waiters are opaque tickets of the shell (`T`); these structures only
decide when each one may be released.

Linearizable reads (leader only), `LinearizableReads`: a read that arrives is
*unattached*.  The next entry the leader sends after that (a write batch, or
an empty barrier batch when nothing is queued: `needs_barrier` tells the
batcher to cut one) takes every unattached read with it (`sent`).  When that
entry is acknowledged by Qa bookies and applied, its reads are released
(`applied`) and answered from local state.  Why this is enough: had a
successor fenced our ledger before that entry was acknowledged, the add could
not have succeeded; so at the moment of the acknowledgement we were still the
only writer, and our state included every command acknowledged before the
read arrived.  One entry serves every read that arrived before it was sent,
however many.

Read-your-writes (any replica), `IndexWaiters`: a read carries the index
token its writer got back and waits until the replica has applied that index.

Invariants: a read is released only by an entry sent after it arrived (it is
attached only by a `sent` that follows its `add`); reads are released in
arrival order; neither structure holds more waiters than its bound (`add`
raises `Overloaded` instead); an index waiter is released only once
`applied_index` reaches its index.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Generic, TypeVar

from rsm import limits
from rsm.errors import Overloaded

T = TypeVar("T")


class LinearizableReads(Generic[T]):
    """Reads waiting for an entry sent after their arrival to be acknowledged and applied."""

    __slots__ = ("_unattached", "_attached", "_count", "_waiters_max", "_last_sent")

    def __init__(self, waiters_max: int = limits.linearizable_read_waiters_max) -> None:
        assert waiters_max >= 1
        self._unattached: list[T] = []
        self._attached: deque[tuple[int, list[T]]] = deque()
        self._count = 0
        self._waiters_max = waiters_max
        self._last_sent = -1

    def __len__(self) -> int:
        return self._count

    @property
    def needs_barrier(self) -> bool:
        """Some read waits for an entry to be sent: send a barrier if no write batch goes."""
        return bool(self._unattached)

    def add(self, read: T) -> None:
        """A read arrived; `Overloaded` when the bound is reached."""
        if self._count >= self._waiters_max:
            raise Overloaded(f"{self._count} linearizable reads are waiting")
        self._unattached.append(read)
        self._count += 1

    def sent(self, sequence: int) -> None:
        """Entry number `sequence` (batch or barrier) was just cut: it carries the waiting reads."""
        assert sequence > self._last_sent, "entries are sent in sequence order"
        self._last_sent = sequence
        if self._unattached:
            self._attached.append((sequence, self._unattached))
            self._unattached = []

    def applied(self, sequence: int) -> list[T]:
        """Entry `sequence` was acknowledged and applied: the reads now answerable, oldest first."""
        assert sequence <= self._last_sent
        released: list[T] = []
        attached = self._attached
        while attached and attached[0][0] <= sequence:
            released.extend(attached.popleft()[1])
        self._count -= len(released)
        assert self._count >= 0
        return released

    def abandon(self) -> list[T]:
        """On step-down: every waiting read (answer NotLeader); none is left afterwards."""
        reads = [read for _, group in self._attached for read in group]
        reads.extend(self._unattached)
        self._attached.clear()
        self._unattached = []
        self._count = 0
        return reads


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
