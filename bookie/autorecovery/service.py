"""One autorecovery process's work: stand for auditor, and repair marked ledgers.

`run_autorecovery` runs an `AuditorService` and a `ReplicationWorker` over one
metadata session until cancelled; neither raises for an operating error (each logs
and retries), so a bookie process that hosts them is never stopped by them.  A bookie
runs it by default (config key `autorecovery`); `bookie autorecovery` runs it alone.
"""

from __future__ import annotations

import logging
import random

import anyio

from bookie.autorecovery.auditor import AuditorService
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.autorecovery.stats import AutoRecoveryStats
from bookie.autorecovery.worker import ReplicationWorker
from bookie.client.connections import Connector
from bookie.logs import emit
from bookie.meta.api import MetadataStore

logger = logging.getLogger(__name__)


async def run_autorecovery(
    store: MetadataStore,
    settings: AutoRecoverySettings,
    rng: random.Random | None = None,
    connector: Connector | None = None,
    stats: AutoRecoveryStats | None = None,
) -> None:
    """Audit (when elected) and repair, until cancelled; bookies are reached over TCP, or
    through `connector` (the simulated network).  Both count into `stats` (its metrics)."""
    stats = AutoRecoveryStats() if stats is None else stats
    emit(
        logger,
        logging.INFO,
        "autorecovery.started",
        owner=settings.owner,
        grace_ms=settings.grace_ms,
        poll_interval_ms=settings.poll_interval_ms,
    )
    async with anyio.create_task_group() as task_group:
        rng = rng or random.Random()
        task_group.start_soon(AuditorService(store, settings, rng, connector, stats).run)
        task_group.start_soon(ReplicationWorker(store, settings, rng, connector, stats).run)
