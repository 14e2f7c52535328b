"""One Spark task of a bulk snapshot: its decoded batches made into session columns and a summary.

Pure: the executor's shell (`rsm/spark/bulk_snapshot.py`) reads the task's
entries from the bookies and calls `part_pass` with them.  A task's entries
are consecutive in the log (one or more planned partitions, in order), so
its items have consecutive indexes.

`part_pass` gives back, for the items of indexes `[start, end)`:

* `SessionColumns`: the first index; per batch, its time and how many of
  its items are kept; per item, in index order, its session fields (no
  session: client NO_SESSION, a leader-start marker: MARKER; seq and ack
  0 for both), the
  client ids once each in `client_ids`.  What the driver's session pass
  needs (rsm/spark/session_pass.py), in a form that pickles as a few
  arrays;
* the position of the last item's entry (epoch, ledger, entry, time), for
  the snapshot's header;
* the reducer's summary (`SparkReducer.summarize`) of the task's commands,
  leaving out markers and the indexes of `skipped`, with their open indexes
  (`open_indexes`); or, when the reducer refused, its message.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from rsm.core.log_format import Batch, CommandItem
from rsm.errors import NotReducible
from rsm.spark.reduction import PartCommands

NO_SESSION: Final = -1
MARKER: Final = -2


@dataclass(slots=True)
class SessionColumns:
    first_index: int = 0
    batch_times_ms: array[int] = field(default_factory=lambda: array("q"))
    batch_items: array[int] = field(default_factory=lambda: array("q"))
    clients: array[int] = field(default_factory=lambda: array("l"))
    """Position in `client_ids`; NO_SESSION: a command without one; MARKER: a leader-start
    marker."""
    seqs: array[int] = field(default_factory=lambda: array("q"))
    acks: array[int] = field(default_factory=lambda: array("q"))
    client_ids: list[bytes] = field(default_factory=list)

    @property
    def last_index(self) -> int:
        """The last index held (first_index - 1 when none)."""
        return self.first_index + len(self.clients) - 1

    def clock(self, skipped: frozenset[int]) -> Iterator[tuple[int, int]]:
        """`(index, time_ms)` of each command a replica applies (markers and `skipped` left
        out), in index order."""
        clients = self.clients
        index = self.first_index
        for time_ms, count in zip(self.batch_times_ms, self.batch_items, strict=True):
            for position in range(index - self.first_index, index - self.first_index + count):
                if clients[position] != MARKER and index not in skipped:
                    yield index, time_ms
                index += 1

    def rows(self) -> Iterator[tuple[int, int, bytes | None, int | None, int | None]]:
        """`(index, time_ms, client_id, seq, ack_seq)` per item, as `session_pass` takes them."""
        ids = self.client_ids
        clients, seqs, acks = self.clients, self.seqs, self.acks
        index = self.first_index
        for time_ms, count in zip(self.batch_times_ms, self.batch_items, strict=True):
            for position in range(index - self.first_index, index - self.first_index + count):
                client = clients[position]
                if client < 0:
                    yield index, time_ms, None, None, None
                else:
                    yield index, time_ms, ids[client], seqs[position], acks[position]
                index += 1


@dataclass(frozen=True, slots=True)
class Position:
    """Where the last item of a task was logged."""

    index: int
    epoch: int
    ledger_id: int
    entry_id: int
    time_ms: int


@dataclass(frozen=True, slots=True)
class PartPass:
    sessions: SessionColumns
    position: Position | None
    """None: the task read no item."""
    summary: Any
    refusal: str | None
    """The reducer's `NotReducible` message; `summary` is None then."""
    cpu_s: float = 0.0
    """The CPU seconds the executor spent on it (set by the shell that measures them)."""


def open_indexes(columns: SessionColumns) -> frozenset[int]:
    """The indexes of the commands with a session that no later command of the same client
    acknowledges (`ack_seq >= seq`)."""
    acked_later: dict[int, int] = {}
    found: list[int] = []
    clients, seqs, acks = columns.clients, columns.seqs, columns.acks
    for position in range(len(clients) - 1, -1, -1):
        client = clients[position]
        if client < 0:
            continue
        acked = acked_later.get(client, 0)
        if seqs[position] > acked:
            found.append(columns.first_index + position)
        if acks[position] > acked:
            acked_later[client] = acks[position]
    return frozenset(found)


def part_pass(
    entries: Iterable[tuple[int, int, Batch]],
    start: int,
    end: int,
    summarize: Callable[[PartCommands], Any],
    skipped: frozenset[int],
    *,
    keep: frozenset[Any] = frozenset(),
    settings: Any = None,
) -> PartPass:
    """The task's pass over `entries`, `(ledger_id, entry_id, batch)` in log order, keeping
    indexes `[start, end)` (see the module docstring); `keep` and `settings` are
    `PartCommands`'."""
    columns = SessionColumns()
    codes: dict[Any, int] = {None: NO_SESSION, MARKER: MARKER}
    batches: list[Batch] = []
    position = None
    for ledger_id, entry_id, batch in entries:
        first = batch.first_index
        items = batch.items
        low = max(0, start - first)
        high = min(len(items), end - first)
        if low >= high:
            if first >= end:
                break
            continue
        if not batches:
            columns.first_index = first + low
        batches.append(batch)
        kept = items[low:high] if low or high < len(items) else items
        _session_fields(kept, codes, columns)
        columns.batch_times_ms.append(batch.timestamp_ms)
        columns.batch_items.append(len(kept))
        position = Position(first + high - 1, batch.epoch, ledger_id, entry_id, batch.timestamp_ms)
    columns.client_ids.extend(client for client in codes if type(client) is bytes)
    if position is None:
        return PartPass(columns, None, None, None)
    part = PartCommands(
        batches,
        max(start, columns.first_index),
        position.index + 1,
        skipped,
        open_indexes(columns),
        keep,
        settings,
    )
    try:
        return PartPass(columns, position, summarize(part), None)
    except NotReducible as error:
        return PartPass(columns, position, None, str(error))


def _session_fields(items: tuple[Any, ...], codes: dict[Any, int], columns: SessionColumns) -> None:
    """Append the session fields of `items` to `columns`, numbering new clients in `codes`."""
    try:
        client_ids = [item.client_id for item in items]
    except AttributeError:  # a leader-start marker among them
        client_ids = [item.client_id if type(item) is CommandItem else MARKER for item in items]
    columns.clients.extend([codes.setdefault(client, len(codes) - 2) for client in client_ids])
    columns.seqs.extend([getattr(item, "seq", 0) or 0 for item in items])
    columns.acks.extend([getattr(item, "ack_seq", 0) or 0 for item in items])


def holds_any(part: PartPass, indexes: frozenset[int]) -> bool:
    """Whether `part` read an item of one of `indexes` (its summary then depends on them)."""
    columns = part.sessions
    if not columns.clients or not indexes:
        return False
    first, last = columns.first_index, columns.last_index
    return any(first <= index <= last for index in indexes)
