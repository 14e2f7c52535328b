"""Takeover by the leader-elect: fence, replay, one CAS (steps 1-3 of architecture.md).

Step 4 (the leader-start marker, then publishing and serving) belongs to the
`LeaderTerm` that this module's result starts.

1. Read the log (version v).  If a segment is OPEN, recovery-open its ledger:
   that fences the old writer (it can get nothing more acknowledged) and finds
   the ledger's true end; a ledger its writer already closed (rollover or
   handoff not yet recorded in the log) just yields its end, with no fencing.
   The old leader may still hold a read lease given by a round that started
   before the fencing finished: the new term acknowledges nothing until
   `successor_wait_ms` after the recovery returned (`Takeover.serve_from_s`,
   see rsm/core/reads.py).  A log whose last segment is CLOSED was handed
   over: its leader stopped answering before it closed the segment.
2. Replay from the replica's applied position to that end, through every
   CLOSED segment on the way.
3. Create the next ledger (on fewer bookies than configured when fewer are
   writable, never fewer than Qa: rsm/runtime/segment_ledger.py), then one
   CAS from v: close the OPEN segment at the recovered last index and append
   the new ledger as the OPEN segment of epoch = max epoch + 1.  The same
   multi-operation records the new leader in the `handoff` znode under the new
   epoch, so that the leader stays
   leader-elect while it is a candidate, whatever the candidates' order (see
   rsm/core/election.py and docs/architecture.md).  A lost CAS means someone
   else moved the log: the new ledger is deleted and the caller starts over
   (or stands aside if no longer leader-elect).

Nothing here serves clients or appends: a takeover that fails leaves the
replica a follower whose state is still a prefix of the log.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.logs import emit
from bookie.meta.api import ANY_VERSION, Check, Op, SetData
from rsm.config import ReplicaConfig
from rsm.core import log_state
from rsm.core.log_format import Handoff, encode_handoff, encode_log
from rsm.core.log_state import Log
from rsm.core.reads import successor_wait_ms
from rsm.runtime.applier import Applier
from rsm.runtime.log import LogStore, SegmentReader, discard_ledger, replay_log
from rsm.runtime.segment_ledger import create_segment_ledger

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Takeover:
    """What a successful takeover hands to the leader term."""

    handle: WriteHandle
    log: Log
    log_version: int
    recovered: bool
    """Whether an OPEN segment had to be recovered (False after a graceful handoff)."""
    serve_from_s: float
    """When, by the replica's lease clock, the term may first acknowledge anything: once any
    read lease of the leader it fenced has run out (-inf when it fenced nobody)."""


async def take_over(
    *,
    log_store: LogStore,
    reader: SegmentReader,
    ledgers: LedgerClient,
    applier: Applier,
    replica_id: str,
    app: str,
    config: ReplicaConfig,
    still_elected: Callable[[], bool],
    lease_clock_s: Callable[[], float],
) -> Takeover | None:
    """Steps 1-3; None when the CAS was lost or the replica stopped being leader-elect.

    Raises what reads, recovery and metadata calls raise (transient ones are
    the caller's to retry).
    """
    log, version = await log_store.read()
    current = log.open_segment
    recovered = None
    recovered_last_index = None
    serve_from_s = -math.inf
    if current is not None:
        recovered = await reader.open(current, recovery=True)
        serve_from_s = lease_clock_s() + successor_wait_ms(config.read_lease_ms) / 1000
    await replay_log(log, reader, applier, recovered)
    if current is not None:
        recovered_last_index = applier.applied_index
    if not still_elected():
        return None
    successor = await create_segment_ledger(
        ledgers,
        config,
        app=app,
        epoch=log.epoch + 1,
        writer=log_store.layout.replica(replica_id),
    )
    taken = log_state.takeover(
        log, new_ledger_id=successor.ledger_id, recovered_last_index=recovered_last_index
    )
    if not still_elected():
        await discard_ledger(ledgers, successor.ledger_id)
        return None
    layout = log_store.layout
    ops: list[Op] = [
        SetData(layout.log, encode_log(taken), version),
        SetData(layout.handoff, encode_handoff(Handoff(replica_id, taken.epoch)), ANY_VERSION),
        # An orphan sweep (rsm/runtime/orphans.py) may have deleted a ledger this late.
        Check(ledgers.metadata_path(successor.ledger_id), ANY_VERSION),
    ]

    def took_effect(seen: Log) -> bool:
        segment = seen.open_segment
        return segment is not None and segment.ledger_id == successor.ledger_id

    if not await log_store.cas(ops, took_effect):
        await discard_ledger(ledgers, successor.ledger_id)
        emit(logger, logging.INFO, "rsm.takeover_lost", epoch=taken.epoch)
        return None
    emit(
        logger,
        logging.INFO,
        "rsm.takeover",
        epoch=taken.epoch,
        ledger_id=successor.ledger_id,
        recovered_last_index=recovered_last_index,
    )
    return Takeover(
        successor, taken, version + 1, recovered=current is not None, serve_from_s=serve_from_s
    )
