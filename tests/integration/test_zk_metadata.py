"""What only a real ZooKeeper can show: the chroot-like root, connection failures and server
outages, real session expiry under the bookie registration, and the ledger manager
over real znodes.  The shared contract runs in tests/conformance/test_metadata_store.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from bookie.core.metadata import LedgerMetadata
from bookie.errors import MetadataUnavailable
from bookie.local.zookeeper import LocalZooKeeper, ZooKeeperUnavailable, free_port
from bookie.meta.api import NO_NODE_VERSION, SessionState
from bookie.meta.bookies import (
    BookieInfo,
    decode_registration,
    init_cluster,
    list_bookies,
    register,
)
from bookie.meta.ledgers import LedgerManager
from bookie.meta.zk import ZkMetadataStore
from bookie.wire.packet import DigestType

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper]

WAIT_S = 10.0
SESSION_TIMEOUT_MS = 4_000


@pytest.fixture
async def store(zookeeper: LocalZooKeeper, zk_root: str) -> AsyncIterator[ZkMetadataStore]:
    async with ZkMetadataStore.connect(
        zookeeper.connect_string, root=zk_root, session_timeout_ms=SESSION_TIMEOUT_MS
    ) as opened:
        yield opened


def metadata(ledger_id: int) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=1,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ensembles=((0, ("b1:3181", "b2:3181")),),
    )


async def test_root_is_created_and_hidden(zookeeper: LocalZooKeeper, zk_root: str) -> None:
    nested = f"{zk_root}/deeper/still"
    async with ZkMetadataStore.connect(zookeeper.connect_string, root=nested) as store:
        assert await store.create("/a", b"x") == "/a"
        assert await store.create("/s-", b"", sequential=True) == "/s-0000000001"
        assert await store.children("/") == ["a", "s-0000000001"]
    async with ZkMetadataStore.connect(zookeeper.connect_string) as unrooted:
        assert (await unrooted.get(f"{nested}/a")).value == b"x"


async def test_no_server_means_metadata_unavailable_in_time() -> None:
    with anyio.fail_after(WAIT_S):
        with pytest.raises(MetadataUnavailable, match="no ZooKeeper session"):
            async with ZkMetadataStore.connect(
                f"127.0.0.1:{free_port()}", operation_timeout_ms=500
            ):
                pass


@pytest.mark.slow
async def test_server_outage_suspends_then_reconnects(tmp_path: Path) -> None:
    server = LocalZooKeeper(tmp_path / "zk")
    server.start()
    try:
        async with ZkMetadataStore.connect(
            server.connect_string, session_timeout_ms=10_000, operation_timeout_ms=1_000
        ) as store:
            await store.create("/e", b"", ephemeral=True)
            events = store.session_events()
            await anyio.to_thread.run_sync(server.stop)
            with pytest.raises(MetadataUnavailable):
                await store.get("/e")
            with anyio.fail_after(WAIT_S):
                assert await anext(events) is SessionState.SUSPENDED
            await anyio.to_thread.run_sync(server.start)
            # kazoo waits up to the session timeout for a starting server to answer,
            # and a slow restart may outlast the session: then LOST comes first.
            with anyio.fail_after(3 * WAIT_S):
                after: list[SessionState] = []
                while not after or after[-1] is not SessionState.CONNECTED:
                    after.append(await anext(events))
            assert set(after) <= {SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED}
            expected = None if SessionState.LOST in after else 0
            assert await store.exists("/e") == expected
    finally:
        server.stop()


async def test_registration_survives_a_real_session_expiry(
    zookeeper: LocalZooKeeper, zk_root: str, store: ZkMetadataStore
) -> None:
    await init_cluster(store, "/cluster")
    async with (
        ZkMetadataStore.connect(zookeeper.connect_string, root=zk_root) as observer,
        register(store, "b1:3181", BookieInfo("127.0.0.1:3181"), root="/cluster") as registration,
    ):
        assert (await list_bookies(observer, "/cluster")).writable == {
            "b1:3181": BookieInfo("127.0.0.1:3181")
        }
        await store.expire_session()
        with anyio.fail_after(WAIT_S):
            await observer.watch("/cluster/available/b1:3181", NO_NODE_VERSION)
        stored = await observer.get("/cluster/available/b1:3181")
        _info, owner = decode_registration(stored.value, "registration")
        assert owner == store.session_id, "re-created by the new session"
        await registration.set_read_only(True)
        listed = await list_bookies(observer, "/cluster")
        assert (listed.writable, list(listed.read_only)) == ({}, ["b1:3181"])
    assert await store.children("/cluster/available/readonly") == []


async def test_ledger_manager_over_real_znodes(
    zookeeper: LocalZooKeeper, zk_root: str, store: ZkMetadataStore
) -> None:
    allocated: list[int] = []

    async def allocate() -> None:
        async with ZkMetadataStore.connect(zookeeper.connect_string, root=zk_root) as client:
            manager = LedgerManager(client)
            for _ in range(5):
                allocated.append(await manager.allocate_id())

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as task_group:
            for _ in range(3):
                task_group.start_soon(allocate)
    assert sorted(allocated) == list(range(15))

    manager = LedgerManager(store)
    ids = [3, 12_345, 10**10 + 7]
    for ledger_id in ids:
        await manager.create(metadata(ledger_id))
    assert await manager.list_ledgers() == ids
    assert await manager.read(12_345) == (metadata(12_345), 0)
    await manager.delete(12_345)
    assert await manager.list_ledgers() == [3, 10**10 + 7]


def test_a_port_served_by_another_zookeeper_is_not_taken_for_ours(
    zookeeper: LocalZooKeeper, tmp_path: Path
) -> None:
    """Two local clusters choosing the same free port at once: the one that lost the race
    must fail, not quietly use the other's ZooKeeper (and its ledgers and logs)."""
    assert zookeeper.port is not None
    second = LocalZooKeeper(tmp_path / "zk", port=zookeeper.port)
    with pytest.raises(ZooKeeperUnavailable, match=f"port {zookeeper.port} is served by another"):
        second.start()
