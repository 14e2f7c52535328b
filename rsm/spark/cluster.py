"""The Spark sources' I/O: what the driver plans from ZooKeeper, what executors read from bookies.

Spark calls a source synchronously (`partitions()` on the driver, `read()` on
executors), so a `Cluster` runs one ZooKeeper session and one ledger client
on an event loop in a thread of its own (an anyio blocking portal) for the
length of a `with` block, and its methods call into it.

Driver (`plan_log`, `plan_ledgers`, `readable_end`): the log znode (or the ledger list)
gives the ledgers; each one is opened without recovery, so nothing is ever
fenced: a CLOSED ledger is read to its last entry, an open one to the LAC its
bookies report now.  Index bounds become entry ranges by `SegmentReader.locate`
(binary search on the batches' first indexes), time bounds by a binary
search on the batches' timestamps (never decreasing along the log); segments
outside the bounds are never opened.  The entry ranges are then cut by
`planning.split`, once: a retried task reads exactly the entries it read
the first time (an open ledger's end is pinned to the LAC seen when
planning).  Ledgers are opened with the framework's ledger password
(`ReplicaConfig.ledger_password`).  With `ClusterOptions.tls_ca_file` (the
option `tlsCaFile`) the driver and every executor reach the bookies through
their TLS listeners, each building its TLS context from the files.

The bulk snapshot (on the driver): `restore_snapshot` loads the snapshot a
truncated log goes on from, as replicas load one; a reduced state goes
through the replicas' own snapshot store (rsm/snapshots/store.py: a pending
ledger, the chunks `stream_snapshot` makes, the manifest registered by
compare-and-set), so it is a snapshot like any replica's.

Executors (`log_entries`, `ledger_entries`): the partition's entries, in chunks of
`limits.spark_read_chunk_entries`, the next chunk asked for while the
caller uses the current one, decoded with the framework's own
`decode_entry` (which also checks each batch carries its segment's epoch).
An entry that cannot be read or decoded raises `EntryUnreadable` naming the
ledger, the entry and the bookies of its write set; with `mode=PERMISSIVE`
it is a `CorruptEntry` with the same text instead, and the read goes on.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from anyio.from_thread import BlockingPortal, start_blocking_portal

from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import LedgerEntry, ReadHandle
from bookie.core.quorum import Quorum
from bookie.errors import BookieError, DigestMismatch, NoNode, NoSuchLedgerError
from bookie.errors import InvalidConfig as BookieInvalidConfig
from bookie.meta.api import MetadataStore
from bookie.meta.zk import ZkMetadataStore
from bookie.net.tls import client_context
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core import snapshot_manifest
from rsm.core.layout import AppLayout
from rsm.core.log_format import Batch
from rsm.core.log_state import Log, Segment
from rsm.core.sessions import SessionTable
from rsm.core.snapshot_format import SnapshotHeader
from rsm.core.snapshot_manifest import Manifest
from rsm.core.state_machine import StateMachine
from rsm.errors import (
    EntryUnreadable,
    InvalidConfig,
    MalformedValue,
    NoSuchApplication,
    Truncated,
)
from rsm.host import split_zk
from rsm.runtime.log import LogStore, SegmentReader, decode_entry
from rsm.snapshots.capture import CaptureResult, stream_snapshot
from rsm.snapshots.loader import Restored, load
from rsm.snapshots.store import SnapshotStore, manifest_of, pending_ledger, read_snapshots
from rsm.spark.options import ClusterOptions, SplitOptions
from rsm.spark.planning import Bounds, Interval, Span, split
from rsm.spark.rows import DIGEST_MISMATCH, DIGEST_UNAVAILABLE, DIGEST_VERIFIED, CorruptEntry


@dataclass(frozen=True, slots=True)
class LogPartition:
    """Entries `first_entry .. last_entry` of one segment's ledger, and the rows to keep."""

    segment: Segment
    first_entry: int
    last_entry: int
    bounds: Bounds


@dataclass(frozen=True, slots=True)
class LedgerPartition:
    """Entries `first_entry .. last_entry` of one ledger."""

    ledger_id: int
    first_entry: int
    last_entry: int


class Cluster:
    """One ZooKeeper session and ledger client, called from synchronous code (see above)."""

    def __init__(
        self, portal: BlockingPortal, store: MetadataStore, ledgers: LedgerClient, ledger_root: str
    ) -> None:
        self._portal = portal
        self._ledger_root = ledger_root
        self._store = store
        self._ledgers = ledgers
        self._reader = SegmentReader(ledgers, ReplicaConfig().ledger_password)

    @classmethod
    @contextlib.contextmanager
    def open(cls, options: ClusterOptions) -> Iterator[Cluster]:
        hosts, chroot = split_zk(options.zk)
        with (
            start_blocking_portal() as portal,
            portal.wrap_async_context_manager(
                _connect(hosts, chroot, options.ledger_root, _ledger_config(options))
            ) as (store, ledgers),
        ):
            yield cls(portal, store, ledgers, options.ledger_root)

    # --- driver -------------------------------------------------------------------------------

    def log(self, app: str) -> Log:
        """`app`'s log as its znode holds it now."""
        return self._portal.call(self._read_log, app)

    def plan_log(
        self, app: str, bounds: Bounds, options: SplitOptions, *, on_data_loss: str = "fail"
    ) -> list[LogPartition]:
        """The partitions of a read of `app`'s log within `bounds` (index start None: earliest).

        An explicit start index below the log's first index raises
        `Truncated`, naming the missing range and the snapshot that covers it;
        with `on_data_loss="snapshot"` the read goes on from the first index
        instead when a registered snapshot covers the gap.
        """
        log = self.log(app)
        start = bounds.index.start
        if start is not None and start < log.first_index:
            covering = self.covering_snapshot(app, log.first_index)
            if on_data_loss != "snapshot" or covering is None:
                raise _truncated(app, start, log.first_index, covering)
        bounds = bounds.meet(Bounds(index=Interval(log.first_index, None)))
        if bounds.is_empty:
            return []
        spans: list[Span] = []
        segments: dict[int, Segment] = {}
        for segment in log.segments:
            if not (
                bounds.epoch.holds(segment.epoch) and bounds.ledger_id.holds(segment.ledger_id)
            ):
                continue
            last_index = None if segment.is_open else segment.last_index
            if not bounds.index.overlaps(
                segment.first_index, _FAR if last_index is None else last_index
            ):
                continue
            span = self._portal.call(self._segment_span, segment, bounds)
            segments[segment.ledger_id] = segment
            spans.append(span)
        pieces = split(
            spans,
            min_partitions=options.min_partitions,
            max_entries_per_partition=options.max_entries_per_partition,
        )
        return [
            LogPartition(segments[piece.ledger_id], piece.first_entry, piece.last_entry, bounds)
            for piece in pieces
        ]

    def covering_snapshot(self, app: str, first_index: int) -> int | None:
        """The index of the oldest registered snapshot of `app` from which its log, truncated
        below `first_index`, still goes on; None when there is none."""
        return self._portal.call(self._covering_snapshot, app, first_index)

    def restore_snapshot(
        self, app: str, machine: StateMachine, config: ReplicaConfig, *, at_least: int, below: int
    ) -> Restored | None:
        """The newest registered snapshot of `app` at an index in `[at_least, below)`,
        restored into `machine` (fresh) through the replicas' snapshot store and checked as
        they check one (rsm/snapshots/loader.py); None when there is none."""
        return self._portal.call(
            functools.partial(
                self._restore_snapshot, app, machine, config, at_least=at_least, below=below
            )
        )

    def readable_end(self, app: str) -> int:
        """One past the last index readable now without fencing (the log's first index when
        nothing is): a CLOSED last segment's end, else the batch at its ledger's LAC."""
        log = self.log(app)
        if not log.segments:
            return log.first_index
        last = log.segments[-1]
        if not last.is_open:
            return last.last_index + 1
        return self._portal.call(self._open_segment_end, last)

    def write_snapshot(
        self,
        machine: StateMachine,
        header: SnapshotHeader,
        sessions: SessionTable,
        config: ReplicaConfig,
    ) -> Manifest:
        """Write `machine` and `sessions` as a snapshot described by `header` and register it;
        its manifest.  A snapshot already registered at that index stays the registered one
        (the new ledger goes to garbage), as for replicas."""
        return self._portal.call(self._write_snapshot, machine, header, sessions, config)

    def plan_ledgers(
        self, ledger_ids: Sequence[int] | None, options: SplitOptions
    ) -> list[LedgerPartition]:
        """The partitions of a read of the given ledgers (None: every ledger of the cluster)."""
        spans = self._portal.call(self._ledger_spans, ledger_ids)
        pieces = split(
            spans,
            min_partitions=options.min_partitions,
            max_entries_per_partition=options.max_entries_per_partition,
        )
        return [
            LedgerPartition(piece.ledger_id, piece.first_entry, piece.last_entry)
            for piece in pieces
        ]

    # --- executors ----------------------------------------------------------------------------

    def log_entries(
        self, partition: LogPartition, *, permissive: bool = False
    ) -> Iterator[list[tuple[int, Batch, int] | CorruptEntry]]:
        """The partition's entries as (entry id, batch, payload bytes), one list per chunk;
        with `permissive` an entry that cannot be read or decoded is a `CorruptEntry`.

        Each batch must go on from the one before it (the entry before the partition's
        first is read for that) and stay within its segment's indexes; a closed segment's
        last entry must end at the segment's last index.  An entry that does not (a gap,
        an overlap, indexes outside its segment) is unreadable as a corrupt one is: it
        raises `EntryUnreadable` naming it, or is a `CorruptEntry` with `permissive` (the
        next one must then go on from the last entry that fitted)."""
        segment = partition.segment
        handle = self._portal.call(functools.partial(self._reader.open, segment, recovery=False))
        expected = self._index_at(handle, segment, partition.first_entry)
        fitted = -1  # the last entry that decoded and fitted
        for entries in self._chunks(
            handle, partition.first_entry, partition.last_entry, permissive
        ):
            decoded: list[tuple[int, Batch, int] | CorruptEntry] = []
            for entry in entries:
                if isinstance(entry, CorruptEntry):
                    decoded.append(entry)
                    expected = None  # what the next entry should start at is unknown
                    continue
                try:
                    batch = decode_entry(segment, entry.entry_id, entry.payload)
                    _check_place(segment, batch, expected)
                except MalformedValue as error:
                    unreadable = _unreadable(handle, entry.entry_id, str(error))
                    if not permissive:
                        raise unreadable from None
                    decoded.append(CorruptEntry(entry.entry_id, DIGEST_VERIFIED, str(unreadable)))
                    continue
                if batch.items:
                    expected = batch.next_index
                fitted = entry.entry_id
                decoded.append((entry.entry_id, batch, len(entry.payload)))
            yield decoded
        if (
            not segment.is_open
            and partition.last_entry == handle.last_add_confirmed
            and fitted == partition.last_entry
            and expected is not None
            and expected != segment.last_index + 1
        ):
            why = (
                f"the segment ends at index {segment.last_index}, but its last entry ends "
                f"at {expected - 1}"
            )
            unreadable = _unreadable(handle, partition.last_entry, why)
            if not permissive:
                raise unreadable
            yield [CorruptEntry(partition.last_entry, DIGEST_VERIFIED, str(unreadable))]

    def _index_at(self, handle: ReadHandle, segment: Segment, entry_id: int) -> int | None:
        """The index the entry `entry_id` of `segment` must start at: the segment's first for
        its first entry, else where the entry before it ends (None when that entry cannot be
        read or decoded: the partition holding it says so)."""
        for before in range(entry_id - 1, -1, -1):  # back over entries without items
            try:
                [(_entry_id, batch)] = self._portal.call(
                    self._reader.read, segment, handle, before, before
                )
            except (BookieError, MalformedValue):
                return None
            if batch.items:
                return batch.next_index
        return segment.first_index

    def ledger_entries(
        self, partition: LedgerPartition, *, permissive: bool = False
    ) -> Iterator[list[tuple[LedgerEntry | CorruptEntry, tuple[str, ...]]]]:
        """The partition's entries with the bookies that hold each, one list per chunk; with
        `permissive` an entry that cannot be read is a `CorruptEntry`."""
        handle = self._portal.call(
            functools.partial(
                self._ledgers.open_ledger,
                partition.ledger_id,
                ReplicaConfig().ledger_password,
                recovery=False,
            )
        )
        for entries in self._chunks(
            handle, partition.first_entry, partition.last_entry, permissive
        ):
            yield [(entry, write_set(handle, entry.entry_id)) for entry in entries]

    def _chunks(
        self, handle: ReadHandle, first: int, last: int, permissive: bool
    ) -> Iterator[list[LedgerEntry | CorruptEntry]]:
        chunk = limits.spark_read_chunk_entries
        starts = range(first, last + 1, chunk)

        def read(chunk_first: int) -> Future[Sequence[LedgerEntry]]:
            chunk_last = min(last, chunk_first + chunk - 1)
            return self._portal.start_task_soon(handle.read_entries, chunk_first, chunk_last)

        ahead = read(starts[0]) if starts else None
        for number, chunk_first in enumerate(starts):
            chunk_last = min(last, chunk_first + chunk - 1)
            current = ahead
            assert current is not None
            # The next chunk is asked for before this one is used: the bookies serve it
            # while the caller decodes.
            ahead = read(starts[number + 1]) if number + 1 < len(starts) else None
            try:
                yield list(current.result())
            except BookieError:
                # Find the entries at fault, so the error (or the rows) names them.
                yield [
                    self._entry(handle, entry_id, permissive)
                    for entry_id in range(chunk_first, chunk_last + 1)
                ]

    def _entry(
        self, handle: ReadHandle, entry_id: int, permissive: bool
    ) -> LedgerEntry | CorruptEntry:
        try:
            (entry,) = self._portal.call(handle.read_entries, entry_id, entry_id)
        except BookieError as error:
            unreadable = _unreadable(handle, entry_id, f"{type(error).__name__}: {error}")
            if not permissive:
                raise unreadable from None
            digest = DIGEST_MISMATCH if isinstance(error, DigestMismatch) else DIGEST_UNAVAILABLE
            return CorruptEntry(entry_id, digest, str(unreadable))
        return entry

    # --- async work, on the portal's loop ------------------------------------------------------

    async def _write_snapshot(
        self,
        machine: StateMachine,
        header: SnapshotHeader,
        sessions: SessionTable,
        config: ReplicaConfig,
    ) -> Manifest:
        store = SnapshotStore(self._store, self._ledgers, AppLayout.of(header.app), config)
        stream = stream_snapshot(machine, header, sessions, config.snapshot_chunk_bytes)
        results: list[CaptureResult] = []

        async def payloads() -> AsyncIterator[bytes]:
            for piece in stream:
                if isinstance(piece, CaptureResult):
                    results.append(piece)
                else:
                    yield piece

        async with pending_ledger(
            store, replica_id=header.replica_id, started_ms=header.created_ms
        ) as handle:
            written = await store.write_ledger(handle, payloads())
            (result,) = results
            manifest = manifest_of(header, written, result)
            await store.update(
                lambda current: snapshot_manifest.register(
                    current, manifest, kept=config.snapshots_kept
                )
            )
        return manifest

    async def _read_log(self, app: str) -> Log:
        layout = AppLayout.of(app)
        try:
            log, _version = await LogStore(self._store, layout).read()
        except NoNode:
            raise NoSuchApplication(app) from None
        return log

    async def _restore_snapshot(
        self, app: str, machine: StateMachine, config: ReplicaConfig, *, at_least: int, below: int
    ) -> Restored | None:
        layout = AppLayout.of(app)
        value, _version = await read_snapshots(self._store, layout)
        usable = [m for m in value.newest_first() if at_least <= m.index < below]
        if not usable:
            return None
        store = SnapshotStore(self._store, self._ledgers, layout, config)
        return await load(store, usable[0], machine, config)

    async def _covering_snapshot(self, app: str, first_index: int) -> int | None:
        """The index of the oldest registered snapshot from which the log still goes on."""
        value, _version = await read_snapshots(self._store, AppLayout.of(app))
        covering = [m.index for m in value.snapshots if m.index >= first_index - 1]
        return covering[0] if covering else None

    async def _segment_span(self, segment: Segment, bounds: Bounds) -> Span:
        """The entries of `segment` that may hold rows within `bounds`."""
        reader = self._reader
        try:
            handle = await reader.open(segment, recovery=False)
        except NoSuchLedgerError:
            raise EntryUnreadable(
                f"ledger {segment.ledger_id} of the log is not in the ledger cluster rooted at "
                f"{self._ledger_root}: a wrong ledgerRoot, or the ledger was deleted"
            ) from None
        first = 0
        last = handle.last_add_confirmed
        start, end = bounds.index.start, bounds.index.end
        if start is not None and start > segment.first_index:
            # The entry holding `start`: the one before the first that starts after it.
            first = max(0, await reader.locate(segment, handle, start + 1) - 1)
        if end is not None and (segment.is_open or end <= segment.last_index):
            last = await reader.locate(segment, handle, end) - 1
        time = bounds.time_ms
        if time.start is not None and first <= last:
            first = await self._first_at(segment, handle, first, last, time.start)
        if time.end is not None and first <= last:
            last = await self._first_at(segment, handle, first, last, time.end) - 1
        return Span(segment.ledger_id, segment.epoch, first, last)

    async def _open_segment_end(self, segment: Segment) -> int:
        handle = await self._reader.open(segment, recovery=False)
        last = handle.last_add_confirmed
        if last < 0:
            return segment.first_index
        [(_entry_id, batch)] = await self._reader.read(segment, handle, last, last)
        return batch.next_index

    async def _first_at(
        self, segment: Segment, handle: ReadHandle, low: int, last: int, time_ms: int
    ) -> int:
        """The first entry of `low .. last` logged at or after `time_ms`, else `last + 1`."""
        high = last + 1
        while low < high:
            middle = (low + high) // 2
            [(_entry_id, batch)] = await self._reader.read(segment, handle, middle, middle)
            if batch.timestamp_ms < time_ms:
                low = middle + 1
            else:
                high = middle
        return low

    async def _ledger_spans(self, ledger_ids: Sequence[int] | None) -> list[Span]:
        ledgers = self._ledgers
        ids = await ledgers.list_ledgers() if ledger_ids is None else list(ledger_ids)
        spans: list[Span] = []
        for ledger_id in ids:
            try:
                handle = await ledgers.open_ledger(
                    ledger_id, ReplicaConfig().ledger_password, recovery=False
                )
            except NoSuchLedgerError:
                if ledger_ids is None:
                    continue  # deleted since it was listed
                raise InvalidConfig(f"there is no ledger {ledger_id}") from None
            spans.append(Span(ledger_id, 0, 0, handle.last_add_confirmed))
        return spans


_FAR = 1 << 63
"""Past every index: the end of an OPEN segment, not known yet."""


def _ledger_config(options: ClusterOptions) -> ClientConfig:
    """The ledger client's settings: TLS to the bookies with `tls_ca_file`; `InvalidConfig`
    naming the file that cannot be used."""
    if options.tls_ca_file is None:
        return ClientConfig()
    paths = (options.tls_ca_file, options.tls_cert_file, options.tls_key_file)
    ca_file, cert_file, key_file = (None if path is None else Path(path) for path in paths)
    try:
        return ClientConfig(tls=client_context(ca_file, cert_file, key_file))
    except BookieInvalidConfig as error:
        raise InvalidConfig(str(error)) from None


@contextlib.asynccontextmanager
async def _connect(
    hosts: str, chroot: str | None, ledger_root: str, config: ClientConfig
) -> AsyncIterator[tuple[MetadataStore, LedgerClient]]:
    async with (
        ZkMetadataStore.connect(hosts, root=chroot) as store,
        LedgerClient.open(store, root=ledger_root, config=config) as ledgers,
    ):
        yield store, ledgers


def _truncated(app: str, start: int, first_index: int, covering: int | None) -> Truncated:
    where = (
        f"the snapshot at index {covering} covers it (read on from index {covering + 1}, "
        "or set onDataLoss=snapshot)"
        if covering is not None
        else "no registered snapshot covers it"
    )
    return Truncated(f"indexes [{start}, {first_index}) of {app!r} were truncated away; {where}")


def _check_place(segment: Segment, batch: Batch, expected: int | None) -> None:
    """`MalformedValue` unless `batch` starts at `expected` (when known) and its indexes lie
    within `segment`'s."""
    if not batch.items:
        return
    if expected is not None and batch.first_index != expected:
        raise MalformedValue(
            f"it starts at index {batch.first_index}; the previous entry ended at {expected - 1}"
        )
    last = batch.next_index - 1
    if batch.first_index < segment.first_index or (
        not segment.is_open and last > segment.last_index
    ):
        end = "" if segment.is_open else f" .. {segment.last_index}"
        raise MalformedValue(
            f"it holds indexes {batch.first_index} .. {last}, outside its segment's "
            f"{segment.first_index}{end}"
        )


def write_set(handle: ReadHandle, entry_id: int) -> tuple[str, ...]:
    """The bookies that hold `entry_id` of the handle's ledger, in the order readers try them."""
    metadata = handle.metadata
    ensemble = metadata.ensemble_at(entry_id)
    quorum = Quorum(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
    return tuple(ensemble[position] for position in quorum.write_set(entry_id))


def _unreadable(handle: ReadHandle, entry_id: int, why: str) -> EntryUnreadable:
    bookies = ", ".join(write_set(handle, entry_id))
    return EntryUnreadable(
        f"ledger {handle.ledger_id} entry {entry_id} (on bookies {bookies}) is unreadable: {why}"
    )
