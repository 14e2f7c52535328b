"""The leader's sweep of orphan ledgers: the I/O around `rsm.core.orphans`.

While a replica leads, `orphan_loop` runs `sweep` every
`config.orphan_check_interval_ms`.  A sweep lists the bookie cluster's ledgers and
reads each one's metadata; only when some is this application's, old enough and
possibly unnamed does it read the log and the snapshots znode (after the listing,
so a ledger named before the listing is seen named) and decide with
`rsm.core.orphans.orphans`.  Each orphan is deleted by one transaction:

    Check(log znode, version read)
    Check(snapshots znode, version read)      (when it exists)
    Delete(the ledger's metadata znode, any version)

so it goes only if neither znode changed since `named` was read; otherwise the
sweep stops and the next one decides again.  The other half of the guard is in
the takeover and the rollover: their compare-and-set of the log checks that the new
ledger's metadata still exists.  One `rsm.orphan_deleted` event per ledger
deleted (with its age), `rsm.orphan_sweep_failed` (warning) when a sweep met an
error; a sweep never raises for a metadata error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from bookie.client.ledger_client import LedgerClient
from bookie.errors import BookieError, MetadataVersionConflict, NoNode, NoSuchLedgerError
from bookie.logs import emit
from bookie.meta.api import ANY_VERSION, Check, Delete, MetadataStore, Op
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.orphans import APP_KEY, LedgerTag, orphans
from rsm.errors import RsmError
from rsm.runtime.log import LogStore
from rsm.snapshots.store import read_snapshots

logger = logging.getLogger(__name__)


async def sweep(
    store: MetadataStore,
    ledgers: LedgerClient,
    layout: AppLayout,
    *,
    now_ms: int,
    safe_age_ms: int,
) -> list[int]:
    """Delete the application's orphan ledgers (module docstring); return their ids."""
    tags: dict[int, LedgerTag] = {}
    for ledger_id in await ledgers.list_ledgers():
        try:
            metadata = await ledgers.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue
        tags[ledger_id] = LedgerTag(ledger_id, metadata.custom.get(APP_KEY), metadata.ctime_ms)
    app = layout.app
    if not orphans(tags.values(), app=app, named=(), now_ms=now_ms, safe_age_ms=safe_age_ms):
        return []
    log, log_version = await LogStore(store, layout).read()
    snapshots, snapshots_version = await read_snapshots(store, layout)
    named = {segment.ledger_id for segment in log.segments} | snapshots.ledger_ids
    checks: list[Op] = [Check(layout.log, log_version)]
    if snapshots_version >= 0:
        checks.append(Check(layout.snapshots, snapshots_version))
    deleted: list[int] = []
    for ledger_id in orphans(
        tags.values(), app=app, named=named, now_ms=now_ms, safe_age_ms=safe_age_ms
    ):
        try:
            await store.commit([*checks, Delete(ledgers.metadata_path(ledger_id), ANY_VERSION)])
        except MetadataVersionConflict:
            break  # the log or the snapshots moved: the next sweep decides again
        except NoNode:
            continue  # deleted meanwhile
        deleted.append(ledger_id)
        emit(
            logger,
            logging.WARNING,
            "rsm.orphan_deleted",
            app=app,
            ledger_id=ledger_id,
            age_ms=now_ms - tags[ledger_id].ctime_ms,
        )
    return deleted


async def orphan_loop(
    ended: Callable[[], bool],
    *,
    store: MetadataStore,
    ledgers: LedgerClient,
    layout: AppLayout,
    config: ReplicaConfig,
    wall_clock_ms: Callable[[], int],
) -> None:
    """Sweep every `orphan_check_interval_ms` until `ended()` (the leader's term is over)."""
    interval_s = config.orphan_check_interval_ms / 1000
    while not ended():
        await anyio.sleep(interval_s)
        try:
            await sweep(
                store,
                ledgers,
                layout,
                now_ms=wall_clock_ms(),
                safe_age_ms=config.orphan_safe_age_ms,
            )
        except (BookieError, RsmError) as error:
            emit(logger, logging.WARNING, "rsm.orphan_sweep_failed", error=repr(error))
