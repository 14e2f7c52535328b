"""Where the tools read a log from: a cluster (read only, never fencing), or an exported file.

Both sources give the same thing: the application's segments, and the log's
entries over an inclusive index range as a stream, raw (`RawEntry`: the
segment, the entry id, the payload as stored) or decoded (`LoggedEntry`,
through the one decoder every replica uses, `rsm.runtime.log.decode_entry`,
which also checks each batch's epoch against its segment's).

`ClusterSource` reads ZooKeeper's log znode once, then the ledgers through
the ledger client opened *without recovery*: nothing is fenced and nothing is
written, so it runs beside live replicas or with them stopped (bookies and
ZooKeeper up).  CLOSED segments are read to their end, the OPEN one up to the
LAC the bookies report when it is opened (`follow` keeps tailing it, as a
follower does).  Reads run ahead of the consumer: up to
`limits.tool_read_ahead_reads_max` ranged reads are in flight while the
caller decodes and applies, so the bookies' work overlaps the replay's; each
asks for about `limits.tool_read_bytes_target` bytes of a closed ledger (its
size is in its metadata), at most `limits.tool_read_entries_max` entries.
The entry holding the first wanted index is found by binary search on entry
ids (`SegmentReader.locate`).  Snapshots are the application's registered
ones, loaded as a replica loads them.

`FileSource` reads an exported file (rsm/tools/export_format.py) as a log
truncated at its first exported index, with the snapshot the file carries;
a worker thread reads and checks the records ahead of the consumer, and
entries before the wanted range are skipped without being decoded (each
record says its index range).

Invariants: entries come in log order, each once; nothing here writes to
ZooKeeper or a bookie; a range below the log's truncation point is
`Truncated`, naming the snapshots from which the rest can be replayed.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from bookie import limits as bookie_limits
from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import ReadHandle
from bookie.errors import BookieError, NoNode
from bookie.meta.api import MetadataStore
from bookie.meta.zk_tls import ZkTls
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_state import Log, Segment
from rsm.core.snapshot_manifest import Manifest, SnapshotsValue
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig, MalformedValue, NoSuchApplication, Truncated
from rsm.host import command_zk_store
from rsm.runtime.log import LogStore, SegmentReader, decode_entry
from rsm.snapshots.loader import Restored, load
from rsm.snapshots.store import SnapshotStore, read_snapshots
from rsm.tools.export_format import ExportedEntry, ExportHeader, ExportReader
from rsm.tools.records import LoggedEntry


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One entry as read, not decoded yet."""

    segment: Segment
    entry_id: int
    payload: bytes

    def decode(self) -> LoggedEntry:
        """The decoded entry; `MalformedValue` naming the ledger and entry otherwise."""
        try:
            batch = decode_entry(self.segment, self.entry_id, self.payload)
        except MalformedValue as error:
            raise MalformedValue(
                f"ledger {self.segment.ledger_id} entry {self.entry_id} does not decode: {error}"
            ) from None
        return LoggedEntry(self.segment.ledger_id, self.entry_id, batch, len(self.payload))


class LogSource(Protocol):
    """What every tool reads (see the module docstring)."""

    app: str
    log: Log
    description: str
    """The command-line options naming this source (for reproduce lines)."""

    def raw_entries(
        self, first_index: int, last_index: int | None = None
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[RawEntry]]:
        """The entries from the one holding `first_index` on, in order, to the readable end
        (`last_index` only lets a source stop early: it may give entries past it)."""
        ...

    async def snapshots(self) -> SnapshotsValue:
        """The application's registered snapshots (none for a file)."""
        ...

    async def restore(
        self, manifest: Manifest, machine: StateMachine, config: ReplicaConfig
    ) -> Restored:
        """`machine` (fresh) restored from the snapshot `manifest` describes."""
        ...

    async def end_index(self) -> int:
        """The last readable index (the OPEN segment: as far as its LAC)."""
        ...

    def snapshot_chunks(self, manifest: Manifest) -> AsyncIterator[bytes]:
        """The chunks of one of `snapshots()`, in order, as stored."""
        ...


@contextlib.asynccontextmanager
async def entries(
    source: LogSource, first_index: int, last_index: int | None = None
) -> AsyncIterator[AsyncIterator[LoggedEntry]]:
    """`source.raw_entries`, decoded, up to the entry holding `last_index`; a corrupt entry,
    or one whose commands do not follow the previous entry's (a gap or an overlap, so that
    indexes would be skipped or read twice), raises `MalformedValue` naming it."""
    async with source.raw_entries(first_index, last_index) as raw:

        async def decoded() -> AsyncIterator[LoggedEntry]:
            continuity = Continuity(first_index)
            async for entry in raw:
                logged = entry.decode()
                continuity.check(logged)
                yield logged
                if last_index is not None and logged.last_index >= last_index:
                    return

        yield decoded()


class Continuity:
    """Checks that the entries read from `first_index` on hold every index once, in order."""

    def __init__(self, first_index: int) -> None:
        self._first_index = first_index
        self._expected: int | None = None
        """The index the next entry with commands must start at, once one was read."""

    def check(self, logged: LoggedEntry) -> None:
        """`MalformedValue` naming `logged` when its commands do not follow the previous
        entry's (a gap or an overlap), or start past `first_index` (which no entry holds)."""
        batch = logged.batch
        if not batch.items:
            return
        expected = self._expected
        where = f"ledger {logged.ledger_id} entry {logged.entry_id} starts at index"
        if expected is None and batch.first_index > self._first_index:
            raise MalformedValue(
                f"{where} {batch.first_index}, past index {self._first_index}, which no "
                "entry holds (`rsm log check` lists every such problem)"
            )
        if expected is not None and batch.first_index != expected:
            raise MalformedValue(
                f"{where} {batch.first_index}; the previous entry ended at {expected - 1} "
                "(`rsm log check` lists every such problem)"
            )
        self._expected = batch.next_index


async def check_range(source: LogSource, first_index: int) -> None:
    """`Truncated` when `first_index` lies below the log's first index, naming the
    snapshots from which the rest of the log can be replayed."""
    log_first = source.log.first_index
    if first_index >= log_first:
        return
    value = await source.snapshots()
    usable = sorted(m.index for m in value.newest_first() if m.index >= log_first - 1)
    hint = (
        f"; the snapshots at indexes {', '.join(map(str, usable))} cover the rest "
        "(`rsm replay --to` starts from one)"
        if usable
        else "; no snapshot covers what is left"
    )
    raise Truncated(
        f"index {first_index} was truncated away: the log of {source.app!r} starts at "
        f"index {log_first}{hint}"
    )


# --- a cluster --------------------------------------------------------------------------------


@dataclass
class _Read:
    """One ranged read in flight: its entries once `done` is set, or its error."""

    segment: Segment
    first: int
    last: int
    done: anyio.Event = field(default_factory=anyio.Event)
    entries: list[tuple[int, bytes]] = field(default_factory=list)
    error: BaseException | None = None


class ClusterSource:
    """An application's log on its cluster; create it with `ClusterSource.connect`."""

    def __init__(
        self,
        *,
        store: MetadataStore,
        ledgers: LedgerClient,
        app: str,
        log: Log,
        config: ReplicaConfig,
        description: str,
        layout: AppLayout,
    ) -> None:
        self._store = store
        self._ledgers = ledgers
        self.app = app
        self.log = log
        self._config = config
        self.description = description
        self._layout = layout
        self._reader = SegmentReader(ledgers, config.ledger_password)
        self._handles: dict[int, ReadHandle] = {}

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        zk: str,
        app: str,
        *,
        ledger_root: str,
        config: ReplicaConfig | None = None,
        tls: ssl.SSLContext | None = None,
        zk_tls: ZkTls | None = None,
    ) -> AsyncIterator[ClusterSource]:
        """Connect to ZooKeeper (with `zk_tls`, over TLS with those files; default: as
        `BOOKIE_ZK_TLS_*` say) and the bookies (with `tls`, their TLS listeners), read the
        log znode: `NoSuchApplication` at once
        when the application does not exist, `MetadataUnavailable` when ZooKeeper gives no
        session within `limits.cli_zk_connect_timeout_ms` (a person waits for the tools)."""
        config = ReplicaConfig() if config is None else config
        layout = AppLayout.of(app)
        async with command_zk_store(zk, tls=zk_tls) as store:
            try:
                log, _version = await LogStore(store, layout).read()
            except NoNode:
                raise NoSuchApplication(app) from None
            async with LedgerClient.open(
                store, root=ledger_root, config=ClientConfig(tls=tls)
            ) as ledgers:
                description = f"--app {app} --zk {zk}"
                if ledger_root != bookie_limits.metadata_root_default:
                    description += f" --ledger-root {ledger_root}"
                yield cls(
                    store=store,
                    ledgers=ledgers,
                    app=app,
                    log=log,
                    config=config,
                    description=description,
                    layout=layout,
                )

    @property
    def ledgers(self) -> LedgerClient:
        return self._ledgers

    @property
    def password(self) -> bytes:
        """The password the application's ledgers were created with."""
        return self._config.ledger_password

    async def handle(self, segment: Segment) -> ReadHandle:
        """A read handle of the segment's ledger, opened without recovery (kept)."""
        handle = self._handles.get(segment.ledger_id)
        if handle is None:
            handle = await self._reader.open(segment, recovery=False)
            self._handles[segment.ledger_id] = handle
        return handle

    async def snapshots(self) -> SnapshotsValue:
        value, _version = await read_snapshots(self._store, self._layout)
        return value

    async def restore(
        self, manifest: Manifest, machine: StateMachine, config: ReplicaConfig
    ) -> Restored:
        return await load(self._snapshot_store(config), manifest, machine, config)

    def snapshot_chunks(self, manifest: Manifest) -> AsyncIterator[bytes]:
        return self._snapshot_store(self._config).chunks(manifest)

    def _snapshot_store(self, config: ReplicaConfig) -> SnapshotStore:
        return SnapshotStore(self._store, self._ledgers, self._layout, config)

    async def end_index(self) -> int:
        log = self.log
        segment = log.open_segment
        if segment is None:
            end = log.end_index
            assert end is not None
            return end
        handle = await self.handle(segment)
        last = handle.last_add_confirmed
        if last < 0:
            return segment.first_index - 1
        [(_entry_id, batch)] = await self._reader.read(segment, handle, last, last)
        return batch.next_index - 1

    async def start_entry(self, segment: Segment, index: int) -> int:
        """The entry of `segment` holding `index` (or the first after it).

        `SegmentReader.locate` finds the first entry starting above `index`;
        the one before it holds `index` (indexes may start mid-batch here)."""
        if index <= segment.first_index:
            return 0
        after = await self._reader.locate(segment, await self.handle(segment), index + 1)
        return max(0, after - 1)

    async def follow(self, next_index: int) -> AsyncGenerator[LoggedEntry]:
        """The entries from the one holding `next_index` on, as they are confirmed, across
        segments, as a follower reads them (the OPEN ledger tailed without recovery); never
        ends by itself."""
        logs = LogStore(self._store, self._layout)
        while True:
            log, version = await logs.read()
            holder = log.segment_for(next_index)
            segments = () if holder is None else log.segments[log.segments.index(holder) :]
            for segment in segments:
                handle = await self._reader.open(segment, recovery=False)
                self._handles[segment.ledger_id] = handle
                first = await self.start_entry(segment, next_index)
                if handle.is_closed:
                    chunk = entries_per_read(handle)
                    for start in range(first, handle.last_add_confirmed + 1, chunk):
                        last = min(handle.last_add_confirmed, start + chunk - 1)
                        for entry in await handle.read_entries(start, last):
                            logged = RawEntry(segment, entry.entry_id, entry.payload).decode()
                            next_index = max(next_index, logged.last_index + 1)
                            yield logged
                    continue
                async with handle.tail(first) as tail:
                    async for entry in tail:
                        logged = RawEntry(segment, entry.entry_id, entry.payload).decode()
                        next_index = max(next_index, logged.last_index + 1)
                        yield logged
            await logs.watch(version)

    @contextlib.asynccontextmanager
    async def raw_entries(
        self, first_index: int, last_index: int | None = None
    ) -> AsyncIterator[AsyncIterator[RawEntry]]:
        await check_range(self, first_index)
        send, receive = anyio.create_memory_object_stream[_Read](limits.tool_read_ahead_reads_max)
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(self._produce, task_group, send, first_index, last_index)
            try:
                yield _consume(receive)
            finally:
                task_group.cancel_scope.cancel()

    async def _produce(
        self,
        task_group: anyio.abc.TaskGroup,
        send: anyio.abc.ObjectSendStream[_Read],
        first_index: int,
        last_index: int | None,
    ) -> None:
        async with send:
            for segment in self.log.segments:
                if not segment.holds(first_index) and not segment.first_index > first_index:
                    continue
                if last_index is not None and segment.first_index > last_index:
                    break
                try:
                    handle = await self.handle(segment)
                    start = await self.start_entry(segment, first_index)
                except BookieError as error:
                    failed = _Read(segment, 0, 0, error=error)
                    failed.done.set()
                    await send.send(failed)
                    return
                chunk = entries_per_read(handle)
                for first in range(start, handle.last_add_confirmed + 1, chunk):
                    read = _Read(segment, first, min(handle.last_add_confirmed, first + chunk - 1))
                    task_group.start_soon(_run_read, handle, read)
                    await send.send(read)


def entries_per_read(handle: ReadHandle) -> int:
    """Entries per ranged read of this ledger: `limits.tool_read_bytes_target` worth when its
    size is known (closed), within the entry bounds."""
    most = min(limits.tool_read_entries_max, bookie_limits.read_batch_entries_max)
    metadata = handle.metadata
    entries = handle.last_add_confirmed + 1
    if not metadata.is_closed or entries <= 0 or metadata.length <= 0:
        return most
    entry_bytes = max(1, metadata.length // entries)
    return max(1, min(most, limits.tool_read_bytes_target // entry_bytes))


async def _run_read(handle: ReadHandle, read: _Read) -> None:
    try:
        got = await handle.read_entries(read.first, read.last)
        read.entries = [(entry.entry_id, entry.payload) for entry in got]
    except BookieError as error:
        read.error = error
    finally:
        read.done.set()


async def _consume(receive: anyio.abc.ObjectReceiveStream[_Read]) -> AsyncIterator[RawEntry]:
    async with receive:
        async for read in receive:
            await read.done.wait()
            if read.error is not None:
                raise read.error
            for entry_id, payload in read.entries:
                yield RawEntry(read.segment, entry_id, payload)


# --- an exported file -------------------------------------------------------------------------


class FileSource:
    """An exported log file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.description = f"--log {path}"
        try:
            with path.open("rb") as stream:
                header = ExportReader(stream, str(path)).header
        except OSError as error:
            raise InvalidConfig(f"cannot read {path}: {error.strerror}") from None
        self.header = header
        self.app = header.app
        self.log = _exported_part(header)

    async def snapshots(self) -> SnapshotsValue:
        snapshot = self.header.snapshot
        return SnapshotsValue() if snapshot is None else SnapshotsValue(snapshots=(snapshot,))

    async def restore(
        self, manifest: Manifest, machine: StateMachine, config: ReplicaConfig
    ) -> Restored:
        """Load the file's snapshot, checked as a replica checks one (`rsm.snapshots.loader`)."""
        if manifest != self.header.snapshot:
            raise InvalidConfig(f"{self.path} holds no snapshot at index {manifest.index}")
        return await load(_FileChunks(self.path), manifest, machine, config)

    def snapshot_chunks(self, manifest: Manifest) -> AsyncIterator[bytes]:
        return _FileChunks(self.path).chunks(manifest)

    async def end_index(self) -> int:
        return self.header.last_index

    @contextlib.asynccontextmanager
    async def raw_entries(
        self, first_index: int, last_index: int | None = None
    ) -> AsyncIterator[AsyncIterator[RawEntry]]:
        if first_index < self.header.first_index:
            raise Truncated(
                f"index {first_index} is not in {self.path}: it holds indexes "
                f"{self.header.first_index}..{self.header.last_index}"
            )
        segments = {segment.ledger_id: segment for segment in self.log.segments}
        with self.path.open("rb") as stream:
            records = iter(ExportReader(stream, str(self.path)))
            send, receive = anyio.create_memory_object_stream[list[ExportedEntry]](
                limits.tool_read_ahead_reads_max
            )
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(_read_ahead, records, send)
                try:
                    yield _file_entries(receive, segments, first_index, last_index)
                finally:
                    task_group.cancel_scope.cancel()


class _FileChunks:
    """The chunks of an exported file's snapshot, as `load` reads a snapshot store's."""

    def __init__(self, path: Path) -> None:
        self._path = path

    async def chunks(self, manifest: Manifest) -> AsyncIterator[bytes]:
        with self._path.open("rb") as stream:
            reader = ExportReader(stream, str(self._path))
            for chunk in reader.chunks():
                yield chunk
                await anyio.lowlevel.checkpoint()


def _exported_part(header: ExportHeader) -> Log:
    """The log as the file holds it: its segments from the one holding the first exported
    index on, that one starting there (like a log truncated at that index)."""
    first = header.first_index
    kept = [
        replace(segment, first_index=max(segment.first_index, first))
        for segment in header.segments
        if segment.is_open or segment.last_index >= first
    ]
    return Log(max((segment.epoch for segment in kept), default=0), tuple(kept))


async def _read_ahead(
    records: Iterator[ExportedEntry], send: anyio.abc.ObjectSendStream[list[ExportedEntry]]
) -> None:
    """Read the file's records in a worker thread, a chunk at a time, ahead of the consumer."""

    def chunk() -> list[ExportedEntry]:
        taken: list[ExportedEntry] = []
        for record in records:
            taken.append(record)
            if len(taken) == limits.tool_read_entries_max:
                break
        return taken

    async with send:
        while True:
            taken = await anyio.to_thread.run_sync(chunk, abandon_on_cancel=True)
            if not taken:
                return
            await send.send(taken)


async def _file_entries(
    receive: anyio.abc.ObjectReceiveStream[list[ExportedEntry]],
    segments: dict[int, Segment],
    first_index: int,
    last_index: int | None,
) -> AsyncIterator[RawEntry]:
    async with receive:
        async for chunk in receive:
            for record in chunk:
                if record.first_index + record.items <= first_index and record.items:
                    continue
                if last_index is not None and record.first_index > last_index:
                    return
                yield RawEntry(segments[record.ledger_id], record.entry_id, record.payload)


# --- choosing one -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_source(
    *,
    log_file: str | None,
    app: str | None,
    zk: str | None,
    ledger_root: str,
    config: ReplicaConfig | None = None,
    tls: ssl.SSLContext | None = None,
    zk_tls: ZkTls | None = None,
) -> AsyncIterator[LogSource]:
    """The file when `log_file` is given, else the cluster of `app` at `zk` (its bookies
    reached with `tls`, None: plain TCP; its ZooKeeper with `zk_tls`, see
    `ClusterSource.connect`)."""
    if log_file is not None:
        if app is not None or zk is not None:
            raise InvalidConfig("give either --log FILE or --app and --zk, not both")
        yield FileSource(Path(log_file))
        return
    if app is None or zk is None:
        raise InvalidConfig("give --app NAME and --zk HOSTS (or --log FILE, an exported log)")
    async with ClusterSource.connect(
        zk, app, ledger_root=ledger_root, config=config, tls=tls, zk_tls=zk_tls
    ) as source:
        yield source
