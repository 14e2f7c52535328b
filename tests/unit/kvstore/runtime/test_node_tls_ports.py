"""Key-value nodes in the middle of a move to TLS (docs/security.md, "Moving a store to
TLS"): a leader with plain and TLS framework ports, a follower with both, a follower with
its TLS port only.  Writes through every node reach the leader (the first follower
forwards over plain TCP, the TLS-only one over TLS) and every node reads them."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
import redis.asyncio as aredis
from kvstore.runtime.node import KvNode

from bookie.address import parse_address
from bookie.client.ledger_client import LedgerClient
from bookie.net.tls import client_context, server_context
from rsm.client import tls_connector
from tests.tls_certs import Certificates
from tests.unit.bookie.client.cluster import memory_cluster
from tests.unit.rsm.runtime.harness import ledger_config, replica_config, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("certs"))


def _redis(node: KvNode) -> aredis.Redis:
    address = parse_address(node.resp_address)
    return aredis.Redis(host=address.host, port=address.port)


async def test_writes_through_nodes_with_both_ports_and_tls_only(certs: Certificates) -> None:
    server = server_context(certs.server, None, certs.ca, require_client_cert=False)
    both_ports: dict[str, Any] = {"tls": server, "tls_listen": "127.0.0.1:0"}
    tls_only: dict[str, Any] = {
        "tls": server,
        "connector": tls_connector(client_context(certs.ca)),
    }
    async with memory_cluster(3) as cluster, contextlib.AsyncExitStack() as stack:

        async def start(number: int, options: dict[str, Any]) -> KvNode:
            store = await stack.enter_async_context(cluster.store_factory())
            ledgers = await stack.enter_async_context(
                LedgerClient.open(
                    store, root=cluster.root, rng=random.Random(number), config=ledger_config()
                )
            )
            return await stack.enter_async_context(
                KvNode(
                    store=store,
                    ledgers=ledgers,
                    replica_id=f"kv-{number}",
                    config=replica_config(),
                    **options,
                )
            )

        leader = await start(1, both_ports)
        await wait_until(lambda: leader.replica.is_leader)
        nodes = [leader, await start(2, both_ports), await start(3, tls_only)]
        tls_listener = leader.replica.tls_listener
        assert tls_listener is not None
        assert tls_listener.accepted == 0
        for number, node in enumerate(nodes, start=1):
            async with _redis(node) as client:
                assert await client.set(f"key-{number}", f"through kv-{number}")
        # The TLS-only follower reached the leader on its TLS port.
        assert tls_listener.accepted >= 1
        for node in nodes:
            async with _redis(node) as client:
                assert await client.mget("key-1", "key-2", "key-3") == [
                    b"through kv-1",
                    b"through kv-2",
                    b"through kv-3",
                ]
