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

A leader whose open segment is degraded rolls over to a full-size ledger as
soon as E bookies are writable again (`restorable`; rsm/runtime/leader_term.py
checks it as it appends and while idle).  The entries written while degraded
keep their Qa copies until something re-replicates them.

Custom metadata of every segment ledger: "rsm.app" (the application's name,
UTF-8) and "rsm.epoch" (the segment's epoch, ASCII decimal); a degraded one
also carries the ledger client's "bookie.requested" ("E/Qw/Qa" asked for).
"""

from __future__ import annotations

import logging
from typing import Any

from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerMetadata
from bookie.logs import emit
from rsm.config import ReplicaConfig

logger = logging.getLogger(__name__)


async def create_segment_ledger(
    ledgers: LedgerClient, config: ReplicaConfig, *, app: str, epoch: int
) -> WriteHandle:
    """The write handle of a new ledger for a segment of `epoch` (see the module docstring).

    Raises `NotEnoughBookies` with fewer than Qa writable bookies, and what
    creating a ledger raises.
    """
    handle = await ledgers.create_ledger(
        config.ensemble_size,
        config.write_quorum,
        config.ack_quorum,
        password=config.ledger_password,
        custom_metadata={"rsm.app": app.encode(), "rsm.epoch": str(epoch).encode()},
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


def restorable(metadata: LedgerMetadata, config: ReplicaConfig, writable_bookies: int) -> bool:
    """Whether a degraded segment's ledger can be replaced by a full-size one now."""
    return is_degraded(metadata, config) and writable_bookies >= config.ensemble_size


def replication_status(metadata: LedgerMetadata, config: ReplicaConfig) -> dict[str, Any]:
    """The `replication` part of a leader's status: the open ledger's sizes and the
    configured ones, and whether it is degraded."""
    return {
        "degraded": is_degraded(metadata, config),
        "ensemble_size": metadata.ensemble_size,
        "write_quorum": metadata.write_quorum,
        "ack_quorum": metadata.ack_quorum,
        "configured_ensemble_size": config.ensemble_size,
        "configured_write_quorum": config.write_quorum,
    }
