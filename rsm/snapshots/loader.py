"""Loading a snapshot: its chunks, checked, into a fresh state machine and session table.

`load` reads one snapshot's chunks (from its ledger, a window at a time) and checks
every chunk as it comes (rsm/core/snapshot_format.py).  The framework
section becomes the header and the session table; the application's section
goes to the state machine as it arrives:

* a machine with the default `restore` gets it chunk by chunk through the
  default codec's incremental decoder, on the event loop: no second copy of
  the snapshot in memory, and no thread (so it runs in the simulation too);
* a machine that overrides `restore(chunks)` gets a synchronous iterator:
  `restore` then runs in a worker thread whose iterator fetches the next
  chunks from the loop, so memory stays bounded too; with `threads=False`
  (the simulation, which has no threads) the section is read whole first.

At the end the stream is checked against the manifest (chunk count, size,
SHA-256), the header against the manifest (application, index, epoch), and
the restored state against the manifest's state hash: the default hash is
the SHA-256 of the section just read; an application's own `state_hash` is
called on the restored machine, which also checks that its `restore`
rebuilt what its `snapshot` saw.  Any failure is `SnapshotCorrupt` (or the
error the ledger read raised) and the machine is left for garbage: the
caller tries an older snapshot with another fresh machine.

Invariants: nothing here touches the replica's live state; a `Restored` is
returned only when every check passed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from rsm.config import ReplicaConfig
from rsm.core.commands import AppliedPosition
from rsm.core.log_state import Cursor
from rsm.core.sessions import PLAIN_VERSION, SessionTable
from rsm.core.snapshot_format import (
    SECTION_FRAMEWORK,
    FrameworkDecoder,
    SnapshotHeader,
    SnapshotReader,
)
from rsm.core.snapshot_manifest import Manifest
from rsm.core.snapshot_state import StateDecoder
from rsm.core.state_machine import StateMachine
from rsm.errors import MalformedValue, SnapshotCorrupt
from rsm.snapshots.capture import uses_default_hash

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Restored:
    """A state rebuilt from a snapshot, ready for `Applier.install`."""

    manifest: Manifest
    header: SnapshotHeader
    machine: StateMachine
    sessions: SessionTable
    position: AppliedPosition
    cursor: Cursor | None


def machine_name(machine_class: type[Any]) -> str:
    return f"{machine_class.__module__}:{machine_class.__qualname__}"


class ChunkSource(Protocol):
    """Where a snapshot's chunks come from: a `SnapshotStore` (its ledger), or anything else
    that holds them in order (a file of an exported log)."""

    def chunks(self, manifest: Manifest) -> AsyncIterator[bytes]: ...


async def load(
    snapshots: ChunkSource,
    manifest: Manifest,
    machine: StateMachine,
    config: ReplicaConfig,
    *,
    threads: bool = True,
) -> Restored:
    """Restore `manifest`'s snapshot into `machine` (fresh); see the module docstring."""
    reader = SnapshotReader()
    framework = FrameworkDecoder()
    chunks = snapshots.chunks(manifest)
    if type(machine).restore is StateMachine.restore:
        decoder = StateDecoder(machine)
        async for payload in chunks:
            section, data = reader.take(payload)
            if section == SECTION_FRAMEWORK:
                framework.feed(data)
            else:
                decoder.feed(data)
            await anyio.lowlevel.checkpoint()
        decoder.finish()
    else:
        state = _state_section(chunks, reader, framework)
        if threads:
            await _restore_in_thread(machine, state)
        else:
            machine.restore([data async for data in state])
    summary = reader.finish(manifest.chunk_count, manifest.size_bytes, manifest.sha256)
    header = framework.finish()
    _check_header(header, manifest)
    state_hash = summary.state_sha256 if uses_default_hash(machine) else machine.state_hash()
    if state_hash != manifest.state_hash:
        taken_by = header.machine
        restored_by = machine_name(type(machine))
        why = (
            "restore() did not rebuild what snapshot() saw"
            if taken_by == restored_by
            else f"it was taken by {taken_by}, and {restored_by} restored it"
        )
        raise SnapshotCorrupt(
            f"the restored state's hash {state_hash.hex()[:16]}... differs from the manifest's "
            f"{manifest.state_hash.hex()[:16]}...: {why}"
        )
    try:
        sessions = SessionTable.from_plain(
            {"v": PLAIN_VERSION, "clock_ms": header.clock_ms, "sessions": framework.sessions},
            ttl_ms=config.session_ttl_ms,
            sessions_max=config.sessions_max,
            evict_idle_ms=config.session_evict_idle_ms,
            results_max=config.session_results_max,
        )
    except MalformedValue as error:
        raise SnapshotCorrupt(
            f"the snapshot's session table is not valid under sessions_max "
            f"{config.sessions_max} and session_results_max {config.session_results_max} "
            f"(the settings of the replicas that take it must hold it): {error}"
        ) from None
    return Restored(
        manifest=manifest,
        header=header,
        machine=machine,
        sessions=sessions,
        position=AppliedPosition(header.index, header.time_ms, header.epoch),
        cursor=None if header.cursor is None else Cursor(*header.cursor),
    )


def _check_header(header: SnapshotHeader, manifest: Manifest) -> None:
    if (header.app, header.index, header.epoch, header.time_ms) != (
        manifest.app,
        manifest.index,
        manifest.epoch,
        manifest.time_ms,
    ):
        raise SnapshotCorrupt(
            f"the snapshot's header ({header.app}, index {header.index}, epoch {header.epoch}) "
            f"does not match its manifest ({manifest.app}, index {manifest.index}, "
            f"epoch {manifest.epoch})"
        )


async def _state_section(
    chunks: AsyncIterator[bytes], reader: SnapshotReader, framework: FrameworkDecoder
) -> AsyncIterator[bytes]:
    """The data of section 1, after feeding section 0 to `framework`."""
    async for payload in chunks:
        section, data = reader.take(payload)
        if section == SECTION_FRAMEWORK:
            framework.feed(data)
        else:
            yield bytes(data)


async def _restore_in_thread(machine: StateMachine, state: AsyncIterator[bytes]) -> None:
    """Run `machine.restore` in a worker thread, its chunks fetched from the loop on demand."""

    async def next_data() -> bytes | None:
        return await anext(state, None)

    def chunk_iterator() -> Iterator[bytes]:
        while True:
            data = anyio.from_thread.run(next_data)
            if data is None:
                return
            yield data

    await anyio.to_thread.run_sync(machine.restore, chunk_iterator())
    # Whatever the application did not read still has to be checked.
    async for _rest in state:
        pass
