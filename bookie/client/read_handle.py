"""`ReadHandle`: reading one ledger, and `LedgerTail`: following it as it grows.

The async shells of `bookie.core.reader`:

* `read_entries(first, last)` runs one `RangeRead` per batch of at most
  `limits.read_batch_entries_max` entries: each entry from the first replica
  of its write set, the next one on an error, a missing or corrupt copy, or a
  speculative timeout.  Digests are verified by the core.
* `read_last_add_confirmed()` runs a `LacRead` (READ_LAC to the last
  ensemble, done once the valid answers cover every write set).
* `tail(from_entry_id)` returns a `LedgerTail`: entries up to the LAC are read
  in batches, then a `LongPollTail` long-polls the bookies for the next one,
  and a metadata watch notices new segments and the close; the tail ends once
  the ledger is closed and every entry has been returned.

The handle's LAC only grows: every answer raises it (rule 4 of the reader
core), and a closed ledger's LAC is its last entry.  Reads past the LAC raise
`ReadBeyondLastAddConfirmed` unless `allow_unconfirmed`; past the end of a
closed ledger they always do.

Stale metadata.  A handle of a ledger still being written does not follow the
writer's ensemble changes by itself: when a read or a LAC read fails it
re-reads the metadata once, and retries if it changed.  A tail watches the
metadata for its whole life.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import NamedTuple

import anyio

from bookie import limits
from bookie.client.context import ClientContext
from bookie.client.dispatch import drive, send_read
from bookie.clock import loop_clock_ms
from bookie.core.metadata import LedgerMetadata
from bookie.core.reader import (
    EntriesRead,
    LacAdvanced,
    LacKnown,
    LacRead,
    LacReadFailed,
    LongPollTail,
    RangeRead,
    ReadFailed,
    SendRead,
    SendReadLac,
    TailEnded,
)
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    InvalidEntryRange,
    MetadataError,
    NoSuchLedgerError,
)
from bookie.wire.messages import ReadLacRequest, ReadLacResponse, ReadResponse, Response
from bookie.wire.packet import Digest, master_key

MetadataListener = Callable[[BookieError | None], None]
"""Told of a metadata change (None), or of the ledger's deletion (the error)."""


class LedgerEntry(NamedTuple):
    """One entry as a reader gets it: its id and its payload (digest verified)."""

    entry_id: int
    payload: bytes


class ReadHandle:
    """Reads one ledger; see the module docstring."""

    def __init__(
        self,
        context: ClientContext,
        metadata: LedgerMetadata,
        version: int,
        password: bytes,
        *,
        last_add_confirmed: int,
    ) -> None:
        self._context = context
        self._metadata = metadata
        self._version = version
        self._digest = Digest(metadata.digest_type, password)
        self._master_key = master_key(password)
        self._last_add_confirmed = last_add_confirmed
        if metadata.is_closed:
            self._last_add_confirmed = metadata.last_entry_id

    # --- state --------------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._metadata.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        """The newest metadata this handle has seen."""
        return self._metadata

    @property
    def is_closed(self) -> bool:
        return self._metadata.is_closed

    @property
    def last_add_confirmed(self) -> int:
        """The highest LAC seen (the last entry, once closed); only grows."""
        return self._last_add_confirmed

    # --- reading ------------------------------------------------------------------------------

    async def read(self, first: int, last: int, *, allow_unconfirmed: bool = False) -> list[bytes]:
        """The payloads of entries `first` .. `last`, in order (see `read_entries`)."""
        entries = await self.read_entries(first, last, allow_unconfirmed=allow_unconfirmed)
        return [entry.payload for entry in entries]

    async def read_entries(
        self, first: int, last: int, *, allow_unconfirmed: bool = False
    ) -> list[LedgerEntry]:
        """Entries `first` .. `last`, in order, digests verified.

        Raises `InvalidEntryRange`, `ReadBeyondLastAddConfirmed` (past the LAC
        without `allow_unconfirmed`, or past a closed ledger's end), and for an
        entry no replica could serve: `NoSuchEntry` (every replica said it
        holds none), `DigestMismatch` (only corrupt copies), `EntryNotAvailable`.
        """
        if first < 0 or last < first:
            raise InvalidEntryRange(f"cannot read entries {first} .. {last}")
        entries: list[LedgerEntry] = []
        batch_max = limits.read_batch_entries_max
        for batch_first in range(first, last + 1, batch_max):
            batch_last = min(last, batch_first + batch_max - 1)
            payloads = await self._read_batch(batch_first, batch_last, allow_unconfirmed)
            entries.extend(
                LedgerEntry(batch_first + offset, payload)
                for offset, payload in enumerate(payloads)
            )
        return entries

    async def _read_batch(self, first: int, last: int, allow_unconfirmed: bool) -> list[bytes]:
        for attempt in range(2):
            core = RangeRead(
                self._metadata,
                self._digest,
                first,
                last,
                last_add_confirmed=self._last_add_confirmed,
                allow_unconfirmed=allow_unconfirmed,
                speculative_read_timeout_ms=self._context.config.speculative_read_timeout_ms,
            )
            payloads, error = await self._run_range_read(core)
            self._raise_last_add_confirmed(core.last_add_confirmed)
            if error is None:
                return payloads
            if attempt == 0 and not self.is_closed and await self._refresh_metadata():
                continue
            raise error
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _run_range_read(self, core: RangeRead) -> tuple[list[bytes], BookieError | None]:
        context = self._context
        ledger_id = self.ledger_id
        payloads: list[bytes] = []
        failures: list[BookieError] = []
        wakeup = context.pool.wakeup()

        def carry_out(*, speculative: bool = False) -> None:
            """`speculative`: the reads sent now are the timer's (one replica was slow)."""
            for effect in core.take_effects():
                if type(effect) is SendRead:
                    context.stats.speculative_reads += speculative
                    send_read(
                        context.pool,
                        effect,
                        ledger_id=ledger_id,
                        master_key=self._master_key,
                        on_response=partial(on_answer, effect.bookie_id, effect.entry_id),
                        read_timeout_ms=context.config.read_timeout_ms,
                    )
                elif type(effect) is EntriesRead:
                    payloads.extend(effect.payloads)
                else:
                    assert isinstance(effect, ReadFailed)
                    failures.append(effect.error)
            wakeup.set()

        def on_answer(bookie_id: str, entry_id: int, outcome: Response | BookieError) -> None:
            if type(outcome) is ReadResponse:
                core.on_read_response(bookie_id, entry_id, outcome, loop_clock_ms())
            elif isinstance(outcome, BookieUnavailable):
                core.on_unreachable(bookie_id, entry_id, str(outcome), loop_clock_ms())
            else:
                core.on_read_timeout(bookie_id, entry_id, loop_clock_ms())
            carry_out()

        def tick(at_ms: int) -> None:
            core.tick(at_ms)
            carry_out(speculative=True)

        core.start(loop_clock_ms())
        carry_out()
        await drive(context.pool, wakeup, lambda: core.finished, lambda: core.next_tick_ms, tick)
        return payloads, failures[0] if failures else None

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (no fencing); return the handle's LAC, raised to it.

        A closed ledger answers its last entry without asking.  Raises
        `BookieUnavailable` when too few bookies answered validly.
        """
        for attempt in range(2):
            if self.is_closed:
                return self._last_add_confirmed
            outcome = await self._run_lac_read(LacRead(self._metadata, self._digest))
            if isinstance(outcome, LacKnown):
                self._raise_last_add_confirmed(outcome.last_add_confirmed)
                return self._last_add_confirmed
            if attempt == 0 and await self._refresh_metadata():
                continue
            raise outcome.error
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _run_lac_read(self, core: LacRead) -> LacKnown | LacReadFailed:
        context = self._context
        ledger_id = self.ledger_id
        outcomes: list[LacKnown | LacReadFailed] = []
        wakeup = context.pool.wakeup()

        def carry_out() -> None:
            for effect in core.take_effects():
                if isinstance(effect, SendReadLac):
                    context.pool.submit(
                        effect.bookie_id,
                        ReadLacRequest(0, ledger_id),
                        partial(on_answer, effect.bookie_id),
                        context.config.read_timeout_ms,
                    )
                else:
                    outcomes.append(effect)
            wakeup.set()

        def on_answer(bookie_id: str, outcome: Response | BookieError) -> None:
            if type(outcome) is ReadLacResponse:
                core.on_read_lac_response(bookie_id, outcome)
            elif isinstance(outcome, BookieUnavailable):
                core.on_read_lac_unreachable(bookie_id, str(outcome))
            else:
                core.on_read_lac_timeout(bookie_id)
            carry_out()

        core.start()
        carry_out()
        await drive(context.pool, wakeup, lambda: bool(outcomes), lambda: None, lambda _at: None)
        return outcomes[0]

    def tail(self, from_entry_id: int = 0) -> LedgerTail:
        """Every entry from `from_entry_id` on, as it becomes confirmed; see `LedgerTail`."""
        if from_entry_id < 0:
            raise InvalidEntryRange(f"cannot tail from entry {from_entry_id}")
        return LedgerTail(self, self._context, self._digest, self._master_key, from_entry_id)

    # --- metadata -----------------------------------------------------------------------------

    def _raise_last_add_confirmed(self, last_add_confirmed: int) -> None:
        if last_add_confirmed > self._last_add_confirmed and not self.is_closed:
            self._last_add_confirmed = last_add_confirmed

    def _set_metadata(self, metadata: LedgerMetadata, version: int) -> bool:
        """Adopt newer metadata; return whether it changed."""
        if version <= self._version:
            return False
        self._metadata = metadata
        self._version = version
        if metadata.is_closed:
            self._last_add_confirmed = metadata.last_entry_id
        return True

    async def _refresh_metadata(self) -> bool:
        """Re-read the metadata; return whether it changed."""
        metadata, version = await self._context.ledgers.read(self.ledger_id)
        return self._set_metadata(metadata, version)

    async def _follow_metadata(self, on_change: MetadataListener) -> None:
        """Call `on_change(None)` after each metadata change until the ledger is closed, or
        `on_change(error)` once it is deleted.  Runs until then or until cancelled."""
        context = self._context
        while not self.is_closed:
            try:
                await context.ledgers.watch(self.ledger_id, self._version)
                changed = await self._refresh_metadata()
            except NoSuchLedgerError as error:
                on_change(error)
                return
            except MetadataError:
                await anyio.sleep(context.config.metadata_retry_delay_ms / 1000)
                continue
            if changed:
                on_change(None)


class LedgerTail:
    """The entries of a ledger from one entry id on, as they become confirmed.

    An async iterator of `LedgerEntry`; it ends after the last entry of the
    closed ledger.  Use it as `async with handle.tail(0) as entries: async for
    entry in entries: ...`, or iterate to the end, or call `aclose()`: that
    stops its long poll and its metadata watch (a task in the client's task
    group).  `__anext__` raises what reads raise, and `NoSuchLedgerError` once
    the ledger is deleted.

    Entries up to the handle's LAC are read in batches (at most
    `limits.read_batch_entries_max` buffered); past it, the long poll's
    answers raise the LAC and usually carry the next entry, which is then
    returned without another read.
    """

    def __init__(
        self,
        handle: ReadHandle,
        context: ClientContext,
        digest: Digest,
        master_key: bytes,
        from_entry_id: int,
    ) -> None:
        assert from_entry_id >= 0
        self._handle = handle
        self._context = context
        self._digest = digest
        self._master_key = master_key
        self._position = from_entry_id
        """The id of the next entry to fetch."""
        self._buffer: deque[LedgerEntry] = deque()
        self._core: LongPollTail | None = None
        self._ready: LedgerEntry | None = None
        """Entry `_position` as a long-poll answer carried it."""
        self._wakeup = context.pool.wakeup()
        self._watch_scope = anyio.CancelScope()
        self._error: BookieError | None = None
        self._stopped = False

    def __aiter__(self) -> LedgerTail:
        return self

    async def __anext__(self) -> LedgerEntry:
        while not self._buffer:
            if self._stopped:
                raise StopAsyncIteration
            await self._fill()
        return self._buffer.popleft()

    async def __aenter__(self) -> LedgerTail:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop following the ledger (idempotent)."""
        self._stop()

    def _stop(self) -> None:
        self._stopped = True
        self._ready = None
        self._watch_scope.cancel()

    async def _fill(self) -> None:
        """Buffer the next entries, end the tail, or wait for the ledger to move."""
        self._context.pool.check_open()
        if self._error is not None:
            self._stop()
            raise self._error
        handle = self._handle
        position = self._position
        readable = handle.last_add_confirmed
        if position <= readable:
            ready = self._ready
            if ready is not None and ready.entry_id == position:
                self._ready = None
                self._buffer.append(ready)
                self._position = position + 1
                return
            last = min(readable, position + limits.read_batch_entries_max - 1)
            self._buffer.extend(await handle.read_entries(position, last))
            self._position = last + 1
            return
        if handle.is_closed:
            self._stop()
            return
        core = self._core if self._core is not None else self._start_following()
        due_ms = core.next_tick_ms
        if due_ms is None:
            await self._wakeup.wait(None)
            return
        delay_ms = due_ms - loop_clock_ms()
        if delay_ms > 0:
            await self._wakeup.wait(delay_ms)
            return
        core.tick(loop_clock_ms())
        self._carry_out()

    def _start_following(self) -> LongPollTail:
        config = self._context.config
        handle = self._handle
        core = self._core = LongPollTail(
            handle.metadata,
            self._digest,
            handle.last_add_confirmed,
            poll_timeout_ms=config.long_poll_timeout_ms,
            retry_delay_ms=config.tail_retry_delay_ms,
        )
        self._context.task_group.start_soon(self._follow_metadata)
        core.start()
        self._carry_out()
        return core

    async def _follow_metadata(self) -> None:
        with self._watch_scope:
            await self._handle._follow_metadata(self._on_metadata)

    def _on_metadata(self, error: BookieError | None) -> None:
        if error is not None:
            self._error = error
        elif self._core is not None and not self._stopped:
            self._core.on_metadata(self._handle.metadata)
            self._carry_out()
        self._wakeup.set()

    def _on_answer(self, bookie_id: str, entry_id: int, outcome: Response | BookieError) -> None:
        core = self._core
        if self._stopped or core is None:
            return
        if type(outcome) is ReadResponse:
            core.on_read_response(bookie_id, entry_id, outcome, loop_clock_ms())
        else:
            core.on_read_timeout(bookie_id, entry_id, loop_clock_ms())
        self._carry_out()

    def _carry_out(self) -> None:
        core = self._core
        assert core is not None
        context = self._context
        for effect in core.take_effects():
            if isinstance(effect, SendRead):
                if not self._stopped:
                    send_read(
                        context.pool,
                        effect,
                        ledger_id=self._handle.ledger_id,
                        master_key=self._master_key,
                        on_response=partial(self._on_answer, effect.bookie_id, effect.entry_id),
                        read_timeout_ms=context.config.read_timeout_ms,
                    )
            elif isinstance(effect, LacAdvanced):
                self._handle._raise_last_add_confirmed(effect.last_add_confirmed)
                if effect.payload is not None and effect.entry_id == self._position:
                    self._ready = LedgerEntry(effect.entry_id, effect.payload)
            else:
                # The handle's own metadata says closed already: that is what
                # ends the iteration, once every entry has been returned.
                assert isinstance(effect, TailEnded)
        self._wakeup.set()
