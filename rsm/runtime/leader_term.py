"""One leader term: accepted commands -> batches in the ledger -> applied -> answered.

A `LeaderTerm` starts once a takeover has put its ledger in the log (as the
OPEN segment of a new epoch) and lasts until the leader steps down or hands
over.  Everything a term does is driven from two places, with no task per
command or per batch:

* `submit_call` / `submit_read` (synchronous, from the server's connection
  readers or from in-process calls) queue work in the pure cores: the
  `Batcher` (group commit) and `LinearizableReads` (read rounds); `pump`
  then cuts every batch the batcher allows and appends it with the ledger's
  pipelined `append_nowait`, so several batches are in flight at once.  While
  the batcher holds the next batch for the clients just answered
  (`batch_linger_ms`), the confirmation loop's idle wait ends in time to cut
  it.
* One confirmation loop waits for the oldest batch in flight to be confirmed
  (Qa bookies and every earlier entry), then takes every batch the ledger's
  LAC now covers, in order: applies it through the `Applier`, answers its
  commands, and pumps again.  Each batch is applied as followers will read
  it: as the batcher built it when every item came with its decoded form
  (`prepare_command_item`: a command of byte-string arguments decodes to
  exactly its values), else as decoded from the bytes that were sent, as
  soon as the batch is written to the bookies, while the leader would
  otherwise wait for them; the state machine's deferred bookkeeping
  (`StateMachine.idle`) is done then too.  Answers to one
  connection are queued together and leave in one send.
* One read loop runs confirmation rounds while linearizable reads wait: each
  round asks the ledger's bookies whether it is fenced
  (`WriteHandle.confirm_writer`, no entry appended, no fsync) and answers
  every read that arrived before it started, from the state as applied
  then, at the leader's clock (rsm/core/reads.py).  A round on a handle that
  a rollover replaced meanwhile proves nothing about the log and is redone;
  one that fails (too few bookies answer) is retried, and once rounds have
  failed in a row for `limits.read_rounds_failing_ms_max` the waiting reads
  are answered Unavailable (stalled bookies would otherwise hold them for as
  long as the stall lasts when nothing is written, since only a write's
  failure ends the term).
  A round that confirms also gives the term a read lease (`ReadLease`):
  until `read_lease_ms` after the round started, by the replica's lease
  clock, `read_now` and `submit_read` answer at once from the applied state;
  once the lease is half used, a read wakes the loop to renew it ahead of
  time.

Metrics: the term observes each batch's commands, bytes and commit latency,
and counts the retries it answers from the session table, in the replica's
`ReplicaStats` (rsm/runtime/stats.py), once per batch.

The first batch of a term is the leader-start marker; a term serves nothing
before it is applied (`wait_started`).

Rollover (segment full by entries, bytes or age, under-replicated while a
full-size ledger can be had, or marked by autorecovery for bookies that are
back: rsm/runtime/segment_ledger.py; a mark loop reads that mark every
`limits.segment_mark_check_interval_ms`): pre-create the
next ledger while appends go on, pause cutting batches (commands keep
queueing), wait for the batches in flight, close the ledger, one CAS that
closes the segment and appends the next one with the same epoch, resume.  The pause is timed
(`rollover_pause_ms`).

Truncation (`truncate`, called by the replica's truncation loop): one
multi-operation from the term's log version replaces the log by a truncated
copy (leading CLOSED segments removed) together with the snapshots znode that
lists their ledgers as garbage.  It never runs during a rollover or a
handover and they never start during it, because all three replace the log
from the version this term last wrote.

The leader also carries state hashes into the log: each batch it cuts takes
the newest hash it recorded that the log does not carry yet
(rsm/core/state_hashes.py).

Step-down (`step_down`): EFENCED or any other refusal of the ledger, a lost
CAS, or a reason from outside (session trouble, election lost).  A ledger
that fails while the term is idle (its last add's slow bookie timed out, no
replacement exists and too few bookies are left for Qa; with enough left, the
ledger defers the change and the term goes on) is noticed at once through
`WriteHandle.on_failure`,
not at the next command: until a successor recovers that ledger, followers
cannot see the term's last confirmed batches.  The term
stops accepting at once; commands never sent are answered NotLeader (they
were not logged), those in flight OutcomeUnknown (they may be in the log;
retrying with the same session seq is safe), waiting linearizable reads
NotLeader, and the read lease is revoked.  A read round that finds the
ledger fenced steps down too.
Everything already applied stays applied: it was confirmed, so it is in the
log whatever a successor's recovery decides (G6).

Invariants: batches are appended in the order the batcher cut them and
applied in that order, each once, only after confirmation (I2); nothing is
appended after `step_down`, `end` or during a rollover pause; at most
`outstanding_batches_max` batches are in flight; at most one of rollover,
truncation and handover changes the log at a time.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.errors import BookieError, LedgerFenced
from bookie.logs import emit
from bookie.meta.api import ANY_VERSION, Check, SetData
from bookie.meta.api import Op as MetadataOp
from bookie.meta.underreplication import UnderReplication
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core import log_state
from rsm.core.batching import Batcher, OutgoingBatch
from rsm.core.commands import prepare_command_item
from rsm.core.log_format import Batch, LeaderStart, encode_leader_start, encode_log
from rsm.core.log_state import Log, Segment
from rsm.core.logged_time import LoggedTime
from rsm.core.protocol import CallRequest, Op
from rsm.core.reads import LEASE_HELD_RENEW, LEASE_NOT_HELD, LinearizableReads, ReadLease
from rsm.core.sessions import Outcome
from rsm.errors import NotLeader, OutcomeUnknown, StatusError, Unavailable
from rsm.runtime.applier import Answerer, Applier, Read
from rsm.runtime.log import LogStore, decode_entry, discard_ledger
from rsm.runtime.segment_ledger import (
    create_segment_ledger,
    fully_replicated,
    is_degraded,
    mark_settled_by_rollover,
    replication_status,
    restorable,
)
from rsm.runtime.stats import ReplicaStats
from rsm.runtime.transient import is_transient

logger = logging.getLogger(__name__)

Ticket = tuple[Answerer, int] | None
"""Who waits for a command's answer and under which request id; None for the marker."""


@dataclass(slots=True)
class _Appended:
    """A batch appended to the ledger and not yet applied."""

    sent: OutgoingBatch[Ticket]
    entry_id: int
    decoded: Batch | None = None
    """The batch `sent.payload` holds: the batcher's (`sent.batch`), or decoded by `_use_wait`."""
    queued_s: float = 0.0
    """When its oldest command arrived, by the loop's clock (commit latency)."""


class LeaderTerm:
    """The pipeline of one leader term (see the module docstring)."""

    def __init__(
        self,
        *,
        applier: Applier,
        ledgers: LedgerClient,
        log_store: LogStore,
        handle: WriteHandle,
        log: Log,
        log_version: int,
        replica_id: str,
        config: ReplicaConfig,
        rng: random.Random,
        wall_clock_ms: Callable[[], int],
        lease_clock_s: Callable[[], float],
        stats: ReplicaStats,
    ) -> None:
        segment = log.open_segment
        assert segment is not None
        assert segment.ledger_id == handle.ledger_id
        assert segment.first_index == applier.applied_index + 1
        self._applier = applier
        self._machine_class = type(applier.machine)
        self._ledgers = ledgers
        self._log_store = log_store
        self._handle = handle
        self._handle_failure: BookieError | None = None
        """Why the current handle failed, once it did (see `_watch_handle`)."""
        self._log = log
        self._log_version = log_version
        self._segment: Segment = segment
        self._replica_id = replica_id
        self._config = config
        self._rng = rng
        self._wall_clock_ms = wall_clock_ms
        self._logged_time = LoggedTime()
        self.epoch = segment.epoch
        self._batcher: Batcher[Ticket] = Batcher(
            epoch=self.epoch,
            next_index=segment.first_index,
            timestamp_ms=applier.position.time_ms,
            pipeline_batches_max=config.pipeline_batches_max,
            batch_commands_max=config.batch_commands_max,
            batch_bytes_max=config.batch_bytes_max,
            linger_ms=config.batch_linger_ms,
        )
        self._reads: LinearizableReads[Read] = LinearizableReads()
        self._lease = ReadLease(config.read_lease_ms)
        self._lease_clock_s = lease_clock_s
        self._loop_time_s = asyncio.get_running_loop().time
        """The clock of timers (virtual under simulation); read directly, since anyio's
        `current_time` costs a library lookup per call."""
        self._renew_lease = False
        """A read found the lease half used: the read loop starts a round without waiting reads."""
        self._in_flight: deque[_Appended] = deque()
        """Batches appended and not yet applied, in append order."""
        self._stats = stats
        self._oldest_queued_s: float | None = None
        """When the oldest command not yet in a batch arrived (None: none waits)."""
        self._call_soon = asyncio.get_running_loop().call_soon
        self.accepting = False
        """Set by `serve` once the term serves (after the marker and the leader znode)."""
        self._started = False
        self._paused = False
        self._rolling = False
        self._truncating = False
        self._rollover_retry_s = 0.0
        self._settle_mark_of: int | None = None
        """The ledger whose autorecovery mark a rollover would settle (`_mark_loop`)."""
        self._ended: str | None = None
        self.stepped_down = False
        """The term ended abnormally (not by a drained, closed handover)."""
        self.stand_aside = False
        self._progress: anyio.Event | None = None
        self._wakeup: anyio.Event | None = None
        self._reads_wakeup: anyio.Event | None = None
        self._segment_entries = 0
        self._segment_bytes = 0
        self._segment_started_s = self._loop_time_s()
        self._scope = anyio.CancelScope()
        self._task_group: anyio.abc.TaskGroup | None = None
        self.rollovers = 0
        self.read_rounds = 0
        """Confirmation rounds that answered linearizable reads."""
        self.rollover_pause_ms: int | None = None
        """How long the last rollover paused appends."""

    # --- state --------------------------------------------------------------------------------

    @property
    def handle(self) -> WriteHandle:
        return self._handle

    @property
    def log(self) -> Log:
        """The log as this term last wrote it."""
        return self._log

    @property
    def log_version(self) -> int:
        return self._log_version

    @property
    def segment(self) -> Segment:
        return self._segment

    @property
    def ended(self) -> str | None:
        """Why the term ended, or None while it lasts."""
        return self._ended

    @property
    def next_index(self) -> int:
        """The index the next command will take."""
        return self._batcher.next_index

    def status(self) -> dict[str, Any]:
        return {
            "ledger_id": self._segment.ledger_id,
            "segment_first_index": self._segment.first_index,
            "ensemble_change_deferred": self._handle.change_deferred,
            "replication": replication_status(self._handle, self._config),
            "queued_commands": self._batcher.pending_count,
            "batches_in_flight": len(self._in_flight),
            "waiting_linearizable_reads": len(self._reads),
            "read_rounds": self.read_rounds,
            "read_lease_ms": self._config.read_lease_ms,
            "read_lease_held": self._lease.holds(self._lease_clock_s()),
            "rollovers": self.rollovers,
            "last_rollover_pause_ms": self.rollover_pause_ms,
        }

    # --- lifetime -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Confirm, apply and answer until the term ends (`step_down` or `end`)."""
        with self._scope:
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                self._batcher.submit(
                    encode_leader_start(self._replica_id), None, LeaderStart(self._replica_id)
                )
                self._watch_handle(self._handle)
                self.pump()
                task_group.start_soon(self._confirm_loop)
                task_group.start_soon(self._read_loop)
                task_group.start_soon(self._mark_loop)
        self._task_group = None

    def serve(self) -> None:
        """Start accepting commands and reads (once the leader znode names this term)."""
        if self._ended is None:
            self.accepting = True

    async def wait_started(self) -> bool:
        """Wait until the leader-start marker is applied; False if the term ended first."""
        await self._wait(lambda: self._started)
        return self._ended is None

    def step_down(self, reason: str, *, stand_aside: bool = True) -> None:
        """End the term now; answer everything pending (see the module docstring).

        `stand_aside`: the cause is this leader's own trouble (its ledger, its
        bookies), so it should let another candidate lead; False when it was
        replaced or lost its ZooKeeper session, where standing aside is moot.
        """
        if self._ended is not None:
            return
        self._ended = reason
        self.stepped_down = True
        self.stand_aside = stand_aside
        self.accepting = False
        self._lease.revoke()
        unsent, in_flight = self._batcher.abandon()
        not_logged = Outcome.failure(NotLeader(f"the leader stepped down ({reason})"))
        unknown = Outcome.failure(
            OutcomeUnknown(f"the leader stepped down ({reason}); retry with the same seq")
        )
        for ticket in unsent:
            if ticket is not None:
                ticket[0].answer(Op.CALL, ticket[1], not_logged, 0)
        for ticket in in_flight:
            if ticket is not None:
                ticket[0].answer(Op.CALL, ticket[1], unknown, 0)
        for read in self._reads.abandon():
            read.answerer.answer(Op.QUERY, read.request_id, not_logged, 0)
        self._in_flight.clear()
        emit(logger, logging.WARNING, "rsm.step_down", epoch=self.epoch, reason=reason)
        self._finish()

    def end(self, reason: str) -> None:
        """End a term whose work is done (`drain`ed and its ledger closed)."""
        assert not self._in_flight
        assert self._batcher.pending_count == 0
        if self._ended is None:
            self._ended = reason
            self.accepting = False
            self._lease.revoke()
            self._finish()

    def _finish(self) -> None:
        self._scope.cancel()
        self._notify_progress()

    async def drain(self) -> None:
        """Stop accepting; return once every accepted command and read is applied and answered.

        Raises `NotLeader` when the term ends meanwhile.
        """
        self.accepting = False
        self.pump()
        await self._wait(
            lambda: (
                not self._paused
                and not self._truncating
                and not self._in_flight
                and not self._batcher.pending_count
                and not len(self._reads)
            )
        )
        if self._ended is not None:
            raise NotLeader(f"the leader stepped down while draining ({self._ended})")

    async def close_ledger(self) -> None:
        """Close the term's ledger at its last entry (after `drain`): nobody needs to recover it."""
        await self._handle.close()

    # --- intake -------------------------------------------------------------------------------

    def submit_call(self, request: CallRequest, answerer: Answerer) -> None:
        """Queue a command (call `pump` after a run of submissions); errors are answered."""
        assert self.accepting
        applier = self._applier
        request_id = request.request_id
        client_id = request.client_id
        if client_id is not None:
            assert request.seq is not None
            recorded = applier.sessions.recorded(client_id, request.seq)
            if recorded is not None:
                # A retry of a command already applied: its recorded answer, with
                # an index at which it is certainly applied.
                answerer.answer(Op.CALL, request_id, recorded, applier.applied_index)
                self._stats.dedup_hits += 1
                return
        try:
            item, decoded = prepare_command_item(
                self._machine_class,
                request.name,
                request.args,
                request.kwargs,
                client_id=client_id,
                seq=request.seq,
                ack_seq=request.ack_seq,
            )
            self._batcher.submit(item, (answerer, request_id), decoded)
            if self._oldest_queued_s is None:
                self._oldest_queued_s = self._loop_time_s()
        except StatusError as error:
            answerer.answer(Op.CALL, request_id, Outcome.failure(error), 0)

    def read_now(self, name: str, args: list[Any], kwargs: dict[str, Any] | None) -> Outcome | None:
        """A linearizable read's outcome at once, under the lease; None when it needs a round."""
        time_ms = self.lease_time_ms()
        if time_ms is None:
            return None
        return self._applier.query(name, args, kwargs, time_ms=time_ms)

    def lease_time_ms(self) -> int | None:
        """The leader's clock for a read answered now under the lease (its renewal asked
        for when due); None when the lease is not held and a read needs a round."""
        now_s = self._lease_clock_s()
        lease = self._lease.check(now_s)
        if lease == LEASE_NOT_HELD:
            return None
        if lease == LEASE_HELD_RENEW and not self._renew_lease:
            self._renew_lease = True
            self._wake_reads()
        return self._batcher.advance_time(self._logged_time.now_ms(self._wall_clock_ms(), now_s))

    def _logged_now_ms(self) -> int:
        """The time to stamp on a batch or give a read now (rsm/core/logged_time.py)."""
        return self._logged_time.now_ms(self._wall_clock_ms(), self._lease_clock_s())

    def submit_read(self, read: Read) -> None:
        """Answer a linearizable read now under the lease, or queue it for the next round."""
        outcome = self.read_now(read.name, read.args, read.kwargs)
        if outcome is not None:
            applied_index = self._applier.applied_index
            read.answerer.answer(Op.QUERY, read.request_id, outcome, applied_index)
            return
        try:
            self._reads.add(read)
        except StatusError as error:
            read.answerer.answer(Op.QUERY, read.request_id, Outcome.failure(error), 0)
            return
        self._wake_reads()

    def pump(self) -> None:
        """Append every batch the batcher lets go now (none while paused or ended)."""
        batcher = self._batcher
        if self._paused or self._ended is not None or not batcher.pending_count:
            return
        handle = self._handle
        in_flight = self._in_flight
        rng = self._rng
        hashes = self._applier.hashes
        stats = self._stats
        lingering = batcher.linger_until_ms is not None
        linger_clock_ms = self._linger_clock_ms()
        appended = False
        # `due` first: most calls (one per arriving command while a batch is in
        # flight or held) cut nothing, and the inputs of a cut cost more.
        while batcher.due(linger_clock_ms):
            sent = batcher.cut(
                self._logged_now_ms(),
                rng,
                state_hash=hashes.unlogged(),
                linger_clock_ms=linger_clock_ms,
            )
            assert sent is not None
            if sent.state_hash is not None:
                hashes.logged(sent.state_hash.index)
            try:
                entry_id = handle.append_nowait(sent.payload)
            except BookieError as error:
                self.step_down(f"the ledger refused an entry: {error!r}")
                return
            assert sent.batch is None or sent.batch.epoch == self._segment.epoch
            now_s = self._loop_time_s()
            queued_s = self._oldest_queued_s
            self._oldest_queued_s = now_s if batcher.pending_count else None
            in_flight.append(
                _Appended(sent, entry_id, sent.batch, now_s if queued_s is None else queued_s)
            )
            stats.batch_commands.observe(len(sent.tickets))
            stats.batch_bytes.observe(len(sent.payload))
            self._segment_entries += 1
            self._segment_bytes += len(sent.payload)
            appended = True
        if appended:
            # After the callbacks that write the entries to the bookies.
            self._call_soon(self._use_wait)
        if appended or (not lingering and batcher.linger_until_ms is not None):
            # Batches to confirm, or a wait for answered clients to time.
            wakeup = self._wakeup
            if wakeup is not None:
                self._wakeup = None
                wakeup.set()
            self._maybe_roll_over()

    # --- confirmation -------------------------------------------------------------------------

    def _watch_handle(self, handle: WriteHandle) -> None:
        handle.on_failure(functools.partial(self._on_handle_failure, handle))

    def _on_handle_failure(self, handle: WriteHandle, error: BookieError) -> None:
        """From inside the handle: note the failure and wake the confirmation loop."""
        if handle is self._handle:
            self._handle_failure = error
            wakeup = self._wakeup
            if wakeup is not None:
                self._wakeup = None
                wakeup.set()

    async def _confirm_loop(self) -> None:
        in_flight = self._in_flight
        while True:
            if not in_flight:
                if self._handle_failure is not None:
                    self.step_down(f"the ledger failed: {self._handle_failure!r}")
                    return
                self._notify_progress()
                wakeup = self._wakeup = anyio.Event()
                with anyio.move_on_after(self._idle_timer_s()):
                    await wakeup.wait()
                self._wakeup = None
                if self._handle_failure is None:
                    self.pump()  # a batch held for answered clients may be due
                self._maybe_roll_over()
                continue
            handle = self._handle
            try:
                await handle.wait_confirmed(in_flight[0].entry_id)
            except BookieError as error:
                self.step_down(f"the ledger refused an entry: {error!r}")
                return
            self._complete(handle.last_add_confirmed)
            self.pump()
            self._notify_progress()

    # --- linearizable reads -------------------------------------------------------------------

    async def _read_loop(self) -> None:
        """Confirmation rounds, one at a time, while reads wait (see the module docstring)."""
        reads = self._reads
        retry_delay_s = self._config.retry_delay_ms / 1000
        # When the first of the rounds failing in a row started, while reads wait through
        # them: a read waits at most `limits.read_rounds_failing_ms_max` plus one round.
        failing_since_s: float | None = None
        for sequence in itertools.count():
            while not (reads.needs_round or self._renew_lease) or self._paused or not self._started:
                failing_since_s = None
                wakeup = self._reads_wakeup = anyio.Event()
                await wakeup.wait()
            handle = self._handle
            reads.start_round(sequence)
            self._renew_lease = False
            started_s = self._lease_clock_s()
            round_started_s = self._loop_time_s()
            try:
                await handle.confirm_writer()
            except LedgerFenced as error:
                self.step_down(f"a read round found the ledger fenced: {error!r}")
                return
            except BookieError as error:
                # Too few answers, an ensemble change, a closing handle: the
                # reads wait for the next round, unless rounds have failed for
                # too long (the bookies may not answer for as long as a stall
                # lasts, and with nothing to write the term would not end).
                reads.round_failed(sequence)
                emit(logger, logging.WARNING, "rsm.read_round_failed", error=repr(error))
                if failing_since_s is None:
                    failing_since_s = round_started_s
                failing_ms = round((self._loop_time_s() - failing_since_s) * 1000)
                if failing_ms >= limits.read_rounds_failing_ms_max:
                    self._refuse_reads(f"no read round confirmed the ledger for {failing_ms} ms")
                    failing_since_s = None  # reads that come now wait their own time
                await anyio.sleep(retry_delay_s)
                continue
            failing_since_s = None
            if handle is not self._handle or self._paused:
                reads.round_failed(sequence)
                continue
            self.read_rounds += 1
            self._lease.confirmed(started_s)
            time_ms = self._batcher.advance_time(self._logged_now_ms())
            applier = self._applier
            for read in reads.confirmed(sequence):
                applier.answer_read(read, time_ms=time_ms)
            self._notify_progress()

    def _refuse_reads(self, reason: str) -> None:
        """Answer every waiting linearizable read `Unavailable` (they change nothing: their
        clients send them again)."""
        refused = self._reads.abandon()
        if not refused:
            return  # the round was a lease renewal's
        unavailable = Outcome.failure(Unavailable(f"{reason}; retry"))
        for read in refused:
            read.answerer.answer(Op.QUERY, read.request_id, unavailable, 0)
        emit(logger, logging.WARNING, "rsm.reads_refused", reads=len(refused), reason=reason)

    def _wake_reads(self) -> None:
        wakeup = self._reads_wakeup
        if wakeup is not None:
            self._reads_wakeup = None
            wakeup.set()

    def _use_wait(self) -> None:
        """While the bookies store what was just sent, work that would otherwise be on the
        path from a confirmation to the clients' answers: decode the batches in flight that
        the batcher could not give decoded, and let the state machine do its deferred
        bookkeeping (`StateMachine.idle`)."""
        segment = self._segment
        for appended in self._in_flight:
            if appended.decoded is None:
                appended.decoded = decode_entry(segment, appended.entry_id, appended.sent.payload)
        try:
            self._applier.machine.idle()
        except Exception as error:  # the application's code: report it, serve on
            emit(logger, logging.ERROR, "rsm.idle_failed", error=repr(error))

    def _complete(self, last_add_confirmed: int) -> None:
        """Apply and answer every batch in flight up to `last_add_confirmed`, in order."""
        in_flight = self._in_flight
        applier = self._applier
        segment = self._segment
        ledger_id = segment.ledger_id
        batcher = self._batcher
        commit_seconds = self._stats.commit_seconds
        while in_flight and in_flight[0].entry_id <= last_add_confirmed:
            appended = in_flight.popleft()
            sent = appended.sent
            entry_id = appended.entry_id
            batcher.acknowledged(sent.sequence)
            batch = appended.decoded
            if batch is None:
                batch = decode_entry(segment, entry_id, sent.payload)
            outcomes = applier.apply(batch, ledger_id, entry_id)
            applier.log_bytes += len(sent.payload)
            assert outcomes is not None, "a leader applies each of its entries once"
            index = sent.first_index
            for ticket, outcome in zip(sent.tickets, outcomes, strict=True):
                if ticket is not None:
                    ticket[0].answer(Op.CALL, ticket[1], outcome, index)
                index += 1
            commit_seconds.observe(self._loop_time_s() - appended.queued_s)
            if not self._started:
                self._started = True
                self._wake_reads()

    def _notify_progress(self) -> None:
        event = self._progress
        if event is not None:
            self._progress = None
            event.set()

    async def _wait(self, condition: Callable[[], bool]) -> None:
        while not condition() and self._ended is None:
            event = self._progress
            if event is None:
                event = self._progress = anyio.Event()
            await event.wait()

    # --- truncation ---------------------------------------------------------------------------

    async def truncate(self, truncated: Log, also: Sequence[MetadataOp]) -> bool:
        """Replace the log by `truncated` (this term's log without leading segments) in one
        multi-operation with `also` (operations with their own expected versions).

        True when it took effect.  False when it could not be tried now (a
        rollover or handover is under way, the term ended, or the log changed
        since `truncated` was planned) or when a node of `also` had moved: the
        caller plans again later.  When the log itself had moved, someone else
        wrote it: the term steps down (and False is returned).
        """
        current = self._log
        kept = len(truncated.segments)
        if (
            self._rolling
            or self._truncating
            or not self.accepting
            or self._ended is not None
            or not 0 < kept <= len(current.segments)
            or truncated.segments != current.segments[len(current.segments) - kept :]
            or truncated.epoch != current.epoch
        ):
            return False
        self._truncating = True
        try:
            version = self._log_version
            ops = [SetData(self._log_store.layout.log, encode_log(truncated), version), *also]
            try:
                done = await self._log_store.cas(
                    ops, lambda seen: seen.segments == truncated.segments
                )
            except BookieError as error:
                emit(logger, logging.WARNING, "rsm.truncation_unknown", error=repr(error))
                return False
            if done:
                self._log = truncated
                self._log_version = version + 1
                return True
            try:
                _log, seen_version = await self._log_store.read()
            except BookieError as error:
                emit(logger, logging.WARNING, "rsm.truncation_unknown", error=repr(error))
                return False
            if seen_version != version:
                self.step_down("the log moved under a truncation (another leader?)")
            return False
        finally:
            self._truncating = False
            self._notify_progress()

    # --- rollover -----------------------------------------------------------------------------

    def _linger_clock_ms(self) -> int:
        return int(self._loop_time_s() * 1000)

    def _idle_timer_s(self) -> float | None:
        """Seconds until an idle leader must cut a held batch or look at the segment's age."""
        age_s = self._age_timer_s()
        until_ms = self._batcher.linger_until_ms
        if until_ms is None:
            return age_s
        linger_s = max(0.0, (until_ms - self._linger_clock_ms()) / 1000)
        return linger_s if age_s is None else min(age_s, linger_s)

    def _age_timer_s(self) -> float | None:
        """Seconds until an idle leader must look at the segment's age again, or, while the
        segment is under-replicated, at the writable bookies (None: never)."""
        if self._rolling or not self._segment_entries:
            return None
        config = self._config
        due_s = self._segment_started_s + config.segment_age_ms_max / 1000
        if not fully_replicated(self._handle, config):
            due_s = min(due_s, self._loop_time_s() + limits.degraded_check_interval_ms / 1000)
        return max(0.0, max(due_s, self._rollover_retry_s) - self._loop_time_s())

    def _maybe_roll_over(self) -> None:
        """Start a rollover when one of its rules holds; only a mark to settle rolls over
        an empty segment (the others would then only repeat themselves)."""
        settles_mark = self._settle_mark_of == self._handle.ledger_id
        if (
            self._rolling
            or self._truncating
            or self._ended is not None
            or not (self._segment_entries or settles_mark)
        ):
            return
        config = self._config
        now_s = self._loop_time_s()
        if now_s < self._rollover_retry_s:
            return
        age_ms = (now_s - self._segment_started_s) * 1000
        if (
            self._segment_entries >= config.segment_entries_max
            or self._segment_bytes >= config.segment_bytes_max
            or age_ms >= config.segment_age_ms_max
            or restorable(self._handle, config, len(self._ledgers.writable_bookies))
            or settles_mark
        ):
            task_group = self._task_group
            assert task_group is not None
            self._rolling = True
            task_group.start_soon(self._roll_over)

    async def _mark_loop(self) -> None:
        """Read autorecovery's mark of the open segment's ledger every
        `limits.segment_mark_check_interval_ms` and, once a rollover would settle it
        (`mark_settled_by_rollover`), ask for one at each look until it is done (a
        rollover that failed waits for its retry time); a metadata error waits for the
        next look."""
        marks = UnderReplication(self._log_store.store, self._ledgers.root)
        while True:
            await anyio.sleep(limits.segment_mark_check_interval_ms / 1000)
            ledger_id = self._handle.ledger_id
            if self._settle_mark_of != ledger_id and await self._mark_settled(marks, ledger_id):
                self._settle_mark_of = ledger_id
            if self._settle_mark_of == self._handle.ledger_id:
                self._maybe_roll_over()

    async def _mark_settled(self, marks: UnderReplication, ledger_id: int) -> bool:
        """Whether the open segment's ledger `ledger_id` is marked so that a rollover would
        settle the mark (logged as `rsm.marked_segment`)."""
        if self._rolling:
            return False
        try:
            mark = await marks.read_mark(ledger_id)
        except BookieError as error:
            emit(logger, logging.WARNING, "rsm.mark_read_failed", error=repr(error))
            return False
        writable = self._ledgers.writable_bookies
        if (
            mark is None
            or ledger_id != self._handle.ledger_id
            or not mark_settled_by_rollover(mark.missing, self._handle, writable)
        ):
            return False
        emit(
            logger,
            logging.INFO,
            "rsm.marked_segment",
            epoch=self.epoch,
            ledger_id=ledger_id,
            missing=sorted(mark.missing),
        )
        return True

    async def _roll_over(self) -> None:
        config = self._config
        try:
            layout = self._log_store.layout
            successor = await create_segment_ledger(
                self._ledgers,
                config,
                app=layout.app,
                epoch=self.epoch,
                writer=layout.replica(self._replica_id),
            )
        except Exception as error:
            if not is_transient(error):
                raise
            emit(logger, logging.WARNING, "rsm.rollover_delayed", error=repr(error))
            self._rolling = False
            self._rollover_retry_s = self._loop_time_s() + config.retry_delay_ms / 1000
            return
        paused_s = self._loop_time_s()
        self._paused = True
        await self._wait(lambda: not self._in_flight)
        if self._ended is not None:
            await discard_ledger(self._ledgers, successor.ledger_id)
            return
        current = self._segment
        last_index = self._applier.applied_index
        try:
            await self._handle.close()
        except BookieError as error:
            await discard_ledger(self._ledgers, successor.ledger_id)
            self.step_down(f"closing the ledger for a rollover failed: {error!r}")
            return
        log = log_state.rollover(
            self._log,
            epoch=self.epoch,
            ledger_id=current.ledger_id,
            last_index=last_index,
            new_ledger_id=successor.ledger_id,
        )
        ops: list[MetadataOp] = [
            SetData(self._log_store.layout.log, encode_log(log), self._log_version),
            # An orphan sweep (rsm/runtime/orphans.py) may have deleted a ledger this late.
            Check(self._ledgers.metadata_path(successor.ledger_id), ANY_VERSION),
        ]
        try:
            done = await self._log_store.cas(ops, lambda seen: seen.segments == log.segments)
        except BookieError as error:
            self.step_down(f"the rollover's CAS has an unknown outcome: {error!r}")
            return
        if not done:
            await discard_ledger(self._ledgers, successor.ledger_id)
            self.step_down("the log moved under a rollover (another leader?)")
            return
        segment = log.open_segment
        assert segment is not None
        restored = not fully_replicated(self._handle, config) and not is_degraded(
            successor.metadata, config
        )
        self._handle = successor
        self._watch_handle(successor)
        self._log = log
        self._log_version += 1
        self._segment = segment
        self._segment_entries = 0
        self._segment_bytes = 0
        self._segment_started_s = self._loop_time_s()
        self._rolling = False
        self._paused = False
        self._wake_reads()
        self.rollovers += 1
        self.rollover_pause_ms = round((self._loop_time_s() - paused_s) * 1000)
        emit(
            logger,
            logging.INFO,
            "rsm.rollover",
            epoch=self.epoch,
            closed_ledger=current.ledger_id,
            last_index=last_index,
            ledger_id=segment.ledger_id,
            pause_ms=self.rollover_pause_ms,
        )
        if restored:
            emit(
                logger,
                logging.INFO,
                "rsm.replication_restored",
                epoch=self.epoch,
                under_replicated_ledger=current.ledger_id,
                ledger_id=segment.ledger_id,
                ensemble_size=successor.metadata.ensemble_size,
                write_quorum=successor.metadata.write_quorum,
            )
        self.pump()
        self._notify_progress()
