"""`rsm log check`: is the log whole, and how far is it good?

Reads every entry of every segment (a cluster: without recovery, the OPEN
segment up to its LAC; or an exported file) and reports each problem with
both coordinates:

* `unreadable`: an entry no bookie returned intact (the read's error names
  why: digest mismatch on every copy, no copy, ...);
* `undecodable`: an entry that is not a batch of this framework, or carries
  another epoch than its segment's;
* `gap` / `overlap`: an entry that does not start at the index after the
  previous one's last, within a segment or across two;
* `segment-end`: a CLOSED segment whose ledger ends at another index than
  the log says (of an export that stops inside or before a segment, only
  the segments it holds whole);
* `ledger-state`: a CLOSED segment whose ledger is not closed, or an OPEN
  segment whose ledger is closed (a takeover that did not finish: the
  segment is left open until the next leader records its end);
* `file`: an exported file that is truncated or damaged (reading stops).

`ok_up_to` is the last index before the first problem: every command up to it
was read and decoded in order.  Without `keep_going` the check stops at the
first problem; with it, it goes on past unreadable and undecodable entries
(whose indexes are then unknown: the next entry's first index resumes the
count).

Invariants: read only; entries are checked in log order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from bookie.errors import BookieError
from rsm.core.log_state import Segment
from rsm.errors import ExportCorrupt, MalformedValue
from rsm.tools.source import ClusterSource, LogSource, RawEntry, entries_per_read


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    message: str
    ledger_id: int | None = None
    entry_id: int | None = None
    index: int | None = None

    def plain(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "index": self.index,
        }


@dataclass
class CheckReport:
    app: str
    segments: int = 0
    entries: int = 0
    commands: int = 0
    payload_bytes: int = 0
    end_index: int = 0
    ok_up_to: int = 0
    open_segments: int = 0
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Unreadable:
    segment: Segment
    entry_id: int
    error: Exception


async def check_log(
    source: LogSource, *, keep_going: bool, progress: Callable[[int], None] | None = None
) -> CheckReport:
    """Check the whole log of `source` (see the module docstring)."""
    log = source.log
    report = CheckReport(source.app, segments=len(log.segments))
    report.ok_up_to = log.first_index - 1
    report.end_index = log.first_index - 1
    report.open_segments = sum(1 for segment in log.segments if segment.is_open)
    expected = log.first_index
    ends: dict[int, int] = {}
    """Ledger id -> the last index its entries hold, for the segment-end check."""

    def problem(found: Problem) -> bool:
        report.problems.append(found)
        return keep_going

    for segment in log.segments:
        if not await _check_ledger_state(source, segment, problem):
            return report
    async for read in _all_entries(source):
        segment = read.segment
        if isinstance(read, _Unreadable):
            fatal = isinstance(read.error, ExportCorrupt)
            kind = "file" if fatal else "unreadable"
            ledger_id, entry_id = (None, None) if fatal else (segment.ledger_id, read.entry_id)
            if not problem(Problem(kind, str(read.error), ledger_id, entry_id)):
                return report
            if fatal:
                return report
            continue
        report.entries += 1
        report.payload_bytes += len(read.payload)
        try:
            entry = read.decode()
        except MalformedValue as error:
            if not problem(Problem("undecodable", str(error), segment.ledger_id, read.entry_id)):
                return report
            continue
        batch = entry.batch
        if batch.items and batch.first_index != expected:
            kind = "gap" if batch.first_index > expected else "overlap"
            message = (
                f"ledger {entry.ledger_id} entry {entry.entry_id} starts at index "
                f"{batch.first_index}; the previous entry ended at {expected - 1}"
            )
            if not problem(Problem(kind, message, entry.ledger_id, entry.entry_id, expected)):
                return report
        report.commands += len(batch.items)
        if batch.items:
            expected = batch.next_index
            report.end_index = expected - 1
            ends[entry.ledger_id] = expected - 1
            if not report.problems:
                report.ok_up_to = expected - 1
        if progress is not None:
            progress(report.end_index)
    if not report.problems:
        _check_segment_ends(log.segments, ends, await source.end_index(), problem)
    return report


def _check_segment_ends(
    segments: tuple[Segment, ...],
    ends: dict[int, int],
    end_index: int,
    problem: Callable[[Problem], bool],
) -> None:
    """Each CLOSED segment up to `end_index` (the source's end: an export may stop inside
    or before a segment) ends where its entries do."""
    for segment in segments:
        if segment.is_open or segment.last_index > end_index:
            continue
        end = ends.get(segment.ledger_id, segment.first_index - 1)
        if end != segment.last_index:
            message = (
                f"segment of ledger {segment.ledger_id} ends at index {segment.last_index} in "
                f"the log, but its entries end at index {end}"
            )
            if not problem(Problem("segment-end", message, segment.ledger_id)):
                return


async def _check_ledger_state(
    source: LogSource, segment: Segment, problem: Callable[[Problem], bool]
) -> bool:
    """Compare the segment's state with its ledger's (a cluster only); False: stop."""
    if not isinstance(source, ClusterSource):
        return True
    try:
        handle = await source.handle(segment)
    except BookieError as error:
        message = f"ledger {segment.ledger_id} cannot be opened: {error}"
        problem(Problem("unreadable", message, segment.ledger_id))
        return False
    if segment.is_open == handle.is_closed:
        if segment.is_open:
            message = (
                f"segment of ledger {segment.ledger_id} is OPEN in the log but its ledger is "
                "closed: a takeover did not finish (the next leader records its end)"
            )
        else:
            message = f"segment of ledger {segment.ledger_id} is CLOSED but its ledger is not"
        return problem(Problem("ledger-state", message, segment.ledger_id))
    return True


async def _all_entries(source: LogSource) -> AsyncIterator[RawEntry | _Unreadable]:
    """Every entry of the log in order; one that cannot be read is an `_Unreadable`."""
    if isinstance(source, ClusterSource):
        for segment in source.log.segments:
            async for read in _segment_entries(source, segment):
                yield read
        return
    first = source.log.segments[0] if source.log.segments else None
    try:
        async with source.raw_entries(source.log.first_index) as raw:
            async for read in raw:
                yield read
    except ExportCorrupt as error:
        if first is not None:
            yield _Unreadable(first, -1, error)


async def _segment_entries(
    source: ClusterSource, segment: Segment
) -> AsyncIterator[RawEntry | _Unreadable]:
    handle = await source.handle(segment)
    chunk = entries_per_read(handle)
    last = handle.last_add_confirmed
    for first in range(0, last + 1, chunk):
        chunk_last = min(last, first + chunk - 1)
        try:
            got = await handle.read_entries(first, chunk_last)
        except BookieError:
            for entry_id in range(first, chunk_last + 1):
                try:
                    [single] = await handle.read_entries(entry_id, entry_id)
                except BookieError as error:
                    yield _Unreadable(segment, entry_id, error)
                else:
                    yield RawEntry(segment, single.entry_id, single.payload)
            continue
        for entry in got:
            yield RawEntry(segment, entry.entry_id, entry.payload)
