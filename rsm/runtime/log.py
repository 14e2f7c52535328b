"""The log of ledgers as the runtime sees it: the log znode, reading entries, following.

Three pieces, each small:

* `LogStore`: the application's znodes (created once, idempotently), and the
  log znode read, watched and changed only by compare-and-set (I1).  The
  value's meaning and its legal changes are `rsm/core/log_state.py`'s.
* `SegmentReader`: the entries of one segment's ledger as decoded batches:
  read a range, replay a range into the `Applier`, and `locate` the entry
  that holds an index by binary search on entry ids (each batch carries its
  `first_index`, which never decreases along a ledger).  Every batch read is
  checked to carry its segment's epoch (I4: a leader writes only to the
  segment it appended).
* `LogFollower`: a follower's reading of the log, across segment boundaries.
  CLOSED segments are read to their end; the OPEN one is tailed without
  recovery (read up to the LAC, then long-poll the bookies), and the tail ends
  when its ledger is closed, by its writer (rollover, handoff) or by a new
  leader's recovery.  The follower then waits for the log znode to show the
  segment CLOSED and the next one, and goes on there.  It never fences and
  never reads past the LAC, so everything it applies is acknowledged (G1/G5)
  and therefore part of the log forever (G6).

Invariants: entries are applied in (segment, entry id) order, which is index
order; nothing here writes a ledger; the log znode is only replaced by `cas`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

import anyio

from bookie import limits as bookie_limits
from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import ReadHandle
from bookie.errors import (
    BookieError,
    MetadataUnavailable,
    MetadataVersionConflict,
    NodeExists,
    NoNode,
)
from bookie.logs import emit
from bookie.meta.api import MetadataStore, Op
from rsm.core.election import may_stand
from rsm.core.layout import AppLayout
from rsm.core.log_format import Batch, decode_batch, decode_log, encode_log
from rsm.core.log_state import Log, Segment
from rsm.errors import MalformedValue, Truncated
from rsm.runtime.applier import Applier
from rsm.runtime.transient import is_transient

logger = logging.getLogger(__name__)

ProgressListener = Callable[[bool], None]
"""Told, as the follower reads, whether it is caught up enough to stand for election: every
CLOSED segment read to within the bound (in indexes), and the OPEN one to within the bound (in
ledger entries behind its LAC), or read to its end when its ledger is already closed."""


class LogStore:
    """The znodes of one application, above all its log znode."""

    def __init__(self, store: MetadataStore, layout: AppLayout) -> None:
        self._store = store
        self.layout = layout

    @property
    def store(self) -> MetadataStore:
        return self._store

    async def ensure_layout(self) -> None:
        """Create the application's znodes that do not exist yet (an empty log first)."""
        layout = self.layout
        initial = (
            (layout.log, encode_log(Log())),
            (layout.election, b""),
            (layout.replicas, b""),
            (layout.handoff, b""),
            (layout.snapshots, b""),
        )
        for path, value in initial:
            if await self._store.exists(path) is not None:
                continue
            # Another replica may create it meanwhile, with the same empty value.
            with contextlib.suppress(NodeExists):
                await self._store.create(path, value, make_parents=True)

    async def read(self) -> tuple[Log, int]:
        """The log and the version it was read at; `MalformedValue` if the znode is not a log."""
        versioned = await self._store.get(self.layout.log)
        return decode_log(versioned.value), versioned.version

    async def watch(self, version: int) -> None:
        """Return once the log znode is no longer at `version`."""
        await self._store.watch(self.layout.log, version)

    async def cas(self, ops: Sequence[Op], took_effect: Callable[[Log], bool]) -> bool:
        """Apply `ops` (one of them a `SetData` of the log with its expected version) atomically.

        True when they took effect, False when the log (or another checked
        node) had moved, so nothing changed.  When ZooKeeper did not answer, the
        outcome is learnt by reading the log again and asking `took_effect`;
        if that read fails too, the error is raised and the outcome stays
        unknown, so the caller must not undo anything (a ledger it created may
        be in the log).
        """
        try:
            await self._store.commit(ops)
        except MetadataVersionConflict:
            return False
        except (NoNode, NodeExists):
            return False
        except MetadataUnavailable:
            log, _version = await self.read()
            return took_effect(log)
        return True


class SegmentReader:
    """Reads the entries of segments' ledgers as batches (see the module docstring)."""

    def __init__(self, ledgers: LedgerClient, password: bytes) -> None:
        self._ledgers = ledgers
        self._password = password

    async def open(self, segment: Segment, *, recovery: bool) -> ReadHandle:
        """A read handle of the segment's ledger; `recovery` fences it and finds its end."""
        return await self._ledgers.open_ledger(segment.ledger_id, self._password, recovery=recovery)

    async def read(
        self, segment: Segment, handle: ReadHandle, first: int, last: int
    ) -> list[tuple[int, Batch]]:
        """Entries `first` .. `last` of the segment's ledger, decoded, with their entry ids."""
        entries = await handle.read_entries(first, last)
        return [
            (entry.entry_id, decode_entry(segment, entry.entry_id, entry.payload))
            for entry in entries
        ]

    async def replay(
        self, segment: Segment, handle: ReadHandle, first: int, applier: Applier
    ) -> None:
        """Apply entries `first` .. the handle's LAC (a closed ledger: its last entry)."""
        last = handle.last_add_confirmed
        chunk = bookie_limits.read_batch_entries_max
        ledger_id = segment.ledger_id
        for chunk_first in range(first, last + 1, chunk):
            chunk_last = min(last, chunk_first + chunk - 1)
            for entry in await handle.read_entries(chunk_first, chunk_last):
                entry_id = entry.entry_id
                payload = entry.payload
                applier.apply(decode_entry(segment, entry_id, payload), ledger_id, entry_id)
                applier.log_bytes += len(payload)

    async def locate(self, segment: Segment, handle: ReadHandle, index: int) -> int:
        """The first entry (up to the handle's LAC) whose batch starts above `index - 1`.

        That is where a replica that applied up to `index - 1` goes on reading
        (an earlier empty batch may be applied again, which changes nothing).  One
        past the LAC when every readable entry is below.
        """
        low = 0
        high = handle.last_add_confirmed + 1
        while low < high:
            middle = (low + high) // 2
            [(_entry_id, batch)] = await self.read(segment, handle, middle, middle)
            if batch.first_index < index:
                low = middle + 1
            else:
                high = middle
        return low


async def discard_ledger(ledgers: LedgerClient, ledger_id: int) -> None:
    """Delete a ledger that is certainly not in the log (a lost CAS); failures only leak it."""
    try:
        await ledgers.delete_ledger(ledger_id)
    except BookieError as error:
        emit(logger, logging.WARNING, "rsm.ledger_leaked", ledger_id=ledger_id, error=repr(error))


def decode_entry(segment: Segment, entry_id: int, payload: bytes) -> Batch:
    """The batch in an entry of `segment`, checked to carry the segment's epoch (I4)."""
    batch = decode_batch(payload)
    if batch.epoch != segment.epoch:
        raise MalformedValue(
            f"entry {entry_id} of ledger {segment.ledger_id} carries epoch {batch.epoch}, "
            f"but its segment has epoch {segment.epoch}"
        )
    return batch


class LogFollower:
    """Applies the log as it grows, from the applier's position on; runs until cancelled."""

    def __init__(
        self,
        log: LogStore,
        reader: SegmentReader,
        applier: Applier,
        *,
        lag_entries_max: int,
        retry_delay_ms: int,
        on_progress: ProgressListener,
    ) -> None:
        self._log = log
        self._reader = reader
        self._applier = applier
        self._lag_entries_max = lag_entries_max
        self._retry_delay_s = retry_delay_ms / 1000
        self._on_progress = on_progress
        self._reading: tuple[ReadHandle, int] | None = None
        """The handle of the ledger being read, and the entry the reading started at."""

    @property
    def lag_entries(self) -> int:
        """Entries of the ledger being read that are confirmed but not applied here yet.

        Computed when asked, from the handle's last-add-confirmed (for the OPEN
        segment, as the tail's long polls last reported it) and the applier's
        cursor; 0 before a ledger is opened.  Only that ledger counts: a
        replica catching up over several ledgers has the later ones to read as
        well (the progress listener says when it is near enough to stand).
        """
        reading = self._reading
        if reading is None:
            return 0
        handle, first = reading
        cursor = self._applier.cursor
        applied = first - 1
        if cursor is not None and cursor.ledger_id == handle.ledger_id:
            applied = cursor.entry_id
        return max(0, handle.last_add_confirmed - applied)

    async def run(self) -> None:
        """Follow forever; transient errors (bookies or ZooKeeper away) are retried.

        Raises `Truncated` when the log no longer holds the next index this
        replica needs (truncated below it, possibly while it was reading): the
        replica must load a snapshot first.
        """
        while True:
            try:
                log, version = await self._log.read()
                if await self._pass(log):
                    await self._log.watch(version)
            except Exception as error:
                if isinstance(error, BookieError):
                    # A ledger or entry that vanished may have been truncated away.
                    await self._check_not_truncated()
                if not is_transient(error):
                    raise
                emit(logger, logging.INFO, "rsm.follow_retry", error=repr(error))
                await anyio.sleep(self._retry_delay_s)

    async def _check_not_truncated(self) -> None:
        try:
            log, _version = await self._log.read()
        except BookieError:
            return  # the caller's own error says enough
        next_index = self._applier.applied_index + 1
        if next_index < log.first_index:
            raise Truncated(
                f"this replica needs index {next_index}, but the log was truncated up to "
                f"index {log.first_index - 1}; it must start from a snapshot"
            )

    async def _pass(self, log: Log) -> bool:
        """Read what `log` lets us read; True when nothing more can come until the log changes."""
        segments = log.segments
        if not segments:
            self._on_progress(True)
            return True
        position, first = await resume_point(log, self._reader, self._applier)
        applier = self._applier
        closed_end = _closed_end(log)
        for offset in range(position, len(segments)):
            segment = segments[offset]
            entry = first if offset == position else 0
            if not segment.is_open:
                self._on_progress(
                    may_stand(applier.applied_index, closed_end, self._lag_entries_max)
                )
            handle = await self._reader.open(segment, recovery=False)
            self._reading = (handle, entry)
            if handle.is_closed:
                await self._reader.replay(segment, handle, entry, applier)
                if segment.is_open:
                    # Closed by its writer or a recovery; the log will say so once a
                    # takeover records it.  This replica holds all the ledger will ever
                    # hold, so it may stand for that takeover: if caught-up replicas
                    # waited for the log to move first, none would stand and it never would.
                    self._on_progress(True)
                    return True
                check_segment_end(segment, applier)
                continue
            if not segment.is_open:
                raise MalformedValue(
                    f"segment of ledger {segment.ledger_id} is CLOSED in the log, "
                    "but its ledger is not"
                )
            await self._tail(segment, handle, entry)
            return False
        self._on_progress(may_stand(applier.applied_index, closed_end, self._lag_entries_max))
        return True

    async def _tail(self, segment: Segment, handle: ReadHandle, first: int) -> None:
        """Apply the OPEN segment's entries as they are confirmed, until its ledger is closed.

        Within the OPEN segment the lag is counted in ledger entries behind the
        LAC the follower knows (each holds one batch): it stands once that is
        within the bound.
        """
        applier = self._applier
        ledger_id = segment.ledger_id
        lag_max = self._lag_entries_max
        self._on_progress(handle.last_add_confirmed - (first - 1) <= lag_max)
        async with handle.tail(first) as entries:
            async for entry in entries:
                entry_id = entry.entry_id
                payload = entry.payload
                applier.apply(decode_entry(segment, entry_id, payload), ledger_id, entry_id)
                applier.log_bytes += len(payload)
                self._on_progress(handle.last_add_confirmed - entry_id <= lag_max)


async def resume_point(log: Log, reader: SegmentReader, applier: Applier) -> tuple[int, int]:
    """Where a replica goes on reading `log`: (position of the segment, entry id in it).

    After the entry it applied last when that ledger is in the log (the usual
    case), from the start for a fresh replica of an untruncated log, else (a
    state restored from a snapshot) the entry that holds the next index, found
    by binary search.  Raises `Truncated` when the log no longer holds it.
    """
    cursor = applier.cursor
    if cursor is not None:
        for position, segment in enumerate(log.segments):
            if segment.ledger_id == cursor.ledger_id:
                return position, cursor.entry_id + 1
    next_index = applier.applied_index + 1
    if cursor is None and next_index == log.first_index == 1:
        return 0, 0
    holder = log.segment_for(next_index)  # Truncated: the log no longer holds next_index
    if holder is None:
        return len(log.segments), 0
    handle = await reader.open(holder, recovery=False)
    return log.segments.index(holder), await reader.locate(holder, handle, next_index)


async def replay_log(
    log: Log, reader: SegmentReader, applier: Applier, recovered: ReadHandle | None
) -> None:
    """Apply the whole of `log` from the applier's position: its CLOSED segments, and its
    OPEN one through `recovered` (a handle opened with recovery, so its end is known)."""
    position, first = await resume_point(log, reader, applier)
    for offset in range(position, len(log.segments)):
        segment = log.segments[offset]
        entry = first if offset == position else 0
        if segment.is_open:
            assert recovered is not None
            assert recovered.ledger_id == segment.ledger_id
            assert recovered.is_closed
            await reader.replay(segment, recovered, entry, applier)
            return
        handle = await reader.open(segment, recovery=False)
        await reader.replay(segment, handle, entry, applier)
        check_segment_end(segment, applier)


def check_segment_end(segment: Segment, applier: Applier) -> None:
    """A CLOSED segment read to its end must have brought the replica to its last index."""
    if applier.applied_index != segment.last_index:
        raise MalformedValue(
            f"segment of ledger {segment.ledger_id} ends at index {segment.last_index}, "
            f"but its ledger ends at index {applier.applied_index}"
        )


def _closed_end(log: Log) -> int:
    """The index of the last command of the log's CLOSED part."""
    for segment in reversed(log.segments):
        if not segment.is_open:
            return segment.last_index
    return log.first_index - 1
