"""A replica's election znodes (`Leadership`) against a memory metadata store."""

from __future__ import annotations

import pytest

from bookie.errors import MetadataUnavailable
from bookie.meta.memory import MemoryMetadataServer
from rsm.core.layout import AppLayout
from rsm.runtime.election import Leadership
from rsm.runtime.log import LogStore

pytestmark = pytest.mark.anyio


async def test_a_withdrawal_that_failed_keeps_the_candidacy() -> None:
    """Cut off from ZooKeeper with its session alive, a replica cannot delete its candidacy:
    it must still know it, or it stands a second time and neither name is ever elected."""
    async with MemoryMetadataServer().client() as store:
        log_store = LogStore(store, AppLayout.of("app"))
        await log_store.ensure_layout()
        leadership = Leadership(
            store, log_store, replica_id="r1", address="127.0.0.1:1", retry_delay_ms=10
        )
        name = await leadership.stand()
        store.suspend()
        with pytest.raises(MetadataUnavailable):
            await leadership.withdraw()
        assert leadership.candidacy == name
        store.resume()
        await leadership.withdraw()
        assert leadership.candidacy is None
        assert await store.children(log_store.layout.election) == []
