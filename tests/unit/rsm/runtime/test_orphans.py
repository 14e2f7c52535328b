"""The leader's sweep of orphan ledgers over in-process bookies: a segment ledger created
by a leader that died before naming it in the log is deleted once old enough, while
every ledger the log names, other applications' and untagged ledgers stay; a sweep whose
view of the log went stale deletes nothing, and a log compare-and-set naming a ledger
already deleted fails."""

from __future__ import annotations

from typing import Any

import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.errors import NoSuchLedgerError
from bookie.meta.api import ANY_VERSION, Check, MetadataStore, SetData
from rsm.core.layout import AppLayout
from rsm.core.log_format import encode_log
from rsm.runtime.log import LogStore
from rsm.runtime.orphans import sweep
from rsm.runtime.segment_ledger import create_segment_ledger
from tests.unit.bookie.client.cluster import WAIT_S, memory_cluster
from tests.unit.bookie.server.support import eventually
from tests.unit.rsm.runtime.harness import APP, replica_cluster, replica_config

pytestmark = pytest.mark.anyio

SAFE_AGE_MS = 300


async def exists(client: LedgerClient, ledger_id: int) -> bool:
    try:
        await client.ledger_metadata(ledger_id)
    except NoSuchLedgerError:
        return False
    return True


async def test_the_leader_deletes_an_orphan_once_old_and_nothing_that_is_named() -> None:
    config = replica_config(orphan_safe_age_ms=SAFE_AGE_MS, orphan_check_interval_ms=20)
    async with replica_cluster() as replicas:
        await replicas.start("a", config=config)
        await replicas.start("b", config=config)
        await replicas.wait_leader()
        async with replicas.client() as rsm_client:
            assert await rsm_client.call("add", 1) == 1
        async with replicas.cluster.client() as client:
            # What a leader that died between creating its ledger and the log's CAS leaves.
            orphan = await create_segment_ledger(
                client, config, app=APP, epoch=99, writer=AppLayout.of(APP).replica("gone")
            )
            other_app = await create_segment_ledger(
                client, config, app="other", epoch=1, writer="/rsm/other/replicas/x"
            )
            untagged = await client.create_ledger(3, 3, 2)

            async def orphan_gone() -> bool:
                return not await exists(client, orphan.ledger_id)

            await eventually(orphan_gone, poll_s=0.01, timeout_s=WAIT_S)
            async with replicas.cluster.store_factory() as store:
                log, _ = await LogStore(store, AppLayout.of(APP)).read()
            for segment in log.segments:
                assert await exists(client, segment.ledger_id), segment
            assert await exists(client, other_app.ledger_id)
            assert await exists(client, untagged.ledger_id)
            async with replicas.client() as rsm_client:
                assert await rsm_client.call("add", 1) == 2, "the store goes on"


class _LogMovesBeforeCommit:
    """A store in which the log is written (as by a leader naming a ledger) just before
    each commit of the sweep."""

    def __init__(self, store: MetadataStore, layout: AppLayout) -> None:
        self._store = store
        self._layout = layout

    async def commit(self, ops: Any) -> None:
        log, version = await LogStore(self._store, self._layout).read()
        await self._store.set(self._layout.log, encode_log(log), version)
        await self._store.commit(ops)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_sweep_that_saw_an_older_log_deletes_nothing() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        layout = AppLayout.of(APP)
        config = replica_config()
        async with cluster.store_factory() as store:
            await LogStore(store, layout).ensure_layout()
            orphan = await create_segment_ledger(
                client, config, app=APP, epoch=1, writer=layout.replica("gone")
            )
            far_future_ms = orphan.metadata.ctime_ms + 10 * SAFE_AGE_MS
            moving: Any = _LogMovesBeforeCommit(store, layout)
            assert (
                await sweep(moving, client, layout, now_ms=far_future_ms, safe_age_ms=SAFE_AGE_MS)
                == []
            )
            assert await exists(client, orphan.ledger_id)
            assert await sweep(
                store, client, layout, now_ms=far_future_ms, safe_age_ms=SAFE_AGE_MS
            ) == [orphan.ledger_id]
            assert not await exists(client, orphan.ledger_id)


async def test_a_log_cas_naming_a_deleted_ledger_fails() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        layout = AppLayout.of(APP)
        async with cluster.store_factory() as store:
            log_store = LogStore(store, layout)
            await log_store.ensure_layout()
            ledger = await client.create_ledger(3, 3, 2)
            await client.delete_ledger(ledger.ledger_id)
            log, version = await log_store.read()
            ops = [
                SetData(layout.log, encode_log(log), version),
                Check(client.metadata_path(ledger.ledger_id), ANY_VERSION),
            ]
            assert not await log_store.cas(ops, lambda seen: False)
            assert (await log_store.read())[1] == version
