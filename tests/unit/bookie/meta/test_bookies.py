"""Cluster initialisation, bookie registration and discovery, and cookies, over the in-memory
store (the same code over real ZooKeeper: tests/integration/test_zk_metadata.py)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator

import anyio
import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.errors import BadMetadata, MetadataUnavailable, MetadataVersionConflict, NodeExists
from bookie.meta.api import NO_NODE_VERSION, Versioned
from bookie.meta.bookies import (
    BookieInfo,
    Bookies,
    Cookie,
    encode_registration,
    init_cluster,
    list_bookies,
    list_cookies,
    read_cookie,
    read_instance_id,
    register,
    watch_bookies,
    write_cookie,
)
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore

from .strategies import bookie_ids

pytestmark = pytest.mark.anyio

WAIT_S = 1.0
INFO = BookieInfo(address="10.0.0.1:3181", rack="/rack-a")
COOKIE = Cookie(
    instance_id="c0ffee00-0000-4000-8000-000000000000",
    bookie_id="b1",
    advertised_address="10.0.0.1:3181",
    journal_dir="/data/journal",
    ledger_dirs=("/data/ledgers-1", "/data/ledgers-2"),
)


@pytest.fixture
def server() -> MemoryMetadataServer:
    return MemoryMetadataServer()


@pytest.fixture
async def store(server: MemoryMetadataServer) -> AsyncIterator[MemoryMetadataStore]:
    async with server.client() as opened:
        await init_cluster(opened, instance_id="cluster-1")
        yield opened


async def wait_exists(store: MemoryMetadataStore, path: str) -> None:
    with anyio.fail_after(WAIT_S):
        await store.watch(path, NO_NODE_VERSION)


# --- cluster ----------------------------------------------------------------------------------


async def test_init_cluster_creates_the_layout_once(server: MemoryMetadataServer) -> None:
    async with server.client() as store:
        instance_id = await init_cluster(store)
        assert uuid.UUID(instance_id)
        assert await init_cluster(store) == instance_id
        assert await init_cluster(store, instance_id="ignored") == instance_id
        assert await read_instance_id(store) == instance_id
        assert await store.children("/ledgers") == ["INSTANCEID", "available", "cookies"]
        assert await store.children("/ledgers/available") == ["readonly"]


async def test_concurrent_inits_agree(server: MemoryMetadataServer) -> None:
    results: list[str] = []

    async def init(index: int) -> None:
        async with server.client() as store:
            results.append(await init_cluster(store, "/c", instance_id=f"id-{index}"))

    async with anyio.create_task_group() as task_group:
        for index in range(8):
            task_group.start_soon(init, index)
    assert len(set(results)) == 1
    assert results[0].startswith("id-")


async def test_junk_instance_id_is_reported(store: MemoryMetadataStore) -> None:
    await store.set("/ledgers/INSTANCEID", b"\xff\xfe", 0)
    with pytest.raises(BadMetadata, match="not UTF-8"):
        await read_instance_id(store)


# --- registration -----------------------------------------------------------------------------


async def test_registration_lifecycle(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    async with server.client() as client:
        async with register(store, "b1", INFO) as registration:
            assert registration.registered
            assert registration.path == "/ledgers/available/b1"
            listed = await list_bookies(client)
            assert listed.writable == {"b1": INFO}
            assert listed.read_only == {}

            await registration.set_read_only(True)
            assert registration.path == "/ledgers/available/readonly/b1"
            listed = await list_bookies(client)
            assert (listed.writable, listed.read_only) == ({}, {"b1": INFO})

            await registration.set_read_only(True)
            await registration.set_read_only(False)
            assert (await list_bookies(client)).writable == {"b1": INFO}
        listed = await list_bookies(client)
        assert (listed.writable, listed.read_only) == ({}, {})


async def test_registration_is_ephemeral_and_comes_back(server: MemoryMetadataServer) -> None:
    async with server.client() as observer, server.client() as bookie_store:
        await init_cluster(observer)
        async with register(bookie_store, "b1", INFO) as registration:
            assert "b1" in (await list_bookies(observer)).writable
            bookie_store.suspend()
            bookie_store.expire_session()
            assert (await list_bookies(observer)).writable == {}
            bookie_store.resume()
            assert not registration.registered
            await wait_exists(observer, "/ledgers/available/b1")
            assert registration.registered


async def test_registration_comes_back_after_session_expiry(store: MemoryMetadataStore) -> None:
    async with register(store, "b1", INFO) as registration:
        store.expire_session()
        await wait_exists(store, "/ledgers/available/b1")
        assert registration.registered


async def test_read_only_switch_while_lost_applies_at_re_registration(
    store: MemoryMetadataStore,
) -> None:
    async with register(store, "b1", INFO) as registration:
        store.suspend()
        store.expire_session()
        store.resume()
        # The session changed and the re-registration task has not run yet: the
        # switch is recorded and the re-registration creates the znode in its
        # new place.
        assert not registration.registered
        await registration.set_read_only(True)
        await wait_exists(store, "/ledgers/available/readonly/b1")
        assert await store.exists("/ledgers/available/b1") is None


async def test_registration_waits_out_a_stale_znode(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    previous_process = server.client()
    await previous_process.create(
        "/ledgers/available/b1",
        encode_registration(INFO, previous_process.session_id),
        ephemeral=True,
    )
    registered = anyio.Event()

    async def start_bookie() -> None:
        async with register(store, "b1", INFO):
            registered.set()

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(start_bookie)
            await anyio.wait_all_tasks_blocked()
            assert not registered.is_set()
            previous_process.expire_session()
    assert registered.is_set()


async def test_registration_goes_on_when_the_stale_znode_goes_between_its_reads(
    server: MemoryMetadataServer, store: MemoryMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous session expires after the create failed and before the znode's owner
    is read: the owner is no one, and the znode must be created again, not waited for."""
    previous_process = server.client()
    await previous_process.create(
        "/ledgers/available/b1",
        encode_registration(INFO, previous_process.session_id),
        ephemeral=True,
    )
    get = store.get
    expired = False

    async def get_after_the_expiry(path: str) -> Versioned:
        nonlocal expired
        if not expired:
            expired = True
            previous_process.expire_session()
        return await get(path)

    monkeypatch.setattr(store, "get", get_after_the_expiry)
    with anyio.fail_after(WAIT_S):
        async with register(store, "b1", INFO, stale_wait_ms=2_000) as registration:
            assert registration.registered
    assert expired


async def test_registration_gives_up_on_a_live_duplicate(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    other = server.client()
    await other.create(
        "/ledgers/available/b1", encode_registration(INFO, other.session_id), ephemeral=True
    )
    with pytest.raises(NodeExists, match="is another bookie running with id 'b1'"):
        async with register(store, "b1", INFO, stale_wait_ms=50):
            pass


async def test_registration_cut_off_while_waiting_says_so_not_duplicate(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    """The stale znode's session expires while this one is cut off: the deletion is not
    heard until it is back, so the wait ends as a metadata outage, not as a duplicate."""
    previous_process = server.client()
    await previous_process.create(
        "/ledgers/available/b1",
        encode_registration(INFO, previous_process.session_id),
        ephemeral=True,
    )
    failures: list[BaseException] = []

    async def start_bookie() -> None:
        try:
            async with register(store, "b1", INFO, stale_wait_ms=200):
                pass
        except MetadataUnavailable as error:
            failures.append(error)

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(start_bookie)
            await anyio.wait_all_tasks_blocked()
            store.suspend()
            previous_process.expire_session()
    assert len(failures) == 1
    assert "lost the metadata session" in str(failures[0])
    store.resume()
    async with register(store, "b1", INFO, stale_wait_ms=50) as registration:
        assert registration.registered


async def test_a_reconnection_restarts_the_wait_for_a_stale_znode(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    """A ZooKeeper server that restarts starts every old session's timeout again, and
    disconnects its clients: the stale znode may outlive a bound counted from the bookie's
    start, so the bound counts from its reconnection."""
    previous_process = server.client()
    await previous_process.create(
        "/ledgers/available/b1",
        encode_registration(INFO, previous_process.session_id),
        ephemeral=True,
    )
    wait_s = 1.0
    registered = anyio.Event()

    async def start_bookie() -> None:
        async with register(store, "b1", INFO, stale_wait_ms=int(wait_s * 1000)) as registration:
            assert registration.registered
            registered.set()

    with anyio.fail_after(2 * wait_s + WAIT_S):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(start_bookie)
            await anyio.wait_all_tasks_blocked()
            # These sleeps are the thing under test, not a wait for a condition: the bound
            # is a time span, so the faults must come at set times.  The server "restarts"
            # 0.6 s into the wait, and the stale session expires 0.7 s after that: past the
            # bound counted from the start, within the one counted from the reconnection.
            # Timers fire in order on one loop, so a slow machine cannot swap them.
            await anyio.sleep(0.6 * wait_s)
            store.suspend()
            store.resume()
            await anyio.sleep(0.7 * wait_s)
            assert not registered.is_set()
            previous_process.expire_session()
    assert registered.is_set()


async def test_registration_adopts_its_own_znode(store: MemoryMetadataStore) -> None:
    """A create whose answer was lost left our own znode: it is ours, not a duplicate."""
    await store.create(
        "/ledgers/available/b1", encode_registration(INFO, store.session_id), ephemeral=True
    )
    async with register(store, "b1", INFO, stale_wait_ms=50) as registration:
        assert registration.registered


async def test_listing_an_uninitialised_cluster_is_empty(server: MemoryMetadataServer) -> None:
    async with server.client() as store:
        listed = await list_bookies(store, "/nothing")
        assert (listed.writable, listed.read_only) == ({}, {})


async def test_junk_registration_is_reported(store: MemoryMetadataStore) -> None:
    await store.create("/ledgers/available/b1", b"junk")
    with pytest.raises(BadMetadata, match="registration /ledgers/available/b1"):
        await list_bookies(store)


async def test_watch_bookies_wakes_on_every_kind_of_change(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    async def changed_by(seen: Bookies, change: object) -> None:
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(watch_bookies, store, seen)
                await anyio.wait_all_tasks_blocked()
                await change  # type: ignore[misc]

    bookie_store = server.client()
    async with register(bookie_store, "b1", INFO) as registration:
        seen = await list_bookies(store)
        await changed_by(seen, registration.set_read_only(True))
        seen = await list_bookies(store)
        await changed_by(seen, store.create("/ledgers/available/readonly/b2", b""))
    with anyio.fail_after(WAIT_S):
        await watch_bookies(store, seen)  # already different: returns at once


async def test_watch_bookies_wakes_when_the_cluster_is_initialised(
    server: MemoryMetadataServer,
) -> None:
    async with server.client() as store:
        seen = await list_bookies(store)
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(watch_bookies, store, seen)
                await anyio.wait_all_tasks_blocked()
                await init_cluster(store)


async def test_watch_bookies_raises_the_store_error_itself(store: MemoryMetadataStore) -> None:
    """Not an exception group: a registry retries on `MetadataError` and must see one."""
    seen = await list_bookies(store)
    store.suspend()
    with pytest.raises(MetadataUnavailable):
        await watch_bookies(store, seen)


# --- cookies ----------------------------------------------------------------------------------


async def test_cookie_create_read_and_compare_and_set(store: MemoryMetadataStore) -> None:
    assert await read_cookie(store, "b1") is None
    assert await write_cookie(store, COOKIE, None) == 0
    assert await read_cookie(store, "b1") == (COOKIE, 0)
    with pytest.raises(NodeExists):
        await write_cookie(store, COOKIE, None)
    moved = Cookie(
        instance_id=COOKIE.instance_id,
        bookie_id="b1",
        advertised_address="10.0.0.2:3181",
        journal_dir=COOKIE.journal_dir,
        ledger_dirs=COOKIE.ledger_dirs,
    )
    assert await write_cookie(store, moved, 0) == 1
    with pytest.raises(MetadataVersionConflict):
        await write_cookie(store, COOKIE, 0)
    assert await read_cookie(store, "b1") == (moved, 1)


async def test_list_cookies_names_every_bookie_with_a_cookie(store: MemoryMetadataStore) -> None:
    assert await list_cookies(store) == [], "no cluster yet"
    await init_cluster(store)
    assert await list_cookies(store) == []
    for bookie_id in ("b2", "b1"):
        await write_cookie(store, dataclasses.replace(COOKIE, bookie_id=bookie_id), None)
    assert await list_cookies(store) == ["b1", "b2"]


async def test_cookie_of_another_bookie_is_refused(store: MemoryMetadataStore) -> None:
    await store.create("/ledgers/cookies/b2", COOKIE.encode())
    with pytest.raises(BadMetadata, match="belongs to bookie 'b1'"):
        await read_cookie(store, "b2")


def test_cookie_differences_name_each_field() -> None:
    other = Cookie(
        instance_id="another-cluster",
        bookie_id="b1",
        advertised_address=COOKIE.advertised_address,
        journal_dir="/elsewhere",
        ledger_dirs=COOKIE.ledger_dirs,
    )
    assert COOKIE.differences(COOKIE) == []
    assert COOKIE.differences(other) == [
        "instance_id: 'c0ffee00-0000-4000-8000-000000000000' here, 'another-cluster' there",
        "journal_dir: '/data/journal' here, '/elsewhere' there",
    ]


@given(
    st.text(min_size=1),
    bookie_ids,
    st.text(min_size=1),
    st.text(min_size=1),
    st.lists(st.text(min_size=1), min_size=1, max_size=4),
)
def test_cookie_round_trip(
    instance_id: str, bookie_id: str, address: str, journal_dir: str, ledger_dirs: list[str]
) -> None:
    cookie = Cookie(instance_id, bookie_id, address, journal_dir, tuple(ledger_dirs))
    assert Cookie.decode(cookie.encode()) == cookie


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a CBOR value"),
        (b"\xa1\x61v\x02", "format version 2 is not supported"),
        (b"\xa1\x61v\x01", "missing fields"),
    ],
)
def test_junk_cookie_is_reported(data: bytes, message: str) -> None:
    with pytest.raises(BadMetadata, match=message):
        Cookie.decode(data)


def test_cookie_needs_a_ledger_directory() -> None:
    data = cbor2.dumps(
        {"v": 1, "i": "i", "b": "b1", "a": "a:1", "j": "/j", "l": []}, canonical=True
    )
    with pytest.raises(BadMetadata, match="no ledger directory"):
        Cookie.decode(data)
