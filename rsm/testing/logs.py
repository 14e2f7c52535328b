"""Logs with a known history, written to a real cluster as a leader would write them.

For the tools' tests and benchmark: `LogBuilder` encodes commands with the
framework's own functions (`prepare_command`, `encode_batch`), applies each
batch to a real instance of the class through an `Applier`, as a leader
applies its own entries, and puts the leader's state hash into the next
batch on the leader's schedule (`StateHashes.unlogged`).  `write_log` then
puts the batches into ledgers (one ledger per segment, closed) and the
segments into the application's log znode.  Everything (times, seeds,
sessions) comes from the caller, so the log is the same every run except
for the ledger ids the cluster allocates.

Invariants: the log written is one a leader could have written: dense
indexes, a never-decreasing timestamp, one epoch per segment, increasing
along the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bookie.client.ledger_client import LedgerClient
from bookie.meta.api import MetadataStore
from rsm.config import ReplicaConfig
from rsm.core.commands import prepare_command
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_batch, encode_batch, encode_leader_start, encode_log
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.core.state_machine import StateMachine
from rsm.runtime.applier import Applier
from rsm.runtime.log import LogStore


@dataclass(frozen=True, slots=True)
class Call:
    """One command to log: its name, arguments and, optionally, its session."""

    name: str
    args: tuple[Any, ...] = ()
    client_id: bytes | None = None
    seq: int | None = None
    ack_seq: int | None = None


@dataclass
class BuiltSegment:
    epoch: int
    first_index: int
    payloads: list[bytes] = field(default_factory=list)


class LogBuilder:
    """Builds a log's entries (see the module docstring)."""

    def __init__(self, machine_class: type[StateMachine], config: ReplicaConfig) -> None:
        self.machine_class = machine_class
        self.applier = Applier(machine_class(), config)
        self.segments: list[BuiltSegment] = []
        self._next_index = 1

    def segment(self, epoch: int, *, leader: str | None = None, time_ms: int = 0) -> None:
        """Start a new segment of `epoch`; with `leader`, its first entry is the leader-start
        marker of that replica (as after a takeover)."""
        self.segments.append(BuiltSegment(epoch, self._next_index))
        if leader is not None:
            self._add([encode_leader_start(leader)], time_ms=time_ms, seed=0)

    def batch(self, calls: Sequence[Call], *, time_ms: int, seed: int = 0) -> None:
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
        self._add(items, time_ms=time_ms, seed=seed)

    def _add(self, items: list[bytes], *, time_ms: int, seed: int) -> None:
        segment = self.segments[-1]
        hashes = self.applier.hashes
        state_hash = hashes.unlogged()
        if state_hash is not None:
            hashes.logged(state_hash.index)
        payload = encode_batch(
            epoch=segment.epoch,
            first_index=self._next_index,
            timestamp_ms=time_ms,
            seed=seed,
            items=items,
            state_hash=state_hash,
        )
        entry_id = len(segment.payloads)
        segment.payloads.append(payload)
        batch = decode_batch(payload)
        self.applier.apply(batch, -len(self.segments), entry_id)
        self._next_index = batch.next_index

    @property
    def last_index(self) -> int:
        return self._next_index - 1


async def write_log(
    store: MetadataStore,
    ledgers: LedgerClient,
    app: str,
    builder: LogBuilder,
    *,
    config: ReplicaConfig,
) -> Log:
    """Write the built segments as closed ledgers and record them in the log znode."""
    layout = AppLayout.of(app)
    logs = LogStore(store, layout)
    await logs.ensure_layout()
    segments: list[Segment] = []
    for built in builder.segments:
        handle = await ledgers.create_ledger(
            config.ensemble_size,
            config.write_quorum,
            config.ack_quorum,
            password=config.ledger_password,
        )
        for payload in built.payloads:
            await handle.wait_for_capacity()
            handle.append_nowait(payload)
        await handle.close()
        last_index = decode_batch(built.payloads[-1]).next_index - 1 if built.payloads else 0
        segments.append(
            Segment(
                handle.ledger_id,
                built.epoch,
                built.first_index,
                SegmentState.CLOSED,
                max(last_index, built.first_index - 1),
            )
        )
    log = Log(max(segment.epoch for segment in segments), tuple(segments))
    _old, version = await logs.read()
    await store.set(layout.log, encode_log(log), version)
    return log
