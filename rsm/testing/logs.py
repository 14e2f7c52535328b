"""Logs with a known history, written to a real cluster as a leader would write them.

For the tools' tests and benchmark.  `LogWriter` encodes commands with the
framework's own functions (`prepare_command`, `encode_batch`), appends each
batch to the current segment's ledger (pipelined), applies it to a real
instance of the class through an `Applier`, as a leader applies its own
entries, and puts the leader's state hash into the next batch on the
leader's schedule (`StateHashes.unlogged`).  `snapshot` registers a snapshot
of the state at the current index through the replica's own
`SnapshotService`, as taken by the replica the caller names.  `finish`
closes the ledgers and records the segments in the application's log
znode.  Everything (times, seeds, sessions) comes from
the caller, so the log is the same every run except for the ledger ids the
cluster allocates.

Invariants: the log written is one a leader could have written: dense
indexes, a never-decreasing timestamp, one epoch per segment, increasing
along the log, every segment CLOSED.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.clock import system_wall_clock_ms
from bookie.meta.api import MetadataStore
from rsm.config import ReplicaConfig
from rsm.core.commands import prepare_command
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_batch, encode_batch, encode_leader_start, encode_log
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.core.snapshot_manifest import Manifest
from rsm.core.state_machine import StateMachine
from rsm.runtime.applier import Applier
from rsm.runtime.log import LogStore
from rsm.runtime.snapshot_service import SnapshotService
from rsm.snapshots.store import SnapshotStore


@dataclass(frozen=True, slots=True)
class Call:
    """One command to log: its name, arguments and, optionally, its session."""

    name: str
    args: tuple[Any, ...] = ()
    client_id: bytes | None = None
    seq: int | None = None
    ack_seq: int | None = None


class LogWriter:
    """Writes a log (see the module docstring); `await finish()` once done."""

    def __init__(
        self,
        store: MetadataStore,
        ledgers: LedgerClient,
        app: str,
        machine_class: type[StateMachine],
        config: ReplicaConfig,
    ) -> None:
        self._store = store
        self._ledgers = ledgers
        self.layout = AppLayout.of(app)
        self.machine_class = machine_class
        self.config = config
        self.applier = Applier(machine_class(), config)
        self._segments: list[tuple[WriteHandle, int, int]] = []
        """Per segment: its ledger's write handle, its epoch and its first index."""
        self._next_index = 1
        self._snapshots: dict[str, SnapshotService] = {}
        """The snapshot service of each replica id snapshots were taken as."""

    @property
    def last_index(self) -> int:
        return self._next_index - 1

    async def segment(self, epoch: int, *, leader: str | None = None, time_ms: int = 0) -> None:
        """Start a new segment of `epoch` in a new ledger; with `leader`, its first entry is the
        leader-start marker of that replica (as after a takeover)."""
        if not self._segments:
            await LogStore(self._store, self.layout).ensure_layout()
        config = self.config
        handle = await self._ledgers.create_ledger(
            config.ensemble_size,
            config.write_quorum,
            config.ack_quorum,
            password=config.ledger_password,
        )
        self._segments.append((handle, epoch, self._next_index))
        if leader is not None:
            await self._add([encode_leader_start(leader)], time_ms=time_ms, seed=0)

    async def batch(self, calls: Sequence[Call], *, time_ms: int, seed: int = 0) -> None:
        """One entry holding `calls`, logged at `time_ms`."""
        items = [
            prepare_command(
                self.machine_class,
                call.name,
                call.args,
                client_id=call.client_id,
                seq=call.seq,
                ack_seq=call.ack_seq,
            )
            for call in calls
        ]
        await self._add(items, time_ms=time_ms, seed=seed)

    async def _add(self, items: list[bytes], *, time_ms: int, seed: int) -> None:
        handle, epoch, _first_index = self._segments[-1]
        hashes = self.applier.hashes
        state_hash = hashes.unlogged()
        if state_hash is not None:
            hashes.logged(state_hash.index)
        payload = encode_batch(
            epoch=epoch,
            first_index=self._next_index,
            timestamp_ms=time_ms,
            seed=seed,
            items=items,
            state_hash=state_hash,
        )
        await handle.wait_for_capacity()
        entry_id = handle.append_nowait(payload)
        batch = decode_batch(payload)
        self.applier.apply(batch, handle.ledger_id, entry_id)
        self._next_index = batch.next_index

    async def snapshot(self, replica_id: str = "log-writer") -> Manifest:
        """A snapshot of the state at the last index, registered as replica `replica_id`
        registers one."""
        handle, _epoch, _first_index = self._segments[-1]
        await handle.wait_confirmed(handle.last_add_pushed)
        service = self._snapshots.get(replica_id)
        if service is None:
            service = self._snapshots[replica_id] = SnapshotService(
                app=self.layout.app,
                replica_id=replica_id,
                snapshots=SnapshotStore(self._store, self._ledgers, self.layout, self.config),
                applier=self.applier,
                config=self.config,
                machine_factory=self.machine_class,
                wall_clock_ms=system_wall_clock_ms,
            )
        return await service.take()

    async def finish(self) -> Log:
        """Close every segment's ledger and write the log znode; the log."""
        segments: list[Segment] = []
        for position, (handle, epoch, first_index) in enumerate(self._segments):
            await handle.close()
            following = self._segments[position + 1 :]
            last_index = following[0][2] - 1 if following else self.last_index
            segments.append(
                Segment(handle.ledger_id, epoch, first_index, SegmentState.CLOSED, last_index)
            )
        log = Log(max(segment.epoch for segment in segments), tuple(segments))
        logs = LogStore(self._store, self.layout)
        _old, version = await logs.read()
        await self._store.set(self.layout.log, encode_log(log), version)
        return log
