"""A key-value node's start-up around ZooKeeper trouble: in-process bookies, a memory
metadata store, the real `KvNode`."""

from __future__ import annotations

import random

import anyio
import pytest
from kvstore.endpoints import decode_endpoint, endpoint_path
from kvstore.runtime.node import DEFAULT_APP, KvNode

from bookie.client.ledger_client import LedgerClient
from bookie.errors import MetadataUnavailable
from bookie.meta.memory import MemoryMetadataStore
from tests.unit.bookie.client.cluster import WAIT_S, memory_cluster
from tests.unit.rsm.runtime.harness import ledger_config, replica_config

pytestmark = pytest.mark.anyio


async def test_a_connection_lost_while_publishing_the_endpoint_is_waited_out() -> None:
    async with memory_cluster(3) as cluster, cluster.store_factory() as store:
        assert isinstance(store, MemoryMetadataStore)
        create = store.create
        failures: list[str] = []

        async def create_losing_the_first_endpoint(path: str, *args: object, **kw: object) -> str:
            if "/endpoints/" in path and not failures:
                failures.append(path)
                raise MetadataUnavailable(f"create {path}: ConnectionLoss")
            return await create(path, *args, **kw)  # type: ignore[arg-type]

        store.create = create_losing_the_first_endpoint  # type: ignore[method-assign]
        async with (
            LedgerClient.open(
                store, root=cluster.root, rng=random.Random(1), config=ledger_config()
            ) as ledgers,
            KvNode(
                store=store, ledgers=ledgers, replica_id="kv-1", config=replica_config()
            ) as node,
        ):
            with anyio.fail_after(WAIT_S):
                stored = await store.get(endpoint_path(DEFAULT_APP, "kv-1"))
        assert failures, "the first try did lose its connection"
        assert decode_endpoint("kv-1", stored.value).resp == node.resp_address
