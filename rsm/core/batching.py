"""The leader's adaptive group commit: which commands go into which log entry, and when.

Pure.  The leader's shell `submit`s each command (already encoded as a log
item, with a ticket it uses to answer the caller), calls `cut` whenever
something changed, appends each batch `cut` returns to its ledger, and
reports each completed append with `acknowledged`, in append order.  An
item may come with its decoded form (when its decoding is certain, see
`entry_format.decoded_command`); a batch all of whose items did carries the
`Batch` that decoding its payload gives (`OutgoingBatch.batch`), so the
leader applies it without decoding what it just encoded.

When a batch is cut, and why:

* Whenever fewer than `pipeline_batches_max` batches are in flight and
  something is queued, a batch is cut at once with everything queued (up to
  the batch bounds).  So a lone command is sent immediately: no timer, no
  added latency at low load.
* When the pipeline is full, commands queue and the next batch grows; the
  next completion makes room and the whole queue goes out in one entry.
  Batches therefore grow with the load by themselves, which is what keeps
  the number of bookie round trips (and journal syncs) per command low.
* Except while the batcher *waits for the answered clients* (with
  `linger_ms` > 0).  When a completion frees the pipeline, the clients whose
  commands it answered usually send their next command right after their
  answer (a Redis client, a synchronous RPC: a closed loop).  Cut at once,
  the next batch would hold only the commands that queued meanwhile, and
  the answered clients' commands would make the batch after it: with a
  pipeline of one, the clients split into two groups taking turns, and every
  log entry costs its round of bookie writes, syncs and follower reads for
  half of them.  So the next cut waits until as many commands are queued as
  were queued at the completion plus the ones it answered, or for
  `linger_ms` after the first cut it refused, whichever comes first.  A lone
  client's next command is that count by itself and goes at once; clients
  that do not come back cost at most `linger_ms`.
* A batch that is already full (`batch_commands_max` items or
  `batch_bytes_max` bytes queued) is cut even with the pipeline full, up to
  the hard bound `outstanding_batches_max`: waiting could not make it bigger.
* Nothing queued, nothing cut: linearizable reads need no entry (they are
  confirmed by a round trip to the bookies, rsm/core/reads.py).
* `advance_time` gives a read the time it may assume (the leader's clock, but
  never earlier than a logged timestamp) and makes every later batch's
  timestamp at least that, so a key a read saw expire stays expired.

Invariants: indexes are dense and increasing across batches (a batch's first
index is the previous batch's next index); every
submitted command is in exactly one batch, in submission order; at most
`outstanding_batches_max` batches are in flight; `timestamp_ms` never
decreases from batch to batch; the queue never exceeds its bounds (`submit`
raises `Overloaded` instead).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from rsm import limits
from rsm.core.log_format import Batch, Item, StateHash, encode_batch
from rsm.errors import BadRequest, Overloaded

T = TypeVar("T")

_SEED_BITS = 64


@dataclass(frozen=True, slots=True)
class OutgoingBatch(Generic[T]):
    """A log entry to append: command k of it has index `first_index + k`."""

    sequence: int
    """Number of the batch in this batcher (0, 1, ...)."""
    first_index: int
    timestamp_ms: int
    tickets: tuple[T, ...]
    payload: bytes
    """The encoded entry (entry_format layout)."""
    state_hash: StateHash | None = None
    """The state hash the entry carries, if any."""
    batch: Batch | None = None
    """The entry as `decode_batch` returns it, when every item was submitted with its
    decoded form; else None."""

    @property
    def next_index(self) -> int:
        return self.first_index + len(self.tickets)


class Batcher(Generic[T]):
    """Group commit for one leader term (a new term starts a new batcher)."""

    __slots__ = (
        "_epoch",
        "_next_index",
        "_timestamp_ms",
        "_next_sequence",
        "_queue",
        "_queued_bytes",
        "_in_flight",
        "_pipeline_batches_max",
        "_outstanding_batches_max",
        "_batch_commands_max",
        "_batch_bytes_max",
        "_pending_commands_max",
        "_pending_bytes_max",
        "_linger_ms",
        "_awaited_count",
        "_linger_until_ms",
    )

    def __init__(
        self,
        *,
        epoch: int,
        next_index: int,
        timestamp_ms: int = 0,
        pipeline_batches_max: int = limits.pipeline_batches_max_default,
        outstanding_batches_max: int = limits.outstanding_batches_max,
        batch_commands_max: int = limits.batch_commands_max,
        batch_bytes_max: int = limits.batch_bytes_max,
        pending_commands_max: int = limits.pending_commands_max,
        pending_bytes_max: int = limits.pending_command_bytes_max,
        linger_ms: int = 0,
    ) -> None:
        """`next_index`: the index the first command will take; `timestamp_ms`: last logged time;
        `linger_ms`: the longest wait for answered clients (0: none, see the module docstring)."""
        assert epoch >= 1
        assert next_index >= 1
        assert 1 <= pipeline_batches_max <= outstanding_batches_max
        assert 1 <= batch_commands_max <= pending_commands_max
        assert 1 <= batch_bytes_max <= pending_bytes_max
        assert linger_ms >= 0
        self._epoch = epoch
        self._next_index = next_index
        self._timestamp_ms = timestamp_ms
        self._next_sequence = 0
        self._queue: deque[tuple[bytes, T, Item | None]] = deque()
        self._queued_bytes = 0
        self._in_flight: deque[OutgoingBatch[T]] = deque()
        self._pipeline_batches_max = pipeline_batches_max
        self._outstanding_batches_max = outstanding_batches_max
        self._batch_commands_max = batch_commands_max
        self._batch_bytes_max = batch_bytes_max
        self._pending_commands_max = pending_commands_max
        self._pending_bytes_max = pending_bytes_max
        self._linger_ms = linger_ms
        self._awaited_count = 0
        """Commands the next cut waits for (0: none): see the module docstring."""
        self._linger_until_ms: int | None = None
        """Until when the cut waits for them, set by the first cut it refused."""

    @property
    def next_index(self) -> int:
        """The index the next command cut into a batch will take."""
        return self._next_index

    @property
    def pending_count(self) -> int:
        """Commands submitted and not yet cut into a batch."""
        return len(self._queue)

    @property
    def outstanding_count(self) -> int:
        """Batches cut and not yet acknowledged."""
        return len(self._in_flight)

    def submit(self, item: bytes, ticket: T, decoded: Item | None = None) -> None:
        """Queue one encoded command item, with what decoding it gives when the caller knows
        (`OutgoingBatch.batch`); `Overloaded` when the queue is at its bounds."""
        size_bytes = len(item)
        if size_bytes > self._batch_bytes_max:
            raise BadRequest(f"command of {size_bytes} bytes exceeds {self._batch_bytes_max}")
        if (
            len(self._queue) >= self._pending_commands_max
            or self._queued_bytes + size_bytes > self._pending_bytes_max
        ):
            raise Overloaded(
                f"{len(self._queue)} commands ({self._queued_bytes} bytes) wait for the log"
            )
        self._queue.append((item, ticket, decoded))
        self._queued_bytes += size_bytes

    @property
    def linger_until_ms(self) -> int | None:
        """While the cut waits for answered clients (`cut` refused one): until when, by the
        clock of `cut`'s `linger_clock_ms`; the shell calls `cut` again then."""
        return self._linger_until_ms

    def cut(
        self,
        now_ms: int,
        rng: random.Random,
        *,
        state_hash: StateHash | None = None,
        linger_clock_ms: int | None = None,
    ) -> OutgoingBatch[T] | None:
        """The next batch to append now, or None when nothing should be sent yet.

        Call again until it returns None: several full batches may be ready at once.
        `now_ms` (wall clock) stamps the batch; `linger_clock_ms` (a monotonic
        clock) times the wait for answered clients (required with `linger_ms` >
        0).  `state_hash` (the leader's hash at an index already applied) goes
        into the batch if one is cut; `OutgoingBatch.state_hash` says whether it
        did.
        """
        if not self.due(linger_clock_ms):
            return None
        queue = self._queue
        self._awaited_count = 0
        self._linger_until_ms = None
        items: list[bytes] = []
        tickets: list[T] = []
        decoded_items: list[Item] = []
        all_decoded = True
        size_bytes = 0
        commands_max = self._batch_commands_max
        bytes_max = self._batch_bytes_max
        while queue and len(items) < commands_max:
            item = queue[0][0]
            if size_bytes + len(item) > bytes_max:
                break
            _, ticket, decoded = queue.popleft()
            items.append(item)
            tickets.append(ticket)
            if decoded is None:
                all_decoded = False
            else:
                decoded_items.append(decoded)
            size_bytes += len(item)
        assert items, "submit keeps every item within a batch"
        self._queued_bytes -= size_bytes
        self._timestamp_ms = max(self._timestamp_ms, now_ms)
        first_index = self._next_index
        assert state_hash is None or state_hash.index < first_index
        seed = rng.getrandbits(_SEED_BITS)
        payload = encode_batch(
            epoch=self._epoch,
            first_index=first_index,
            timestamp_ms=self._timestamp_ms,
            seed=seed,
            items=items,
            state_hash=state_hash,
        )
        known = None
        if all_decoded:
            known = Batch(
                self._epoch,
                first_index,
                self._timestamp_ms,
                seed,
                tuple(decoded_items),
                state_hash,
            )
        batch = OutgoingBatch(
            self._next_sequence,
            first_index,
            self._timestamp_ms,
            tuple(tickets),
            payload,
            state_hash,
            known,
        )
        self._next_sequence += 1
        self._next_index = batch.next_index
        self._in_flight.append(batch)
        assert len(self._in_flight) <= self._outstanding_batches_max
        assert self._queued_bytes >= 0
        return batch

    def due(self, linger_clock_ms: int | None = None) -> bool:
        """Whether `cut` would cut a batch now (the shell asks before computing its inputs).

        The first refusal while waiting for answered clients starts the linger.
        """
        queue = self._queue
        if not queue:
            return False
        outstanding = len(self._in_flight)
        if outstanding >= self._outstanding_batches_max:
            return False
        fills_a_batch = self._queue_fills_a_batch()
        if outstanding >= self._pipeline_batches_max and not fills_a_batch:
            return False
        if len(queue) < self._awaited_count and not fills_a_batch:
            assert linger_clock_ms is not None, "a batcher that lingers needs its clock"
            until_ms = self._linger_until_ms
            if until_ms is None:
                until_ms = self._linger_until_ms = linger_clock_ms + self._linger_ms
            if linger_clock_ms < until_ms:
                return False
        return True

    def advance_time(self, now_ms: int) -> int:
        """The time a read answered now may assume: `now_ms`, but never earlier than a
        timestamp already given out; every later batch is stamped at least this."""
        self._timestamp_ms = max(self._timestamp_ms, now_ms)
        return self._timestamp_ms

    def _queue_fills_a_batch(self) -> bool:
        return (
            len(self._queue) >= self._batch_commands_max
            or self._queued_bytes >= self._batch_bytes_max
        )

    def acknowledged(self, sequence: int) -> OutgoingBatch[T]:
        """The batch whose append completed; appends complete in the order they were cut."""
        assert self._in_flight, "an acknowledgement with no batch in flight"
        batch = self._in_flight.popleft()
        assert batch.sequence == sequence, (batch.sequence, sequence)
        if self._linger_ms and len(self._in_flight) < self._pipeline_batches_max:
            # The pipeline has room: wait for the clients this batch answers.
            if not self._awaited_count:
                self._awaited_count = len(self._queue)
            self._awaited_count += len(batch.tickets)
        return batch

    def abandon(self) -> tuple[list[T], list[T]]:
        """On step-down: `(never sent, in flight)` tickets; the batcher is empty afterwards.

        Commands never sent were not logged (answer NotLeader); those in
        flight may or may not be in the log (answer OutcomeUnknown).
        """
        unsent = [ticket for _, ticket, _ in self._queue]
        in_flight = [ticket for batch in self._in_flight for ticket in batch.tickets]
        self._queue.clear()
        self._queued_bytes = 0
        self._in_flight.clear()
        self._awaited_count = 0
        self._linger_until_ms = None
        return unsent, in_flight
