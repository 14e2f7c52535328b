"""GETs answered at once under the leader's read lease, on real `KvNode`s (in-process bookies,
memory metadata stores): the lease checked on the server's shortest path must still stop a
leader that a successor has outlived."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

import anyio
import pytest
import redis.asyncio as aredis
import redis.exceptions
from kvstore.runtime.node import KvNode, StoreSettings

from bookie.address import parse_address
from bookie.client.ledger_client import LedgerClient
from bookie.meta.memory import MemoryMetadataStore
from rsm.config import ReplicaConfig
from rsm.core.roles import Role
from tests.unit.bookie.client.cluster import WAIT_S, memory_cluster
from tests.unit.rsm.runtime.harness import ledger_config, replica_config, wait_until

pytestmark = pytest.mark.anyio


def redis_client(node: KvNode) -> aredis.Redis:
    address = parse_address(node.resp_address)
    return aredis.Redis(host=address.host, port=address.port)


@contextlib.asynccontextmanager
async def three_nodes(
    config: ReplicaConfig, settings: StoreSettings
) -> AsyncIterator[tuple[list[KvNode], dict[str, MemoryMetadataStore]]]:
    """Three `KvNode`s on in-process bookies, each with a metadata store of its own."""
    async with memory_cluster(3) as cluster, contextlib.AsyncExitStack() as stack:
        nodes: list[KvNode] = []
        stores: dict[str, MemoryMetadataStore] = {}
        for number in range(1, 4):
            store = await stack.enter_async_context(cluster.store_factory())
            assert isinstance(store, MemoryMetadataStore)
            ledgers = await stack.enter_async_context(
                LedgerClient.open(
                    store, root=cluster.root, rng=random.Random(number), config=ledger_config()
                )
            )
            replica_id = f"kv-{number}"
            stores[replica_id] = store
            nodes.append(
                await stack.enter_async_context(
                    KvNode(
                        store=store,
                        ledgers=ledgers,
                        replica_id=replica_id,
                        config=config,
                        settings=settings,
                    )
                )
            )
        yield nodes, stores


def serving_leader(candidates: list[KvNode]) -> KvNode | None:
    for node in candidates:
        term = node.replica.term
        if node.replica.is_leader and term is not None and term.accepting:
            return node
    return None


async def test_a_get_under_a_lease_that_a_successor_outlived_is_refused() -> None:
    """The old leader is cut off from ZooKeeper and told nothing, so it still believes it
    leads; its lease (500 ms) ran out before the successor acknowledged a write, so a GET
    on the old leader's open connection must not answer the value from before that write."""
    config = replica_config(read_lease_ms=500)
    settings = StoreSettings(command_deadline_ms=2_000)
    async with (
        three_nodes(config, settings) as (nodes, stores),
        contextlib.AsyncExitStack() as stack,
    ):
        old = await wait_until(lambda: serving_leader(nodes))
        old_client = await stack.enter_async_context(redis_client(old))
        assert await old_client.set("k", "1")
        assert await old_client.get("k") == b"1"
        term = old.replica.term
        assert term is not None
        assert term.status()["read_lease_held"], "the GET's round gave one"

        store = stores[old.replica.replica_id]
        store.hold_session_events()
        store.suspend()  # cut off from ZooKeeper, and never told
        store.expire_session()
        others = [node for node in nodes if node is not old]
        new = await wait_until(lambda: serving_leader(others))
        async with redis_client(new) as new_client:
            assert await new_client.set("k", "2")
        assert old.replica.is_leader, "it still knows nothing"

        with anyio.fail_after(WAIT_S):
            try:
                answer = await old_client.get("k")
            except redis.exceptions.TryAgainError:  # TRYAGAIN: no leader took it in time
                answer = None
        assert answer != b"1", "answered under a lease the successor had waited out"
        assert answer in (None, b"2")
        store.release_session_events()


async def test_info_names_a_successor_the_leader_only_once_it_serves() -> None:
    """A replica that won the log waits out its cut-off predecessor's read lease (4 s here)
    before it serves; INFO says `taking_over` meanwhile, so a client looking for the leader
    there does not send its commands to one that forwards them."""
    config = replica_config(read_lease_ms=4_000)
    async with three_nodes(config, StoreSettings()) as (nodes, stores):
        old = await wait_until(lambda: serving_leader(nodes))
        store = stores[old.replica.replica_id]
        store.hold_session_events()
        store.suspend()
        store.expire_session()
        others = [node for node in nodes if node is not old]

        def won_not_serving() -> KvNode | None:
            for node in others:
                if node.replica.role is Role.LEADER and not node.replica.is_leader:
                    return node
            return None

        new = await wait_until(won_not_serving)
        async with redis_client(new) as client:
            info = await client.info("replication")
            assert not new.replica.is_leader, "the lease wait outlasted the INFO"
            assert info["rsm_role"] == "taking_over"
            await wait_until(lambda: serving_leader([new]))
            assert (await client.info("replication"))["rsm_role"] == "leader"
        store.release_session_events()
