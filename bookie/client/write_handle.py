"""`WriteHandle`: the async shell around `bookie.core.writer.Writer` for one ledger.

The core decides everything (which bookies get an entry, when an entry is
confirmed, when a bookie is replaced, when the ledger may close); this shell
carries out its effects and feeds back what happened:

* `SendAdd`: one ADD frame, encoded once, to every bookie named, with
  `add_timeout_ms`; each answer (or timeout, or connection loss) goes back to
  the core as `on_add_response` / `on_add_timeout`.
* `ChangeEnsemble`: replacements from placement, excluding every bookie that
  failed this handle before, then the metadata CAS loop with
  `writer_ensemble_change_transform`; the outcome goes back as
  `on_ensemble_changed` / `on_ensemble_change_failed`.
* `SendExplicitLac`: WRITE_LAC to the ensemble (best effort: answers are not
  needed); a timer task calls `tick` when the core says it is due (which is
  also how a deferred ensemble change, one that found no replacement, is
  asked for again).  A bookie that failed is never taken back; the handle
  notes the registry's join count when it failed, and `failed_bookie_returned`
  says when it has registered anew since (a new ledger may use it again).
* Probing a failed bookie: while a change is deferred, each retry (every
  `limits.ensemble_change_retry_interval_ms_default`) sends every failed
  bookie not known to be back a WRITE_LAC of the LAC, which a bookie answers
  only after its journal synced it, as an add.  A bookie that only stalled (a
  long GC, SIGSTOP, a disk frozen for less than its ZooKeeper session
  timeout) never registers anew, so without this the handle would take it
  for gone while it is writable again.  An EOK within `add_timeout_ms` makes
  `failed_bookie_returned` true as a new registration does; a read-only
  bookie (EREADONLY) or one whose disk is still too slow for the add timeout
  does not.  (Sending a failed bookie the LAC is nothing new: the explicit
  LAC goes to every bookie of the ensemble.)
* `CloseLedger`: the CAS loop with `writer_close_transform`, then `on_closed` /
  `on_close_failed`.  A ledger closed with a bookie in its last ensemble that
  the handle gave up on (a deferred change never carried out) lacks on that
  bookie every entry written since; nothing else would tell autorecovery
  before its presence check (hourly), since the bookie was never lost.  So
  the handle marks the ledger under-replicated, missing that bookie
  (`ledger.marked`), and autorecovery copies the entries back.
* `AddsConfirmed` / `AddsFailed` / `CloseFailed`: wake whoever waits.

A writer that fails while it has nothing to append (the last add's slow
bookie times out, no replacement exists and too few bookies are left for
Qa, say) would not find out until its next append, and meanwhile readers
cannot see its last confirmed entries: their LAC was never published, and
only the writer's close or a recovery publishes it.  `on_failure(listener)`
tells the owner at once.

Two ways to append.  `await append(payload)` returns the entry id once it is
confirmed (Qa acks and every earlier entry confirmed).  For throughput,
`append_nowait(payload)` returns the entry id at once and
`await wait_confirmed(entry_id)` waits for a whole run of entries in one go
(confirmations come in ranges): a leader keeps thousands of adds in flight
with no task, future or event per append.  `capacity` / `wait_for_capacity`
bound the window (`outstanding_adds_max`); `append_nowait` past it raises
`AppendWindowFull`.

Invariants:

* Effects are carried out in the order the core produced them; a callback
  arriving while effects are being carried out only queues more (the loop in
  `_process` picks them up), so the order holds across re-entry.
* `last_add_confirmed` only grows; a waiter for entry e returns only once it
  is >= e, and raises the handle's error once e can no longer be confirmed.
* EFENCED or EUA from any bookie, or metadata that is no longer OPEN, makes the
  handle dead: pending appends raise `LedgerFenced`, so do later calls.
* The explicit-LAC timer task lives in the client's task group and ends when
  the handle stops being writable or the client closes.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from types import TracebackType

import anyio

from bookie.client.context import ClientContext
from bookie.client.dispatch import send_adds
from bookie.clock import loop_clock_ms
from bookie.core.metadata import (
    LedgerMetadata,
    writer_close_transform,
    writer_ensemble_change_transform,
)
from bookie.core.placement import choose_replacements
from bookie.core.writer import (
    AddsConfirmed,
    AddsFailed,
    ChangeEnsemble,
    CloseFailed,
    CloseLedger,
    SendAdd,
    SendExplicitLac,
    Writer,
    WriterState,
)
from bookie.errors import (
    AppendWindowFull,
    BookieError,
    ClientClosed,
    InvalidEntryRange,
    LedgerClosed,
    LedgerFenced,
    NotEnoughBookies,
    Status,
    WriterNotConfirmed,
)
from bookie.logs import emit
from bookie.wire.messages import (
    AddResponse,
    LedgerStateRequest,
    LedgerStateResponse,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)
from bookie.wire.packet import Digest, master_key

logger = logging.getLogger(__name__)

_NOT_FENCED_STATUSES = (Status.EOK, Status.ENOLEDGER)
"""A bookie that holds nothing of the ledger has not fenced it: a fence creates it."""


class _Confirmation:
    """Answers gathered by one `confirm_writer` call."""

    __slots__ = ("fenced", "not_fenced_mask", "pending")

    def __init__(self, pending: int) -> None:
        self.pending = pending
        self.not_fenced_mask = 0
        self.fenced = False


def _ignore_answer(_outcome: Response | BookieError) -> None:
    """Explicit LACs are best effort: a lost one is made good by the next add or tick."""


class WriteHandle:
    """Appends to one ledger this client created; see the module docstring."""

    def __init__(self, context: ClientContext, metadata: LedgerMetadata, password: bytes) -> None:
        config = context.config
        self._context = context
        self._metadata = metadata
        self._ledger_id = metadata.ledger_id
        self._master_key = master_key(password)
        self._digest = Digest(metadata.digest_type, password)
        self._writer = Writer(
            metadata,
            self._digest,
            outstanding_adds_max=config.outstanding_adds_max,
            explicit_lac_interval_ms=config.explicit_lac_interval_ms,
            ensemble_changes_max=config.ensemble_changes_max,
        )
        self._excluded: set[str] = set()
        """Bookies that failed this handle: never chosen again as its replacements."""
        self._failed_at: dict[str, int] = {}
        """Each bookie that failed this handle -> the registry's join count when it first did."""
        self._answered: set[str] = set()
        """Failed bookies that stored a probe since they failed, in time: writable again."""
        self._probing: set[str] = set()
        """Failed bookies with a probe in flight."""
        self._error: BookieError | None = None
        """Why pending adds failed (the first reason); set once, never cleared."""
        self._client_closed: ClientClosed | None = None
        """Set when the client closes: from then on the handle does nothing at all."""
        self._waiters: list[tuple[int, int, anyio.Event]] = []
        """Heap of (entry id, tie-breaker, event) of `wait_confirmed` calls."""
        self._waiter_ids = itertools.count()
        self._capacity_wakeup: anyio.Event | None = None
        self._close_done: anyio.Event | None = None
        self._close_error: BookieError | None = None
        self._failure_listeners: list[Callable[[BookieError], None]] = []
        self._processing = False
        self._timer_scope = anyio.CancelScope()
        self._tick_wakeup: anyio.Event | None = None
        """Set to wake the timer task when the core gets a due time it did not have."""
        self._deferral_logged = False
        self._appended_s: deque[tuple[int, float]] = deque()
        """(entry id, when appended on the monotonic clock) of entries not yet confirmed."""
        context.stats.handles.add(self)
        context.task_group.start_soon(self._tick)

    # --- state --------------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger's metadata as this handle last wrote or read it."""
        return self._metadata

    @property
    def change_deferred(self) -> bool:
        """A failed bookie has no replacement yet: entries go to the bookies left (at least
        Qa of each write set) and the change is asked for again every
        `limits.ensemble_change_retry_interval_ms_default`."""
        return self._writer.change_deferred

    @property
    def failed_bookie_returned(self) -> bool:
        """Whether a bookie that failed this handle has become writable again since (restarted,
        registered anew, or answered a probe: it had only stalled).  The handle never takes it
        back; a new ledger may."""
        registry = self._context.registry
        writable = registry.writable
        return any(
            bookie_id in writable
            and (registry.joined(bookie_id) > failed_at or bookie_id in self._answered)
            for bookie_id, failed_at in self._failed_at.items()
        )

    @property
    def last_add_confirmed(self) -> int:
        """Highest entry confirmed with every earlier one (-1: none yet)."""
        return self._writer.last_add_confirmed

    @property
    def last_add_pushed(self) -> int:
        """Highest entry id handed out by `append`/`append_nowait` (-1: none yet)."""
        return self._writer.last_add_pushed

    @property
    def length(self) -> int:
        """Ledger length in bytes up to and including the last add confirmed."""
        return self._writer.length

    @property
    def capacity(self) -> int:
        """How many `append_nowait` calls succeed now (0 also when no longer writable)."""
        return self._writer.capacity

    @property
    def is_closed(self) -> bool:
        return self._writer.state is WriterState.CLOSED

    def on_failure(self, listener: Callable[[BookieError], None]) -> None:
        """Call `listener` once with the error when this handle can take no more adds
        because it failed (fenced, or broken), at once if it already has.

        Called from inside the handle: the listener must only note the error or
        wake a task, not call the handle.  A handle that closes normally never
        calls it.
        """
        self._failure_listeners.append(listener)
        self._notify_failure()

    # --- appending ----------------------------------------------------------------------------

    def append_nowait(self, payload: bytes) -> int:
        """Send `payload` as the next entry; return its entry id at once.

        Raises `AppendWindowFull` when `outstanding_adds_max` adds are pending,
        `LedgerFenced` once fenced, `LedgerClosed` once closed or closing,
        `ClientClosed` after the client closed, or the error that broke the
        handle; nothing is appended then.
        """
        if self._client_closed is not None:
            raise self._client_closed
        writer = self._writer
        if writer.state is WriterState.WRITABLE and writer.capacity == 0:
            raise AppendWindowFull(
                f"ledger {self._ledger_id}: {self._context.config.outstanding_adds_max} "
                "adds pending"
            )
        entry_id = writer.append(payload)
        self._appended_s.append((entry_id, time.monotonic()))
        self._process()
        return entry_id

    async def wait_for_capacity(self) -> None:
        """Return once `append_nowait` would not raise `AppendWindowFull` (it may still
        raise because the handle is no longer writable)."""
        writer = self._writer
        while writer.state is WriterState.WRITABLE and writer.capacity == 0 and self._error is None:
            wakeup = self._capacity_wakeup
            if wakeup is None:
                wakeup = self._capacity_wakeup = anyio.Event()
            await wakeup.wait()

    async def wait_confirmed(self, entry_id: int) -> None:
        """Return once entry `entry_id` (and so every earlier one) is confirmed.

        Raises the error that failed it (`LedgerFenced`, ...) when it can no
        longer be confirmed; its outcome is then unknown.  `InvalidEntryRange`
        if no such entry was appended.
        """
        writer = self._writer
        if not 0 <= entry_id <= writer.last_add_pushed:
            raise InvalidEntryRange(
                f"entry {entry_id} of ledger {self._ledger_id} was never appended "
                f"(last is {writer.last_add_pushed})"
            )
        while entry_id > writer.last_add_confirmed:
            if self._error is not None:
                raise self._error
            event = anyio.Event()
            heapq.heappush(self._waiters, (entry_id, next(self._waiter_ids), event))
            await event.wait()

    async def append(self, payload: bytes) -> int:
        """Append `payload`; return its entry id once it is confirmed.

        Waits while the window is full.  Raises like `append_nowait` and
        `wait_confirmed`.
        """
        await self.wait_for_capacity()
        entry_id = self.append_nowait(payload)
        await self.wait_confirmed(entry_id)
        return entry_id

    # --- confirming the writer ---------------------------------------------------------------

    async def confirm_writer(self) -> None:
        """Return once bookies prove that no recovery had finished fencing this ledger at
        some instant after the call began (rule 5 of `bookie.core.quorum`).

        Whatever this writer has confirmed is then the ledger's latest state at that
        instant, with no entry appended and no fsync waited for: a replicated
        state machine answers linearizable reads this way.  Raises `LedgerFenced`
        when a bookie says the ledger is fenced (this writer must stop),
        `WriterNotConfirmed` (retryable) when too few bookies answered in time or
        the ensemble changed meanwhile, `LedgerClosed` once closing, or the error
        that broke the handle.
        """
        if self._client_closed is not None:
            raise self._client_closed
        writer = self._writer
        if writer.state is not WriterState.WRITABLE:
            raise self._error or LedgerClosed(f"ledger {self._ledger_id} is closing or closed")
        if writer.changing_ensemble:
            raise WriterNotConfirmed(f"ledger {self._ledger_id}: ensemble change in flight")
        ensemble = writer.ensemble
        quorum = writer.quorum
        answered = anyio.Event()
        state = _Confirmation(len(ensemble))

        def on_answer(index: int, outcome: Response | BookieError) -> None:
            if isinstance(outcome, LedgerStateResponse):
                if outcome.status == Status.EOK and outcome.fenced:
                    state.fenced = True
                elif outcome.status in _NOT_FENCED_STATUSES and not outcome.fenced:
                    state.not_fenced_mask |= 1 << index
            state.pending -= 1
            if state.fenced or state.pending == 0 or quorum.writer_confirmed(state.not_fenced_mask):
                answered.set()

        context = self._context
        for index, bookie_id in enumerate(ensemble):
            context.pool.submit(
                bookie_id,
                LedgerStateRequest(0, self._ledger_id),
                functools.partial(on_answer, index),
                context.config.read_timeout_ms,
            )
        await answered.wait()
        if state.fenced:
            raise LedgerFenced(f"ledger {self._ledger_id} is fenced: another writer took over")
        if not quorum.writer_confirmed(state.not_fenced_mask):
            raise WriterNotConfirmed(f"ledger {self._ledger_id}: too few bookies answered")
        if writer.ensemble != ensemble or writer.changing_ensemble:
            raise WriterNotConfirmed(f"ledger {self._ledger_id}: the ensemble changed meanwhile")
        if writer.state is not WriterState.WRITABLE:
            # Closed (or closing) meanwhile: a ledger this writer closed is never
            # fenced, so "not fenced" no longer says that this writer owns anything.
            raise self._error or WriterNotConfirmed(
                f"ledger {self._ledger_id} stopped being writable meanwhile"
            )

    # --- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Wait for pending adds, then close the ledger at its last add confirmed.

        Idempotent once it succeeded.  Raises `LedgerFenced` when a recovery
        took the ledger (the recovery decides its end), `LedgerClosed` when
        another client closed it elsewhere, and metadata errors of the CAS.
        """
        if self._client_closed is not None:
            raise self._client_closed
        if self._close_done is None:
            self._close_done = anyio.Event()
            self._timer_scope.cancel()
            try:
                self._writer.close()
            except BookieError as error:
                self._close_error = error
                self._close_done.set()
                raise
            self._process()
        await self._close_done.wait()
        if self._writer.state is not WriterState.CLOSED:
            failure = self._close_error or self._error
            assert failure is not None, "a close ends closed or with an error"
            raise failure

    async def __aenter__(self) -> WriteHandle:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.close()
        elif isinstance(exc, Exception):
            # The block's own error is the one to report; a close that fails
            # too (the handle was fenced, say) must not hide it.
            with contextlib.suppress(BookieError):
                await self.close()

    def shut_down(self, error: ClientClosed) -> None:
        """The client is closing: release every waiter with `error` (outcomes unknown);
        answers that still arrive (connections failing as they close) are ignored."""
        self._client_closed = error
        if self._error is None:
            self._error = error
        self._timer_scope.cancel()
        self._wake_all()
        if self._close_done is not None and not self._close_done.is_set():
            self._close_error = error
            self._close_done.set()

    # --- carrying out effects -----------------------------------------------------------------

    def _process(self) -> None:
        """Carry out every effect the core has produced, in order (see the invariants)."""
        if self._processing or self._client_closed is not None:
            return
        writer = self._writer
        effects = writer.take_effects()
        if not effects:
            # Most answers (every ack past the Qa-th) change nothing to carry out.
            if self._failure_listeners:
                self._notify_failure()
            return
        self._processing = True
        try:
            while effects:
                for effect in effects:
                    if type(effect) is SendAdd:
                        send_adds(
                            self._context.pool,
                            effect,
                            ledger_id=self._ledger_id,
                            master_key=self._master_key,
                            on_answer=self._on_add_answer,
                            timeout_ms=self._context.config.add_timeout_ms,
                        )
                    elif type(effect) is AddsConfirmed:
                        self._on_confirmed(effect.last_entry_id)
                    else:
                        self._carry_out(effect)
                effects = writer.take_effects()
        finally:
            self._processing = False
        if self._failure_listeners:
            self._notify_failure()

    def _notify_failure(self) -> None:
        error = self._writer.failure
        if error is None:
            return
        listeners, self._failure_listeners = self._failure_listeners, []
        for listener in listeners:
            listener(error)

    def _carry_out(self, effect: object) -> None:
        """The effects off the hot path."""
        context = self._context
        if isinstance(effect, AddsFailed):
            if self._error is None:
                self._error = effect.error
            self._wake_all()
        elif isinstance(effect, ChangeEnsemble):
            context.task_group.start_soon(self._change_ensemble, effect)
        elif isinstance(effect, SendExplicitLac):
            request = WriteLacRequest(
                0, self._ledger_id, self._master_key, effect.lac, effect.packet
            )
            for bookie_id in effect.bookie_ids:
                context.pool.submit(
                    bookie_id, request, _ignore_answer, context.config.add_timeout_ms
                )
        elif isinstance(effect, CloseLedger):
            context.task_group.start_soon(self._close_metadata, effect)
        elif isinstance(effect, CloseFailed):
            self._close_error = effect.error
            self._wake_all()
            if self._close_done is not None:
                self._close_done.set()
        else:
            raise AssertionError(f"unknown writer effect {effect!r}")

    def _on_add_answer(
        self, bookie_id: str, entry_id: int, outcome: Response | BookieError
    ) -> None:
        if type(outcome) is AddResponse:
            self._writer.on_add_response(bookie_id, entry_id, outcome.status)
        else:
            self._writer.on_add_timeout(bookie_id, entry_id)
        self._process()

    def _on_confirmed(self, last_add_confirmed: int) -> None:
        appended = self._appended_s
        if appended:
            now_s = time.monotonic()
            add_seconds = self._context.stats.add_seconds
            while appended and appended[0][0] <= last_add_confirmed:
                add_seconds.observe(now_s - appended.popleft()[1])
        waiters = self._waiters
        while waiters and waiters[0][0] <= last_add_confirmed:
            heapq.heappop(waiters)[2].set()
        wakeup = self._capacity_wakeup
        if wakeup is not None:
            self._capacity_wakeup = None
            wakeup.set()

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for _, _, event in waiters:
            event.set()
        wakeup = self._capacity_wakeup
        if wakeup is not None:
            self._capacity_wakeup = None
            wakeup.set()

    def _with_causes(self, error: BookieError, failed: Iterable[str]) -> BookieError:
        """`error`, and for a `NotEnoughBookies` why each failed bookie could not be reached
        (a refused token, a refused connection): the cause a user can act on."""
        pool = self._context.pool
        causes = [
            f"{bookie_id}: {reason}"
            for bookie_id in sorted(failed)
            if (reason := pool.failure(bookie_id)) is not None
        ]
        if not causes or not isinstance(error, NotEnoughBookies):
            return error
        return NotEnoughBookies(f"{error}; unreachable: {'; '.join(causes)}")

    async def _change_ensemble(self, effect: ChangeEnsemble) -> None:
        context = self._context
        self._excluded.update(effect.failed.values())
        for bookie_id in effect.failed.values():
            self._failed_at.setdefault(bookie_id, context.registry.join_count)
        try:
            replacements = choose_replacements(
                context.registry.writable,
                effect.ensemble,
                list(effect.failed),
                write_quorum=self._metadata.write_quorum,
                rng=context.rng,
                excluded=self._excluded,
            )
            metadata, _version = await context.ledgers.update(
                self._ledger_id,
                lambda current: writer_ensemble_change_transform(
                    current, effect.ensemble, effect.first_entry_id, replacements
                ),
            )
        except BookieError as error:
            error = self._with_causes(error, effect.failed.values())
            self._writer.on_ensemble_change_failed(error)
            if self._writer.change_deferred:
                if not self._deferral_logged:
                    context.stats.ensemble_changes_deferred += 1
                # Once per deferral, not per retry: a warning a second says nothing new.
                level = logging.DEBUG if self._deferral_logged else logging.WARNING
                self._deferral_logged = True
                emit(
                    logger,
                    level,
                    "ledger.ensemble_change_deferred",
                    ledger_id=self._ledger_id,
                    failed=sorted(effect.failed.values()),
                    reason=str(error),
                )
                wakeup = self._tick_wakeup
                if wakeup is not None:
                    self._tick_wakeup = None
                    wakeup.set()
                self._probe(effect.failed.values())
        else:
            self._metadata = metadata
            context.stats.ensemble_changes += 1
            self._writer.on_ensemble_changed(metadata)
            self._deferral_logged = False
        self._process()

    def _probe(self, bookie_ids: Iterable[str]) -> None:
        """Ask each failed bookie not known to be back to store the LAC, as an add is stored
        (see the module docstring); one probe in flight per bookie."""
        lac = self._writer.last_add_confirmed
        if lac < 0:
            return  # nothing to publish yet: the next retry probes
        context = self._context
        request = WriteLacRequest(
            0, self._ledger_id, self._master_key, lac, self._digest.build_lac(self._ledger_id, lac)
        )
        for bookie_id in bookie_ids:
            if bookie_id in self._answered or bookie_id in self._probing:
                continue
            self._probing.add(bookie_id)
            context.pool.submit(
                bookie_id,
                request,
                functools.partial(self._on_probe_answer, bookie_id),
                context.config.add_timeout_ms,
            )

    def _on_probe_answer(self, bookie_id: str, outcome: Response | BookieError) -> None:
        self._probing.discard(bookie_id)
        if isinstance(outcome, WriteLacResponse) and outcome.status == Status.EOK:
            self._answered.add(bookie_id)

    async def _close_metadata(self, effect: CloseLedger) -> None:
        try:
            metadata, _version = await self._context.ledgers.update(
                self._ledger_id,
                lambda current: writer_close_transform(
                    current, effect.last_entry_id, effect.length
                ),
            )
        except BookieError as error:
            self._writer.on_close_failed(error)
            self._close_error = error
            self._wake_all()
        else:
            self._metadata = metadata
            self._writer.on_closed(metadata)
            missed = sorted(set(self._failed_at).intersection(metadata.current_ensemble))
            if missed:
                self._context.task_group.start_soon(self._mark_missed, missed)
        done = self._close_done
        assert done is not None, "the core closes only after close()"
        done.set()

    async def _mark_missed(self, bookie_ids: list[str]) -> None:
        """Mark the closed ledger under-replicated, missing `bookie_ids`: bookies of its last
        ensemble this handle gave up on and never replaced, which lack the entries written
        since (see the module docstring).  Best effort: a mark that cannot be written is
        left to autorecovery's presence check."""
        try:
            await self._context.marks.mark(self._ledger_id, bookie_ids)
        except BookieError as error:
            emit(
                logger,
                logging.WARNING,
                "ledger.mark_failed",
                ledger_id=self._ledger_id,
                missing=bookie_ids,
                error=repr(error),
            )
            return
        emit(logger, logging.INFO, "ledger.marked", ledger_id=self._ledger_id, missing=bookie_ids)

    async def _tick(self) -> None:
        """Call the core's `tick` when it says it is due, until it never will be."""
        writer = self._writer
        with self._timer_scope:
            while True:
                due_ms = writer.next_tick_ms
                if due_ms is None:
                    if writer.state is not WriterState.WRITABLE:
                        return
                    # Nothing timed (no explicit LAC) until a change is deferred.
                    wakeup = self._tick_wakeup = anyio.Event()
                    await wakeup.wait()
                    continue
                delay_ms = due_ms - loop_clock_ms()
                if delay_ms > 0:
                    await anyio.sleep(delay_ms / 1000)
                writer.tick(loop_clock_ms())
                self._process()
