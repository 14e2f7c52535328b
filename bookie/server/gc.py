"""Bookie garbage collection: drop the ledgers whose metadata is gone, then compact.

Deleting a ledger removes only its metadata znode (`LedgerManager.delete`);
each bookie notices by itself and reclaims the space.  `GarbageCollector` runs
a *round* every `interval_ms` (and on `trigger()` or `run_once()`, for tests
and the admin interface), in its own task owned by its `async with` lifetime:

1. read the ledger-id counter N (`idgen`: every id below it was handed out);
2. take the set H of ledgers this bookie holds (`LedgerStorage.ledger_ids`);
3. list the ledgers in metadata, L (`LedgerManager.list_ledgers`, complete or
   raising).  If reading N or L fails, the round does nothing at all: it logs,
   counts, and waits for the next one;
4. the candidates are the ledgers of H below N that are not in L; each is
   read individually (`LedgerManager.read`), and only `NoSuchLedgerError`
   confirms it: then it is deleted through `BookieServer.delete_ledger`, so
   the request logic forgets it at the same moment as storage does (a
   fenced one leaves a tombstone, so a late add from its old writer gets
   EFENCED instead of re-creating it).  Any other answer keeps it; a
   metadata error stops the round;
5. compact (`compactor.compact()`, when a compacting storage is given), which
   is what actually gives the space back.  Its errors (a damaged entry log or
   index, a full disk) are the round's error; a `StorageError` it raises
   instead of reporting ends the round the same way, never the collector.

Why a ledger whose metadata exists is never deleted.  Clients create a
ledger's metadata before they send it any entry, so a ledger in H (taken
before the listing began) had its metadata before the listing began, and the
listing contract says it is then listed unless it was deleted during the
walk.  A ledger that reaches the bookie after step 2 is not in H, so a ledger
created during the listing is never a candidate.  Two more guards cover
clients that break the order and races nobody thought of: an id not below N
(handed out after step 1) is never a candidate, and a candidate is deleted
only when its own metadata read says it does not exist, after the listing.
A ledger id is never handed out twice, so metadata that is confirmed gone
never comes back.

Every round's outcome is a `GcReport` (logged as one `bookie.gc` event) and
is added to `metrics`, plain counters for the admin interface and monitoring.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import anyio
import anyio.abc

from bookie import limits
from bookie.clock import system_wall_clock_ms
from bookie.errors import (
    BadMetadata,
    BookieError,
    MetadataError,
    NoNode,
    NoSuchLedgerError,
    StorageError,
)
from bookie.logs import emit
from bookie.meta.api import MetadataStore
from bookie.meta.layout import MetadataLayout
from bookie.meta.ledgers import LedgerManager
from bookie.server.server import BookieServer
from bookie.storage.api import LedgerStorage
from bookie.storage.compaction import CompactionReport

logger = logging.getLogger(__name__)


class Compactor(Protocol):
    """A storage that can compact itself (`FileLedgerStorage`)."""

    async def compact(self) -> CompactionReport: ...


def deletion_candidates(
    held: Iterable[int], listed: Collection[int], next_ledger_id: int
) -> list[int]:
    """The held ledgers that are not listed and whose id was handed out before the
    counter was read, ascending (steps 1-4 of the module docstring)."""
    listed_ids = set(listed)
    return sorted(
        ledger_id
        for ledger_id in held
        if ledger_id < next_ledger_id and ledger_id not in listed_ids
    )


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one round did."""

    held: int
    """Ledgers the bookie held when the round began."""
    listed: int | None
    """Ledgers in metadata; None when the listing failed (the round did nothing)."""
    deleted: tuple[int, ...] = ()
    kept: tuple[int, ...] = ()
    """Candidates whose own metadata read did not confirm they are gone."""
    compaction: CompactionReport | None = None
    error: str | None = None
    duration_ms: int = 0


@dataclass(slots=True)
class GcMetrics:
    """Counters over every round since start, for logs and monitoring."""

    rounds: int = 0
    rounds_skipped: int = 0
    """Rounds that did nothing because the ledger list could not be read."""
    ledgers_deleted: int = 0
    logs_deleted: int = 0
    logs_compacted: int = 0
    bytes_reclaimed: int = 0
    last_run_time_ms: int | None = None
    """Wall-clock time (ms since the epoch) at which the last round ended."""
    last_duration_ms: int | None = None
    last_error: str | None = None
    errors: int = 0
    """Rounds that ended with an error (listing, metadata check, storage or compaction)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "rounds_skipped": self.rounds_skipped,
            "ledgers_deleted": self.ledgers_deleted,
            "logs_deleted": self.logs_deleted,
            "logs_compacted": self.logs_compacted,
            "bytes_reclaimed": self.bytes_reclaimed,
            "last_run_time_ms": self.last_run_time_ms,
            "last_duration_ms": self.last_duration_ms,
            "last_error": self.last_error,
            "errors": self.errors,
        }


class GarbageCollector:
    """Periodic garbage collection of one bookie.  Use as `async with GarbageCollector(...)`."""

    def __init__(
        self,
        server: BookieServer,
        storage: LedgerStorage,
        store: MetadataStore,
        *,
        root: str = limits.metadata_root_default,
        interval_ms: int = limits.gc_interval_ms_default,
        compactor: Compactor | None = None,
        metadata_timeout_ms: int = limits.gc_metadata_timeout_ms,
    ) -> None:
        """`storage` must be the one `server` serves; `compactor` is usually that
        storage too (None: deletions only, e.g. over `MemoryLedgerStorage`)."""
        assert interval_ms > 0
        assert metadata_timeout_ms > 0
        self._server = server
        self._storage = storage
        self._store = store
        self._layout = MetadataLayout(root)
        self._ledgers = LedgerManager(store, root)
        self._interval_ms = interval_ms
        self._compactor = compactor
        self._metadata_timeout_ms = metadata_timeout_ms
        self._round_lock = anyio.Lock()
        self._wakeup = anyio.Event()
        self._round_ended = anyio.Event()
        self._task_group: anyio.abc.TaskGroup | None = None
        self.metrics = GcMetrics()
        self.last_report: GcReport | None = None

    # --- lifetime -----------------------------------------------------------------------------

    async def __aenter__(self) -> GarbageCollector:
        task_group = self._task_group = anyio.create_task_group()
        await task_group.__aenter__()
        task_group.start_soon(self._run_periodically)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        task_group = self._task_group
        assert task_group is not None
        task_group.cancel_scope.cancel()
        return await task_group.__aexit__(exc_type, exc, traceback)

    def trigger(self) -> None:
        """Start a round now instead of at the next interval (admin request)."""
        self._wakeup.set()

    async def next_round(self) -> GcReport:
        """Wait for the end of the round in progress, or else of the next one; its report."""
        await self._round_ended.wait()
        assert self.last_report is not None
        return self.last_report

    async def _run_periodically(self) -> None:
        while True:
            with anyio.move_on_after(self._interval_ms / 1000):
                await self._wakeup.wait()
            self._wakeup = anyio.Event()
            await self.run_once()

    # --- one round ----------------------------------------------------------------------------

    async def run_once(self) -> GcReport:
        """Run one round now (after the one in progress, if any) and return its report."""
        async with self._round_lock:
            started_s = anyio.current_time()
            report = await self._round()
            duration_ms = math.ceil((anyio.current_time() - started_s) * 1000)
            report = dataclasses.replace(report, duration_ms=duration_ms)
            self._account(report)
            return report

    async def _round(self) -> GcReport:
        if self._storage.failure is not None:
            return GcReport(held=0, listed=None, error=f"storage stopped: {self._storage.failure}")
        try:
            with anyio.fail_after(self._metadata_timeout_ms / 1000):
                next_ledger_id = await self._next_ledger_id()
                held = self._storage.ledger_ids()
                listed = set(await self._ledgers.list_ledgers())
        except (MetadataError, TimeoutError) as failure:
            reason = "timed out" if isinstance(failure, TimeoutError) else str(failure)
            return GcReport(held=0, listed=None, error=f"listing ledgers failed: {reason}")
        deleted: list[int] = []
        kept: list[int] = []
        error: str | None = None
        for ledger_id in deletion_candidates(held, listed, next_ledger_id):
            try:
                gone = await self._metadata_gone(ledger_id)
                if gone:
                    self._server.delete_ledger(ledger_id)
            except BookieError as failure:
                error = f"ledger {ledger_id}: {type(failure).__name__}: {failure}"
                break
            (deleted if gone else kept).append(ledger_id)
        compaction = None
        if self._compactor is not None and self._storage.failure is None:
            try:
                compaction = await self._compactor.compact()
            except StorageError as failure:
                # `compact` reports its errors rather than raising them; one that
                # escapes anyway ends this round, not the collector's task (whose
                # failure would take the whole bookie down).
                logger.error("compaction raised: %s", failure)
                if error is None:
                    error = f"compaction: {type(failure).__name__}: {failure}"
            else:
                if compaction.errors and error is None:
                    error = f"compaction: {compaction.errors[-1]}"
        return GcReport(
            held=len(held),
            listed=len(listed),
            deleted=tuple(deleted),
            kept=tuple(kept),
            compaction=compaction,
            error=error,
        )

    async def _next_ledger_id(self) -> int:
        """The id counter: every ledger id below it has been handed out.

        Read through the store because `LedgerManager` only offers allocation;
        the format is `LedgerManager`'s (ASCII decimal, absent or empty: 0)."""
        path = self._layout.idgen
        try:
            value = (await self._store.get(path)).value
        except NoNode:
            return 0
        if not value:
            return 0
        text = value.decode("ascii", errors="replace")
        if not (text.isascii() and text.isdigit()):
            raise BadMetadata(f"{path}: ledger id counter holds {value!r}, not a decimal number")
        return int(text)

    async def _metadata_gone(self, ledger_id: int) -> bool:
        try:
            await self._ledgers.read(ledger_id)
        except NoSuchLedgerError:
            return True
        except BadMetadata:
            return False  # unreadable, but it exists
        # Not listed, yet there: the listing raced with something.  Keep it.
        return False

    def _account(self, report: GcReport) -> None:
        metrics = self.metrics
        metrics.rounds += 1
        if report.listed is None:
            metrics.rounds_skipped += 1
        metrics.ledgers_deleted += len(report.deleted)
        if report.compaction is not None:
            metrics.logs_deleted += report.compaction.logs_deleted
            metrics.logs_compacted += report.compaction.logs_compacted
            metrics.bytes_reclaimed += report.compaction.bytes_reclaimed
        metrics.last_run_time_ms = system_wall_clock_ms()
        metrics.last_duration_ms = report.duration_ms
        if report.error is not None:
            metrics.errors += 1
            metrics.last_error = report.error
        self.last_report = report
        self._round_ended.set()
        self._round_ended = anyio.Event()
        compaction = report.compaction or CompactionReport()
        emit(
            logger,
            logging.WARNING if report.error is not None else logging.INFO,
            "bookie.gc",
            held=report.held,
            listed=report.listed,
            deleted=len(report.deleted),
            kept=list(report.kept),
            logs_deleted=compaction.logs_deleted,
            logs_compacted=compaction.logs_compacted,
            entries_moved=compaction.entries_moved,
            bytes_reclaimed=compaction.bytes_reclaimed,
            logs_skipped_no_space=compaction.logs_skipped_no_space,
            duration_ms=report.duration_ms,
            reason=report.error,
        )
