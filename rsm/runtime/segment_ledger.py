"""The ledger of a new segment: full size when the bookies are there, degraded when not.

A takeover and a rollover both create the next segment's ledger here.  It
asks for the configured E, Qw and Qa; when fewer than E bookies are
writable but at least Qa are, the ledger client makes a *degraded* ledger on
the bookies there are (E' = their count, Qw' = min(Qw, E'), Qa unchanged:
bookie/core/placement.py, rule 4), so one lost machine of three does not stop
the log.  Every entry acknowledged in it is still on Qa bookies' disks.
Creating one logs `rsm.degraded` (a warning) with the sizes it got and the
sizes configured.  Fewer than Qa writable bookies raise `NotEnoughBookies`
(retryable): no segment can then acknowledge anything.

A bookie that dies while a segment's ledger is open is the ledger client's to
handle: it replaces it, or, with no bookie to spare, *defers* the change and
writes to the bookies left (docs/ledgers.md, "No replacement").  Either way
the segment is under-replicated (fewer than Qw copies of new entries, never
fewer than Qa), and a leader rolls over to a full-size ledger as soon as that
can help (`restorable`: E bookies writable, and the ledger degraded or its
failed bookie back; rsm/runtime/leader_term.py checks it as it appends and
while idle), logging `rsm.replication_restored`.  The entries written while
under-replicated keep their Qa copies until something re-replicates them.

Autorecovery marks the ledgers of a bookie gone past its grace, the open
segment's too, and leaves the segment being written to its writer: what a
bookie of it lacks (entries written while it was away) is known only once
the ledger is closed.  A bookie away while nothing was written is never
failed by the handle, so no rollover above comes, and the mark would stay
until the segment filled up or aged out.  So a leader reads the mark of its
open segment's ledger now and then (`limits.segment_mark_check_interval_ms`)
and rolls over when it names bookies of the segment's ensemble that are all
writable again (`mark_settled_by_rollover`), even from a segment with no entry
yet: the closed ledger's mark is then autorecovery's to settle, copying back
what a bookie lacks or finding it whole.

Custom metadata of every segment ledger: "rsm.app" (the application's name,
UTF-8), "rsm.epoch" (the segment's epoch, ASCII decimal) and "bookie.writer"
(the path of its writer's ephemeral `replicas/<id>` znode, UTF-8, which exists
while the writer's session lives: autorecovery never fences a ledger whose
writer znode exists); a degraded one also carries the ledger client's
"bookie.requested" ("E/Qw/Qa" asked for).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerMetadata
from bookie.core.open_ledgers import WRITER_KEY
from bookie.logs import emit
from rsm.config import ReplicaConfig
from rsm.core.orphans import APP_KEY

logger = logging.getLogger(__name__)


async def create_segment_ledger(
    ledgers: LedgerClient, config: ReplicaConfig, *, app: str, epoch: int, writer: str
) -> WriteHandle:
    """The write handle of a new ledger for a segment of `epoch`, written by the replica
    whose membership znode is `writer` (see the module docstring).

    Raises `NotEnoughBookies` with fewer than Qa writable bookies, and what
    creating a ledger raises.
    """
    handle = await ledgers.create_ledger(
        config.ensemble_size,
        config.write_quorum,
        config.ack_quorum,
        password=config.ledger_password,
        digest_type=config.ledger_digest,
        custom_metadata={
            APP_KEY: app.encode(),
            "rsm.epoch": str(epoch).encode(),
            WRITER_KEY: writer.encode(),
        },
        degraded=True,
    )
    metadata = handle.metadata
    if is_degraded(metadata, config):
        emit(
            logger,
            logging.WARNING,
            "rsm.degraded",
            ledger_id=handle.ledger_id,
            epoch=epoch,
            ensemble_size=metadata.ensemble_size,
            write_quorum=metadata.write_quorum,
            ack_quorum=metadata.ack_quorum,
            configured_ensemble_size=config.ensemble_size,
            configured_write_quorum=config.write_quorum,
            writable_bookies=len(ledgers.writable_bookies),
        )
    return handle


def is_degraded(metadata: LedgerMetadata, config: ReplicaConfig) -> bool:
    """Whether a segment's ledger has fewer bookies than configured."""
    return metadata.ensemble_size < config.ensemble_size


def fully_replicated(handle: WriteHandle, config: ReplicaConfig) -> bool:
    """Whether entries written to the handle now get the configured copies."""
    return not is_degraded(handle.metadata, config) and not handle.change_deferred


def restorable(handle: WriteHandle, config: ReplicaConfig, writable_bookies: int) -> bool:
    """Whether the open segment is under-replicated and a full-size ledger can take its place
    now: E bookies are writable, and the ledger is degraded or its writer deferred the
    replacement of a bookie that has come back since (the handle never takes a failed bookie
    back, so only a new ledger puts the configured copies on it again)."""
    if writable_bookies < config.ensemble_size:
        return False
    return is_degraded(handle.metadata, config) or (
        handle.change_deferred and handle.failed_bookie_returned
    )


def mark_settled_by_rollover(
    marked: Collection[str], handle: WriteHandle, writable_bookies: Collection[str]
) -> bool:
    """Whether closing the open segment's ledger lets autorecovery settle its mark, which
    names `marked`: some of them are in the ledger's last ensemble and all of those are
    writable again (see the module docstring)."""
    named = set(marked).intersection(handle.metadata.current_ensemble)
    return bool(named) and named.issubset(writable_bookies)


def replication_status(handle: WriteHandle, config: ReplicaConfig) -> dict[str, Any]:
    """The `replication` part of a leader's status: the open ledger's sizes and the configured
    ones, whether it is degraded, whether a failed bookie of it has no replacement
    (`ensemble_change_deferred`), and `full` when neither holds: every entry written now
    gets its Qw copies."""
    metadata = handle.metadata
    return {
        "full": fully_replicated(handle, config),
        "degraded": is_degraded(metadata, config),
        "ensemble_change_deferred": handle.change_deferred,
        "ensemble_size": metadata.ensemble_size,
        "write_quorum": metadata.write_quorum,
        "ack_quorum": metadata.ack_quorum,
        "configured_ensemble_size": config.ensemble_size,
        "configured_write_quorum": config.write_quorum,
    }
