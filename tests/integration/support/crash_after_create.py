"""A process that creates a segment ledger as a leader does, prints its id, and waits to be
killed before naming it in any log: what a leader that crashed between creating its
ledger and the log's compare-and-set leaves behind.

    python -m tests.integration.support.crash_after_create ZK LEDGER_ROOT APP
"""

from __future__ import annotations

import sys

import anyio

from bookie.client.ledger_client import LedgerClient
from bookie.meta.zk import ZkMetadataStore
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.runtime.segment_ledger import create_segment_ledger


async def main(zk: str, ledger_root: str, app: str) -> None:
    async with (
        ZkMetadataStore.connect(zk) as store,
        LedgerClient.open(store, root=ledger_root) as ledgers,
    ):
        handle = await create_segment_ledger(
            ledgers, ReplicaConfig(), app=app, epoch=1_000, writer=AppLayout.of(app).replica("x")
        )
        print(handle.ledger_id, flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
