"""The snapshot store of one application: its snapshots znode and its snapshot ledgers.

A snapshot is one ledger, one chunk per entry (rsm/core/snapshot_format.py),
created with the application's E/Qw/Qa and password, written with pipelined
appends (at most `limits.snapshot_write_inflight_bytes_max` unconfirmed) and
closed; its manifest then goes into `/rsm/<app>/snapshots` by
compare-and-set.  The znode's meaning and its legal changes are
`rsm/core/snapshot_manifest.py`'s; this module reads it, changes it in
re-read-and-retry loops, writes and reads the ledgers, and deletes the
ledgers the znode lists as garbage.

Steps of `write` and what a crash after each leaves:

1. create the ledger, then CAS it into `pending`: a crash leaves it pending;
   once `orphan_grace_ms` passed, the leader's round moves it to garbage.
   (A crash between creating it and this CAS leaks an empty ledger: nothing
   records it yet.)
2. append the chunks, close: the same.
3. CAS the manifest in (and the snapshots past the newest K out, to
   garbage): the snapshot is durable.  Before this step the previous
   snapshots are untouched and stay the ones replicas load.
4. delete the garbage: a crash leaves it listed; the next round deletes it.

A write that fails (an exception, not a crash or a cancellation) moves its
ledger to garbage itself, at once.  A replica's next snapshot gives up the
pending entries it left before (a replica writes one snapshot at a time).

Invariants: the znode changes only by CAS; a ledger the znode refers to is
deleted only once it lists it as garbage, and leaves the garbage list only
once it is gone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import anyio

from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import ReadHandle
from bookie.client.write_handle import WriteHandle
from bookie.errors import (
    BookieError,
    MetadataVersionConflict,
    NodeExists,
    NoNode,
    NoSuchLedgerError,
)
from bookie.logs import emit
from bookie.meta.api import MetadataStore, SetData
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core import snapshot_manifest
from rsm.core.layout import AppLayout
from rsm.core.orphans import APP_KEY
from rsm.core.snapshot_format import SnapshotHeader
from rsm.core.snapshot_manifest import (
    Manifest,
    SnapshotsValue,
    decode_snapshots,
    encode_snapshots,
)
from rsm.errors import MalformedValue, SnapshotCorrupt, Unavailable
from rsm.snapshots.capture import CaptureResult

logger = logging.getLogger(__name__)

_CAS_ATTEMPTS_MAX = 100
"""Re-read-and-retry rounds of one change of the snapshots znode before giving up."""

KIND_SNAPSHOT = b"snapshot"
"""Custom metadata `rsm.kind` of a snapshot ledger (log ledgers carry none)."""


@dataclass(frozen=True, slots=True)
class Written:
    """What `write_ledger` put in the ledger."""

    ledger_id: int
    chunk_count: int
    size_bytes: int


class SnapshotStore:
    """Snapshots of one application (see the module docstring)."""

    def __init__(
        self,
        store: MetadataStore,
        ledgers: LedgerClient,
        layout: AppLayout,
        config: ReplicaConfig,
    ) -> None:
        self._store = store
        self._ledgers = ledgers
        self.layout = layout
        self._config = config

    # --- the znode ----------------------------------------------------------------------------

    async def read(self) -> tuple[SnapshotsValue, int]:
        """The znode's value and version (an absent znode reads as empty, version -1)."""
        return await read_snapshots(self._store, self.layout)

    async def watch(self, version: int) -> None:
        """Return once the znode is no longer at `version`."""
        await self._store.watch(self.layout.snapshots, version)

    async def update(
        self, change: Callable[[SnapshotsValue], SnapshotsValue]
    ) -> tuple[SnapshotsValue, int]:
        """Apply `change` to the znode by CAS, re-reading and retrying when it moved.

        `change` may raise (`SnapshotsFull`, `SnapshotAbandoned`): that ends
        the update and nothing is written.  Returns the value written and its
        version (or the ones read, when `change` changed nothing).
        """
        for _attempt in range(_CAS_ATTEMPTS_MAX):
            value, version = await self.read()
            changed = change(value)
            if changed == value:
                return value, version
            data = encode_snapshots(changed)
            try:
                if version < 0:
                    await self._store.create(self.layout.snapshots, data, make_parents=True)
                    written = 0
                else:
                    written = await self._store.set(self.layout.snapshots, data, version)
            except (MetadataVersionConflict, NoNode, NodeExists):
                continue  # it moved (or appeared) since it was read: read it again
            return changed, written
        raise Unavailable(f"the snapshots znode kept changing: {_CAS_ATTEMPTS_MAX} attempts failed")

    def snapshots_op(self, value: SnapshotsValue, version: int) -> SetData:
        """The operation that writes `value` over version `version` (for a multi-operation)."""
        return SetData(self.layout.snapshots, encode_snapshots(value), version)

    # --- writing ------------------------------------------------------------------------------

    async def create_ledger(self) -> WriteHandle:
        config = self._config
        return await self._ledgers.create_ledger(
            config.ensemble_size,
            config.write_quorum,
            config.ack_quorum,
            password=config.ledger_password,
            digest_type=config.ledger_digest,
            custom_metadata={
                APP_KEY: self.layout.app.encode(),
                "rsm.kind": KIND_SNAPSHOT,
            },
        )

    async def write_ledger(self, handle: WriteHandle, payloads: AsyncIterator[bytes]) -> Written:
        """Append every payload as the next entry, then close the ledger.

        At most `snapshot_write_inflight_bytes_max` bytes are appended and not
        yet confirmed, so a large snapshot streams through in bounded memory.
        """
        in_flight: list[tuple[int, int]] = []
        in_flight_bytes = 0
        first = 0
        count = 0
        size_bytes = 0
        async for payload in payloads:
            while in_flight_bytes + len(payload) > limits.snapshot_write_inflight_bytes_max:
                entry_id, entry_bytes = in_flight[first]
                await handle.wait_confirmed(entry_id)
                first += 1
                in_flight_bytes -= entry_bytes
            await handle.wait_for_capacity()
            entry_id = handle.append_nowait(payload)
            in_flight.append((entry_id, len(payload)))
            in_flight_bytes += len(payload)
            count += 1
            size_bytes += len(payload)
            if first > len(in_flight) // 2:
                del in_flight[:first]
                first = 0
        await handle.close()
        return Written(handle.ledger_id, count, size_bytes)

    async def abandon(self, handle: WriteHandle) -> None:
        """A write that failed: its ledger is closed, goes to garbage, then is deleted (best
        effort, bounded in time, even when the writer is being cancelled)."""
        ledger_id = handle.ledger_id
        with anyio.CancelScope(shield=True), anyio.move_on_after(_cleanup_s()):
            with contextlib.suppress(BookieError):
                await handle.close()
            try:
                await self.update(lambda value: snapshot_manifest.abandon(value, ledger_id))
                await self.collect((ledger_id,))
            except (BookieError, Unavailable) as error:
                emit(
                    logger,
                    logging.WARNING,
                    "rsm.snapshot_abandon_failed",
                    ledger_id=ledger_id,
                    error=repr(error),
                )

    # --- reading ------------------------------------------------------------------------------

    async def open(self, manifest: Manifest) -> ReadHandle:
        """A read handle of the snapshot's ledger, checked to hold exactly its chunks."""
        handle = await self._ledgers.open_ledger(
            manifest.ledger_id, self._config.ledger_password, recovery=False
        )
        if not handle.is_closed or handle.last_add_confirmed != manifest.chunk_count - 1:
            raise SnapshotCorrupt(
                f"snapshot ledger {manifest.ledger_id} holds entries up to "
                f"{handle.last_add_confirmed} (closed: {handle.is_closed}), but the manifest "
                f"says {manifest.chunk_count} chunks"
            )
        return handle

    async def chunks(self, manifest: Manifest) -> AsyncIterator[bytes]:
        """The snapshot's chunk payloads in order, read `snapshot_read_ahead_entries` at a time."""
        handle = await self.open(manifest)
        window = limits.snapshot_read_ahead_entries
        for first in range(0, manifest.chunk_count, window):
            last = min(manifest.chunk_count, first + window) - 1
            for entry in await handle.read_entries(first, last):
                yield entry.payload

    # --- garbage ------------------------------------------------------------------------------

    async def collect(self, ledger_ids: Sequence[int] | None = None) -> int:
        """Delete garbage ledgers (all listed, up to a bound, or just `ledger_ids`), then take
        them off the list; how many went."""
        if ledger_ids is None:
            value, _version = await self.read()
            ledger_ids = value.garbage[: limits.snapshot_orphan_sweep_ledgers_max]
        deleted: set[int] = set()
        for ledger_id in ledger_ids:
            try:
                await self._ledgers.delete_ledger(ledger_id)
            except NoSuchLedgerError:
                pass
            except BookieError as error:
                emit(
                    logger,
                    logging.WARNING,
                    "rsm.ledger_delete_failed",
                    ledger_id=ledger_id,
                    error=repr(error),
                )
                continue
            deleted.add(ledger_id)
        if deleted:
            gone = frozenset(deleted)
            await self.update(lambda value: snapshot_manifest.collected(value, gone))
            emit(logger, logging.INFO, "rsm.ledgers_deleted", ledger_ids=sorted(deleted))
        return len(deleted)


def manifest_of(header: SnapshotHeader, written: Written, result: CaptureResult) -> Manifest:
    """The manifest of the snapshot `header` describes, written as `written` from a capture
    that ended with `result`; `SnapshotCorrupt` when the ledger does not hold what the
    capture made."""
    summary = result.summary
    if (written.chunk_count, written.size_bytes) != (summary.chunk_count, summary.size_bytes):
        raise SnapshotCorrupt(
            f"wrote {written.chunk_count} chunks of {written.size_bytes} bytes, the "
            f"capture made {summary.chunk_count} of {summary.size_bytes}"
        )
    return Manifest(
        app=header.app,
        index=header.index,
        time_ms=header.time_ms,
        epoch=header.epoch,
        ledger_id=written.ledger_id,
        state_hash=result.state_hash,
        sha256=summary.content_sha256,
        size_bytes=summary.size_bytes,
        chunk_count=summary.chunk_count,
        created_ms=header.created_ms,
        replica_id=header.replica_id,
    )


async def read_snapshots(store: MetadataStore, layout: AppLayout) -> tuple[SnapshotsValue, int]:
    """An application's snapshots znode: its value and version (absent: empty, version -1).

    A value that does not decode is `MalformedValue`, naming the znode and where the
    operator's steps are: nothing here overwrites or ignores it, since only it says which
    snapshot ledgers hold the state below a truncated log (docs/snapshots.md, "A damaged
    snapshots znode")."""
    try:
        versioned = await store.get(layout.snapshots)
    except NoNode:
        return SnapshotsValue(), -1
    try:
        return decode_snapshots(versioned.value), versioned.version
    except MalformedValue as error:
        raise MalformedValue(
            f"{layout.snapshots} (version {versioned.version}, {len(versioned.value)} bytes) "
            f"cannot be read: {error}; replicas of {layout.app!r} stop rather than guess what "
            'it named: see docs/snapshots.md, "A damaged snapshots znode"'
        ) from None


def _cleanup_s() -> float:
    return limits.close_abandoned_ms_max / 1000


@contextlib.asynccontextmanager
async def pending_ledger(
    snapshots: SnapshotStore, *, replica_id: str, started_ms: int
) -> AsyncIterator[WriteHandle]:
    """A new snapshot ledger, registered as pending; abandoned if the block raises an
    exception."""
    handle = await snapshots.create_ledger()
    ledger_id = handle.ledger_id
    try:
        await snapshots.update(
            lambda value: snapshot_manifest.begin(
                value, ledger_id=ledger_id, replica_id=replica_id, started_ms=started_ms
            )
        )
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_cleanup_s()):
            with contextlib.suppress(BookieError):
                await handle.close()
            with contextlib.suppress(BookieError):
                await snapshots.collect((ledger_id,))
        raise
    try:
        yield handle
    except Exception:
        await snapshots.abandon(handle)
        raise
    # A cancellation (the replica stopping or being killed) leaves the pending entry, as a
    # crash would: the replica's next snapshot, or the grace period, clears it.
